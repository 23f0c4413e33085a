//! `epm-run generate`: one prompt, or an interactive chat on stdin, with experts paged
//! within a RAM budget. Both are clients of the engine's generation core with one slot.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};

use anyhow::{bail, Context, Result};
use clap::Args;

use epm_core::units::MIB;
use epm_engine::generation::{
    Constraint, Event, EventSink, GenerationCounters, Generator, Job, SinkGoneProbe,
};
use epm_engine::integrity::ModelIdentity;
use epm_engine::{telemetry, warm};
use epm_engine::{
    Engine, EngineError, Extras, SamplerOrder, SamplingError, SamplingParams, Session,
};

use super::chat_args::ChatArgs;
use super::exit::{Interrupted, UsageError};
use super::model_run::{ModelRun, ModelRunArgs, PromptReuse};
use super::progress;
use super::signals::StopSignals;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    run: ModelRunArgs,
    /// Prompt text.
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 64)]
    n_predict: usize,
    /// Stop at this text (repeat for several); it is not printed.
    #[arg(long)]
    stop: Vec<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Write the f32 little-endian logits of every sampled position, concatenated.
    #[arg(long)]
    dump_logits: Option<PathBuf>,
    /// Interactive chat on stdin using the model's chat template; each turn evaluates only
    /// its new tokens. Ctrl-C stops a reply; at the prompt, it (or Ctrl-D) ends the chat.
    #[arg(long)]
    chat: bool,
    /// The chat's system message (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// The chat's template and reasoning budget (with --chat).
    #[command(flatten)]
    chat_args: ChatArgs,
    /// Constrain the output to values valid against this JSON schema (a file).
    #[arg(long, conflicts_with = "grammar")]
    json_schema: Option<PathBuf>,
    /// Constrain the output with this GBNF grammar (a file; the start rule is `root`).
    #[arg(long)]
    grammar: Option<PathBuf>,
    /// Where the expert heat is kept: a small file per model counting the experts past runs
    /// selected, read at start (where more of the model is cached than the budget holds,
    /// those are kept first) and written at the end (default: the user's cache folder, where
    /// `serve` keeps it too). --no-warm-start neither reads nor writes it.
    #[arg(long)]
    heat_dir: Option<PathBuf>,
}

/// How tokens are picked: llama.cpp's samplers in llama-server's order, with its names
/// (`--top-n-sigma` is `top_n_sigma`); those left out change nothing.
#[derive(Args, Debug)]
#[command(next_help_heading = "Sampling")]
struct SamplingArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Seed of the sampler's draws (with --temp above 0).
    #[arg(long, default_value_t = 42)]
    seed: u32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: u32,
    /// Keep the smallest set of tokens whose probability reaches P (1: all).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Drop tokens less likely than P times the likeliest one.
    #[arg(long)]
    min_p: Option<f32>,
    /// Locally typical sampling's mass (1: off).
    #[arg(long)]
    typical_p: Option<f32>,
    /// Keep tokens within N standard deviations of the top logit.
    #[arg(long)]
    top_n_sigma: Option<f32>,
    /// XTC: with this probability, drop the likeliest tokens above --xtc-threshold but one.
    #[arg(long)]
    xtc_probability: Option<f32>,
    #[arg(long)]
    xtc_threshold: Option<f32>,
    /// Dynamic temperature: --temp ± this, with the entropy.
    #[arg(long)]
    dynatemp_range: Option<f32>,
    #[arg(long)]
    dynatemp_exponent: Option<f32>,
    /// Divide a repeated token's logit by this (1: off).
    #[arg(long)]
    repeat_penalty: Option<f32>,
    /// The penalties' window in tokens, prompt included (-1: the whole context, 0: off;
    /// default 64).
    #[arg(long, allow_negative_numbers = true)]
    repeat_last_n: Option<i32>,
    /// Subtract this from a token's logit if it occurred.
    #[arg(long, allow_negative_numbers = true)]
    presence_penalty: Option<f32>,
    /// Subtract this from a token's logit for each time it occurred.
    #[arg(long, allow_negative_numbers = true)]
    frequency_penalty: Option<f32>,
    /// DRY: penalize tokens that extend a repeat of earlier text (0: off).
    #[arg(long)]
    dry_multiplier: Option<f32>,
    #[arg(long)]
    dry_base: Option<f32>,
    #[arg(long)]
    dry_allowed_length: Option<u32>,
    /// DRY's window (-1, the default: the whole context).
    #[arg(long, allow_negative_numbers = true)]
    dry_penalty_last_n: Option<i32>,
    /// Text that ends a repeat for DRY (repeat for several; default: newline, `:`, `"`, `*`).
    #[arg(long = "dry-sequence-breaker")]
    dry_sequence_breakers: Vec<String>,
    /// Mirostat version (0: off, 1 or 2), in place of the truncating samplers.
    #[arg(long)]
    mirostat: Option<u8>,
    #[arg(long)]
    mirostat_tau: Option<f32>,
    #[arg(long)]
    mirostat_eta: Option<f32>,
    /// Never stop at an end-of-generation token: generate -n tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// The samplers' order, `;`-separated llama.cpp names (default:
    /// `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`); one left out
    /// is not applied.
    #[arg(long)]
    samplers: Option<String>,
}

