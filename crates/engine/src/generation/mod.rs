//! The generation core: every token EPM generates comes from here. `generate` (one slot,
//! one job at a time), `generate --chat` (one slot, one job per turn) and `serve` (K slots)
//! are clients of [`Generator`].
//!
//! Each of the `K` slots is one sequence of the llama.cpp context and keeps its KV cache
//! between jobs. A new job goes to the free slot whose cache shares the longest prefix with
//! its prompt, which then prefills only what its kept part lacks ([`Session::prefill_reusing`]),
//! a ubatch per step, pausing between them so that the replies under way go on and jobs that
//! arrive meanwhile are admitted ([`Generator::step`]). Every decode step puts the next token
//! of every replying slot into one batch (continuous batching). A job whose receiver has
//! gone is dropped before the next step.
//!
//! The core speaks in protocol-neutral types: a [`Job`] in, [`Event`]s out through the
//! job's [`EventSink`], ending in [`FinishReason`]s of its own; adapters translate. It
//! drives a [`Backend`], which [`Session`] implements and tests fake.

pub mod budget;
#[cfg(test)]
mod tests;
pub mod text;

use std::collections::VecDeque;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use epm_core::prefix::SeqCache;
use epm_core::prompt_store::{PromptStore, SavedFile};
use epm_core::stats::RunStats;
use epm_sys::proc::{self, Pid};

use crate::error::EngineError;
use crate::hook::GoneProbe;
use crate::prompt_folder::PromptFolder;
use crate::sampling::{Pick, Picked, Sampler, SamplingParams};
use crate::session::{PrefillProgress, Prefilled, Session, Step};
pub use budget::{BudgetError, BudgetState, ReasoningBudget};
use epm_chat::{OutputParser, Piece};
pub use text::LineLimits;
use text::{LineWatch, StopMatcher, Utf8Stream};

