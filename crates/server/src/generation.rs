//! From a protocol's request to the generation core and back: validate the sampling
//! settings and lengths ([`prepare`]), count the request in or refuse it ([`submit`]), and
//! gather a whole generation for non-streaming answers ([`collect`]). Adapters call these;
//! the engine thread ([`engine_main`]) runs the core.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use epm_chat::{OutputParser, ToolCall};
use epm_core::prompt_store::PromptStore;
use epm_core::stats::RunStats;
use epm_engine::generation::{
    Constraint, Event, EventSink, FinishReason, Generator, Job, LineLimits, ReasoningBudget,
    SinkGoneProbe, TokenLogprob,
};
use epm_engine::integrity::ModelIdentity;
use epm_engine::prompt_folder::{PromptFolder, StoreKey};
use epm_engine::{
    Engine, EngineError, Extras, LogitBias, SamplingError, SamplingParams, SessionOptions,
};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ContextOverflow};
use crate::output::{OutputAsk, OutputPlan};
use crate::state::{AppState, ControlGuard, Loaded, ServerCounters};
use crate::ServerOptions;

/// The sampling and length settings a request asked for, before they are checked.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    pub max_tokens: Option<u32>,
    /// Evaluate the prompt into a slot's cache and generate nothing (a warm-up: a later
    /// request sharing its prefix evaluates only the rest), once checked as the reply
    /// `max_tokens` asks for would be.
    pub prompt_only: bool,
    /// The protocol's default when `max_tokens` is absent (`None`: the room left).
    pub default_max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Keep the `k` most likely tokens (0 or below, or absent: all).
    pub top_k: Option<i32>,
    pub seed: Option<i64>,
    pub stop: Vec<String>,
    pub extras: SamplerExtras,
}

/// The sampling settings beyond temperature, top-p and top-k, by llama-server's names,
/// which OpenAI's (penalties, `logit_bias`) and Ollama's `options` share: one wire shape,
/// flattened into each protocol's request that has them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SamplerExtras {
    #[serde(flatten)]
    pub llama: Extras,
    pub logit_bias: Option<WireLogitBias>,
}

/// `logit_bias`: OpenAI's object of token ids (as strings) to biases, or llama-server's
/// list of `[token, bias]` pairs. As in llama-server, a token may also be given as text
/// (each of its tokens gets the bias) and a bias as `false` (never pick it).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum WireLogitBias {
    Object(serde_json::Map<String, Value>),
    Pairs(Vec<(Value, Value)>),
}

impl WireLogitBias {
    /// The biases by token id; text is tokenized by `tokenize`. Ids are checked against
    /// the vocabulary of `n_vocab` tokens later, by [`SamplingParams::check`], once they fit
    /// a token id at all.
    fn resolve(
        &self,
        n_vocab: usize,
        tokenize: impl Fn(&str) -> Vec<i32>,
    ) -> Result<Vec<LogitBias>, ApiError> {
        let pairs: Vec<(Value, &Value)> = match self {
            WireLogitBias::Object(m) => m
                .iter()
                .map(|(k, v)| (Value::String(k.clone()), v))
                .collect(),
            WireLogitBias::Pairs(p) => p.iter().map(|(k, v)| (k.clone(), v)).collect(),
        };
        let mut out = Vec::new();
        for (token, bias) in pairs {
            let bias = match bias {
                Value::Number(n) => n.as_f64().unwrap_or(f64::NAN) as f32,
                Value::Bool(false) => f32::NEG_INFINITY,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "`logit_bias` gives token {token} the bias {other}: use a number, or false for never"
                    )))
                }
            };
            let id = match &token {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            };
            let ids = match (id, &token) {
                (Some(id), _) => vec![i32::try_from(id).map_err(|_| {
                    ApiError::bad_request(
                        SamplingError::BiasToken { token: id, n_vocab }.to_string(),
                    )
                })?],
                (None, Value::String(text)) => tokenize(text),
                (None, other) => {
                    return Err(ApiError::bad_request(format!(
                        "`logit_bias` names the token {other}: give a token id, or text"
                    )))
                }
            };
            out.extend(ids.into_iter().map(|token| LogitBias { token, bias }));
        }
        Ok(out)
    }
}

