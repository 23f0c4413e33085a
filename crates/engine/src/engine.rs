//! The [`Engine`]: a model loaded once through the patched llama-cpp-2 (no populate, no
//! extra buffer types), its tokenizer and chat template, and the sessions started on it.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use epm_core::budget::{BudgetInputs, Budgets};
use epm_core::model::ModelIndex;
use epm_core::plan::{self, Measured, RunShape};
use epm_core::prefix::{PromptCuts, PromptSplit};
use epm_core::stats::RunStats;
use epm_sys::proc::{self, Pid};

use crate::error::EngineError;
use crate::generation::{BudgetError, Constraint, ReasoningBudget};
use crate::hook::attach::{self, PagingOptions};
use crate::hook::HookedContext;
use crate::infill::FimTokens;
use crate::sampling::{Sampler, SamplingParams};
use crate::session::Session;

/// How the model's experts are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagerMode {
    /// Upstream llama.cpp's loading with MAP_POPULATE kept: the honest baseline.
    UpstreamMmap,
    /// Upstream behaviour apart from MAP_POPULATE; no hook.
    Off,
    /// Page experts to keep total RSS within `budget_bytes`.
    On { budget_bytes: u64 },
}

impl PagerMode {
    /// Whether this mode pages the experts of `index`'s model (a dense model has none).
    pub fn pages_experts_of(self, index: &ModelIndex) -> bool {
        matches!(self, PagerMode::On { .. }) && index.is_moe()
    }
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub mode: PagerMode,
    pub paging: PagingOptions,
}

/// The context a session runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOptions {
    pub n_ctx: u32,
    /// Tokens per `llama_decode` call (the logical batch).
    pub n_batch: u32,
    pub n_ubatch: u32,
    /// Compute threads for ubatches of one token (decode).
    pub n_threads: i32,
    /// Compute threads for ubatches of several tokens (prefill, several slots' decode).
    pub n_threads_batch: i32,
    /// Sequences the context holds at once (parallel slots).
    pub n_seq: u32,
    /// Where prompts are cut into ubatches besides every `n_ubatch` tokens
    /// ([`epm_core::prefix`]): at end-of-turn tokens where prompts share conversations.
    pub prompt_cuts: PromptCuts,
}

impl SessionOptions {
    /// The sequences the context holds, at least one: also the most outputs (logits rows)
    /// any batch asks for (a prompt's last token, or one decode step per sequence).
    pub fn sequences(&self) -> u32 {
        self.n_seq.max(1)
    }

    pub fn shape(&self) -> RunShape {
        RunShape {
            n_ctx: self.n_ctx,
            n_ubatch: self.n_ubatch,
            n_seq: self.n_seq,
        }
    }
}

fn backend() -> Result<&'static LlamaBackend, EngineError> {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    if let Some(b) = BACKEND.get() {
        return Ok(b);
    }
    let b = LlamaBackend::init().map_err(EngineError::llama)?;
    Ok(BACKEND.get_or_init(|| b))
}

/// A loaded model. Sessions borrow it; the pager attaches when a paged session starts.
pub struct Engine {
    model: LlamaModel,
    index: ModelIndex,
    opts: EngineOptions,
    stats: Arc<RunStats>,
    /// A paged session owns the model's page cache: at most one at a time.
    session_active: AtomicBool,
    /// Every token's bytes, for constrained sampling; made on first use.
    token_pieces: OnceLock<Arc<Vec<Vec<u8>>>>,
    eog_tokens: OnceLock<Arc<Vec<i32>>>,
    /// Where a turn of a chat ends, ascending: the vocabulary's end-of-generation tokens and
    /// its [`MESSAGE_ENDS`].
    end_of_turn: Vec<i32>,
}

/// Control tokens that end a chat message without ending a generation, cut after as the
/// end-of-generation tokens are: harmony's `<|end|>` closes every message but a reply's
/// last (which `<|return|>` or `<|call|>` ends), so without it a gpt-oss prompt has no turn
/// to cut at.
const MESSAGE_ENDS: &[&str] = &["<|end|>"];