/// What the core needs of a session: [`Session`] is the real one.
pub trait Backend {
    type Sampler;
    /// Sequences the context holds: one slot each.
    fn n_slots(&self) -> usize;
    /// Context cells per sequence.
    fn n_ctx_per_seq(&self) -> u32;
    /// A sampler for `params`, constrained by `constraint` when given, with `history`
    /// (the prompt) counted in its repetition window.
    fn sampler(
        &self,
        params: &SamplingParams,
        constraint: Option<&Constraint>,
        history: &[i32],
    ) -> Result<Self::Sampler, EngineError>;
    /// Make `seq` hold `prompt` with its logits ready, reusing what `cache` allows;
    /// `progress` hears how far it has come, before the first ubatch and after each, and
    /// breaking stops the prefill there with [`EngineError::Cancelled`] (`cache` then
    /// holds what was evaluated). `gone` also stops it within a ubatch, once it says the
    /// job's client has gone (the same error; that ubatch is lost).
    fn prefill(
        &mut self,
        seq: i32,
        cache: &mut SeqCache,
        prompt: &[i32],
        progress: &mut dyn FnMut(PrefillProgress) -> ControlFlow<()>,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<Prefilled, EngineError>;
    /// Whether a prefill stopped by `progress` on a ubatch boundary keeps, when asked again
    /// for the same prompt, all it evaluated: then the core may pause a prefill.
    fn can_pause_prefill(&self) -> bool;
    /// How many leading tokens of `prompt` may keep their KV from a sequence whose cache
    /// holds `cache` (what [`Backend::prefill`] will keep).
    fn reusable_prefix(&self, cache: &SeqCache, prompt: &[i32]) -> usize;
    /// Whether sequences can be saved to files and loaded back part by part.
    fn can_store_prefixes(&self) -> bool;
    /// Save `seq`'s first `tokens.len()` positions (which hold `tokens`) to `path`,
    /// dropping the positions past them; returns the file's size and checksum. Writes
    /// nothing when the file would be larger than `max_bytes`
    /// ([`EngineError::PrefixLargerThanStore`]; the positions past `tokens` are dropped
    /// all the same).
    fn save_prefix(
        &mut self,
        seq: i32,
        tokens: &[i32],
        path: &Path,
        max_bytes: u64,
    ) -> Result<SavedFile, EngineError>;
    /// Make `seq` hold what `save_prefix` saved to `path` (`tokens`, written as `file`); on
    /// an error (a file that is not as it was written among them) it holds nothing.
    fn load_prefix(
        &mut self,
        seq: i32,
        tokens: &[i32],
        path: &Path,
        file: SavedFile,
    ) -> Result<(), EngineError>;
    /// One decode step of every sequence in `steps`; the logits of step `i` are at `i`.
    fn decode(&mut self, steps: &[Step]) -> Result<(), EngineError>;
    fn logits(&self, index: i32) -> &[f32];
    /// Pick the token for the logits at `index`, and accept it, as `pick` says (a token
    /// forced unless the sampler's grammar refuses it; whether the grammar applies).
    fn sample(&mut self, sampler: &mut Self::Sampler, index: i32, pick: Pick) -> Picked;
    fn is_eog(&self, token: i32) -> bool;
    /// The bytes of one token's text as output; special tokens' text only when `special`.
    fn piece(&self, token: i32, special: bool, out: &mut Vec<u8>);
    /// Drop all of sequence `seq`'s cache.
    fn clear(&mut self, seq: i32);
    fn stats(&self) -> &Arc<RunStats>;
    /// While no job runs: one step of a warm start ([`crate::warm`]); whether there is more
    /// to do (the core then looks for jobs again soon instead of sleeping).
    fn warm_step(&mut self) -> bool {
        false
    }
    /// Keep what outlives the run besides prompts (a warm start's expert heat): at an idle
    /// save and at the end.
    fn save_heat(&mut self) {}
}

impl Backend for Session<'_> {
    type Sampler = Sampler;
    fn n_slots(&self) -> usize {
        self.options().sequences() as usize
    }
    fn n_ctx_per_seq(&self) -> u32 {
        Session::n_ctx_per_seq(self)
    }
    fn sampler(
        &self,
        params: &SamplingParams,
        constraint: Option<&Constraint>,
        history: &[i32],
    ) -> Result<Sampler, EngineError> {
        self.engine().sampler(params, constraint, history)
    }
    fn prefill(
        &mut self,
        seq: i32,
        cache: &mut SeqCache,
        prompt: &[i32],
        progress: &mut dyn FnMut(PrefillProgress) -> ControlFlow<()>,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<Prefilled, EngineError> {
        self.prefill_reusing(seq, cache, prompt, progress, gone)
    }
    fn can_pause_prefill(&self) -> bool {
        self.prefills_in_split_ubatches()
    }
    fn reusable_prefix(&self, cache: &SeqCache, prompt: &[i32]) -> usize {
        Session::reusable_prefix(self, cache, prompt)
    }
    fn can_store_prefixes(&self) -> bool {
        Session::can_store_prefixes(self)
    }
    fn save_prefix(
        &mut self,
        seq: i32,
        tokens: &[i32],
        path: &Path,
        max_bytes: u64,
    ) -> Result<SavedFile, EngineError> {
        Session::save_prefix(self, seq, tokens, path, max_bytes)
    }
    fn load_prefix(
        &mut self,
        seq: i32,
        tokens: &[i32],
        path: &Path,
        file: SavedFile,
    ) -> Result<(), EngineError> {
        Session::load_prefix(self, seq, tokens, path, file)
    }
    fn decode(&mut self, steps: &[Step]) -> Result<(), EngineError> {
        Session::decode(self, steps)
    }
    fn logits(&self, index: i32) -> &[f32] {
        Session::logits(self, index)
    }
    fn sample(&mut self, sampler: &mut Sampler, index: i32, pick: Pick) -> Picked {
        Session::sample(self, sampler, index, pick)
    }
    fn is_eog(&self, token: i32) -> bool {
        self.engine().is_eog(token)
    }
    fn piece(&self, token: i32, special: bool, out: &mut Vec<u8>) {
        self.engine().output_piece(token, special, out)
    }
    fn clear(&mut self, seq: i32) {
        Session::clear(self, seq)
    }
    fn stats(&self) -> &Arc<RunStats> {
        self.engine().stats()
    }
    fn warm_step(&mut self) -> bool {
        Session::warm_step(self)
    }
    fn save_heat(&mut self) {
        Session::save_heat(self)
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-generation token (EOS, EOT, `<|im_end|>` ...).
    EndOfGeneration,
    /// One of the job's stop strings appeared; it and what followed are cut off.
    StopSequence(String),
    /// `max_tokens` were generated.
    Length,
    /// The reply was one or more tool calls, and ended after them.
    ToolCalls,
}

/// A constraint on what may be generated: a GBNF grammar for llama.cpp's grammar sampler.
/// It changes which token is sampled, never the logits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constraint {
    /// The whole output must match `root` of the grammar.
    Grammar(String),
    /// Free output until a trigger (a regex; its first group starts the grammar's input)
    /// matches; from there the grammar holds.
    Lazy {
        grammar: String,
        triggers: Vec<String>,
    },
}

/// The log-probability of one generated token, and of the most likely tokens at its
/// position, from the logits sampling used (before any constraint).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenText,
    pub logprob: f32,
    /// Most likely first.
    pub top: Vec<(TokenText, f32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenText {
    pub id: i32,
    /// The token's bytes, special tokens' text included; not always whole UTF-8.
    pub bytes: Vec<u8>,
}

/// What a job's receiver is told, in order: `Progress`es, `Started`, `Text`s (and the other
/// output events), then `Done` or `Failed`.
#[derive(Debug)]
pub enum Event {
    Started {
        prompt_tokens: usize,
        /// Prompt tokens whose KV was kept from an earlier job.
        cached_tokens: usize,
    },
    /// Content: whole UTF-8 characters, stop strings (and what could still become one)
    /// held back, and so is text that could still become a tool call or reasoning marker.
    Text(String),
    /// Reasoning, split out of the content (`<think>` blocks, harmony's analysis channel).
    Reasoning(String),
    /// A whole tool call, parsed from the output.
    ToolCall(epm_chat::ToolCall),
    /// A sampled token's log-probabilities (when the job asked for them), before its text.
    Logprob(TokenLogprob),
    /// How far the prompt's prefill has come: before `Started`, once before the first
    /// ubatch and after each.
    Progress(PrefillProgress),
    Done {
        finish_reason: FinishReason,
        completion_tokens: usize,
        /// Of them, generated inside reasoning blocks (counted when the job has a
        /// [`ReasoningBudget`], which may be one without a limit).
        reasoning_tokens: usize,
    },
    Failed(EngineError),
}

/// Where a job's events go.
pub trait EventSink: Send {
    /// Deliver `event`; false when the receiver has gone.
    fn send(&mut self, event: Event) -> bool;
    /// Whether the receiver has gone: the job is then dropped before the next step.
    fn is_closed(&self) -> bool {
        false
    }
    /// A probe that says, from any thread and without blocking, whether the receiver has
    /// gone: read between graph nodes, it stops the job's prompt ubatch in flight. `None`:
    /// the prefill stops only between ubatches.
    fn gone_probe(&self) -> Option<SinkGoneProbe> {
        None
    }
}

/// What [`EventSink::gone_probe`] hands out.
pub type SinkGoneProbe = Arc<dyn Fn() -> bool + Send + Sync>;

impl EventSink for std::sync::mpsc::Sender<Event> {
    fn send(&mut self, event: Event) -> bool {
        std::sync::mpsc::Sender::send(self, event).is_ok()
    }
}

/// One generation, tokenized.
pub struct Job {
    pub prompt: Vec<i32>,
    /// Tokens to generate at most; 0 evaluates the prompt into the slot's cache and ends
    /// with nothing sampled (a warm-up that a later prompt sharing its prefix reuses).
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    /// Generation stops at the first of these; it is not part of the text.
    pub stop: Vec<String>,
    /// Receives the f32 little-endian logits of every sampled position.
    pub logits: Option<Box<dyn Write + Send>>,
    pub constraint: Option<Constraint>,
    /// Splits the output into content, reasoning and tool calls.
    pub parser: OutputParser,
    /// Send a [`Event::Logprob`] per token with this many alternatives (`None`: none).
    pub logprobs: Option<usize>,
    /// Code completion's limits on lines; a generation they end finishes by length.
    pub line_limits: LineLimits,
    /// Closes reasoning blocks that outrun their budget, and counts their tokens.
    pub reasoning_budget: Option<ReasoningBudget>,
    /// Set from another thread to end the open reasoning block now (a client's
    /// `reasoning_end`); taken before the next pick.
    pub end_reasoning: Option<Arc<AtomicBool>>,
    pub events: Box<dyn EventSink>,
}

impl Job {
    /// A greedy job with no stop strings, constraint or parsing (all text is content).
    pub fn new(prompt: Vec<i32>, max_tokens: u32, events: Box<dyn EventSink>) -> Job {
        Job {
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            logits: None,
            constraint: None,
            parser: OutputParser::new(None, None),
            logprobs: None,
            line_limits: LineLimits::default(),
            reasoning_budget: None,
            end_reasoning: None,
            events,
        }
    }

    pub fn with_sampling(mut self, sampling: SamplingParams) -> Job {
        self.sampling = sampling;
        self
    }

    pub fn with_stop(mut self, stop: Vec<String>) -> Job {
        self.stop = stop;
        self
    }

    pub fn with_logits(mut self, logits: Option<Box<dyn Write + Send>>) -> Job {
        self.logits = logits;
        self
    }

    pub fn with_constraint(mut self, constraint: Option<Constraint>) -> Job {
        self.constraint = constraint;
        self
    }

    pub fn with_parser(mut self, parser: OutputParser) -> Job {
        self.parser = parser;
        self
    }

    pub fn with_logprobs(mut self, top: Option<usize>) -> Job {
        self.logprobs = top;
        self
    }

    pub fn with_line_limits(mut self, limits: LineLimits) -> Job {
        self.line_limits = limits;
        self
    }

    pub fn with_reasoning_budget(mut self, budget: Option<ReasoningBudget>) -> Job {
        self.reasoning_budget = budget;
        self
    }

    pub fn with_end_reasoning(mut self, flag: Option<Arc<AtomicBool>>) -> Job {
        self.end_reasoning = flag;
        self
    }
}

/// What a slot is doing, for readers on other threads.
#[derive(Debug, Default)]
pub struct SlotView {
    /// [`SlotState`] as a number.
    pub state: std::sync::atomic::AtomicU8,
    /// Of the slot's latest job: prompt tokens, those reused from its cache, tokens generated.
    pub prompt_tokens: AtomicU64,
    pub reused_tokens: AtomicU64,
    /// Prompt tokens evaluated so far (of `prompt_tokens - reused_tokens`).
    pub prefilled: AtomicU64,
    pub generated: AtomicU64,
}

/// What a slot is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    Idle = 0,
    Prefill = 1,
    Decode = 2,
}

impl SlotView {
    pub fn state(&self) -> SlotState {
        match self.state.load(Ordering::Relaxed) {
            1 => SlotState::Prefill,
            2 => SlotState::Decode,
            _ => SlotState::Idle,
        }
    }