/// A request ready for the engine.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub prompt: Vec<i32>,
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub constraint: Option<Constraint>,
    pub parser: OutputParser,
    /// Log-probabilities per token with this many alternatives (`None`: none).
    pub logprobs: Option<usize>,
    pub line_limits: LineLimits,
    pub reasoning_budget: Option<ReasoningBudget>,
    /// The completion id a client may end the reasoning of (`/v1/chat/completions/control`).
    pub control_id: Option<String>,
}

impl Prepared {
    pub fn with_output(mut self, plan: OutputPlan) -> Prepared {
        self.constraint = plan.constraint;
        self.parser = plan.parser;
        self.reasoning_budget = plan.budget;
        self
    }

    /// `n` requests for the choices of one (OpenAI's `n`): this one first, then copies whose
    /// seeds follow its own, so that choices differ when sampled and a seed gives the same
    /// choices again.
    pub fn choices(self, n: usize) -> Vec<Prepared> {
        let mut out = Vec::with_capacity(n);
        for i in 1..n {
            let mut choice = self.clone();
            choice.sampling.seed = self.sampling.seed.wrapping_add(i as u32);
            out.push(choice);
        }
        out.insert(0, self);
        out
    }

    pub fn with_logprobs(mut self, top: Option<usize>) -> Prepared {
        self.logprobs = top;
        self
    }

    pub fn with_line_limits(mut self, limits: LineLimits) -> Prepared {
        self.line_limits = limits;
        self
    }

    pub fn with_control_id(mut self, id: String) -> Prepared {
        self.control_id = Some(id);
        self
    }
}

/// A completion's prompt: text or token ids, as OpenAI's and llama-server's completion
/// endpoints take it; a list of one prompt is that prompt.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum WirePrompt {
    Text(String),
    Tokens(Vec<i32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<i32>>),
}

impl WirePrompt {
    /// The prompt's tokens: text is tokenized as a prompt's (special tokens and their
    /// text), ids are checked against the vocabulary.
    pub fn tokens(self, loaded: &Loaded) -> Result<Vec<i32>, ApiError> {
        self.tokenized(loaded, |t| loaded.engine.tokenize(t, true, true))
    }

    /// The prompt as the text before the cursor, with `suffix` after it, in the model's
    /// fill-in-the-middle layout; text is tokenized as plain text.
    pub fn fill_in_the_middle(self, loaded: &Loaded, suffix: &str) -> Result<Vec<i32>, ApiError> {
        fill_in_the_middle(loaded, &self.plain_tokens(loaded)?, suffix)
    }

    /// The prompt's tokens, text read as plain text (no BOS, special tokens' text as text).
    pub fn plain_tokens(self, loaded: &Loaded) -> Result<Vec<i32>, ApiError> {
        self.tokenized(loaded, |t| loaded.engine.tokenize_plain(t))
    }

    fn tokenized(
        self,
        loaded: &Loaded,
        tokenize: impl Fn(&str) -> Vec<i32>,
    ) -> Result<Vec<i32>, ApiError> {
        let one = "`prompt` must be one prompt (text, token ids, or a list of one of them): this server answers one choice per request";
        let ids = match self {
            WirePrompt::Text(t) => return Ok(tokenize(&t)),
            WirePrompt::Texts(mut v) if v.len() == 1 => return Ok(tokenize(&v.remove(0))),
            WirePrompt::Tokens(ids) => ids,
            WirePrompt::TokenLists(mut v) if v.len() == 1 => v.remove(0),
            WirePrompt::Texts(_) | WirePrompt::TokenLists(_) => {
                return Err(ApiError::bad_request(one))
            }
        };
        let n = loaded.engine.n_vocab();
        if let Some(bad) = ids.iter().find(|&&t| t < 0 || t as usize >= n) {
            return Err(ApiError::bad_request(format!(
                "`prompt` holds token {bad}, outside the vocabulary of {n} tokens"
            )));
        }
        Ok(ids)
    }
}

