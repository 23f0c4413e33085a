//! Reading GGUF headers (metadata and tensor infos) from one file or a split model.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::value::{wire, Value};
use super::{GgmlType, GgufError, DEFAULT_ALIGNMENT, MAGIC};

/// Arrays nested deeper than this are rejected (llama.cpp itself never nests more than once).
const MAX_ARRAY_DEPTH: usize = 8;
/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// `ne[0..n_dims]`, innermost first, as ggml orders them.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset relative to the start of the file's data section.
    pub offset: u64,
    /// Bytes of tensor data.
    pub n_bytes: u64,
}

/// The parsed header of one GGUF file.
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
    pub file_size: u64,
}

/// A model: one GGUF file, or every shard of a `-0000k-of-0000N.gguf` split, in order.
#[derive(Debug, Clone)]
pub struct GgufModel {
    pub shards: Vec<GgufFile>,
}

struct Cursor<R> {
    inner: R,
    pos: u64,
    size: u64,
    path: PathBuf,
}

impl<R: Read> Cursor<R> {
    fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.pos)
    }

    fn need(&self, what: &'static str, needed: u64) -> Result<(), GgufError> {
        if needed > self.remaining() {
            return Err(GgufError::TruncatedHeader {
                path: self.path.clone(),
                what,
                offset: self.pos,
                needed,
                remaining: self.remaining(),
            });
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        self.need(what, N as u64)?;
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes(what)?))
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        self.need(what, len)?;
        let start = self.pos;
        let mut buf = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.pos += len;
        String::from_utf8(buf).map_err(|_| GgufError::Utf8 {
            path: self.path.clone(),
            what,
            offset: start,
        })
    }

    fn value(&mut self, key: &str, value_type: u32, depth: usize) -> Result<Value, GgufError> {
        Ok(match value_type {
            wire::U8 => Value::U8(self.bytes::<1>("u8 value")?[0]),
            wire::I8 => Value::I8(self.bytes::<1>("i8 value")?[0] as i8),
            wire::U16 => Value::U16(u16::from_le_bytes(self.bytes("u16 value")?)),
            wire::I16 => Value::I16(i16::from_le_bytes(self.bytes("i16 value")?)),
            wire::U32 => Value::U32(self.u32("u32 value")?),
            wire::I32 => Value::I32(i32::from_le_bytes(self.bytes("i32 value")?)),
            wire::F32 => Value::F32(f32::from_le_bytes(self.bytes("f32 value")?)),
            wire::BOOL => Value::Bool(self.bytes::<1>("bool value")?[0] != 0),
            wire::STRING => Value::String(self.string("string value")?),
            wire::U64 => Value::U64(self.u64("u64 value")?),
            wire::I64 => Value::I64(i64::from_le_bytes(self.bytes("i64 value")?)),
            wire::F64 => Value::F64(f64::from_le_bytes(self.bytes("f64 value")?)),
            wire::ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::TooDeep {
                        path: self.path.clone(),
                        max_depth: MAX_ARRAY_DEPTH,
                    });
                }
                let elem_type = self.u32("array element type")?;
                let min = wire::min_size(elem_type).ok_or_else(|| GgufError::BadValueType {
                    path: self.path.clone(),
                    key: key.to_string(),
                    value_type: elem_type,
                })?;
                let count = self.u64("array length")?;
                self.need("array elements", count.saturating_mul(min))?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(key, elem_type, depth + 1)?);
                }
                Value::Array { elem_type, items }
            }
            other => {
                return Err(GgufError::BadValueType {
                    path: self.path.clone(),
                    key: key.to_string(),
                    value_type: other,
                })
            }
        })
    }
}

impl GgufFile {
    /// Parse the header of one GGUF file and check every tensor's data lies inside the file.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let meta = std::fs::metadata(path).map_err(|source| GgufError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.is_dir() {
            return Err(GgufError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        let file = File::open(path).map_err(|source| GgufError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c = Cursor {
            inner: BufReader::with_capacity(1 << 20, file),
            pos: 0,
            size: meta.len(),
            path: path.to_path_buf(),
        };

        if c.remaining() < 4 {
            let mut found = vec![0u8; c.remaining() as usize];
            let _ = c.inner.read_exact(&mut found);
            return Err(GgufError::BadMagic {
                path: c.path,
                found,
            });
        }
        let magic: [u8; 4] = c.bytes("magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic {
                path: c.path,
                found: magic.to_vec(),
            });
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion {
                path: c.path,
                version,
            });
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes;
        // a tensor info at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
        c.need("metadata entries", n_kv.saturating_mul(13))?;
        let mut metadata = Vec::with_capacity(n_kv as usize);
        for _ in 0..n_kv {
            let key = c.string("metadata key")?;
            let value_type = c.u32("metadata value type")?;
            let value = c.value(&key, value_type, 0)?;
            metadata.push((key, value));
        }

