//! Writing GGUF files: metadata, tensor infos, then tensor data streamed from a callback.
//!
//! Files are written under a temporary name in the target directory and renamed into
//! place only when complete, so an interrupted write never leaves a file that looks whole.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::os::AlignedBuf;

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

/// A `Write` that hands full page-aligned chunks to writer threads, so that producing tensor
/// data and writing it run on different cores, with a few writes in flight (this disk
/// writes 1.16 GB/s at queue depth 1 and 2.05 GB/s at 4); with `O_DIRECT` the writes skip
/// the page-cache copy entirely. Chunks circulate between the threads; nothing is allocated
/// after start-up. The last chunk is written padded to a page and the file then cut to size.
struct ThreadedWriter {
    chunk: AlignedBuf,
    len: usize,
    written: u64,
    to_writers: Option<SyncSender<(u64, AlignedBuf)>>,
    free: Receiver<AlignedBuf>,
    /// Shared with the writer threads until `finish` takes it back.
    file: Option<Arc<File>>,
    writers: Vec<JoinHandle<io::Result<()>>>,
}

impl ThreadedWriter {
    const CHUNK: usize = 8 << 20;
    const WRITERS: usize = 3;
    const CHUNKS: usize = 2 * Self::WRITERS;

    fn new(file: File) -> io::Result<ThreadedWriter> {
        let (to_writers, full) = sync_channel::<(u64, AlignedBuf)>(Self::CHUNKS);
        let full = Arc::new(Mutex::new(full));
        let (give_back, free) = channel();
        for _ in 0..Self::CHUNKS {
            give_back
                .send(AlignedBuf::new(Self::CHUNK))
                .expect("receiver alive");
        }
        let file = Arc::new(file);
        let mut writers = Vec::new();
        for i in 0..Self::WRITERS {
            let (full, give_back, file) = (full.clone(), give_back.clone(), file.clone());
            writers.push(
                std::thread::Builder::new()
                    .name(format!("gguf-writer-{i}"))
                    .spawn(move || loop {
                        let next = full
                            .lock()
                            .map_err(|_| io::Error::other("poisoned"))?
                            .recv();
                        let Ok((offset, chunk)) = next else {
                            return Ok(());
                        };
                        file.write_all_at(chunk.as_slice(), offset)?;
                        // The producer may have finished and gone: then it needs no chunk.
                        let _ = give_back.send(chunk);
                    })?,
            );
        }
        Ok(ThreadedWriter {
            chunk: AlignedBuf::new(Self::CHUNK),
            len: 0,
            written: 0,
            to_writers: Some(to_writers),
            free,
            file: Some(file),
            writers,
        })
    }

    /// Stop the writer threads and return the first error any of them met.
    fn join(&mut self) -> io::Result<()> {
        self.to_writers = None;
        let mut first = Ok(());
        for w in self.writers.drain(..) {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a GGUF writer thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn send_full(&mut self) -> io::Result<()> {
        // No free chunk means every writer stopped: on an error, which `join` returns.
        let Ok(next) = self.free.recv() else {
            return self
                .join()
                .and(Err(io::Error::other("GGUF writer threads stopped")));
        };
        let full = std::mem::replace(&mut self.chunk, next);
        let offset = self.written;
        self.written += self.len as u64;
        self.len = 0;
        let sent = self.to_writers.as_ref().map(|tx| tx.send((offset, full)));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => self
                .join()
                .and(Err(io::Error::other("GGUF writer threads stopped"))),
        }
    }

    /// Write what is buffered (a zero-padded whole chunk), wait for the writer threads, cut
    /// the file to the bytes actually produced, and return it.
    fn finish(mut self) -> io::Result<File> {
        let total = self.written + self.len as u64;
        if self.len > 0 {
            self.chunk.as_mut_slice()[self.len..].fill(0);
            self.send_full()?;
        }
        self.join()?;
        let file = self
            .file
            .take()
            .and_then(|f| Arc::try_unwrap(f).ok())
            .ok_or_else(|| io::Error::other("GGUF writer threads still hold the file"))?;
        file.set_len(total)?;
        Ok(file)
    }
}

impl Write for ThreadedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let k = (Self::CHUNK - self.len).min(data.len());
        self.chunk.as_mut_slice()[self.len..self.len + k].copy_from_slice(&data[..k]);
        self.len += k;
        if self.len == Self::CHUNK {
            self.send_full()?;
        }
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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

    /// Write the file to `path` atomically. `fill(index, spec, out)` writes exactly
    /// `spec.n_bytes()` bytes of that tensor's data; `progress(bytes_written)` is called
    /// after each tensor.
    pub fn write_atomic(
        &self,
        path: &Path,
        mut fill: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> io::Result<()>,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, GgufError> {
        let tmp = temp_path(path);
        let io_err = |source| GgufError::Io {
            path: tmp.clone(),
            source,
        };
        let result = (|| -> Result<u64, GgufError> {
            let (file, _direct) = crate::os::create_for_streaming(&tmp).map_err(io_err)?;
            let mut out = Counting {
                inner: ThreadedWriter::new(file).map_err(io_err)?,
                n: 0,
            };
            self.write_header(&mut out).map_err(io_err)?;
            let align = self.alignment();
            pad_to(&mut out, align).map_err(io_err)?;
            for (i, t) in self.tensors.iter().enumerate() {
                let before = out.n;
                fill(i, t, &mut out).map_err(io_err)?;
                let written = out.n - before;
                if written != t.n_bytes() {
                    return Err(GgufError::BadShape {
                        path: tmp.clone(),
                        tensor: t.name.clone(),
                        dims: t.dims.clone(),
                        ggml_type: format!(
                            "{} (wrote {written} bytes, expected {})",
                            t.ggml_type,
                            t.n_bytes()
                        ),
                    });
                }
                pad_to(&mut out, align).map_err(io_err)?;
                progress(out.n);
            }
            let total = out.n;
            let file = out.inner.finish().map_err(io_err)?;
            file.sync_all().map_err(io_err)?;
            Ok(total)
        })();
        match result {
            Ok(total) => {
                std::fs::rename(&tmp, path).map_err(|source| GgufError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
                Ok(total)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

fn pad_to(out: &mut Counting<impl Write>, align: u64) -> io::Result<()> {
    let pad = out.n.next_multiple_of(align) - out.n;
    out.write_all(&vec![0u8; pad as usize])
}

/// A hidden temporary name next to `path`, unique to this process.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}