/// `[BOS] PRE prefix SUF suffix MID` (Ollama's fill-in-the-middle templates' layout) for a
/// completion with a `suffix`, or a 400 where the model has no fill-in-the-middle tokens.
fn fill_in_the_middle(loaded: &Loaded, prefix: &[i32], suffix: &str) -> Result<Vec<i32>, ApiError> {
    let fim = loaded
        .engine
        .fim_tokens()
        .ok_or_else(ApiError::no_fill_in_the_middle)?;
    let suffix = loaded.engine.tokenize_plain(suffix);
    Ok(fim.plain_prompt(loaded.engine.bos_to_add(), prefix, &suffix))
}

/// The sampling settings, checked. Temperature defaults to 1 as in OpenAI's API.
fn sampling(a: &Asked, loaded: &Loaded) -> Result<SamplingParams, ApiError> {
    let temperature = a.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(format!(
            "`temperature` {temperature} is out of range: use 0 to 2"
        )));
    }
    let seed = match a.seed {
        Some(v) => (v as u64 ^ (v as u64 >> 32)) as u32,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()),
    };
    let bad = |e: SamplingError| ApiError::bad_request(e.to_string());
    let x = &a.extras;
    let logit_bias = match &x.logit_bias {
        Some(b) => b.resolve(loaded.engine.n_vocab(), |text| {
            loaded.engine.tokenize_plain(text)
        })?,
        None => Vec::new(),
    };
    let base = SamplingParams {
        temperature,
        top_p: a.top_p.unwrap_or(1.0),
        top_k: a.top_k.filter(|&k| k > 0).map_or(0, |k| k as u32),
        logit_bias,
        seed,
        ..SamplingParams::default()
    };
    let params = x.llama.apply(base, loaded.n_ctx_per_seq).map_err(bad)?;
    params.check(loaded.engine.n_vocab()).map_err(bad)?;
    Ok(params)
}

/// Check a tokenized prompt and its settings against a slot's context.
pub fn prepare(loaded: &Loaded, prompt: Vec<i32>, asked: &Asked) -> Result<Prepared, ApiError> {
    let sampling = sampling(asked, loaded)?;
    let n_ctx = loaded.n_ctx_per_seq as usize;
    if prompt.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    let overflow = |max_tokens| {
        ApiError::context_overflow(ContextOverflow {
            prompt_tokens: prompt.len(),
            max_tokens,
            n_ctx,
        })
    };
    if prompt.len() >= n_ctx {
        return Err(overflow(asked.max_tokens));
    }
    let room = (n_ctx - prompt.len()) as u32;
    let max_tokens = asked
        .max_tokens
        .or(asked.default_max_tokens)
        .unwrap_or(room);
    if max_tokens == 0 {
        return Err(ApiError::bad_request("`max_tokens` must be at least 1"));
    }
    if prompt.len() + max_tokens as usize > n_ctx {
        return Err(overflow(Some(max_tokens)));
    }
    Ok(Prepared {
        prompt,
        max_tokens: if asked.prompt_only { 0 } else { max_tokens },
        sampling,
        stop: asked.stop.clone(),
        constraint: None,
        parser: OutputParser::new(None, None),
        logprobs: None,
        line_limits: LineLimits::default(),
        reasoning_budget: None,
        control_id: None,
    })
}