    fn set(&self, state: SlotState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }
}

/// What the core counts, for its clients to read from other threads.
#[derive(Debug, Default)]
pub struct GenerationCounters {
    pub active_slots: AtomicUsize,
    /// Jobs submitted and not yet in a slot.
    pub waiting: AtomicUsize,
    /// Jobs ended, by how.
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    /// Tokens generated by jobs, and decode steps run (each a batch of the active slots).
    pub completion_tokens: AtomicU64,
    pub decode_steps: AtomicU64,
    /// Pauses of a prompt's prefill after a ubatch, each for the core's next step: a decode
    /// step of the replies under way, other prompts' ubatches, jobs that arrived.
    pub prefill_pauses: AtomicU64,
    /// Of the generated tokens, those inside reasoning blocks (of jobs that count them), and
    /// the blocks whose close a reasoning budget forced.
    pub reasoning_tokens: AtomicU64,
    pub reasoning_closes_forced: AtomicU64,
    /// One per slot, when made with [`GenerationCounters::with_slots`].
    pub slots: Vec<SlotView>,
}

impl GenerationCounters {
    pub fn with_slots(n: usize) -> GenerationCounters {
        GenerationCounters {
            slots: (0..n).map(|_| SlotView::default()).collect(),
            ..Default::default()
        }
    }
}

struct Running<S> {
    job: Job,
    sampler: S,
    utf8: Utf8Stream,
    stop: StopMatcher,
    /// Only when the job has line limits.
    lines: Option<LineWatch>,
    generated: u32,
    /// The last sampled token, to be decoded in the next step at `pos`.
    next: i32,
    pos: u32,
    /// The job's constraint waits for the close of the reasoning block its prompt opened:
    /// it is for the answer, and the reasoning before it is free.
    constraint_held: bool,
}

/// A job whose prompt its slot is evaluating, a ubatch or more per step
/// ([`Generator::prefill_step`]).
struct Prefilling {
    job: Job,
    /// When it was admitted: among prompts with as much left, the first goes first.
    admitted: u64,
    /// The prompt's tokens kept or evaluated so far: what the slot's cache held of it at
    /// admission, then where it paused (a later pause must be further on: a prefill that
    /// did not keep what it paused with goes on to its end).
    at: usize,
    /// What the job's first call kept (none before it).
    reused: Option<usize>,
    /// Prompt tokens the job's calls evaluated.
    evaluated: usize,
    /// The progress the client heard last.
    last_sent: Option<PrefillProgress>,
}

struct Slot<S> {
    seq: i32,
    cache: SeqCache,
    /// 1. At most one of `prefilling` and `running` is set: the slot is busy with that job.
    prefilling: Option<Prefilling>,
    running: Option<Running<S>>,
    /// When the slot last finished a job (for routing ties: least recently used).
    last_used: u64,
}

impl<S> Slot<S> {
    /// Evaluating a prompt or replying.
    fn busy(&self) -> bool {
        self.prefilling.is_some() || self.running.is_some()
    }
}

/// Where a waiting job goes ([`Generator::pick_slot`]).
enum SlotChoice {
    Free(usize),
    /// A slot that evaluates a warm-up's prompt shares more of it than any free slot.
    WaitForWarmUp,
    NoneFree,
}

/// How a token left its job.
enum After {
    Continue,
    Finished(FinishReason),
}

/// The generation core over a backend's slots.
pub struct Generator<'b, B: Backend> {
    backend: &'b mut B,
    slots: Vec<Slot<B::Sampler>>,
    waiting: VecDeque<Job>,
    counters: Arc<GenerationCounters>,
    clock: u64,
    piece: Vec<u8>,
    /// A token's text with special tokens', for a reasoning budget when `piece` lacks it.
    budget_piece: Vec<u8>,
    /// The slot of the latest job started: its tokens go to the stats' `generated_ids`.
    recorded_slot: Option<usize>,
    /// Prompt prefixes put aside on disk ([`Generator::with_prompt_store`]).
    store: Option<StoreFiles>,
    /// Put idle slots' caches aside once the core has been idle this long
    /// ([`Generator::with_save_when_idle`]); never when `None`.
    save_when_idle: Option<Duration>,
}

/// The index of a folder that outlives the run is written last; a folder of the run's own
/// goes with its files when the `PromptFolder` drops.
impl<B: Backend> Drop for Generator<'_, B> {
    fn drop(&mut self) {
        if let Some(files) = &self.store {
            files.save_index();
        }
    }
}

/// The prompt store and the folder its files are in.
struct StoreFiles {
    store: PromptStore,
    folder: PromptFolder,
    /// A prefix larger than the whole store has been refused (and said so) in this run.
    warned_too_large: bool,
}

