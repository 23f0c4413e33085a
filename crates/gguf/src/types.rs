//! GGML tensor types: block sizes and byte sizes, as llama.cpp's `ggml.c` type traits define them.

use std::fmt;

/// A ggml tensor type id, as stored in a GGUF tensor info.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

impl GgmlType {
    pub const F32: GgmlType = GgmlType(0);
    pub const F16: GgmlType = GgmlType(1);
    pub const Q4_0: GgmlType = GgmlType(2);
    pub const Q8_0: GgmlType = GgmlType(8);
    pub const Q4_K: GgmlType = GgmlType(12);
    pub const Q5_K: GgmlType = GgmlType(13);
    pub const Q6_K: GgmlType = GgmlType(14);
    pub const BF16: GgmlType = GgmlType(30);
    pub const MXFP4: GgmlType = GgmlType(39);

    /// `(name, elements per block, bytes per block)`, or `None` for an id ggml does not define.
    fn traits(self) -> Option<(&'static str, u64, u64)> {
        Some(match self.0 {
            0 => ("F32", 1, 4),
            1 => ("F16", 1, 2),
            2 => ("Q4_0", 32, 18),
            3 => ("Q4_1", 32, 20),
            6 => ("Q5_0", 32, 22),
            7 => ("Q5_1", 32, 24),
            8 => ("Q8_0", 32, 34),
            9 => ("Q8_1", 32, 36),
            10 => ("Q2_K", 256, 84),
            11 => ("Q3_K", 256, 110),
            12 => ("Q4_K", 256, 144),
            13 => ("Q5_K", 256, 176),
            14 => ("Q6_K", 256, 210),
            15 => ("Q8_K", 256, 292),
            16 => ("IQ2_XXS", 256, 66),
            17 => ("IQ2_XS", 256, 74),
            18 => ("IQ3_XXS", 256, 98),
            19 => ("IQ1_S", 256, 50),
            20 => ("IQ4_NL", 32, 18),
            21 => ("IQ3_S", 256, 110),
            22 => ("IQ2_S", 256, 82),
            23 => ("IQ4_XS", 256, 136),
            24 => ("I8", 1, 1),
            25 => ("I16", 1, 2),
            26 => ("I32", 1, 4),
            27 => ("I64", 1, 8),
            28 => ("F64", 1, 8),
            29 => ("IQ1_M", 256, 56),
            30 => ("BF16", 1, 2),
            34 => ("TQ1_0", 256, 54),
            35 => ("TQ2_0", 256, 66),
            39 => ("MXFP4", 32, 17),
            _ => return None,
        })
    }

    pub fn is_known(self) -> bool {
        self.traits().is_some()
    }

    pub fn name(self) -> &'static str {
        self.traits().map_or("unknown", |t| t.0)
    }

    /// Elements per quantization block (1 for plain types). Panics on an unknown type:
    /// the reader rejects unknown types before any tensor reaches this.
    pub fn block_elems(self) -> u64 {
        self.traits().expect("unknown ggml type").1
    }

    pub fn block_bytes(self) -> u64 {
        self.traits().expect("unknown ggml type").2
    }

    /// Bytes of one row of `ne0` elements, or `None` when `ne0` is not a whole number of blocks.
    pub fn row_bytes(self, ne0: u64) -> Option<u64> {
        let (_, blk, bytes) = self.traits()?;
        if ne0 % blk != 0 {
            return None;
        }
        (ne0 / blk).checked_mul(bytes)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}
