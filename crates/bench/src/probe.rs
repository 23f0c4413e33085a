//! `probe-io`: what the disk under a model delivers. Sequential and random `O_DIRECT`
//! reads at expert-sized and 1 MiB blocks, at queue depth 1, 4 and 16 (threads issuing
//! `pread` concurrently). Later work uses these figures as the physical bound.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

use epm_core::model::ModelIndex;
use epm_core::units::MIB;
use epm_gguf::GgufModel;
use epm_synth::quant::Rng;
use epm_sys::fs::PageBuf;
use epm_sys::proc::{machine, read_ahead_kb, Machine};
const SCRATCH_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub pattern: &'static str,
    pub block_bytes: u64,
    pub queue_depth: usize,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub schema_version: u32,
    pub path: String,
    pub file_bytes: u64,
    pub read_ahead_kb: Option<u64>,
    pub expert_block_source: String,
    pub machine: Machine,
    pub command: String,
    pub results: Vec<ProbeResult>,
}

/// The median bytes per expert of a GGUF model, rounded up to pages; `None` for other files.
fn expert_block(path: &Path) -> Option<u64> {
    let index = ModelIndex::build(&GgufModel::open(path).ok()?).ok()?;
    let mut sizes: Vec<u64> = index.layers.iter().map(|l| l.bytes_per_expert()).collect();
    sizes.sort_unstable();
    let page = epm_sys::page_size() as u64;
    sizes.get(sizes.len() / 2).map(|b| b.next_multiple_of(page))
}

fn scratch_file(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(format!(".epm-probe-{}.tmp", std::process::id()));
    let mut f = File::create(&path)?;
    let mut rng = Rng::new(1);
    let mut buf = vec![0u8; 8 << 20];
    for _ in 0..SCRATCH_BYTES / buf.len() as u64 {
        rng.fill(&mut buf);
        f.write_all(&buf)?;
    }
    f.sync_all()?;
    Ok(path)
}

fn measure(
    file: &File,
    size: u64,
    block: u64,
    qd: usize,
    random: bool,
    total: u64,
) -> std::io::Result<ProbeResult> {
    let blocks_in_file = size / block;
    let n_reads =
        (total / block)
            .max(qd as u64)
            .min(if random { u64::MAX } else { blocks_in_file });
    let next = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> std::io::Result<()> {
        let handles: Vec<_> = (0..qd)
            .map(|t| {
                let next = &next;
                s.spawn(move || -> std::io::Result<()> {
                    let mut buf = PageBuf::new(block as usize)?;
                    let mut rng = Rng::new(t as u64 + 7);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n_reads {
                            return Ok(());
                        }
                        let blk = if random {
                            rng.below(blocks_in_file)
                        } else {
                            i % blocks_in_file
                        };
                        file.read_exact_at(buf.as_mut_slice(), blk * block)?;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| std::io::Error::other("probe thread panicked"))??;
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let bytes = n_reads * block;
    Ok(ProbeResult {
        pattern: if random { "random" } else { "sequential" },
        block_bytes: block,
        queue_depth: qd,
        bytes,
        seconds,
        mb_per_s: bytes as f64 / 1e6 / seconds.max(1e-9),
    })
}

/// Run the probe on `path` (read only), or on a scratch file in the current directory.
pub fn run(path: Option<&Path>, bytes_per_test: u64) -> std::io::Result<ProbeReport> {
    let (target, scratch) = match path {
        Some(p) => (p.to_path_buf(), false),
        None => (scratch_file(Path::new("."))?, true),
    };
    let result = (|| {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&target)?;
        let size = file.metadata()?.len();
        let (expert, source) = match expert_block(&target) {
            Some(b) => (b, "median bytes per expert of the model".to_string()),
            None => (2 * MIB, "2 MiB (not a GGUF model)".to_string()),
        };
        let mut results = Vec::new();
        for block in [expert, MIB] {
            if size < block * 16 {
                return Err(std::io::Error::other(format!(
                    "{} is too small to probe ({size} bytes)",
                    target.display()
                )));
            }
            for random in [false, true] {
                for qd in [1, 4, 16] {
                    epm_sys::cache::drop_file_cache(&target)?;
                    results.push(measure(&file, size, block, qd, random, bytes_per_test)?);
                }
            }
        }
        Ok(ProbeReport {
            schema_version: 1,
            path: target.display().to_string(),
            file_bytes: size,
            read_ahead_kb: read_ahead_kb(&target),
            expert_block_source: source,
            machine: machine(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            results,
        })
    })();
    if scratch {
        let _ = std::fs::remove_file(&target);
    }
    result
}
