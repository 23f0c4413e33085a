//! A warm start: while no request runs, read the experts that past runs of this model
//! selected most ([`epm_core::heat`]) into the expert cache's free room, so that the first
//! request after a restart finds them resident instead of reading most of the model at its
//! first layers. Reads go one chunk at a time: the next chunk is advised in only once the
//! last one's pages have landed (mincore counts only completed reads), so a request that
//! arrives meanwhile finds at most one chunk of reads ahead of its own on the disk.
//!
//! The heat is a small file per model (named after the model files' fingerprint), written
//! when a server saves while idle and when it stops: the past runs' heat with this run's
//! selections added ([`epm_core::heat::ExpertHeat::after_run`]), on top of what another
//! process of the model saved meanwhile ([`epm_core::heat::HeatShare`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use epm_core::heat::{ExpertHeat, HeatShare};
use epm_core::model::ModelIndex;
use epm_core::pager::{FileRange, Warmed};
use epm_core::stats::RunStats;
use epm_sys::outward;

use crate::hook::HookState;
use crate::integrity::{fnv1a, ModelIdentity};

/// Bytes advised in before waiting for them to land: about 10-30 ms of a laptop's disk, so
/// a request that arrives waits little behind them.
pub const WARM_CHUNK_BYTES: u64 = 32 << 20;
/// How long a chunk may take to land before the next is issued all the same (a page the
/// kernel dropped again would otherwise stall the warm start).
const CHUNK_PATIENCE: Duration = Duration::from_secs(2);

/// The lock file, beside the heat files, that a save holds while it reads and rewrites one.
pub const HEAT_LOCK: &str = "heat.lock";

/// Where the heat of the model `identity` lives under `dir`.
pub fn heat_file(dir: &Path, identity: &ModelIdentity) -> PathBuf {
    dir.join(format!(
        "heat-{:016x}.bin",
        fnv1a(identity.fingerprint().as_bytes())
    ))
}

/// The heat that past runs of the model `index` left at `path` ([`heat_file`]): none yet,
/// or a file that cannot be read, is no heat (said, and the run goes on; the file is
/// replaced at the end).
pub fn past_heat(path: &Path, index: &ModelIndex) -> ExpertHeat {
    let layers: Vec<u32> = index.layers.iter().map(|l| l.layer).collect();
    read_heat(path, &layers, index.n_expert)
        .map_err(|e| {
            tracing::warn!(
                "{}: {e}; starting without a warm start (the file is replaced at the end)",
                path.display()
            )
        })
        .ok()
        .flatten()
        .unwrap_or_else(|| ExpertHeat::empty(&layers, index.n_expert))
}