impl StoreFiles {
    /// Record the store's entries for the next run (where the folder outlives this one); a
    /// failure costs only that reuse.
    fn save_index(&self) {
        if let Err(e) = self.folder.save_index(&self.store) {
            tracing::warn!(
                "the prompt store's index in {} could not be written: {e}",
                self.folder.dir().display()
            );
        }
    }

    /// Save `slot`'s cache when what a prompt that keeps only `keep` of it would lose is
    /// worth a file; the sequence then holds the saved part at most. Returns `None` when it
    /// did not try, else whether the save succeeded (trying may change the store either way).
    fn put_aside<B: Backend>(
        &mut self,
        backend: &mut B,
        slot: &mut Slot<B::Sampler>,
        keep: usize,
    ) -> Option<bool> {
        let tokens = self
            .store
            .worth_saving(&slot.cache, keep)
            .map(<[i32]>::to_vec)?;
        let stats = backend.stats().clone();
        let id = self.store.new_id();
        let path = self.folder.path(id);
        let capacity = self.store.capacity_bytes();
        let started = Instant::now();
        let result = backend.save_prefix(slot.seq, &tokens, &path, capacity);
        stats
            .prefix_save_us
            .add(started.elapsed().as_micros() as u64);
        let saved = match result {
            Ok(file) => {
                stats.prefixes_saved.inc();
                stats.prefix_bytes_written.add(file.bytes);
                let gone = self.store.insert(id, tokens, file);
                self.folder.forget(&gone);
                true
            }
            Err(e @ EngineError::PrefixLargerThanStore { .. }) => {
                stats.prefixes_too_large.inc();
                // Once per run: every later turn of a long conversation would say it again.
                if !self.warned_too_large {
                    self.warned_too_large = true;
                    tracing::warn!(
                        "{e}: such prompts are evaluated again instead of being put aside; \
                         raise --prompt-cache-mb to keep them"
                    );
                }
                self.folder.forget(&[id]);
                false
            }
            Err(e) => {
                stats.prefix_store_failures.inc();
                tracing::warn!("a prompt prefix could not be put aside: {e}");
                self.folder.forget(&[id]);
                false
            }
        };
        slot.cache.tokens.truncate(slot.cache.exact);
        Some(saved)
    }
}