impl SamplingArgs {
    /// The settings, checked against the model's vocabulary and a context of `n_ctx`.
    fn params(&self, n_ctx: u32, n_vocab: usize) -> Result<SamplingParams> {
        let flag = |e: SamplingError| UsageError(e.to_string().replace('_', "-"));
        let extras = Extras {
            min_p: self.min_p,
            typical_p: self.typical_p,
            top_n_sigma: self.top_n_sigma,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exponent,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            dry_sequence_breakers: (!self.dry_sequence_breakers.is_empty())
                .then(|| self.dry_sequence_breakers.clone()),
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_tau,
            mirostat_eta: self.mirostat_eta,
            ignore_eos: Some(self.ignore_eos),
            samplers: self
                .samplers
                .as_ref()
                .map(|s| SamplerOrder::Names(s.split(';').map(String::from).collect())),
        };
        let base = SamplingParams {
            temperature: self.temp,
            top_p: self.top_p,
            top_k: self.top_k,
            seed: self.seed,
            ..SamplingParams::default()
        };
        let params = extras.apply(base, n_ctx).map_err(flag)?;
        params.check(n_vocab).map_err(flag)?;
        Ok(params)
    }
}

/// The constraint the flags ask for.
fn constraint(a: &GenerateArgs) -> Result<Option<Constraint>> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", p.display())))
    };
    if let Some(p) = &a.grammar {
        return Ok(Some(Constraint::Grammar(read(p)?)));
    }
    let Some(p) = &a.json_schema else {
        return Ok(None);
    };
    let schema: serde_json::Value = serde_json::from_str(&read(p)?)
        .map_err(|e| UsageError(format!("{} is not JSON: {e}", p.display())))?;
    let g = epm_chat::compile_schema(&schema)
        .map_err(|e| UsageError(format!("{}: {e}", p.display())))?;
    Ok(Some(Constraint::Grammar(g.text())))
}

pub fn run(a: GenerateArgs) -> Result<()> {
    if !a.chat && a.chat_args.any_given() {
        bail!(UsageError(
            "--chat-template-file and --reasoning-budget(-message) are for --chat".into()
        ));
    }
    // Read and compiled before the model loads.
    let template = a.chat_args.template()?;
    let heat_dir = heat_dir(&a)?;
    // From here on, Ctrl-C stops the generation (a chat's reply) rather than the process.
    let stop = StopSignals::install()?;
    // A chat's prompts grow and reuse the conversation, like a server's.
    let reuse = if a.chat {
        PromptReuse::Shared
    } else {
        PromptReuse::None
    };
    let run = a
        .run
        .set_up(1, reuse, &[("--dump-logits", &a.dump_logits)])?;
    let disk = run.disk_mb_per_s;
    let result = read_prompt(&a).and_then(|prompt| {
        generate(
            &a,
            &run,
            heat_dir.as_deref(),
            &stop,
            prompt,
            template.as_deref(),
        )
    });
    let ok = result.is_ok();
    let stats = run.finish(ok)?;
    result?;
    if stats.pager_enabled {
        super::model_run::report_disk(&stats, disk);
    }
    if stats.pager_enabled {
        let s = telemetry::snapshot(&stats);
        tracing::info!(
            "decode cache hit rate {:.3}, evictions {}, peak RSS {} MiB (budget {} MiB), prefill {:.1} tok/s, decode {:.1} tok/s",
            s.experts.decode.cache_hit_rate,
            s.experts.evictions,
            s.memory.peak_rss_bytes / MIB,
            s.budget_bytes / MIB,
            s.tok_per_s.prefill,
            s.tok_per_s.decode
        );
    }
    Ok(())
}

/// Where the expert heat is kept, `None` with --no-warm-start. A folder the user named
/// must be writable (the default one is only warned about, at the end).
fn heat_dir(a: &GenerateArgs) -> Result<Option<PathBuf>> {
    if a.run.paging.no_warm_start {
        return Ok(None);
    }
    let Some(dir) = &a.heat_dir else {
        return Ok(Some(super::paging::default_state_dir()));
    };
    super::paging::make_writable_dir(dir).map_err(|e| {
        UsageError(format!(
            "--heat-dir: {}: {e}; give a writable folder, or --no-warm-start",
            dir.display()
        ))
    })?;
    Ok(Some(dir.clone()))
}

