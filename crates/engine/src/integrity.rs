//! The model files' identity, recorded at load and checked while a server runs: a user who
//! replaces or re-downloads a GGUF under a running server must get a clear refusal, not a
//! SIGBUS mid-request or outputs from a file the mapping no longer matches.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes of the header that the checksum covers.
const HEADER_SAMPLE: u64 = 64 << 10;

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    /// FNV-1a of the first [`HEADER_SAMPLE`] bytes.
    header_sum: u64,
}

/// What changed, and in which file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model file {} changed on disk while the server runs ({what}); restart the server to load it", .path.display())]
pub struct ModelChanged {
    pub path: PathBuf,
    pub what: String,
}

/// Every shard's identity at load.
#[derive(Debug, Clone)]
pub struct ModelIdentity {
    files: Vec<FileIdentity>,
}

/// FNV-1a (64 bits) of `bytes`: a checksum against accidents, not adversaries.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A checksum of a saved prefix's bytes, against accidents (a file cut short, changed or
/// replaced under our folder): XXH3-64, which runs at memory speed, where a cryptographic
/// hash took a tenth of a second per 200 MB prefix on every save and every load, with the
/// engine waiting.
pub fn bytes_sum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

fn header_sum(path: &Path) -> std::io::Result<u64> {
    // Without readahead: its window would cache a small model's first tensor (the token
    // table) outside the budget's accounting.
    Ok(fnv1a(&epm_sys::fs::read_head(path, HEADER_SAMPLE)?))
}

fn identity(path: &Path, with_sum: bool) -> std::io::Result<FileIdentity> {
    let m = std::fs::metadata(path)?;
    Ok(FileIdentity {
        path: path.to_path_buf(),
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        header_sum: if with_sum { header_sum(path)? } else { 0 },
    })
}

impl ModelIdentity {
    pub fn record(paths: &[PathBuf]) -> std::io::Result<ModelIdentity> {
        Ok(ModelIdentity {
            files: paths
                .iter()
                .map(|p| identity(p, true))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The files' contents as far as the identity tells them, wherever they are: each
    /// shard's size, modification time and header checksum, not its path or inode (a model
    /// moved or copied with its times is the same model).
    pub fn fingerprint(&self) -> String {
        self.files
            .iter()
            .map(|f| format!("{}:{}:{:016x}", f.size, f.mtime_ns, f.header_sum))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Compare with the files now: `metadata` only when `!with_sum` (cheap enough for every
    /// request), the header checksum too when `with_sum`.
    pub fn check(&self, with_sum: bool) -> Result<(), ModelChanged> {
        for f in &self.files {
            let changed = |what: String| ModelChanged {
                path: f.path.clone(),
                what,
            };
            let now =
                identity(&f.path, with_sum).map_err(|e| changed(format!("cannot read it: {e}")))?;
            if (now.dev, now.ino) != (f.dev, f.ino) {
                return Err(changed("replaced by another file".into()));
            }
            if now.size != f.size {
                return Err(changed(format!(
                    "{} bytes at load, {} now",
                    f.size, now.size
                )));
            }
            if now.mtime_ns != f.mtime_ns {
                return Err(changed("modified since load".into()));
            }
            if with_sum && now.header_sum != f.header_sum {
                return Err(changed("its header differs from the one loaded".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_truncating_or_rewriting_a_file_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        std::fs::write(&p, vec![7u8; 100_000]).unwrap();
        let id = ModelIdentity::record(std::slice::from_ref(&p)).unwrap();
        assert_eq!(id.check(true), Ok(()));
        // Truncated in place.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(50_000)
            .unwrap();
        let e = id.check(false).unwrap_err();
        assert!(e.what.contains("100000 bytes at load, 50000 now"), "{e}");
        assert!(e.to_string().contains("restart the server"), "{e}");
        // Replaced by a new file of the same size (a rename over it).
        std::fs::write(&p, vec![7u8; 100_000]).unwrap();
        let id = ModelIdentity::record(std::slice::from_ref(&p)).unwrap();
        let q = dir.path().join("new.gguf");
        std::fs::write(&q, vec![7u8; 100_000]).unwrap();
        std::fs::rename(&q, &p).unwrap();
        assert!(id.check(false).unwrap_err().what.contains("replaced"));
        // Gone.
        std::fs::remove_file(&p).unwrap();
        assert!(id.check(false).unwrap_err().what.contains("cannot read it"));
    }
}