impl<'b, B: Backend> Generator<'b, B> {
    pub fn new(backend: &'b mut B, counters: Arc<GenerationCounters>) -> Generator<'b, B> {
        let slots = (0..backend.n_slots() as i32)
            .map(|seq| Slot {
                seq,
                cache: SeqCache::default(),
                prefilling: None,
                running: None,
                last_used: 0,
            })
            .collect();
        Generator {
            backend,
            slots,
            waiting: VecDeque::new(),
            counters,
            clock: 0,
            piece: Vec::new(),
            budget_piece: Vec::new(),
            recorded_slot: None,
            store: None,
            save_when_idle: None,
        }
    }

    /// Put a slot's cache aside in `folder`, within `store`'s capacity, when another prompt
    /// is about to take its place, and load it back for a later prompt that keeps more of
    /// it than of any slot's cache (`epm_core::prompt_store`); `store` holds what an earlier
    /// run left in a folder that outlives its run. Nothing where the backend cannot store
    /// prefixes. The files are deleted as they are forgotten, and all of them at the end
    /// unless the folder outlives the run.
    pub fn with_prompt_store(mut self, folder: PromptFolder, store: PromptStore) -> Self {
        if self.backend.can_store_prefixes() {
            self.store = Some(StoreFiles {
                store,
                folder,
                warned_too_large: false,
            });
        }
        self
    }

    /// In [`Generator::serve`], once no job has run or waited for `after`: put the idle
    /// slots' caches aside for the next run as [`Generator::put_aside_for_next_run`] does at
    /// the end, so that a server killed later (SIGKILL, the OOM killer, a power cut) loses
    /// only what came after. A job that arrives meanwhile waits for the save in progress.
    pub fn with_save_when_idle(mut self, after: Duration) -> Self {
        self.save_when_idle = Some(after);
        self
    }

    /// Before the run ends: put every slot's cache aside for the next run, where the store's
    /// folder outlives this one (a restarted server then answers a known conversation or
    /// system prompt without evaluating it again). Nothing otherwise.
    pub fn put_aside_for_next_run(&mut self) {
        self.put_aside_idle_slots();
    }

    /// Save each idle slot's exact cache that adds at least
    /// [`epm_core::prompt_store::MIN_STORED_GAIN_TOKENS`] to what the store holds of it (a
    /// conversation is written whole again only once it has grown that much), where the
    /// folder outlives the run. Returns how many were saved.
    fn put_aside_idle_slots(&mut self) -> u64 {
        let Some(files) = self.store.as_mut().filter(|f| f.folder.persistent()) else {
            return 0;
        };
        let mut saved = 0;
        for slot in &mut self.slots {
            if slot.busy() {
                continue;
            }
            let keep = files.store.stored_part(&slot.cache);
            if let Some(ok) = files.put_aside(&mut *self.backend, slot, keep) {
                saved += u64::from(ok);
                // The index after each save: a stop cut short keeps the saves before it.
                files.save_index();
            }
        }
        saved
    }

    pub fn backend(&mut self) -> &mut B {
        self.backend
    }

    pub fn counters(&self) -> &Arc<GenerationCounters> {
        &self.counters
    }

    /// Queue a job; it starts when a slot is free.
    pub fn submit(&mut self, job: Job) {
        self.waiting.push_back(job);
        self.publish();
    }

    /// No job running, evaluating its prompt or waiting.
    pub fn idle(&self) -> bool {
        self.waiting.is_empty() && !self.slots.iter().any(Slot::busy)
    }

    /// While idle, the next item from `rx` (a job, a chat's next line): one step of the warm
    /// start first, then a wait of 2 ms while it has more to do, 100 ms otherwise.
    pub fn wait_idle<T>(&mut self, rx: &Receiver<T>) -> Result<T, RecvTimeoutError> {
        let warming = self.idle() && self.backend.warm_step();
        rx.recv_timeout(Duration::from_millis(if warming { 2 } else { 100 }))
    }

    /// Drop jobs whose receiver has gone, put waiting jobs in free slots, evaluate the next
    /// part of one slot's prompt ([`Generator::prefill_step`]), and run one decode step of
    /// every replying slot.
    pub fn step(&mut self) {
        self.drop_cancelled();
        self.admit();
        self.prefill_step();
        if self.active() > 0 {
            self.decode_step();
        }
    }

    /// Run until every job submitted so far has ended.
    pub fn run_until_idle(&mut self) {
        while !self.idle() {
            self.step();
        }
    }

    /// Take jobs from `jobs` and run them until `stopping` is set (then every job gets a
    /// final `Failed(ShuttingDown)`) or `jobs` closes with nothing left to do.
    pub fn serve(&mut self, jobs: &Receiver<Job>, stopping: &AtomicBool) {
        // Since when the core has been idle, and whether that idle spell's save is done.
        let mut idle_since: Option<(Instant, bool)> = None;
        loop {
            if stopping.load(Ordering::Acquire) {
                while let Ok(job) = jobs.try_recv() {
                    self.waiting.push_back(job);
                }
                self.shut_down();
                return;
            }
            let idle = self.idle();
            if !idle {
                idle_since = None;
            } else if let Some(after) = self.save_when_idle {
                let (since, saved) = idle_since.get_or_insert((Instant::now(), false));
                if !*saved && since.elapsed() >= after {
                    let started = Instant::now();
                    let n = self.put_aside_idle_slots();
                    self.backend.save_heat();
                    if n > 0 {
                        self.backend.stats().prefixes_saved_idle.add(n);
                        tracing::info!(
                            "idle: put {n} prompt prefixes aside for a restart in {:.2} s",
                            started.elapsed().as_secs_f64()
                        );
                    }
                    *saved = true;
                }
            }
            let next = if idle {
                self.wait_idle(jobs)
            } else {
                jobs.try_recv().map_err(|e| match e {
                    TryRecvError::Empty => RecvTimeoutError::Timeout,
                    TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            };
            match next {
                Ok(job) => {
                    self.submit(job);
                    continue; // take every queued job before stepping
                }
                Err(RecvTimeoutError::Disconnected) if idle => return,
                Err(_) => {}
            }
            self.step();
        }
    }

    /// End every job with `Failed(ShuttingDown)`.
    pub fn shut_down(&mut self) {
        for job in std::mem::take(&mut self.waiting) {
            self.end_failed(job, EngineError::ShuttingDown);
        }
        for i in 0..self.slots.len() {
            if let Some(p) = self.slots[i].prefilling.take() {
                self.slot_idle(i);
                self.end_failed(p.job, EngineError::ShuttingDown);
            }
            if let Some(r) = self.slots[i].running.take() {
                self.slot_idle(i);
                self.end_failed(r.job, EngineError::ShuttingDown);
            }
        }
        self.publish();
    }

    /// Slots replying (decoding).
    fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.running.is_some()).count()
    }

    fn publish(&self) {
        let c = &self.counters;
        let busy = self.slots.iter().filter(|s| s.busy()).count();
        c.active_slots.store(busy, Ordering::Relaxed);
        c.waiting.store(self.waiting.len(), Ordering::Relaxed);
    }

    fn drop_cancelled(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|j| !j.events.is_closed());
        let dropped = (before - self.waiting.len()) as u64;
        self.counters
            .cancelled
            .fetch_add(dropped, Ordering::Relaxed);
        for i in 0..self.slots.len() {
            let gone = self.slots[i]
                .running
                .as_ref()
                .is_some_and(|r| r.job.events.is_closed());
            if gone {
                self.slot_idle(i);
                self.slots[i].running = None;
                self.clock += 1;
                self.slots[i].last_used = self.clock;
                self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            // A client gone while its prompt waits for the next ubatch: the slot's cache
            // keeps the whole ubatches evaluated, for a client that asks again.
            let gone = self.slots[i]
                .prefilling
                .as_ref()
                .is_some_and(|p| p.job.events.is_closed());
            if gone {
                if let Some(p) = self.slots[i].prefilling.take() {
                    self.end_prefill(i, p, Err(EngineError::Cancelled));
                }
            }
        }
        self.publish();
    }

    /// Where a job with `prompt` goes: the free slot whose cache shares the longest prefix
    /// with it (among equals, the least recently used), unless a slot evaluating a prompt
    /// of no reply (a warm-up) shares more: the job then waits for that slot, which is free
    /// as soon as the prompt is evaluated and then holds it.
    fn pick_slot(&self, prompt: &[i32]) -> SlotChoice {
        let shared = |tokens: &[i32]| epm_core::prefix::shared_prefix_len(tokens, prompt);
        let free = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy())
            .map(|(i, s)| (i, shared(&s.cache.tokens), s.last_used))
            .max_by_key(|&(_, common, last_used)| (common, std::cmp::Reverse(last_used)));
        let warming = self
            .slots
            .iter()
            .filter_map(|s| s.prefilling.as_ref())
            .filter(|p| p.job.max_tokens == 0)
            .map(|p| shared(&p.job.prompt))
            .max();
        match (free, warming) {
            (Some((_, common, _)), Some(w)) if w > common => SlotChoice::WaitForWarmUp,
            (None, _) => SlotChoice::NoneFree,
            (Some((i, _, _)), _) => SlotChoice::Free(i),
        }
    }

    /// Put waiting jobs in free slots, in order, to have their prompts evaluated; a job that
    /// waits for a warm-up's slot lets those behind it pass.
    fn admit(&mut self) {
        let mut waiting = VecDeque::new();
        while let Some(job) = self.waiting.pop_front() {
            let i = match self.pick_slot(&job.prompt) {
                SlotChoice::Free(i) => i,
                SlotChoice::WaitForWarmUp => {
                    waiting.push_back(job);
                    continue;
                }
                SlotChoice::NoneFree => {
                    waiting.push_back(job);
                    waiting.append(&mut self.waiting);
                    break;
                }
            };
            let n_ctx = self.backend.n_ctx_per_seq();
            if job.prompt.len() + job.max_tokens as usize > n_ctx as usize {
                let e = EngineError::ContextTooSmall {
                    prompt: job.prompt.len(),
                    predict: job.max_tokens as usize,
                    n_ctx,
                };
                self.end_failed(job, e);
                continue;
            }
            self.use_prompt_store(i, &job.prompt);
            if let Some(v) = self.counters.slots.get(i) {
                v.set(SlotState::Prefill);
                v.prompt_tokens
                    .store(job.prompt.len() as u64, Ordering::Relaxed);
                v.reused_tokens.store(0, Ordering::Relaxed);
                v.prefilled.store(0, Ordering::Relaxed);
                v.generated.store(0, Ordering::Relaxed);
            }
            self.clock += 1;
            let at = self
                .backend
                .reusable_prefix(&self.slots[i].cache, &job.prompt);
            self.slots[i].prefilling = Some(Prefilling {
                job,
                admitted: self.clock,
                at,
                reused: None,
                evaluated: 0,
                last_sent: None,
            });
        }
        self.waiting = waiting;
        self.publish();
    }