/// A conversation to render with the model's chat template: what a protocol's request
/// gives the template, made once for the request and for counting its tokens.
#[derive(Debug, Clone)]
pub struct ChatInput {
    /// OpenAI-shaped messages (`role`, `content`, `tool_calls` ...), as the template reads them.
    pub messages: Vec<serde_json::Value>,
    /// OpenAI-shaped tools, for the template.
    pub tools: Option<serde_json::Value>,
    /// Extra template variables (`enable_thinking` ...).
    pub kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Render a conversation, plan its output (constraint and parser), tokenize and check it:
/// what every chat protocol does before submitting.
pub fn prepare_chat(
    loaded: &Loaded,
    chat: &ChatInput,
    ask: &OutputAsk,
    asked: &Asked,
) -> Result<Prepared, ApiError> {
    let prompt = render_chat(loaded, chat)?;
    let plan = ask.plan(loaded, Some(&prompt))?;
    let tokens = loaded.engine.tokenize(&prompt, true, true);
    Ok(prepare(loaded, tokens, asked)?.with_output(plan))
}

fn render_chat(loaded: &Loaded, chat: &ChatInput) -> Result<String, ApiError> {
    loaded
        .chat
        .render(
            &loaded.engine,
            &chat.messages,
            chat.tools.as_ref(),
            chat.kwargs.as_ref(),
        )
        .map_err(|e| {
            ApiError::bad_request(format!(
                "cannot render the messages with the chat template: {e}"
            ))
        })
}

/// The prompt tokens of a conversation, as a request for it would evaluate them: what the
/// token-counting endpoints answer.
pub fn chat_tokens(loaded: &Loaded, chat: &ChatInput) -> Result<Vec<i32>, ApiError> {
    Ok(loaded
        .engine
        .tokenize(&render_chat(loaded, chat)?, true, true))
}

/// A conversation's items (messages, or Responses items) cut to fit a slot's context with
/// `max_tokens` after them ([`crate::truncation::fit`]): `chat` makes the template's input of
/// a part of them, whose prompt is counted; each item is measured by its own tokens.
pub fn fit_conversation(
    loaded: &Loaded,
    items: Vec<serde_json::Value>,
    max_tokens: Option<u32>,
    chat: impl Fn(&[serde_json::Value]) -> Result<ChatInput, ApiError>,
) -> Result<Vec<serde_json::Value>, ApiError> {
    crate::truncation::fit(
        items,
        loaded.n_ctx_per_seq as usize,
        max_tokens.map(|m| m as usize),
        |items| Ok(chat_tokens(loaded, &chat(items)?)?.len()),
        |item| {
            loaded
                .engine
                .tokenize_plain(&crate::truncation::item_text(item))
                .len()
        },
    )
}

/// A token count's answer, in llama-server's and the Responses API's shape.
pub fn input_tokens_answer(n: usize) -> serde_json::Value {
    serde_json::json!({"object": "response.input_tokens", "input_tokens": n})
}

/// The model, or 503 while it loads.
pub fn loaded(state: &AppState) -> Result<&Loaded, ApiError> {
    state
        .loaded
        .get()
        .ok_or_else(|| ApiError::unavailable("the model is still loading; retry shortly", 5))
}

/// A request counted in flight; it counts out when dropped, however the request ends.
struct Ticket(Arc<ServerCounters>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the model files are still the ones loaded (`with_sum`: the header checksum too);
/// the first change seen is kept and logged.
pub fn check_model(state: &AppState, with_sum: bool) -> Result<(), ApiError> {
    let changed = |why: &String| ApiError::unavailable(why.clone(), 60);
    if let Some(why) = state.server.model_changed.get() {
        return Err(changed(why));
    }
    let Some(loaded) = state.loaded.get() else {
        return Ok(());
    };
    if let Err(e) = loaded.identity.check(with_sum) {
        if state.server.model_changed.set(e.to_string()).is_ok() {
            tracing::error!("{e}; new requests are refused with 503");
        }
        return Err(changed(&e.to_string()));
    }
    Ok(())
}

/// Count the request in, or refuse it when every slot and queue place is taken or the model
/// file changed.
fn admit(state: &AppState) -> Result<Ticket, ApiError> {
    check_model(state, false)?;
    let server = &state.server;
    let cap = state.slots + state.queue;
    let mut cur = server.in_flight.load(Ordering::Acquire);
    loop {
        if cur >= cap || server.stopping.load(Ordering::Acquire) {
            server.rejected_overload.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::unavailable(
                format!(
                    "the server is busy: {} requests running and {} waiting fill its {} slots and queue of {}; retry in a few seconds",
                    state.generation.active_slots.load(Ordering::Relaxed),
                    state.generation.waiting.load(Ordering::Relaxed),
                    state.slots,
                    state.queue
                ),
                2,
            ));
        }
        match server
            .in_flight
            .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Ok(Ticket(server.clone())),
            Err(now) => cur = now,
        }
    }
}