fn read_prompt(a: &GenerateArgs) -> Result<String> {
    Ok(match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .map_err(|e| UsageError(format!("cannot read prompt file {}: {e}", f.display())))?,
        (None, None) if a.chat => String::new(),
        (None, None) => bail!(UsageError(
            "give a prompt with -p TEXT or -f FILE (or use --chat)".into()
        )),
    })
}

/// Load the model and generate for the prompt (or chat); where a stop signal came, what was
/// done so far is kept (the text printed, the heat saved) and the result is [`Interrupted`].
fn generate(
    a: &GenerateArgs,
    run: &ModelRun,
    heat_dir: Option<&Path>,
    stop: &StopSignals,
    prompt: String,
    template: Option<&str>,
) -> Result<()> {
    let logits = match &a.dump_logits {
        Some(p) => Some(epm_sys::fs::UncachedWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let mut engine_opts = run.engine.clone();
    // The heat file is named after the model files' identity, recorded before the load as a
    // server does (only where heat is kept: it reads the header).
    let heat = match heat_dir {
        Some(dir) => {
            let identity = ModelIdentity::record(&run.index.files)
                .with_context(|| format!("cannot read {}", run.index.files[0].display()))?;
            warm::heat_before_load(Some(dir), &identity, &run.index, &mut engine_opts)
        }
        None => None,
    };
    let engine = Engine::load(
        run.index.clone(),
        engine_opts,
        run.stats.clone(),
        progress::loading(),
    )?;
    let constraint = constraint(a)?;
    let sampling = a.sampling.params(run.session.n_ctx, engine.n_vocab())?;
    if let Some(c) = &constraint {
        engine
            .sampler(&SamplingParams::default(), Some(c), &[])
            .map_err(|e| UsageError(e.to_string()))?;
    }
    // The prompt is tokenized before the context exists, so an `auto` ubatch can be no
    // larger than it needs (a chat's prompts grow: it keeps the budget's choice).
    let tokens = if a.chat {
        Vec::new()
    } else {
        let tokens = engine.tokenize(&prompt, true, true);
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt.into());
        }
        tokens
    };
    let mut opts = run.session;
    if !a.chat && a.run.shape.ubatch.is_auto() {
        opts.n_ubatch = epm_core::plan::ubatch_for_prompt(opts.n_ubatch, tokens.len());
        tracing::info!(
            "ubatch {} for a {}-token prompt",
            opts.n_ubatch,
            tokens.len()
        );
    }
    let mut session = engine.start(opts)?;
    if let Some(heat) = heat {
        // Read in only while a chat waits for its next line (one prompt has no idle
        // time); this run's selections are added to the file at the end.
        session.warm_start_from(heat);
    }
    let mut out = std::io::stdout().lock();
    if a.chat {
        chat(
            &engine,
            &mut session,
            a,
            template,
            &sampling,
            stop,
            &mut out,
        )?;
    } else {
        let mut generator = Generator::new(&mut session, Default::default());
        let job = |events| {
            Job::new(tokens.clone(), a.n_predict as u32, events)
                .with_sampling(sampling.clone())
                .with_stop(a.stop.clone())
                .with_logits(logits.map(|w| Box::new(w) as Box<dyn Write + Send>))
                .with_constraint(constraint.clone())
        };
        run_job(&mut generator, job, stop, &mut out)?;
        writeln!(out)?;
    }
    session.save_heat();
    session.finish();
    if stop.any() {
        let by = if stop.terminated() {
            "by SIGTERM"
        } else {
            "by Ctrl-C"
        };
        return Err(Interrupted(by).into());
    }
    Ok(())
}

/// A job's events: prefill progress drawn at once as a bar on the terminal (the core runs
/// on this thread, so queued events would only be seen after the prefill), the rest queued.
/// A stop signal closes it, which ends the job at the next step, or in its prefill between
/// graph nodes.
struct WithPrefillBar {
    events: Sender<Event>,
    bar: indicatif::ProgressBar,
    stop: StopSignals,
}

impl EventSink for WithPrefillBar {
    fn send(&mut self, event: Event) -> bool {
        match event {
            Event::Progress(p) => {
                self.bar.set_length(p.to_evaluate as u64);
                self.bar.set_position(p.evaluated as u64);
                if p.evaluated >= p.to_evaluate {
                    self.bar.finish_and_clear();
                }
                true
            }
            other => self.events.send(other).is_ok(),
        }
    }

    fn is_closed(&self) -> bool {
        self.stop.any()
    }

    fn gone_probe(&self) -> Option<SinkGoneProbe> {
        let stop = self.stop.clone();
        Some(std::sync::Arc::new(move || stop.any()))
    }
}