        c.need("tensor infos", n_tensors.saturating_mul(24))?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = c.string("tensor name")?;
            let n_dims = c.u32("tensor n_dims")?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::BadShape {
                    path: c.path.clone(),
                    tensor: name,
                    dims: vec![],
                    ggml_type: format!("n_dims={n_dims}"),
                });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64("tensor dimension")?);
            }
            let raw_type = c.u32("tensor type")?;
            let ggml_type = GgmlType(raw_type);
            if !ggml_type.is_known() {
                return Err(GgufError::UnknownTensorType {
                    path: c.path.clone(),
                    tensor: name,
                    ggml_type: raw_type,
                });
            }
            let offset = c.u64("tensor offset")?;
            let n_bytes = tensor_bytes(ggml_type, &dims).ok_or_else(|| GgufError::BadShape {
                path: c.path.clone(),
                tensor: name.clone(),
                dims: dims.clone(),
                ggml_type: ggml_type.to_string(),
            })?;
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                n_bytes,
            });
        }

        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                _ => {
                    return Err(GgufError::BadMetadata {
                        path: c.path,
                        key: "general.alignment".into(),
                        reason: format!("{v:?} is not a power of two"),
                    })
                }
            },
        };
        let data_offset = c.pos.next_multiple_of(alignment);
        let file_size = c.size;
        for t in &tensors {
            let start = data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.n_bytes));
            match (start, end) {
                (Some(_), Some(end)) if end <= file_size => {}
                _ => {
                    return Err(GgufError::TruncatedData {
                        path: c.path,
                        tensor: t.name.clone(),
                        start: data_offset.saturating_add(t.offset),
                        end: data_offset
                            .saturating_add(t.offset)
                            .saturating_add(t.n_bytes),
                        file_size,
                    })
                }
            }
        }

        Ok(GgufFile {
            path: c.path,
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_size,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Absolute file offset of a tensor's data.
    pub fn abs_offset(&self, t: &TensorInfo) -> u64 {
        self.data_offset + t.offset
    }
}

/// Bytes of a tensor of this type and shape; `None` for a shape ggml cannot hold.
pub fn tensor_bytes(ty: GgmlType, dims: &[u64]) -> Option<u64> {
    let (&ne0, rest) = dims.split_first()?;
    let mut bytes = ty.row_bytes(ne0)?;
    for &d in rest {
        bytes = bytes.checked_mul(d)?;
    }
    Some(bytes)
}

/// For `name-0000k-of-0000N.gguf`, the stem `name`, k and N.
fn split_parts(path: &Path) -> Option<(String, u32, u32)> {
    let file = path.file_name()?.to_str()?;
    let stem = file.strip_suffix(".gguf")?;
    let (head, count) = stem.rsplit_once("-of-")?;
    let (base, index) = head.rsplit_once('-')?;
    if index.len() != 5 || count.len() != 5 {
        return None;
    }
    Some((base.to_string(), index.parse().ok()?, count.parse().ok()?))
}

/// The path of shard `index` (1-based) of `count`, named as llama.cpp's `llama_split_path` does.
pub fn split_path(dir: &Path, base: &str, index: u32, count: u32) -> PathBuf {
    dir.join(format!("{base}-{index:05}-of-{count:05}.gguf"))
}

impl GgufModel {
    /// Open a model. A path named like a split shard opens every shard of that split.
    pub fn open(path: &Path) -> Result<GgufModel, GgufError> {
        let Some((base, _, count)) = split_parts(path) else {
            return Ok(GgufModel {
                shards: vec![GgufFile::open(path)?],
            });
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut shards = Vec::with_capacity(count as usize);
        for index in 1..=count {
            let p = split_path(dir, &base, index, count);
            if !p.exists() {
                return Err(GgufError::MissingShard {
                    path: p,
                    index,
                    count,
                });
            }
            shards.push(GgufFile::open(&p)?);
        }
        Ok(GgufModel { shards })
    }

    /// Metadata lives in the first shard.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.shards[0].get(key)
    }

    pub fn first_path(&self) -> &Path {
        &self.shards[0].path
    }

    pub fn total_file_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.file_size).sum()
    }
}
