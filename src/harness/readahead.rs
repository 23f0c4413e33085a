//! The block device behind a file and its `read_ahead_kb`, which decides how much the
//! kernel reads per page fault when it pages a plain mmap.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `/sys/.../queue/read_ahead_kb` of the device holding `path`, if it is a block device.
pub fn read_ahead_path(path: &Path) -> Option<PathBuf> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition has no queue of its own; its parent disk does.
    [
        sys.join("queue/read_ahead_kb"),
        sys.join("../queue/read_ahead_kb"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

pub fn read_ahead_kb(path: &Path) -> Option<u64> {
    std::fs::read_to_string(read_ahead_path(path)?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Sets `read_ahead_kb` for the device of a file and restores the old value on drop.
#[derive(Debug)]
pub struct ReadaheadGuard {
    sys: PathBuf,
    old: u64,
}

impl ReadaheadGuard {
    pub fn set(file: &Path, kb: u64) -> std::io::Result<ReadaheadGuard> {
        let sys = read_ahead_path(file).ok_or_else(|| {
            std::io::Error::other(format!(
                "{} is not on a block device with a read_ahead_kb",
                file.display()
            ))
        })?;
        let old = std::fs::read_to_string(&sys)?
            .trim()
            .parse()
            .map_err(std::io::Error::other)?;
        std::fs::write(&sys, kb.to_string())?;
        Ok(ReadaheadGuard { sys, old })
    }
}

impl Drop for ReadaheadGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.sys, self.old.to_string()) {
            tracing::error!(
                "could not restore {} to {}: {e}",
                self.sys.display(),
                self.old
            );
        }
    }
}