impl Engine {
    /// Load the model of `index`. `progress` receives the load fraction (0 to 1).
    pub fn load(
        index: ModelIndex,
        opts: EngineOptions,
        stats: Arc<RunStats>,
        progress: Option<Box<dyn FnMut(f32) + Send>>,
    ) -> Result<Engine, EngineError> {
        let backend = backend()?;
        let path = index.files[0].clone();
        let upstream = opts.mode == PagerMode::UpstreamMmap;
        // Extra buffer types (AMX, CPU_REPACK) stay off in every mode: they copy weights out
        // of the mapping and use other kernels (AMX repacking of Q8_0 changes logits on this
        // kind of machine), so every mode computes with the same kernels and outputs can be
        // compared.
        let mut mparams = LlamaModelParams::default()
            .with_n_gpu_layers(0)
            .with_no_populate(!upstream)
            .with_use_extra_bufts(false);
        if let Some(mut f) = progress {
            mparams = mparams.with_progress_callback(move |p| {
                f(p);
                true
            });
        }
        let model = LlamaModel::load_from_file(backend, &path, &mparams).map_err(|e| {
            EngineError::Load {
                path: path.clone(),
                reason: e.to_string(),
            }
        })?;
        let end_of_turn = {
            let vocab = model.vocab();
            let mut ends: Vec<i32> = (0..model.n_vocab().max(0))
                .filter(|&t| vocab.is_eog(LlamaToken(t)))
                .collect();
            // Wherever the vocabulary has it as one token: llama.cpp does not mark harmony's
            // as a control token.
            for text in MESSAGE_ENDS {
                if let [t] = vocab.tokenize(text.as_bytes(), false, true)[..] {
                    ends.push(t.0);
                }
            }
            ends.sort_unstable();
            ends.dedup();
            ends
        };
        Ok(Engine {
            end_of_turn,
            model,
            index,
            opts,
            stats,
            session_active: AtomicBool::new(false),
            token_pieces: OnceLock::new(),
            eog_tokens: OnceLock::new(),
        })
    }

    pub fn index(&self) -> &ModelIndex {
        &self.index
    }

    pub fn stats(&self) -> &Arc<RunStats> {
        &self.stats
    }

    /// Whether sessions page experts.
    pub fn paged(&self) -> bool {
        self.opts.mode.pages_experts_of(&self.index)
    }