/// A job's events, sent to its HTTP handler; the ticket (and the reasoning control, when
/// the job has one) go with the job.
struct ChannelSink {
    tx: UnboundedSender<Event>,
    _ticket: Ticket,
    _control: Option<ControlGuard>,
}

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        self.tx.send(event).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
    fn gone_probe(&self) -> Option<SinkGoneProbe> {
        // A clone of the sender, held only while the job's prompt is evaluated (its handler
        // still holds the receiver when it matters); `is_closed` is one atomic load.
        let tx = self.tx.clone();
        Some(Arc::new(move || tx.is_closed()))
    }
}

/// Hand a request to the engine thread; its events come back on the receiver.
pub fn submit(state: &AppState, p: Prepared) -> Result<UnboundedReceiver<Event>, ApiError> {
    let ticket = admit(state)?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    // Only a reply with reasoning blocks has reasoning to end.
    let control = match (&p.control_id, &p.reasoning_budget) {
        (Some(id), Some(_)) => Some(state.reasoning_controls.register(id.clone())),
        _ => None,
    };
    let (flag, guard) = control.unzip();
    let sink = Box::new(ChannelSink {
        tx,
        _ticket: ticket,
        _control: guard,
    });
    let job = Job::new(p.prompt, p.max_tokens, sink)
        .with_sampling(p.sampling)
        .with_stop(p.stop)
        .with_constraint(p.constraint)
        .with_parser(p.parser)
        .with_logprobs(p.logprobs)
        .with_line_limits(p.line_limits)
        .with_reasoning_budget(p.reasoning_budget)
        .with_end_reasoning(flag);
    let sent = state
        .jobs
        .lock()
        .map(|j| j.send(job).is_ok())
        .unwrap_or(false);
    if !sent {
        return Err(ApiError::unavailable("the server is shutting down", 5));
    }
    Ok(rx)
}

/// Token counts of one generation, and when its prompt was done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u64,
    /// Prompt tokens reused from a slot's cache.
    pub cached: u64,
    pub completion: u64,
    /// Of the completion, tokens generated inside reasoning blocks.
    pub reasoning: u64,
    /// When the prefill ended ([`Event::Started`] arrived): the prompt's time is from the
    /// request's start to this, the generation's from this to the end.
    pub prompt_done: Option<std::time::Instant>,
}

impl Usage {
    /// Record [`Event::Started`]'s counts, now.
    pub fn started(&mut self, prompt_tokens: usize, cached_tokens: usize) {
        self.prompt = prompt_tokens as u64;
        self.cached = cached_tokens as u64;
        self.prompt_done = Some(std::time::Instant::now());
    }

    /// The usage of a request's choices (OpenAI's `n`), in `index` order: the prompt as
    /// the first evaluated it, counted once, and every choice's completion.
    pub fn of_choices<'a>(mut choices: impl Iterator<Item = &'a Usage>) -> Usage {
        let mut sum = choices.next().copied().unwrap_or_default();
        for u in choices {
            sum.completion += u.completion;
            sum.reasoning += u.reasoning;
        }
        sum
    }

    /// Record [`Event::Done`]'s counts.
    pub fn finished(&mut self, completion_tokens: usize, reasoning_tokens: usize) {
        self.completion = completion_tokens as u64;
        self.reasoning = reasoning_tokens as u64;
    }

    /// The prompt's and the generation's time, for a request that began at `start`.
    pub fn durations(
        &self,
        start: std::time::Instant,
    ) -> (std::time::Duration, std::time::Duration) {
        let done = self.prompt_done.unwrap_or(start);
        (done.saturating_duration_since(start), done.elapsed())
    }
}

/// A whole generation, for non-streaming answers.
pub struct Collected {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub logprobs: Vec<TokenLogprob>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
}

pub async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let mut usage = Usage::default();
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    let mut logprobs = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => usage.started(prompt_tokens, cached_tokens),
            Event::Text(t) => text.push_str(&t),
            Event::Reasoning(t) => reasoning.push_str(&t),
            Event::ToolCall(c) => tool_calls.push(c),
            Event::Logprob(l) => logprobs.push(l),
            Event::Progress(_) => {}
            Event::Done {
                finish_reason,
                completion_tokens,
                reasoning_tokens,
            } => {
                usage.finished(completion_tokens, reasoning_tokens);
                return Ok(Collected {
                    text,
                    reasoning,
                    tool_calls,
                    logprobs,
                    finish_reason,
                    usage,
                });
            }
            Event::Failed(e) => return Err(ApiError::internal(e.to_string())),
        }
    }
    Err(ApiError::internal(
        "the engine stopped before the generation finished",
    ))
}