    /// Evaluate the next part of the slots' prompts, the one with the fewest tokens left
    /// first (the first admitted among equals), so that a short request that arrives during
    /// a long prompt starts first. Where the backend can pause a prefill, each call
    /// evaluates one ubatch and pauses: the core's next step then decodes the replies under
    /// way (a long prompt, minutes at a small budget, would otherwise hold every reply for
    /// all that time) and admits jobs that arrived meanwhile. A pause is a prefill stopped
    /// on a ubatch boundary, whose cache holds whole ubatches of the cold split
    /// ([`Backend::prefill`]); asked again, the prefill keeps them and goes on from there,
    /// so a prompt is evaluated in exactly the ubatches of one prefill and its output is
    /// the same. Once the prompt is evaluated, the job samples its first token.
    fn prefill_step(&mut self) {
        // Prompts that end within their call go on to the next (requests that arrive together
        // start together); the first pause ends the step.
        loop {
            let next = (0..self.slots.len())
                .filter_map(|i| {
                    let p = self.slots[i].prefilling.as_ref()?;
                    Some((i, p.job.prompt.len() - p.at, p.admitted))
                })
                .min_by_key(|&(_, left, admitted)| (left, admitted));
            let Some((i, _, _)) = next else {
                break;
            };
            let Some(mut p) = self.slots[i].prefilling.take() else {
                break;
            };
            match self.prefill_call(i, &mut p) {
                None => {
                    self.counters.prefill_pauses.fetch_add(1, Ordering::Relaxed);
                    self.slots[i].prefilling = Some(p);
                    break;
                }
                Some(result) => self.end_prefill(i, p, result),
            }
        }
        self.publish();
    }

    /// One prefill call for `p` in slot `i`: `None` when it paused after a ubatch.
    fn prefill_call(
        &mut self,
        i: usize,
        p: &mut Prefilling,
    ) -> Option<Result<Prefilled, EngineError>> {
        let stats = self.backend.stats().clone();
        let seq = self.slots[i].seq;
        let counters = Arc::clone(&self.counters);
        let slot_view = counters.slots.get(i);
        let n_prompt = p.job.prompt.len();
        let may_pause = self.backend.can_pause_prefill();
        let (mut pausing, mut evaluated_now) = (false, 0);
        let started = Instant::now();
        let gone = p.job.events.gone_probe();
        let Prefilling {
            job,
            at,
            reused,
            last_sent,
            ..
        } = p;
        let paused_at = *at;
        let events = &mut job.events;
        let filled = self.backend.prefill(
            seq,
            &mut self.slots[i].cache,
            &job.prompt,
            &mut |q: PrefillProgress| {
                let kept = *reused.get_or_insert(q.cached);
                let reached = q.cached + q.evaluated;
                evaluated_now = q.evaluated;
                let job_progress = PrefillProgress {
                    cached: kept,
                    evaluated: reached.saturating_sub(kept),
                    to_evaluate: n_prompt - kept,
                };
                if let Some(v) = slot_view {
                    v.reused_tokens.store(kept as u64, Ordering::Relaxed);
                    v.prefilled
                        .store(job_progress.evaluated as u64, Ordering::Relaxed);
                }
                // A resumed prefill starts where the pause left: no news for the client.
                let news = *last_sent != Some(job_progress);
                *last_sent = Some(job_progress);
                // A client gone mid-prompt stops the prefill after this ubatch.
                if (news && !events.send(Event::Progress(job_progress))) || events.is_closed() {
                    return ControlFlow::Break(());
                }
                if may_pause && q.evaluated > 0 && reached > paused_at && reached < n_prompt {
                    pausing = true;
                    *at = reached;
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            },
            gone.as_deref().map(|g| g as GoneProbe<'_>),
        );
        // The probe may hold a sender of the job's events: the receiver must see them end.
        drop(gone);
        stats.prefill_us.add(started.elapsed().as_micros() as u64);
        // The last progress of a call, ended or stopped, says how far it evaluated.
        p.evaluated += evaluated_now;
        match filled {
            Err(EngineError::Cancelled) if pausing && !p.job.events.is_closed() => None,
            done => Some(done),
        }
    }

    /// `p`'s prompt is evaluated, or its prefill failed: start its reply, or end it.
    fn end_prefill(&mut self, i: usize, p: Prefilling, result: Result<Prefilled, EngineError>) {
        let stats = self.backend.stats().clone();
        let reused = p.reused.unwrap_or(0);
        // Counted as the cache keeps them: a failed prefill's sequence is dropped.
        if matches!(result, Ok(_) | Err(EngineError::Cancelled)) {
            stats.prompt_tokens.add(p.evaluated as u64);
            stats.reused_prompt_tokens.add(reused as u64);
        }
        let mut job = p.job;
        let filled = match result {
            Ok(f) => Prefilled { reused, ..f },
            Err(e) => {
                self.slot_idle(i);
                if matches!(e, EngineError::Cancelled) {
                    self.clock += 1;
                    self.slots[i].last_used = self.clock;
                }
                self.end_failed(job, e);
                return;
            }
        };
        if let Some(v) = self.counters.slots.get(i) {
            v.reused_tokens
                .store(filled.reused as u64, Ordering::Relaxed);
            v.set(SlotState::Decode);
        }
        job.events.send(Event::Started {
            prompt_tokens: job.prompt.len(),
            cached_tokens: filled.reused,
        });
        if job.max_tokens == 0 {
            // A prompt evaluated for the slot's cache alone (a warm-up): nothing sampled.
            job.events.send(Event::Done {
                finish_reason: FinishReason::Length,
                completion_tokens: 0,
                reasoning_tokens: 0,
            });
            self.slot_completed(i);
            return;
        }
        if let Ok(mut ids) = stats.generated_ids.lock() {
            ids.clear();
        }
        self.recorded_slot = Some(i);
        let made = self
            .backend
            .sampler(&job.sampling, job.constraint.as_ref(), &job.prompt);
        let sampler = match made {
            Ok(s) => s,
            Err(e) => {
                self.slot_idle(i);
                self.end_failed(job, e);
                return;
            }
        };
        // A reply that starts inside a reasoning block (the template opened it) is
        // constrained from the block's close on.
        let constraint_held = job.constraint.is_some()
            && job
                .reasoning_budget
                .as_ref()
                .is_some_and(ReasoningBudget::in_block);
        let mut running = Running {
            constraint_held,
            sampler,
            utf8: Utf8Stream::default(),
            stop: StopMatcher::new(job.stop.clone()),
            lines: (!job.line_limits.is_off()).then(|| LineWatch::new(job.line_limits)),
            generated: 0,
            next: 0,
            pos: job.prompt.len() as u32,
            job,
        };
        match self.take_token(i, &mut running, filled.logits) {
            Ok(After::Continue) => self.slots[i].running = Some(running),
            Ok(After::Finished(reason)) => self.finish(i, running, reason),
            Err(e) => self.fail_running(i, running, e),
        }
    }

    /// One decode step of every active slot, in one batch; then each samples its next token.
    fn decode_step(&mut self) {
        let order: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].running.is_some())
            .collect();
        let steps: Vec<Step> = order
            .iter()
            .filter_map(|&i| {
                let r = self.slots[i].running.as_ref()?;
                Some(Step {
                    seq: self.slots[i].seq,
                    token: r.next,
                    pos: r.pos,
                })
            })
            .collect();
        let stats = self.backend.stats().clone();
        let started = Instant::now();
        let read_before = proc::read_bytes(Pid::This).unwrap_or(0);
        let decoded = self.backend.decode(&steps);
        let read_after = proc::read_bytes(Pid::This).unwrap_or(read_before);
        stats
            .decode_read_bytes
            .add(read_after.saturating_sub(read_before));
        if let Err(e) = decoded {
            let shutting_down = matches!(e, EngineError::ShuttingDown);
            let message = e.to_string();
            for &i in &order {
                if let Some(r) = self.slots[i].running.take() {
                    self.slot_idle(i);
                    let seq = self.slots[i].seq;
                    self.backend.clear(seq);
                    self.slots[i].cache.tokens.clear();
                    let e = if shutting_down {
                        EngineError::ShuttingDown
                    } else {
                        EngineError::Llama(message.clone())
                    };
                    self.end_failed(r.job, e);
                }
            }
            self.publish();
            return;
        }
        self.counters.decode_steps.fetch_add(1, Ordering::Relaxed);
        stats.decode_steps.inc();
        for (batch_index, &i) in order.iter().enumerate() {
            let Some(mut r) = self.slots[i].running.take() else {
                continue;
            };
            self.slots[i].cache.tokens.push(r.next);
            r.pos += 1;
            match self.take_token(i, &mut r, batch_index as i32) {
                Ok(After::Continue) => self.slots[i].running = Some(r),
                Ok(After::Finished(reason)) => self.finish(i, r, reason),
                Err(e) => self.fail_running(i, r, e),
            }
        }
        stats.decode_us.add(started.elapsed().as_micros() as u64);
        self.publish();
    }

