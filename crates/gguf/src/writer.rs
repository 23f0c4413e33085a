//! Writing GGUF files: metadata, tensor infos, then tensor data streamed from a callback
//! into any sink. Where the bytes go (a temporary file renamed into place, `O_DIRECT`
//! writer threads) is the caller's choice: see `epm_sys::fs`.

use std::io::{self, Write};

use super::reader::tensor_bytes;
use super::value::Value;
use super::{GgmlType, GgufError, DEFAULT_ALIGNMENT, MAGIC};

/// A tensor to be written: name, shape (innermost first) and type.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
}

impl TensorSpec {
    pub fn new(name: impl Into<String>, dims: &[u64], ggml_type: GgmlType) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dims: dims.to_vec(),
            ggml_type,
        }
    }

    /// Bytes of data. Panics on a shape the type cannot hold: specs come from our own presets.
    pub fn n_bytes(&self) -> u64 {
        tensor_bytes(self.ggml_type, &self.dims).unwrap_or_else(|| {
            panic!(
                "{}: shape {:?} invalid for {}",
                self.name, self.dims, self.ggml_type
            )
        })
    }
}

#[derive(Debug, Default, Clone)]
pub struct GgufWriter {
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorSpec>,
}

fn put_string(out: &mut impl Write, s: &str) -> io::Result<()> {
    out.write_all(&(s.len() as u64).to_le_bytes())?;
    out.write_all(s.as_bytes())
}

fn put_value(out: &mut impl Write, v: &Value) -> io::Result<()> {
    match v {
        Value::U8(x) => out.write_all(&[*x]),
        Value::I8(x) => out.write_all(&x.to_le_bytes()),
        Value::U16(x) => out.write_all(&x.to_le_bytes()),
        Value::I16(x) => out.write_all(&x.to_le_bytes()),
        Value::U32(x) => out.write_all(&x.to_le_bytes()),
        Value::I32(x) => out.write_all(&x.to_le_bytes()),
        Value::F32(x) => out.write_all(&x.to_le_bytes()),
        Value::Bool(x) => out.write_all(&[u8::from(*x)]),
        Value::String(s) => put_string(out, s),
        Value::Array { elem_type, items } => {
            out.write_all(&elem_type.to_le_bytes())?;
            out.write_all(&(items.len() as u64).to_le_bytes())?;
            for item in items {
                put_value(out, item)?;
            }
            Ok(())
        }
        Value::U64(x) => out.write_all(&x.to_le_bytes()),
        Value::I64(x) => out.write_all(&x.to_le_bytes()),
        Value::F64(x) => out.write_all(&x.to_le_bytes()),
    }
}

/// Counts bytes so that the writer can check each tensor's data length.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    pub fn kv(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.metadata.push((key.into(), value));
        self
    }

    pub fn tensor(&mut self, spec: TensorSpec) -> &mut Self {
        self.tensors.push(spec);
        self
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Total bytes the file will have.
    pub fn file_size(&self) -> u64 {
        let mut header = Counting {
            inner: io::sink(),
            n: 0,
        };
        self.write_header(&mut header).expect("sink never fails");
        let align = self.alignment();
        let mut size = header.n.next_multiple_of(align);
        for t in &self.tensors {
            size = (size + t.n_bytes()).next_multiple_of(align);
        }
        size
    }

    fn write_header(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&MAGIC)?;
        out.write_all(&3u32.to_le_bytes())?;
        out.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        out.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
        for (k, v) in &self.metadata {
            put_string(out, k)?;
            out.write_all(&v.wire_type().to_le_bytes())?;
            put_value(out, v)?;
        }
        let align = self.alignment();
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(out, &t.name)?;
            out.write_all(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                out.write_all(&d.to_le_bytes())?;
            }
            out.write_all(&t.ggml_type.0.to_le_bytes())?;
            out.write_all(&offset.to_le_bytes())?;
            offset = (offset + t.n_bytes()).next_multiple_of(align);
        }
        Ok(())
    }

    /// Write the whole file into `out`: header, then each tensor's data from
    /// `fill(index, spec, out)`, which must write exactly `spec.n_bytes()` bytes, padded to
    /// the alignment; `progress(bytes_written)` is called after each tensor. Returns the
    /// bytes written.
    pub fn write_to(
        &self,
        out: &mut dyn Write,
        mut fill: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> io::Result<()>,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, GgufError> {
        let mut out = Counting { inner: out, n: 0 };
        self.write_header(&mut out)?;
        let align = self.alignment();
        pad_to(&mut out, align)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let before = out.n;
            fill(i, t, &mut out)?;
            let wrote = out.n - before;
            if wrote != t.n_bytes() {
                return Err(GgufError::WrongDataLength {
                    tensor: t.name.clone(),
                    wrote,
                    expected: t.n_bytes(),
                });
            }
            pad_to(&mut out, align)?;
            progress(out.n);
        }
        Ok(out.n)
    }
}

fn pad_to(out: &mut Counting<impl Write>, align: u64) -> io::Result<()> {
    let pad = out.n.next_multiple_of(align) - out.n;
    out.write_all(&vec![0u8; pad as usize])
}