/// The engine thread: load the model, start the session, compile the chat format once,
/// publish them, then run the generation core until the server stops.
pub(crate) fn engine_main(
    opts: ServerOptions,
    state: Arc<AppState>,
    jobs: std::sync::mpsc::Receiver<Job>,
    loaded: tokio::sync::oneshot::Sender<Result<(), EngineError>>,
) {
    // Recorded before the load: a change during it is seen too.
    let identity = match ModelIdentity::record(&opts.index.files) {
        Ok(i) => i,
        Err(source) => {
            let _ = loaded.send(Err(EngineError::File {
                path: opts.index.files[0].clone(),
                source,
            }));
            return;
        }
    };
    let mut engine_opts = opts.engine;
    let heat = epm_engine::warm::heat_before_load(
        opts.heat_dir.as_deref(),
        &identity,
        &opts.index,
        &mut engine_opts,
    );
    let engine = match Engine::load(opts.index, engine_opts, opts.stats.clone(), None) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    let chat = match engine.chat_renderer(opts.chat_template.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    let mut session = match engine.start(opts.session) {
        Ok(s) => s,
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    if let Some(heat) = heat {
        session.warm_start_from(heat);
    }
    let store = opts
        .prompt_store
        .filter(|_| session.can_store_prefixes())
        .and_then(|o| {
            open_prompt_store(
                &o.dir,
                o.capacity_bytes,
                &identity,
                &opts.session,
                &opts.stats,
            )
        });
    let _ = state.loaded.set(Loaded {
        engine: engine.clone(),
        chat,
        n_ctx_per_seq: session.n_ctx_per_seq(),
        n_batch: opts.session.n_batch,
        identity,
        budget: opts.reasoning_budget,
    });
    // A shutdown stops the batch in flight rather than waiting for it.
    session.abort_when(state.server.stopping.clone());
    let _ = loaded.send(Ok(()));
    tracing::info!("model loaded; serving");
    let mut generator = Generator::new(&mut session, state.generation.clone());
    if let Some((folder, store)) = store {
        generator = generator.with_prompt_store(folder, store);
    }
    if let Some(after) = opts.save_when_idle {
        generator = generator.with_save_when_idle(after);
    }
    generator.serve(&jobs, &state.server.stopping);
    // A restarted server then answers the conversations it held without evaluating them.
    generator.put_aside_for_next_run();
    drop(generator);
    session.save_heat();
    session.finish();
}

/// The prompt store's folder under `parent` for this model and session, with what an
/// earlier run left there (counted in the stats), or `None` (logged) where it cannot be
/// opened: the server then runs without one.
fn open_prompt_store(
    parent: &std::path::Path,
    capacity: u64,
    identity: &ModelIdentity,
    session: &SessionOptions,
    stats: &RunStats,
) -> Option<(PromptFolder, PromptStore)> {
    let opened =
        StoreKey::new(identity, session).and_then(|key| PromptFolder::open(parent, &key, capacity));
    match opened {
        Ok((folder, store, restored)) => {
            stats.prefixes_restored.add(restored.entries);
            stats.prefix_bytes_restored.add(restored.bytes);
            if restored.entries > 0 || restored.dropped_files > 0 || restored.removed_folders > 0 {
                tracing::info!(
                    "prompt store {}: {} prefixes ({} bytes) from an earlier run; {} files and {} other folders removed",
                    folder.dir().display(),
                    restored.entries,
                    restored.bytes,
                    restored.dropped_files,
                    restored.removed_folders
                );
            }
            Some((folder, store))
        }
        Err(e) => {
            tracing::warn!(
                "prompt prefixes will not be put aside: the store in {} cannot be opened: {e}",
                parent.display()
            );
            None
        }
    }
}