    /// Sample a job's next token from the logits at `index`, send its text, and say
    /// whether the job is done.
    fn take_token(
        &mut self,
        slot: usize,
        r: &mut Running<B::Sampler>,
        index: i32,
    ) -> Result<After, EngineError> {
        if let Some(w) = r.job.logits.as_mut() {
            for &x in self.backend.logits(index) {
                w.write_all(&x.to_le_bytes()).map_err(EngineError::Output)?;
            }
        }
        if let (Some(flag), Some(b)) = (&r.job.end_reasoning, r.job.reasoning_budget.as_mut()) {
            if flag.swap(false, Ordering::Relaxed) {
                b.end_now();
            }
        }
        // A constrained reply that starts outside a block may open one at its first pick
        // (a template that leaves `<think>` to the model): the reasoning is then free too.
        let first_constrained =
            r.generated == 0 && r.job.constraint.is_some() && !r.constraint_held;
        let pick = Pick {
            forced: r
                .job
                .reasoning_budget
                .as_ref()
                .and_then(ReasoningBudget::forced_token),
            constrained: !r.constraint_held,
            free: r
                .job
                .reasoning_budget
                .as_ref()
                .filter(|_| first_constrained)
                .and_then(ReasoningBudget::opening_token),
        };
        let Picked { token, free } = self.backend.sample(&mut r.sampler, index, pick);
        // Opened outside the grammar: the reasoning is free until the block's close.
        r.constraint_held |= free;
        if let Some(k) = r.job.logprobs {
            let lp = self.logprob(index, token, k);
            r.job.events.send(Event::Logprob(lp));
        }
        let stats = self.backend.stats();
        stats.generated_tokens.inc();
        if self.recorded_slot == Some(slot) {
            if let Ok(mut ids) = stats.generated_ids.lock() {
                ids.push(token);
            }
        }
        self.counters
            .completion_tokens
            .fetch_add(1, Ordering::Relaxed);
        r.generated += 1;
        if let Some(v) = self.counters.slots.get(slot) {
            v.generated.store(u64::from(r.generated), Ordering::Relaxed);
        }
        if self.backend.is_eog(token) {
            return Ok(After::Finished(FinishReason::EndOfGeneration));
        }
        self.backend
            .piece(token, r.job.parser.wants_special_tokens(), &mut self.piece);
        let mut text = r.utf8.push(&self.piece);
        if let Some(b) = r.job.reasoning_budget.as_mut() {
            // The tags are matched in the text, special tokens' included.
            let piece = if r.job.parser.wants_special_tokens() {
                &self.piece
            } else {
                self.backend.piece(token, true, &mut self.budget_piece);
                &self.budget_piece
            };
            b.accept(token, piece, r.utf8.at_char_boundary());
            r.constraint_held &= b.in_block();
            // Under a strict grammar, a block is one the reply starts in or opens at once
            // (as the grammar lets it, or free of it); once outside, the answer has begun,
            // and a later opening would be its text, into which no close may be forced.
            if matches!(r.job.constraint, Some(Constraint::Grammar(_)))
                && !b.in_block()
                && !b.opening_under_way()
            {
                b.count_only();
            }
        }
        let mut out_of_lines = false;
        if let Some(w) = r.lines.as_mut() {
            if let Some(keep) = w.push(&text) {
                text.truncate(keep);
                out_of_lines = true;
            }
            out_of_lines |= w.out_of_time();
        }
        let out = r.stop.push(&text);
        if !out.is_empty() {
            let mut pieces = Vec::new();
            r.job.parser.push(&out, &mut pieces);
            send_pieces(&mut r.job, pieces);
        }
        if let Some(s) = r.stop.matched() {
            return Ok(After::Finished(FinishReason::StopSequence(s.to_string())));
        }
        if out_of_lines || r.generated >= r.job.max_tokens {
            // The last token's logits would never be used: it is not decoded.
            return Ok(After::Finished(FinishReason::Length));
        }
        r.next = token;
        Ok(After::Continue)
    }