    /// Start a session: create the llama.cpp context, measure what it costs, and attach the
    /// pager (paged mode). The budget is checked against the measured reserve here.
    pub fn start(&self, s: SessionOptions) -> Result<Session<'_>, EngineError> {
        let backend = backend()?;
        let paged = self.paged();
        if paged && self.session_active.swap(true, Ordering::AcqRel) {
            return Err(EngineError::SessionActive);
        }
        let started = self.start_inner(backend, s, paged);
        if started.is_err() && paged {
            self.session_active.store(false, Ordering::Release);
        }
        started
    }

    fn start_inner(
        &self,
        backend: &LlamaBackend,
        s: SessionOptions,
        paged: bool,
    ) -> Result<Session<'_>, EngineError> {
        let cparams = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(s.n_ctx))
            .with_n_batch(s.n_batch)
            .with_n_ubatch(s.n_ubatch)
            .with_n_seq_max(s.sequences())
            // A batch asks for at most one output (logits row) per sequence: a prompt's last
            // token, or one decode step per slot. llama.cpp reserves its compute buffer for
            // `n_outputs_max` outputs (by default every token of a ubatch: 311 MiB of logits
            // at ubatch 512 with a 152k vocabulary), so this keeps only the activations.
            // The graph a batch runs is built for its own outputs either way: same results.
            .with_n_outputs_max(s.sequences())
            .with_n_threads(s.n_threads)
            .with_n_threads_batch(s.n_threads_batch);
        let read_status = || {
            proc::memory(Pid::This).map_err(|source| EngineError::File {
                path: "/proc/self/status".into(),
                source,
            })
        };
        let before = read_status()?;
        let hooked = HookedContext::new(&self.model, backend, cparams, self.stats.clone(), paged)
            .map_err(EngineError::llama)?;
        let after = read_status()?;
        let mapping_rss: u64 = self.index.files.iter().map(|f| proc::mapping_rss(f)).sum();
        self.stats.mapping_rss_after_load.set(mapping_rss);
        self.stats.n_ubatch.set(u64::from(s.n_ubatch));
        let split = PromptSplit::new(s.n_ubatch as usize, s.prompt_cuts, &self.end_of_turn);
        self.stats
            .prompt_split_turns
            .set(u64::from(split.cuts_at_turns()));
        let reported = hooked.memory();
        if let Some(m) = reported {
            self.stats.compute_buffer.set(m.compute_bytes);
            self.stats.context_memory.set(m.context_bytes);
        }
        if let (PagerMode::On { budget_bytes }, true) = (self.opts.mode, paged) {
            // Context creation reserves memory it touches later: the compute buffer, but
            // also the scheduler's split metadata (about 100 MB of address space on hybrid
            // graphs with 5,120 nodes, almost none of it ever touched). The compute buffer is
            // the part that becomes resident: llama.cpp says how large it is (the plan's
            // estimate, an upper bound, stands in if it does not).
            let virtual_growth = (after.data.saturating_sub(before.data))
                .saturating_sub(after.rss_anon.saturating_sub(before.rss_anon));
            let compute = reported.map_or_else(
                || plan::compute_bytes(&self.index, s.shape()),
                |m| m.compute_bytes,
            );
            let measured = Measured {
                rss_bytes: after.rss,
                mapping_rss_bytes: mapping_rss,
                untouched_context_bytes: virtual_growth.min(compute),
            };
            let reserve = plan::measured_reserve(&self.index, measured);
            tracing::info!("measured after load: {measured:?}");
            let page = epm_sys::page_size() as u64;
            let budgets = Budgets::split(BudgetInputs {
                total_bytes: budget_bytes,
                reserve_bytes: reserve,
                working_set_bytes: plan::ubatch_working_set(&self.index, s.n_ubatch, page),
                expert_bytes: self.index.expert_bytes,
                evict_thread: self.opts.paging.evict_thread,
                shape: s.shape(),
            })?;
            self.stats.reserve_bytes.set(budgets.reserve);
            self.stats.expert_budget_bytes.set(budgets.expert);
            self.stats.evict_slack_bytes.set(budgets.evict_slack);
            tracing::info!(
                "pager: budget {} MiB, measured reserve {} MiB, expert budget {} MiB of {} MiB experts",
                budget_bytes >> 20,
                budgets.reserve >> 20,
                budgets.expert >> 20,
                self.index.expert_bytes >> 20
            );
            let active = attach::attach(&self.index, &self.opts.paging, budgets, &self.stats)?;
            *hooked
                .hook()
                .active
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(active);
        }
        self.stats
            .read_bytes_after_load
            .set(proc::read_bytes(Pid::This).unwrap_or(0));
        let batch = LlamaBatch::new(s.n_batch.max(s.n_seq) as usize, s.sequences() as i32);
        Ok(Session::new(self, hooked, batch, s, split))
    }

    /// The paged session has ended.
    pub(crate) fn session_ended(&self) {
        self.session_active.store(false, Ordering::Release);
    }

    /// Tokenize `text`; `add_special` adds BOS (and what else the vocabulary adds),
    /// `parse_special` turns special-token text such as `<|im_start|>` into those tokens.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<i32> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), add_special, parse_special)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// Tokenize `text` as plain text: no BOS, and special-token text stays text (what a
    /// user wrote around a cursor, or a bias's word).
    pub fn tokenize_plain(&self, text: &str) -> Vec<i32> {
        self.tokenize(text, false, false)
    }

    /// A reasoning budget of `budget` tokens per block (`None`: blocks only counted) for
    /// blocks between `open` and `close`, written as the text a tokenizer reads in a chat
    /// (special tokens as such); a spent budget writes `message` and the close.
    pub fn reasoning_budget(
        &self,
        budget: Option<u32>,
        open: &str,
        close: &str,
        message: &str,
        starts_open: bool,
    ) -> Result<ReasoningBudget, BudgetError> {
        let special = |text: &str| self.tokenize(text, false, true);
        ReasoningBudget::new(
            budget,
            (special(open), open.as_bytes()),
            close.as_bytes(),
            special(&format!("{message}{close}")),
            starts_open,
        )
    }

    /// The bytes of one token's text as output; special tokens' text only when `special`.
    pub fn output_piece(&self, token: i32, special: bool, out: &mut Vec<u8>) {
        out.clear();
        self.model
            .vocab()
            .token_to_piece_into(LlamaToken(token), out, special, None);
    }

    /// A sampler for `params`, with `history` (the prompt) counted in its repetition
    /// window; under `constraint`, llama.cpp's grammar sampler comes first in the chain, so
    /// it narrows the candidates and never touches the context's logits.
    pub fn sampler(
        &self,
        params: &SamplingParams,
        constraint: Option<&Constraint>,
        history: &[i32],
    ) -> Result<Sampler, EngineError> {
        params.check(self.n_vocab())?;
        let grammar = match constraint {
            None => None,
            Some(Constraint::Grammar(g)) => Some(
                LlamaSampler::grammar(&self.model, g, "root")
                    .map_err(|e| EngineError::Grammar(e.to_string()))?,
            ),
            Some(Constraint::Lazy { grammar, triggers }) => Some(
                LlamaSampler::grammar_lazy_patterns(&self.model, grammar, "root", triggers, &[])
                    .map_err(|e| EngineError::Grammar(e.to_string()))?,
            ),
        };
        // The end-of-generation tokens take a pass over the vocabulary the first time:
        // only `ignore_eos` needs them.
        let eog = if params.ignore_eos {
            self.eog_tokens()
        } else {
            Arc::default()
        };
        let mut sampler = Sampler::new(
            params,
            &self.model,
            &eog,
            grammar.map(|g| (g, self.token_pieces())),
        );
        sampler.accept_history(history);
        Ok(sampler)
    }

    /// The vocabulary's end-of-generation tokens, found once.
    pub fn eog_tokens(&self) -> Arc<Vec<i32>> {
        self.eog_tokens
            .get_or_init(|| {
                let vocab = self.model.vocab();
                Arc::new(
                    (0..self.n_vocab() as i32)
                        .filter(|&t| vocab.is_eog(LlamaToken(t)))
                        .collect(),
                )
            })
            .clone()
    }

    /// Every token's bytes as a grammar reads them (special tokens' text included), made
    /// once.
    pub fn token_pieces(&self) -> Arc<Vec<Vec<u8>>> {
        self.token_pieces
            .get_or_init(|| {
                let mut piece = Vec::new();
                Arc::new(
                    (0..self.n_vocab() as i32)
                        .map(|t| {
                            self.output_piece(t, true, &mut piece);
                            piece.clone()
                        })
                        .collect(),
                )
            })
            .clone()
    }

    /// What clients show about the model, from its GGUF metadata.
    pub fn facts(&self) -> ModelFacts {
        let meta = |k: &str| self.model.meta_val_str(k).ok();
        let arch = meta("general.architecture").unwrap_or_default();
        ModelFacts {
            context_length: self.model.n_ctx_train(),
            n_params: self.model.n_params(),
            size_bytes: self.model.size(),
            file_type: meta("general.file_type")
                .and_then(|t| t.parse::<u32>().ok())
                .map(|t| epm_gguf::FileType(t).name())
                .unwrap_or("unknown"),
            arch,
        }
    }

    /// The text of `tokens` (special tokens' text included when `special`).
    pub fn detokenize(&self, tokens: &[i32], special: bool) -> String {
        let mut bytes = Vec::new();
        let mut piece = Vec::new();
        for &t in tokens {
            if t >= 0 && (t as usize) < self.n_vocab() {
                self.output_piece(t, special, &mut piece);
                bytes.extend_from_slice(&piece);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Whether the model keeps a recurrent state per sequence (recurrent or hybrid models):
    /// a state a batch has part-written cannot be cut back like a KV cache.
    pub fn has_recurrent_state(&self) -> bool {
        self.model.is_recurrent() || self.model.is_hybrid()
    }

    /// The vocabulary's fill-in-the-middle tokens; `None` where it lacks the prefix,
    /// suffix or middle token.
    pub fn fim_tokens(&self) -> Option<FimTokens> {
        let vocab = self.model.vocab();
        let id = |t: LlamaToken| (t.0 >= 0).then_some(t.0);
        Some(FimTokens {
            prefix: id(vocab.fim_pre())?,
            suffix: id(vocab.fim_suf())?,
            middle: id(vocab.fim_mid())?,
            repo: id(vocab.fim_rep()),
            file_sep: id(vocab.fim_sep()),
        })
    }

    /// The BOS token, where the vocabulary adds one to a prompt.
    pub fn bos_to_add(&self) -> Option<i32> {
        let vocab = self.model.vocab();
        (vocab.should_add_bos() && vocab.bos().0 >= 0).then_some(vocab.bos().0)
    }

    /// Whether `token` ends a generation (EOS, EOT, `<|im_end|>` ...).
    pub fn is_eog(&self, token: i32) -> bool {
        self.model.vocab().is_eog(LlamaToken(token))
    }

    pub fn n_vocab(&self) -> usize {
        self.model.n_vocab().max(0) as usize
    }

    /// The text of the BOS and EOS tokens, for chat templates.
    pub fn bos_eos_text(&self) -> (String, String) {
        let text = |t: LlamaToken| {
            let mut v = Vec::new();
            if t.0 >= 0 {
                self.model
                    .vocab()
                    .token_to_piece_into(t, &mut v, true, None);
            }
            String::from_utf8_lossy(&v).into_owned()
        };
        let vocab = self.model.vocab();
        (text(vocab.bos()), text(vocab.eos()))
    }

    /// The model's own chat template (`tokenizer.chat_template`), if it has one.
    pub fn chat_template(&self) -> Option<String> {
        self.model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok())
    }

    /// Render `(role, content)` messages with llama.cpp's built-in template engine, which
    /// recognizes the common template families (ChatML and others) by their text.
    pub fn apply_builtin_template(
        &self,
        template: &str,
        messages: &[(String, String)],
        add_generation_prompt: bool,
    ) -> Result<String, EngineError> {
        let tmpl =
            llama_cpp_2::model::LlamaChatTemplate::new(template).map_err(EngineError::llama)?;
        let msgs = messages
            .iter()
            .map(|(r, c)| LlamaChatMessage::new(r.clone(), c.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(EngineError::llama)?;
        self.model
            .apply_chat_template(&tmpl, &msgs, add_generation_prompt)
            .map_err(EngineError::llama)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The model's mappings go away with it.
        epm_sys::sigbus::forget_all();
    }
}

/// What clients show about a model (Ollama's `/api/show`, llama-server's `/props`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// `general.architecture`.
    pub arch: String,
    pub n_params: u64,
    pub size_bytes: u64,
    /// The context length it was trained for.
    pub context_length: u32,
    /// `general.file_type`, as llama.cpp names it (`Q4_K_M` ...).
    pub file_type: &'static str,
}
