//! GGUF metadata values: every scalar type, strings, and (nested) arrays.

/// Wire ids of the GGUF metadata value types.
pub(crate) mod wire {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;

    /// The fewest bytes one element of this type takes on the wire (for bounds checks
    /// before allocation), or `None` for an unknown type.
    pub fn min_size(t: u32) -> Option<u64> {
        Some(match t {
            U8 | I8 | BOOL => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | STRING => 8,
            ARRAY => 12,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// An array keeps its element type, so that an empty array round-trips.
    Array {
        elem_type: u32,
        items: Vec<Value>,
    },
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    pub fn wire_type(&self) -> u32 {
        match self {
            Value::U8(_) => wire::U8,
            Value::I8(_) => wire::I8,
            Value::U16(_) => wire::U16,
            Value::I16(_) => wire::I16,
            Value::U32(_) => wire::U32,
            Value::I32(_) => wire::I32,
            Value::F32(_) => wire::F32,
            Value::Bool(_) => wire::BOOL,
            Value::String(_) => wire::STRING,
            Value::Array { .. } => wire::ARRAY,
            Value::U64(_) => wire::U64,
            Value::I64(_) => wire::I64,
            Value::F64(_) => wire::F64,
        }
    }

    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array { items, .. } => Some(items),
            _ => None,
        }
    }

    /// Helper for writers: an array of strings.
    pub fn strings<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> Value {
        Value::Array {
            elem_type: wire::STRING,
            items: items.into_iter().map(|s| Value::String(s.into())).collect(),
        }
    }

    /// Helper for writers: an array of i32.
    pub fn i32s<I: IntoIterator<Item = i32>>(items: I) -> Value {
        Value::Array {
            elem_type: wire::I32,
            items: items.into_iter().map(Value::I32).collect(),
        }
    }

    /// Helper for writers: an array of bools.
    pub fn bools<I: IntoIterator<Item = bool>>(items: I) -> Value {
        Value::Array {
            elem_type: wire::BOOL,
            items: items.into_iter().map(Value::Bool).collect(),
        }
    }
}
