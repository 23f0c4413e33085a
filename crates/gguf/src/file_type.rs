//! `general.file_type`: a file's quantization as llama.cpp numbers and names it
//! (`enum llama_ftype`), and which one a file of mostly one tensor type is.

use crate::GgmlType;

/// A value of `general.file_type` (`enum llama_ftype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileType(pub u32);

impl FileType {
    /// The file type whose large tensors are mostly `t`, as llama.cpp's loader maps a
    /// tensor type to one (`llama_model_loader`, where a file lacks `general.file_type`;
    /// the K-quants as their `_M` mixes). MXFP4 is the mix llama-quantize writes for MoE
    /// experts, which the loader's map leaves out. `None` for a type no file type names.
    pub fn mostly(t: GgmlType) -> Option<FileType> {
        Some(FileType(match t.0 {
            0 => 0,   // F32
            1 => 1,   // F16
            2 => 2,   // Q4_0
            3 => 3,   // Q4_1
            6 => 8,   // Q5_0
            7 => 9,   // Q5_1
            8 => 7,   // Q8_0
            10 => 10, // Q2_K
            11 => 12, // Q3_K: Q3_K_M
            12 => 15, // Q4_K: Q4_K_M
            13 => 17, // Q5_K: Q5_K_M
            14 => 18, // Q6_K
            30 => 32, // BF16
            39 => 38, // MXFP4: MXFP4_MOE
            _ => return None,
        }))
    }

    /// llama.cpp's name for it, as `llama-quantize` and Ollama print it (`Q4_K_M` ...);
    /// `"other"` for a value not listed here.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "F32",
            1 => "F16",
            2 => "Q4_0",
            3 => "Q4_1",
            7 => "Q8_0",
            8 => "Q5_0",
            9 => "Q5_1",
            10 => "Q2_K",
            11 => "Q3_K_S",
            12 => "Q3_K_M",
            13 => "Q3_K_L",
            14 => "Q4_K_S",
            15 => "Q4_K_M",
            16 => "Q5_K_S",
            17 => "Q5_K_M",
            18 => "Q6_K",
            32 => "BF16",
            38 => "MXFP4_MOE",
            _ => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mostly_type_has_a_name_and_k_quants_are_their_medium_mix() {
        for id in 0..64 {
            if let Some(ft) = FileType::mostly(GgmlType(id)) {
                assert_ne!(ft.name(), "other", "type {id}");
            }
        }
        assert_eq!(
            FileType::mostly(GgmlType::Q4_K).map(FileType::name),
            Some("Q4_K_M")
        );
        assert_eq!(
            FileType::mostly(GgmlType::MXFP4).map(FileType::name),
            Some("MXFP4_MOE")
        );
        assert_eq!(
            FileType::mostly(GgmlType::Q8_0).map(FileType::name),
            Some("Q8_0")
        );
        assert_eq!(
            FileType::mostly(GgmlType(15)),
            None,
            "Q8_K is no file's type"
        );
        assert_eq!(FileType(1024 + 15).name(), "other");
    }
}