/// Run one job on the core, printing its text as it comes, until it ends or a stop signal
/// comes; returns the text.
fn run_job(
    generator: &mut Generator<'_, Session<'_>>,
    job: impl FnOnce(Box<dyn EventSink>) -> Job,
    stop: &StopSignals,
    out: &mut dyn Write,
) -> Result<String> {
    let (tx, rx) = channel();
    let bar = progress::prefill();
    generator.submit(job(Box::new(WithPrefillBar {
        events: tx,
        bar: bar.clone(),
        stop: stop.clone(),
    })));
    let mut text = String::new();
    while !generator.idle() {
        generator.step();
        drain(&rx, &mut text, out)?;
    }
    drain(&rx, &mut text, out)?;
    // A prefill stopped part way leaves its bar drawn.
    bar.finish_and_clear();
    Ok(text)
}

/// Print the events so far; a failure becomes the error.
fn drain(rx: &Receiver<Event>, text: &mut String, out: &mut dyn Write) -> Result<()> {
    while let Ok(ev) = rx.try_recv() {
        match ev {
            Event::Text(t) => {
                out.write_all(t.as_bytes())?;
                out.flush()?;
                text.push_str(&t);
            }
            Event::Started { .. }
            | Event::Done { .. }
            | Event::Reasoning(_)
            | Event::ToolCall(_)
            | Event::Logprob(_)
            | Event::Progress(_) => {}
            Event::Failed(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Standard input's lines, read on a thread of their own; the channel closes at its end.
fn stdin_lines() -> Receiver<std::io::Result<String>> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let failed = line.is_err();
            if tx.send(line).is_err() || failed {
                return;
            }
        }
    });
    rx
}

/// An interactive chat on stdin with the model's chat template. The conversation's KV
/// stays in the slot's cache, so each turn evaluates only its new tokens. Ctrl-C during a
/// reply stops it (what it said stays in the conversation) and waits for the next line;
/// Ctrl-C while waiting for one, SIGTERM, or the end of stdin ends the chat.
fn chat(
    engine: &Engine,
    session: &mut Session<'_>,
    a: &GenerateArgs,
    template: Option<&str>,
    sampling: &SamplingParams,
    stop: &StopSignals,
    out: &mut dyn Write,
) -> Result<()> {
    let renderer = engine.chat_renderer(template)?;
    let counters = std::sync::Arc::new(GenerationCounters::default());
    let mut generator = Generator::new(session, counters);
    let mut history: Vec<serde_json::Value> = a
        .system
        .iter()
        .map(|s| serde_json::json!({"role": "system", "content": s}))
        .collect();
    // Lines are read on a thread of their own, so that while the user types, the warm start
    // reads in the experts past runs selected most (`crate::warm`), as a server does
    // between requests.
    let lines = stdin_lines();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let line = loop {
            if stop.any() {
                writeln!(out)?;
                break None;
            }
            match generator.wait_idle(&lines) {
                Ok(line) => break Some(line?),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break None,
            }
        };
        let Some(line) = line else {
            break;
        };
        // `lines()` took the line ending off.
        if line.is_empty() {
            continue;
        }
        history.push(serde_json::json!({"role": "user", "content": line}));
        let prompt = renderer.render(engine, &history, None, None)?;
        let tokens = engine.tokenize(&prompt, true, true);
        // The template's reasoning tags, where it writes reasoning blocks.
        let budget = match (
            a.chat_args.budget_tokens(),
            renderer.reasoning_tags(&prompt),
        ) {
            (Some(n), Some(tags)) => Some(engine.reasoning_budget(
                Some(n),
                &tags.open,
                &tags.close,
                &a.chat_args.reasoning_budget_message,
                tags.starts_open,
            )?),
            _ => None,
        };
        let reused_before = engine.stats().reused_prompt_tokens.get();
        let reply = run_job(
            &mut generator,
            |events| {
                Job::new(tokens.clone(), a.n_predict as u32, events)
                    .with_sampling(sampling.clone())
                    .with_stop(a.stop.clone())
                    .with_reasoning_budget(budget)
            },
            stop,
            out,
        )?;
        tracing::info!(
            "turn: {} prompt tokens, {} reused from the conversation so far",
            tokens.len(),
            engine.stats().reused_prompt_tokens.get() - reused_before
        );
        writeln!(out)?;
        if stop.terminated() {
            break;
        }
        if stop.take_ctrl_c() && reply.trim().is_empty() {
            // Stopped before it said anything: the turn did not happen.
            history.pop();
            continue;
        }
        history.push(serde_json::json!({
            "role": "assistant",
            "content": reply.trim().to_string(),
        }));
    }
    Ok(())
}