    fn finish(&mut self, i: usize, mut r: Running<B::Sampler>, reason: FinishReason) {
        // Ended without a stop string: what the UTF-8 assembler and the stop matcher hold
        // back is text, and is released.
        let mut out = String::new();
        let reason = if matches!(reason, FinishReason::StopSequence(_)) {
            reason
        } else {
            let tail = r.utf8.finish();
            out = r.stop.push(&tail);
            let reason = match r.stop.matched() {
                Some(s) => FinishReason::StopSequence(s.to_string()),
                None => {
                    out += &r.stop.finish();
                    reason
                }
            };
            reason
        };
        let mut pieces = Vec::new();
        if !out.is_empty() {
            r.job.parser.push(&out, &mut pieces);
        }
        r.job.parser.finish(&mut pieces);
        send_pieces(&mut r.job, pieces);
        let reason = if reason == FinishReason::EndOfGeneration && r.job.parser.calls() > 0 {
            FinishReason::ToolCalls
        } else {
            reason
        };
        if let Some(w) = r.job.logits.as_mut() {
            if let Err(e) = w.flush() {
                self.fail_running(i, r, EngineError::Output(e));
                return;
            }
        }
        let (reasoning_tokens, closes_forced) = r
            .job
            .reasoning_budget
            .as_ref()
            .map_or((0, 0), |b| (b.counted(), b.closes_forced()));
        self.counters
            .reasoning_tokens
            .fetch_add(u64::from(reasoning_tokens), Ordering::Relaxed);
        self.counters
            .reasoning_closes_forced
            .fetch_add(u64::from(closes_forced), Ordering::Relaxed);
        let reasoning_tokens = reasoning_tokens as usize;
        r.job.events.send(Event::Done {
            finish_reason: reason,
            completion_tokens: r.generated as usize,
            reasoning_tokens,
        });
        self.slot_completed(i);
    }

    /// Slot `i`'s job completed: the slot is idle and the most recently used.
    fn slot_completed(&mut self, i: usize) {
        self.slot_idle(i);
        self.clock += 1;
        self.slots[i].last_used = self.clock;
        self.counters.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// A running job failed: its slot's cache may hold part of it, so it is dropped.
    fn fail_running(&mut self, i: usize, r: Running<B::Sampler>, e: EngineError) {
        self.slot_idle(i);
        let seq = self.slots[i].seq;
        self.backend.clear(seq);
        self.slots[i].cache.tokens.clear();
        self.clock += 1;
        self.slots[i].last_used = self.clock;
        self.end_failed(r.job, e);
    }

    /// The log-softmax of the logits at `index`: the sampled `token`'s and the `k` largest.
    fn logprob(&mut self, index: i32, token: i32, k: usize) -> TokenLogprob {
        let logits = self.backend.logits(index);
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
        let lse = f64::from(max) + sum.ln();
        let lp = |x: f32| (f64::from(x) - lse) as f32;
        let mut top: Vec<(i32, f32)> = Vec::with_capacity(k + 1);
        for (id, &x) in logits.iter().enumerate() {
            if top.len() < k || top.last().is_some_and(|&(_, y)| x > y) {
                let at = top.partition_point(|&(_, y)| y >= x);
                top.insert(at, (id as i32, x));
                top.truncate(k);
            }
        }
        let sampled = lp(logits
            .get(token as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY));
        let text = |id: i32| {
            let mut bytes = Vec::new();
            self.backend.piece(id, true, &mut bytes);
            TokenText { id, bytes }
        };
        TokenLogprob {
            token: text(token),
            logprob: sampled,
            top: top.into_iter().map(|(id, x)| (text(id), lp(x))).collect(),
        }
    }

    /// Before slot `i` prefills `prompt`: load the stored prefix that keeps more of it than
    /// the slot's cache does, and first save the slot's cache when what it would lose is
    /// worth a file. A failure costs only the reuse: it is counted and logged, and the slot
    /// then holds what the failed call left (nothing, after a failed load).
    fn use_prompt_store(&mut self, i: usize, prompt: &[i32]) {
        let Some(files) = self.store.as_mut() else {
            return;
        };
        let backend = &mut *self.backend;
        let slot = &mut self.slots[i];
        let stats = backend.stats().clone();
        let have = backend.reusable_prefix(&slot.cache, prompt);
        let best = files.store.best_for(have, |e| {
            let cache = SeqCache {
                tokens: e.tokens.clone(),
                exact: e.tokens.len(),
            };
            backend.reusable_prefix(&cache, prompt)
        });
        let keep = match best {
            // Loading clears the slot; the entry it loads must outlast the save's evictions.
            Some((id, _)) => {
                files.store.touch(id);
                0
            }
            None => have,
        };
        let saved = files.put_aside(backend, slot, keep).is_some();
        let Some(entry) = best.and_then(|(id, _)| files.store.get(id).cloned()) else {
            if saved {
                files.save_index();
            }
            return;
        };
        let id = entry.id;
        let path = files.folder.path(id);
        let started = Instant::now();
        let loaded = backend.load_prefix(slot.seq, &entry.tokens, &path, entry.file());
        stats
            .prefix_load_us
            .add(started.elapsed().as_micros() as u64);
        match loaded {
            Ok(()) => {
                stats.prefixes_loaded.inc();
                stats.prefix_bytes_read.add(entry.bytes);
                slot.cache = SeqCache {
                    exact: entry.tokens.len(),
                    tokens: entry.tokens,
                };
            }
            Err(e) => {
                stats.prefix_store_failures.inc();
                tracing::warn!("a stored prompt prefix could not be loaded: {e}");
                files.store.remove(id);
                files.folder.forget(&[id]);
                slot.cache = SeqCache::default();
            }
        }
        files.save_index();
    }

    fn slot_idle(&self, i: usize) {
        if let Some(v) = self.counters.slots.get(i) {
            v.set(SlotState::Idle);
        }
    }

    /// End `job` with `Failed(e)`. A shutdown or a client gone mid-prompt counts as a
    /// cancellation, anything else as a failure.
    fn end_failed(&self, mut job: Job, e: EngineError) {
        let counter = if matches!(e, EngineError::ShuttingDown | EngineError::Cancelled) {
            &self.counters.cancelled
        } else {
            tracing::warn!("a generation failed: {e}");
            &self.counters.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        job.events.send(Event::Failed(e));
    }
}

/// Send the parser's pieces as events.
fn send_pieces(job: &mut Job, pieces: Vec<Piece>) {
    for p in pieces {
        let ev = match p {
            Piece::Content(t) => Event::Text(t),
            Piece::Reasoning(t) => Event::Reasoning(t),
            Piece::ToolCall(c) => Event::ToolCall(c),
        };
        job.events.send(ev);
    }
}
