//! A [`Session`]: one llama.cpp context on an [`Engine`], with the pager attached, holding
//! up to `n_seq` sequences. It prefills prompts, decodes steps of several sequences in one
//! batch, samples, and keeps or drops each sequence's KV prefix.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use epm_core::pager::Phase;
use epm_core::prefix::{self, PromptSplit, SeqCache};
use epm_core::prompt_store::SavedFile;
use epm_core::stats::RunStats;

use std::sync::Arc;

use crate::engine::{Engine, SessionOptions};
use crate::error::EngineError;
use crate::hook::{attach, GoneProbe, HookedContext, Stopped};
use crate::integrity::bytes_sum;
use crate::prefix_file;
use crate::sampling::{Pick, Picked, Sampler};
use crate::warm::{PastHeat, WarmStart};
use epm_sys::fs::{read_whole_uncached, write_whole_uncached, PageBuf};

/// One decode step of one sequence: `token` at position `pos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub seq: i32,
    pub token: i32,
    pub pos: u32,
}

/// How a prompt met a sequence's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefilled {
    /// Prompt tokens whose KV was kept from before.
    pub reused: usize,
    /// Prompt tokens evaluated now.
    pub evaluated: usize,
    /// Logits index of the prompt's last token.
    pub logits: i32,
}

/// How far a prompt's prefill has come: reported before its first ubatch and after each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefillProgress {
    /// Prompt tokens whose KV was kept from before (not evaluated).
    pub cached: usize,
    /// Tokens evaluated so far, of `to_evaluate`.
    pub evaluated: usize,
    pub to_evaluate: usize,
}

pub struct Session<'e> {
    engine: &'e Engine,
    hooked: HookedContext<'e>,
    batch: LlamaBatch<'static>,
    opts: SessionOptions,
    /// How prompts are cut into ubatches (from `opts` and the vocabulary).
    split: PromptSplit,
    finished: bool,
    /// Experts past runs selected most, read in while idle ([`Session::warm_start_from`]).
    warm: Option<WarmStart>,
}

impl<'e> Session<'e> {
    pub(crate) fn new(
        engine: &'e Engine,
        hooked: HookedContext<'e>,
        batch: LlamaBatch<'static>,
        opts: SessionOptions,
        split: PromptSplit,
    ) -> Session<'e> {
        Session {
            split,
            engine,
            hooked,
            batch,
            opts,
            finished: false,
            warm: None,
        }
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    pub fn options(&self) -> SessionOptions {
        self.opts
    }

    /// Context cells per sequence: llama.cpp splits `n_ctx` evenly between sequences.
    pub fn n_ctx_per_seq(&self) -> u32 {
        self.hooked.ctx().n_ctx() / self.opts.sequences()
    }

    fn check_hook(&self) -> Result<(), EngineError> {
        let hook = self.hooked.hook();
        if hook.foreign.load(Ordering::Relaxed) {
            let what = hook
                .foreign_tensor
                .lock()
                .ok()
                .and_then(|g| g.clone())
                .unwrap_or_default();
            return Err(EngineError::ForeignTensor(what));
        }
        if hook.stats.hook_panicked.load(Ordering::Relaxed) {
            return Err(EngineError::HookPanicked);
        }
        Ok(())
    }