/// The heat at `path` of the model whose MoE layers are `layers` with `n_expert` experts
/// each: `None` where there is no file yet.
fn read_heat(path: &Path, layers: &[u32], n_expert: u32) -> Result<Option<ExpertHeat>, String> {
    match std::fs::read(path) {
        Ok(bytes) => ExpertHeat::decode(&bytes, layers, n_expert)
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The heat past runs left for a model, read before its load: where it lives and what it
/// held.
pub struct PastHeat {
    pub path: PathBuf,
    pub heat: ExpertHeat,
}

/// For a run that keeps heat under `dir` (`None`: a cold start by request) and pages the
/// experts of `index` (`options.mode`; an unpaged run keeps none): the heat past runs of
/// the model `identity` left ([`past_heat`]), with `options.paging.keep_first` set to its
/// hottest, so that where more of the model is cached at start than the budget holds, the
/// experts kept are those past runs selected most. Read before the load for that reason;
/// the session takes it afterwards ([`crate::Session::warm_start_from`]).
pub fn heat_before_load(
    dir: Option<&Path>,
    identity: &ModelIdentity,
    index: &ModelIndex,
    options: &mut crate::EngineOptions,
) -> Option<PastHeat> {
    let dir = dir.filter(|_| options.mode.pages_experts_of(index))?;
    let path = heat_file(dir, identity);
    let heat = past_heat(&path, index);
    options.paging.keep_first = heat.hottest();
    Some(PastHeat { path, heat })
}

/// A warm start in progress, and the heat it came from.
pub(crate) struct WarmStart {
    path: PathBuf,
    /// What the file held at start, to which this run's selections are added when it is
    /// saved (or to what another process saved meanwhile).
    share: HeatShare,
    /// The experts to read, hottest first, and the next one's place.
    order: Vec<(u32, u32)>,
    next: usize,
    /// The last chunk's ranges, until they have landed.
    in_flight: Vec<FileRange>,
    issued_at: Instant,
    started: Instant,
    done: bool,
}

impl WarmStart {
    /// The warm start of a paged run whose pager counts `stats.pager`, from the heat `past`
    /// read from `path` ([`past_heat`]; saved there again at the end). `None` for a run
    /// without a pager.
    pub(crate) fn open(path: PathBuf, past: ExpertHeat, stats: &RunStats) -> Option<WarmStart> {
        stats.pager.layers.first()?;
        let order = past.hottest();
        Some(WarmStart {
            path,
            done: order.is_empty(),
            share: HeatShare::new(past),
            order,
            next: 0,
            in_flight: Vec::new(),
            issued_at: Instant::now(),
            started: Instant::now(),
        })
    }

    /// Whether there is nothing left to read.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// One step while idle: once the last chunk has landed, advise the next one in.
    /// Returns whether there is more to do.
    pub(crate) fn step(&mut self, hook: &HookState) -> bool {
        if self.done {
            return false;
        }
        let mut guard = hook.active.lock().unwrap_or_else(|e| e.into_inner());
        let Some(active) = guard.as_mut() else {
            self.done = true;
            return false;
        };
        if !self.in_flight.is_empty() {
            let files = &active.pager.advisor().files;
            let landed = self.in_flight.iter().all(|r| {
                let (s, e) = outward(r.offset, r.len, files[r.file as usize].page());
                files[r.file as usize].resident_bytes(r.offset, r.len) >= e - s
            });
            if !landed && self.issued_at.elapsed() < CHUNK_PATIENCE {
                return true;
            }
            self.in_flight.clear();
        }
        let mut bytes = 0;
        while bytes < WARM_CHUNK_BYTES && self.next < self.order.len() {
            let (layer, expert) = self.order[self.next];
            let cost = active.pager.expert_cost(layer, expert).unwrap_or(0);
            match active.pager.warm(layer, expert, |r| self.in_flight.push(r)) {
                Warmed::Taken => bytes += cost,
                Warmed::Resident | Warmed::NotAnExpert => {}
                Warmed::NoRoom => {
                    self.next = self.order.len();
                    break;
                }
            }
            self.next += 1;
        }
        self.issued_at = Instant::now();
        if self.in_flight.is_empty() && self.next >= self.order.len() {
            self.done = true;
            let p = &hook.stats.pager;
            tracing::info!(
                "warm start: {} experts ({} MiB) that past runs selected most read while idle in {:.1} s",
                p.warmed.get(),
                p.warmed_bytes.get() >> 20,
                self.started.elapsed().as_secs_f64()
            );
        }
        !self.done || !self.in_flight.is_empty()
    }

    /// Write the past heat with this run's selections added, atomically, over what another
    /// process of the model saved since this one last read or wrote the file (a failure is
    /// said, and costs the next run its warm start).
    pub(crate) fn save(&mut self, stats: &RunStats) {
        // In the heat's order: layers ascending.
        let mut layers: Vec<_> = stats.pager.layers.iter().collect();
        layers.sort_by_key(|l| l.layer);
        let selections: Vec<u64> = layers
            .iter()
            .flat_map(|l| l.selections.iter().map(|c| c.get()))
            .collect();
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| epm_sys::fs::lock_exclusive(&dir.join(HEAT_LOCK)))
            .and_then(|_lock| {
                // Read and rewritten under the lock, so that no other process's save
                // comes in between.
                let (layers, n_expert) = self.share.shape();
                // A file that cannot be read now is replaced (its past was read at start).
                let now = read_heat(&self.path, layers, n_expert).ok().flatten();
                let heat = self.share.to_save(now, &selections);
                epm_sys::fs::write_atomic(&self.path, &heat.encode()).map(|()| heat)
            });
        match written {
            Ok(heat) => self.share.saved(heat, &selections),
            Err(e) => {
                tracing::warn!(
                "the expert heat could not be written to {}: {e}; the next run starts without a warm start",
                self.path.display()
            );
            }
        }
    }
}