    /// Evaluate the batch; with `gone`, it stops part-way once that says the client of its
    /// only sequence has gone ([`EngineError::Cancelled`]).
    fn decode_batch(
        &mut self,
        phase: Phase,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<(), EngineError> {
        self.hooked.hook().set_phase(phase);
        if let Err((e, stopped)) = self.hooked.decode(&mut self.batch, gone) {
            return Err(match stopped {
                Some(Stopped::ShuttingDown) => {
                    self.engine.stats().aborted_batches.inc();
                    EngineError::ShuttingDown
                }
                Some(Stopped::ClientGone) => {
                    self.engine.stats().cancelled_batches.inc();
                    EngineError::Cancelled
                }
                None => EngineError::llama(e),
            });
        }
        self.check_hook()
    }

    /// Stop the batch in flight, between two graph nodes, once `flag` is set (a server's
    /// shutdown); the batch then fails with [`EngineError::ShuttingDown`]. Without it a
    /// shutdown waits for the core's step in flight, which evaluates a prompt's ubatch (the
    /// whole prompt where a prefill cannot pause): a cold ubatch of 1,024 tokens at a small
    /// budget takes a minute, a whole prompt minutes, longer than a container's stop
    /// timeout.
    pub fn abort_when(&mut self, flag: Arc<AtomicBool>) {
        self.hooked.abort_when(flag);
    }

    /// Evaluate `prompt[start..]` of sequence `seq` (whose cache holds `prompt[..start]`,
    /// `start` one of the split's boundaries or 0), asking for the logits of the last token
    /// only; `progress` hears how many are done after each ubatch, and stops the prefill
    /// there with [`EngineError::Cancelled`] by breaking; `gone` stops it within a ubatch.
    /// Returns that token's logits index.
    fn prefill(
        &mut self,
        seq: i32,
        prompt: &[i32],
        start: usize,
        progress: &mut dyn FnMut(usize) -> ControlFlow<()>,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<i32, EngineError> {
        // Progress for readers on other threads (the server's pager view), in the prompt's
        // positions: a prefill the core paused and resumed goes on from where it was.
        let stats = self.engine.stats().clone();
        stats.prefill_total.set(prompt.len() as u64);
        stats.prefill_done.set(start as u64);
        let result = self.prefill_batches(seq, prompt, start, &stats, progress, gone);
        stats.prefill_total.set(0);
        stats.prefill_done.set(0);
        result
    }

    /// The pieces of `prompt[start..]` handed to llama.cpp, one call each: the split's
    /// ubatches, so progress is seen per ubatch, where `n_batch` is a multiple of
    /// `n_ubatch`; `n_batch` tokens at a time otherwise (llama.cpp then splits each as
    /// upstream does, and nothing is reused).
    fn prefill_pieces(&self, prompt: &[i32], start: usize) -> Vec<std::ops::Range<usize>> {
        if self.prefills_in_split_ubatches() {
            return self.split.ubatches_from(prompt, start);
        }
        let n_batch = self.opts.n_batch.max(1);
        (start..prompt.len())
            .step_by(n_batch as usize)
            .map(|a| a..(a + n_batch as usize).min(prompt.len()))
            .collect()
    }

    fn prefill_batches(
        &mut self,
        seq: i32,
        prompt: &[i32],
        start: usize,
        stats: &RunStats,
        progress: &mut dyn FnMut(usize) -> ControlFlow<()>,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<i32, EngineError> {
        let mut last = 0;
        let mut done = 0;
        let to_evaluate = prompt.len() - start;
        for piece in self.prefill_pieces(prompt, start) {
            self.batch.clear();
            let chunk = &prompt[piece.clone()];
            for (i, &t) in chunk.iter().enumerate() {
                let pos = piece.start + i;
                self.batch
                    .add(LlamaToken(t), pos as i32, &[seq], pos + 1 == prompt.len())
                    .map_err(EngineError::llama)?;
            }
            self.hooked.hook().take_token_rows(chunk.iter().copied());
            if let Err(e) = self.decode_batch(Phase::Prompt, gone) {
                if matches!(e, EngineError::Cancelled) {
                    self.keep_pieces_before(seq, piece.start);
                }
                return Err(e);
            }
            stats.prefill_done.add(chunk.len() as u64);
            done += chunk.len();
            if progress(done).is_break() && done < to_evaluate {
                return Err(EngineError::Cancelled);
            }
            last = self.batch.n_tokens() - 1;
        }
        Ok(last)
    }

    /// After a prefill stopped part-way through the piece starting at `start`, make sequence
    /// `seq` hold exactly `prompt[..start]`, or nothing. llama.cpp has dropped the stopped
    /// ubatch's positions, but a piece of several ubatches keeps the ones before it, and a
    /// stopped graph may have written part of a recurrent state, which cannot be told apart.
    fn keep_pieces_before(&mut self, seq: i32, start: usize) {
        if self.engine.has_recurrent_state() || !self.truncate(seq, start as u32) {
            self.clear(seq);
        }
    }

    /// Prompt tokens sequence `seq` holds: positions `0..` this.
    fn held_tokens(&self, seq: i32) -> usize {
        (self.hooked.ctx().kv_cache_seq_pos_max(seq) + 1).max(0) as usize
    }

    /// One decode step of every sequence in `steps`, in one batch; the logits of step `i`
    /// are at index `i`.
    pub fn decode(&mut self, steps: &[Step]) -> Result<(), EngineError> {
        // The context reserves one output per sequence (`n_outputs_max`), and llama.cpp
        // aborts on a batch that asks for more: refuse it here instead.
        if steps.len() > self.opts.sequences() as usize {
            return Err(EngineError::Llama(format!(
                "{} decode steps in one batch, but the context holds {} sequences",
                steps.len(),
                self.opts.sequences()
            )));
        }
        self.batch.clear();
        for s in steps {
            self.batch
                .add(LlamaToken(s.token), s.pos as i32, &[s.seq], true)
                .map_err(EngineError::llama)?;
        }
        self.hooked
            .hook()
            .take_token_rows(steps.iter().map(|s| s.token));
        self.decode_batch(Phase::Decode, None)
    }

    pub fn logits(&self, index: i32) -> &[f32] {
        self.hooked.ctx().get_logits_ith(index)
    }

    pub fn sample(&mut self, sampler: &mut Sampler, index: i32, pick: Pick) -> Picked {
        sampler.sample(self.hooked.ctx(), index, pick)
    }

    /// Drop sequence `seq`'s cache from position `keep` on. False when the memory cannot
    /// drop part of a sequence (recurrent state keeps no history): then nothing changed.
    pub fn truncate(&mut self, seq: i32, keep: u32) -> bool {
        self.hooked
            .ctx_mut()
            .clear_kv_cache_seq(Some(seq as u32), Some(keep), None)
            .is_ok_and(|removed| removed)
    }

    /// Drop all of sequence `seq`'s cache.
    pub fn clear(&mut self, seq: i32) {
        let _ = self
            .hooked
            .ctx_mut()
            .clear_kv_cache_seq(Some(seq as u32), None, None);
    }

    /// Make sequence `seq` hold `prompt` with its logits ready: keep the part of its cache
    /// that a cold run would compute the same ([`prefix::reusable_prefix`]: whole prefill
    /// ubatches of the session's split shared with `prompt`) and evaluate the rest in the
    /// ubatches a cold run makes of it, so the output is the same as from a cold cache.
    /// Where the cache cannot be cut (recurrent models), it is kept only when the kept part
    /// is all of it, else rebuilt from scratch. `cache` is updated;
    /// `progress` hears how far the prefill has come, first before any evaluation. When it
    /// breaks (the client has gone), the prefill stops after that ubatch with
    /// [`EngineError::Cancelled`], and the cache keeps the whole ubatches evaluated, for a
    /// client that asks again. With `gone`, the prefill also stops within a ubatch, between
    /// two graph nodes, once `gone` says the client has gone; that ubatch is then lost.
    pub fn prefill_reusing(
        &mut self,
        seq: i32,
        cache: &mut SeqCache,
        prompt: &[i32],
        progress: &mut dyn FnMut(PrefillProgress) -> ControlFlow<()>,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<Prefilled, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let mut keep =
            prefix::reusable_prefix(cache, prompt, &self.split, self.opts.n_batch as usize);
        if keep < cache.tokens.len() && !self.truncate(seq, keep as u32) {
            self.clear(seq);
            keep = 0;
        }
        *cache = SeqCache::default();
        let mut at = PrefillProgress {
            cached: keep,
            evaluated: 0,
            to_evaluate: prompt.len() - keep,
        };
        let logits = if progress(at).is_break() {
            Err(EngineError::Cancelled)
        } else {
            self.prefill(
                seq,
                prompt,
                keep,
                &mut |done| {
                    at.evaluated = done;
                    progress(at)
                },
                gone,
            )
        };
        let logits = match logits {
            Ok(l) => l,
            Err(EngineError::Cancelled) => {
                // Stopped on a piece boundary, or within a piece and cut back to it: the
                // sequence holds exactly the prompt's first `keep + evaluated` tokens, or
                // (recurrent state) nothing.
                let mut held = keep + at.evaluated;
                if self.held_tokens(seq) != held {
                    self.clear(seq);
                    held = 0;
                }
                *cache = prefix::after_prefill(&prompt[..held], &self.split);
                return Err(EngineError::Cancelled);
            }
            Err(e) => {
                // The cache holds an unknown part of the prompt: forget it all.
                self.clear(seq);
                return Err(e);
            }
        };
        *cache = prefix::after_prefill(prompt, &self.split);
        Ok(Prefilled {
            reused: keep,
            evaluated: prompt.len() - keep,
            logits,
        })
    }

    /// Whether prompts are handed to llama.cpp in the split's ubatches (`n_batch` a
    /// multiple of `n_ubatch`): the only case in which anything is reused, so also whether a
    /// prefill stopped on a ubatch boundary keeps all it evaluated when asked again.
    pub fn prefills_in_split_ubatches(&self) -> bool {
        self.opts.n_batch.max(1) % self.opts.n_ubatch.max(1) == 0
    }

    /// How many leading tokens of `prompt` may keep their KV from a cache holding `cache`
    /// ([`prefix::reusable_prefix`] with the session's split).
    pub fn reusable_prefix(&self, cache: &SeqCache, prompt: &[i32]) -> usize {
        prefix::reusable_prefix(cache, prompt, &self.split, self.opts.n_batch as usize)
    }

    /// Whether a sequence's KV can be saved and loaded back part by part: not where the
    /// model keeps a recurrent state, which holds no history to cut.
    pub fn can_store_prefixes(&self) -> bool {
        !self.engine.has_recurrent_state()
    }

    /// Save the KV of sequence `seq`'s first `tokens.len()` positions, which hold `tokens`,
    /// to `path` (positions past them are dropped first), and its checksum. The file
    /// ([`prefix_file`]) is put together in memory and written past the page cache, so the
    /// expert cache gives up its size meanwhile; it is synced (a file a later run may read
    /// must be whole on disk).
    pub fn save_prefix(
        &mut self,
        seq: i32,
        tokens: &[i32],
        path: &std::path::Path,
        max_bytes: u64,
    ) -> Result<SavedFile, EngineError> {
        let failed = |reason: String| EngineError::PromptStore {
            path: path.to_path_buf(),
            reason,
        };
        if !self.can_store_prefixes() || !self.truncate(seq, tokens.len() as u32) {
            return Err(failed(
                "this model's sequences cannot be saved part by part".into(),
            ));
        }
        let state_bytes = self.hooked.ctx().state_seq_get_size_ext(
            seq,
            llama_cpp_2::context::session::LlamaStateSeqFlags::empty(),
        );
        let file_bytes = prefix_file::file_len(tokens.len(), state_bytes);
        if file_bytes as u64 > max_bytes {
            return Err(EngineError::PrefixLargerThanStore {
                tokens: tokens.len(),
                bytes: file_bytes as u64,
                capacity: max_bytes,
            });
        }
        let started = std::time::Instant::now();
        // When the state was copied and summed (zero where it did not get that far).
        let (mut copied_at, mut summed_at) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        let saved = self.with_io_room(file_bytes as u64, |s| {
            let mut buf = PageBuf::new(file_bytes)
                .map_err(|e| format!("no memory to put it together: {e}"))?;
            let state = prefix_file::write_head(buf.as_mut_slice(), tokens);
            let copied = s.hooked.copy_seq_state(seq, state);
            if copied != state_bytes {
                return Err(format!(
                    "llama.cpp gave {copied} bytes of state, not the {state_bytes} it announced"
                ));
            }
            copied_at = started.elapsed();
            let sum = bytes_sum(buf.as_slice());
            summed_at = started.elapsed();
            write_whole_uncached(path, &buf).map_err(|e| format!("it cannot be written: {e}"))?;
            Ok(SavedFile {
                bytes: file_bytes as u64,
                sum,
            })
        });
        tracing::debug!(
            "prefix of {} tokens, {file_bytes} bytes: state copied in {:?}, summed in {:?}, written in {:?}",
            tokens.len(),
            copied_at,
            summed_at.saturating_sub(copied_at),
            started.elapsed().saturating_sub(summed_at.max(copied_at)),
        );
        saved.map_err(failed)
    }

    /// Run `io`, which holds a saved prefix's file of `bytes` in memory: the expert cache
    /// gives up that much meanwhile.
    fn with_io_room<T>(&mut self, bytes: u64, io: impl FnOnce(&mut Self) -> T) -> T {
        self.hooked.hook().set_io_room(bytes);
        let out = io(self);
        self.hooked.hook().set_io_room(0);
        out
    }

    /// Load into sequence `seq` (whose cache is dropped first) the prefix that
    /// [`save_prefix`](Self::save_prefix) saved to `path` with `tokens`, written as `file`.
    /// The file is read whole past the page cache; one of another size or checksum, or
    /// holding other tokens, is refused before llama.cpp reads it. On an error the sequence
    /// holds nothing.
    pub fn load_prefix(
        &mut self,
        seq: i32,
        tokens: &[i32],
        path: &std::path::Path,
        file: SavedFile,
    ) -> Result<(), EngineError> {
        self.clear(seq);
        let started = std::time::Instant::now();
        // When the file was read and summed (zero where it did not get that far).
        let (mut read_at, mut summed_at) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        let loaded = self.with_io_room(file.bytes, |s| {
            let buf = read_whole_uncached(path, file.bytes)
                .map_err(|e| format!("it cannot be read: {e}"))?;
            read_at = started.elapsed();
            if bytes_sum(buf.as_slice()) != file.sum {
                return Err("its bytes are not those written (checksum)".into());
            }
            summed_at = started.elapsed();
            let state =
                prefix_file::state_holding(buf.as_slice(), tokens).map_err(|e| e.to_string())?;
            match s.hooked.restore_seq_state(seq, state) {
                n if n == state.len() => Ok(()),
                0 => Err("llama.cpp could not load it".into()),
                n => Err(format!(
                    "llama.cpp read {n} of its {} bytes of state",
                    state.len()
                )),
            }
        });
        tracing::debug!(
            "prefix of {} tokens, {} bytes: read in {:?}, summed in {:?}, restored in {:?}",
            tokens.len(),
            file.bytes,
            read_at,
            summed_at.saturating_sub(read_at),
            started.elapsed().saturating_sub(summed_at.max(read_at)),
        );
        if loaded.is_err() || self.held_tokens(seq) != tokens.len() {
            self.clear(seq);
            return Err(EngineError::PromptStore {
                path: path.to_path_buf(),
                reason: loaded
                    .err()
                    .unwrap_or_else(|| "it held other positions than were saved".into()),
            });
        }
        Ok(())
    }

    /// Read the experts past runs selected most (`past`: [`crate::warm::heat_before_load`])
    /// into the expert cache's free room while idle ([`Session::warm_step`]), and keep this
    /// run's selections in its file for the next ([`Session::save_heat`]). Nothing for an
    /// unpaged run.
    pub fn warm_start_from(&mut self, past: PastHeat) {
        if self.engine.paged() {
            self.warm = WarmStart::open(past.path, past.heat, self.engine.stats());
        }
    }

    /// One step of the warm start, between requests; whether there is more to do.
    pub fn warm_step(&mut self) -> bool {
        match self.warm.as_mut() {
            Some(w) if !w.done() => w.step(self.hooked.hook()),
            _ => false,
        }
    }

    /// Write the expert heat with this run's selections added, when warm starts are on.
    pub fn save_heat(&mut self) {
        if let Some(w) = &mut self.warm {
            w.save(self.engine.stats());
        }
    }

    /// The run is over: complete outstanding drops and audit the page cache (the stats
    /// get `stray_cache_bytes_at_exit`). Idempotent; also done on drop.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let hook = self.hooked.hook();
        let mut guard = hook.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(active) = guard.as_mut() {
            active.pager.finish();
            if let Some(t) = active.trace.as_mut() {
                if t.flush().is_err() {
                    tracing::warn!("the routing trace could not be written in full");
                }
            }
            let table = attach::token_table_cached_bytes(active);
            hook.stats.token_table_cached_at_exit.set(table);
            if let Some(loan) = active.loan.as_ref().filter(|l| table > l.taken_bytes()) {
                tracing::warn!(
                    "the page cache holds {table} bytes of the token table, more than the {} bytes read, outside the budget's accounting",
                    loan.taken_bytes()
                );
            }
            let stray = attach::stray_expert_cache_bytes(active);
            hook.stats.stray_expert_cache.set(stray);
            if stray > 0 {
                tracing::warn!(
                    "{stray} bytes of evicted experts are still in the page cache at exit, outside the budget's accounting"
                );
            }
        }
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.finish();
        if self.engine.paged() {
            self.engine.session_ended();
        }
    }
}
