//! How the next token is picked: the settings ([`SamplingParams`], checked by
//! [`SamplingParams::check`]) and the [`Sampler`] made from them. The sampler is llama.cpp's
//! own samplers in llama-server's order (logit bias, repetition penalties, DRY, top-n-sigma,
//! top-k, typical, top-p, min-p, XTC, (dynamic) temperature, then a seeded draw, or the
//! likeliest token at temperature 0; or temperature and Mirostat), so a request sampled here
//! picks what llama-server would pick from the same logits.

use std::sync::Arc;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;

use crate::generation::text::Utf8State;

/// Repetition penalties over the latest tokens, the prompt's included, as llama.cpp's
/// `penalties` sampler applies them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Penalties {
    /// How many of the latest tokens count (0: none).
    pub last_n: u32,
    /// A repeated token's logit is divided by this when positive and multiplied when
    /// negative (1: off).
    pub repeat: f32,
    /// Subtracted from a token's logit once per time it occurs in the window (0: off).
    pub frequency: f32,
    /// Subtracted from a token's logit once if it occurs in the window at all (0: off).
    pub presence: f32,
}

impl Penalties {
    /// llama.cpp's defaults: a window of 64 tokens and no penalty.
    pub const DEFAULT_LAST_N: u32 = 64;

    /// Whether these change no logit (llama.cpp's sampler then returns at once, so it is
    /// left out of the chain).
    pub fn is_off(&self) -> bool {
        self.last_n == 0 || (self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0)
    }

    /// A window as llama.cpp's settings give it (`repeat_last_n`): -1 is the whole
    /// context of `n_ctx` tokens, 0 none. A longer window holds no more tokens than the
    /// context, so it is the context's: llama.cpp allocates the window up front, and a
    /// client's `2147483647` must not become 8 GiB.
    pub fn window(last_n: i32, n_ctx: u32) -> Result<u32, SamplingError> {
        match last_n {
            -1 => Ok(n_ctx),
            n if n >= 0 => Ok((n as u32).min(n_ctx)),
            n => Err(SamplingError::Window(n)),
        }
    }
}

impl Default for Penalties {
    fn default() -> Penalties {
        Penalties {
            last_n: Penalties::DEFAULT_LAST_N,
            repeat: 1.0,
            frequency: 0.0,
            presence: 0.0,
        }
    }
}

/// DRY ("don't repeat yourself"): a penalty on a token that would extend a repeat of an
/// earlier sequence, growing with the repeat's length past `allowed_length`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dry {
    /// 0: off.
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: u32,
    /// How many of the latest tokens are searched for repeats.
    pub last_n: u32,
    /// Text that ends a repeat (a newline, `:` ...).
    pub sequence_breakers: Vec<String>,
}

impl Default for Dry {
    /// llama.cpp's defaults, off.
    fn default() -> Dry {
        Dry {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            last_n: 0,
            sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
        }
    }
}

/// Mirostat: sampling that steers the text's surprise towards `tau`, in place of the
/// truncating samplers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mirostat {
    Off,
    V1 { tau: f32, eta: f32 },
    V2 { tau: f32, eta: f32 },
}

/// A sampler whose place in the chain a request may choose (llama-server's `samplers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    Typical,
    TopP,
    MinP,
    Xtc,
    Temperature,
    /// llama.cpp's infill sampler (fill-in-the-middle clients put it last); in no default
    /// order.
    Infill,
}

impl Stage {
    /// llama-server's order.
    pub const DEFAULT_ORDER: [Stage; 9] = [
        Stage::Penalties,
        Stage::Dry,
        Stage::TopNSigma,
        Stage::TopK,
        Stage::Typical,
        Stage::TopP,
        Stage::MinP,
        Stage::Xtc,
        Stage::Temperature,
    ];

    /// A stage by one of llama.cpp's names for it, any case: the canonical ones (`top_k`,
    /// `typ_p` ...), with `-` for `_` or without it, `nucleus`, `temp` and `typ`. `None` for a
    /// name llama.cpp does not know, and for `adaptive_p`, not served here.
    pub fn from_name(name: &str) -> Option<Stage> {
        let name = name.to_ascii_lowercase().replace(['_', '-'], "");
        Some(match name.as_str() {
            "penalties" => Stage::Penalties,
            "dry" => Stage::Dry,
            "topnsigma" => Stage::TopNSigma,
            "topk" => Stage::TopK,
            "typp" | "typ" => Stage::Typical,
            "topp" | "nucleus" => Stage::TopP,
            "minp" => Stage::MinP,
            "xtc" => Stage::Xtc,
            "temperature" | "temp" => Stage::Temperature,
            "infill" => Stage::Infill,
            _ => return None,
        })
    }

    /// A stage by llama.cpp's one-letter code (`samplers` given as a string, `"edkypmxt"`).
    pub fn from_char(c: char) -> Option<Stage> {
        Some(match c {
            'e' => Stage::Penalties,
            'd' => Stage::Dry,
            's' => Stage::TopNSigma,
            'k' => Stage::TopK,
            'y' => Stage::Typical,
            'p' => Stage::TopP,
            'm' => Stage::MinP,
            'x' => Stage::Xtc,
            't' => Stage::Temperature,
            'i' => Stage::Infill,
            _ => return None,
        })
    }
}

/// `samplers`: names, or a string of one-letter codes.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum SamplerOrder {
    Names(Vec<String>),
    Codes(String),
}

impl SamplerOrder {
    /// The stages, in order; what llama.cpp would not recognize (or this build does not
    /// serve) is left out and named in the second list, as llama-server leaves it out with a
    /// warning.
    pub fn stages(&self) -> (Vec<Stage>, Vec<String>) {
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        match self {
            SamplerOrder::Names(names) => {
                for n in names {
                    match Stage::from_name(n) {
                        Some(s) => out.push(s),
                        None => unknown.push(n.clone()),
                    }
                }
            }
            SamplerOrder::Codes(codes) => {
                for c in codes.chars() {
                    match Stage::from_char(c) {
                        Some(s) => out.push(s),
                        None => unknown.push(c.to_string()),
                    }
                }
            }
        }
        (out, unknown)
    }
}

/// A bias added to one token's logit before any other sampler runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitBias {
    pub token: i32,
    /// `f32::NEG_INFINITY`: the token is never picked.
    pub bias: f32,
}

/// How to pick the next token.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 (or below) picks the likeliest token.
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches this
    /// (1.0: all).
    pub top_p: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: u32,
    /// Drop the tokens less likely than this share of the likeliest one's probability
    /// (0: none).
    pub min_p: f32,
    /// Locally typical sampling's mass (1: off).
    pub typical_p: f32,
    /// Keep the tokens within this many standard deviations of the top logit (0 or below:
    /// off).
    pub top_n_sigma: f32,
    /// XTC: with this probability, drop every token above `xtc_threshold` but the least
    /// likely of them (0: off).
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    /// Dynamic temperature: the temperature ranges over `temperature ± range` with the
    /// entropy (0: off), shaped by `dynatemp_exponent`.
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
    pub penalties: Penalties,
    pub dry: Dry,
    /// Where each of the samplers above goes in the chain (a stage left out is not applied;
    /// without `Temperature`, none is).
    pub order: Vec<Stage>,
    pub mirostat: Mirostat,
    pub logit_bias: Vec<LogitBias>,
    /// Never pick an end-of-generation token (generate `max_tokens` whatever the model
    /// says).
    pub ignore_eos: bool,
    pub seed: u32,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            penalties: Penalties::default(),
            dry: Dry::default(),
            order: Stage::DEFAULT_ORDER.to_vec(),
            mirostat: Mirostat::Off,
            logit_bias: Vec::new(),
            ignore_eos: false,
            seed: 42,
        }
    }
}

/// A sampling setting that llama.cpp's samplers would not handle; the names are the
/// settings' names in llama-server's API (the CLI's flags spell them with dashes).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("`{name}` is {value}: give a finite number")]
    NotFinite { name: &'static str, value: f32 },
    #[error("`repeat_last_n` {0} is out of range: use -1 (the whole context), 0 (off) or a number of tokens")]
    Window(i32),
    #[error("`logit_bias` names token {token}, outside the vocabulary of {n_vocab} tokens")]
    BiasToken { token: i64, n_vocab: usize },
    #[error("`logit_bias` gives token {token} a bias of {bias}: use a finite number, or false for never")]
    BiasValue { token: i32, bias: f32 },
    #[error("`{name}` {value} is out of range: use {range}")]
    Range {
        name: &'static str,
        value: f32,
        range: &'static str,
    },
    #[error("`dry_sequence_breakers` holds a NUL character: give text without it")]
    BreakerNul,
    #[error("`dry_penalty_last_n` {0} is out of range: use -1 (the whole context), 0 (off) or a number of tokens")]
    DryWindow(i32),
    #[error("`mirostat` {0} is not a version: use 0 (off), 1 or 2")]
    Mirostat(u8),
}

impl SamplingParams {
    /// Whether llama.cpp's samplers can take these settings for a vocabulary of `n_vocab`
    /// tokens. Protocols may narrow the ranges further (OpenAI's temperature is 0 to 2).
    pub fn check(&self, n_vocab: usize) -> Result<(), SamplingError> {
        let finite = |name: &'static str, value: f32| {
            if value.is_finite() {
                Ok(())
            } else {
                Err(SamplingError::NotFinite { name, value })
            }
        };
        for (name, value) in [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
            ("top_n_sigma", self.top_n_sigma),
            ("xtc_probability", self.xtc_probability),
            ("xtc_threshold", self.xtc_threshold),
            ("dynatemp_range", self.dynatemp_range),
            ("dynatemp_exponent", self.dynatemp_exponent),
            ("repeat_penalty", self.penalties.repeat),
            ("frequency_penalty", self.penalties.frequency),
            ("presence_penalty", self.penalties.presence),
            ("dry_multiplier", self.dry.multiplier),
            ("dry_base", self.dry.base),
        ] {
            finite(name, value)?;
        }
        let range = |name, value: f32, ok: bool, range| {
            if ok {
                Ok(())
            } else {
                Err(SamplingError::Range { name, value, range })
            }
        };
        let unit = |name, v: f32| range(name, v, (0.0..=1.0).contains(&v), "0 to 1");
        unit("xtc_probability", self.xtc_probability)?;
        unit("xtc_threshold", self.xtc_threshold)?;
        unit("min_p", self.min_p)?;
        range(
            "top_p",
            self.top_p,
            self.top_p > 0.0 && self.top_p <= 1.0,
            "a value above 0 and at most 1",
        )?;
        range(
            "repeat_penalty",
            self.penalties.repeat,
            self.penalties.repeat > 0.0,
            "a value above 0 (1 is off)",
        )?;
        range(
            "typical_p",
            self.typical_p,
            self.typical_p > 0.0 && self.typical_p <= 1.0,
            "a value above 0 and at most 1 (1 is off)",
        )?;
        range(
            "dynatemp_range",
            self.dynatemp_range,
            self.dynatemp_range >= 0.0,
            "0 (off) or more",
        )?;
        range(
            "dry_multiplier",
            self.dry.multiplier,
            self.dry.multiplier >= 0.0,
            "0 (off) or more",
        )?;
        if let Mirostat::V1 { tau, eta } | Mirostat::V2 { tau, eta } = self.mirostat {
            range(
                "mirostat_tau",
                tau,
                tau.is_finite() && tau > 0.0,
                "a value above 0",
            )?;
            range(
                "mirostat_eta",
                eta,
                eta.is_finite() && eta > 0.0,
                "a value above 0",
            )?;
        }
        if self.dry.sequence_breakers.iter().any(|b| b.contains('\0')) {
            return Err(SamplingError::BreakerNul);
        }
        for b in &self.logit_bias {
            if b.token < 0 || b.token as usize >= n_vocab {
                return Err(SamplingError::BiasToken {
                    token: b.token.into(),
                    n_vocab,
                });
            }
            if b.bias.is_nan() || b.bias == f32::INFINITY {
                return Err(SamplingError::BiasValue {
                    token: b.token,
                    bias: b.bias,
                });
            }
        }
        Ok(())
    }
}

/// The sampling settings beyond temperature, top-p, top-k, the seed and the logit bias, by
/// llama-server's names (which Ollama's `options` share; `generate`'s flags fill the same):
/// each optional, llama.cpp's default when left out.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Extras {
    pub min_p: Option<f32>,
    pub typical_p: Option<f32>,
    pub top_n_sigma: Option<f32>,
    pub xtc_probability: Option<f32>,
    pub xtc_threshold: Option<f32>,
    pub dynatemp_range: Option<f32>,
    pub dynatemp_exponent: Option<f32>,
    pub repeat_penalty: Option<f32>,
    /// The repetition window: -1 is the whole context, 0 none (default 64).
    pub repeat_last_n: Option<i32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub dry_multiplier: Option<f32>,
    pub dry_base: Option<f32>,
    pub dry_allowed_length: Option<u32>,
    /// DRY's window: -1 (the default) is the whole context, 0 none.
    pub dry_penalty_last_n: Option<i32>,
    pub dry_sequence_breakers: Option<Vec<String>>,
    /// 0 (off), 1 or 2.
    pub mirostat: Option<u8>,
    pub mirostat_tau: Option<f32>,
    pub mirostat_eta: Option<f32>,
    pub ignore_eos: Option<bool>,
    /// The chain's order (llama-server's `samplers`).
    pub samplers: Option<SamplerOrder>,
}

impl Extras {
    /// `params` with these settings applied, for a context of `n_ctx` tokens.
    pub fn apply(
        &self,
        mut p: SamplingParams,
        n_ctx: u32,
    ) -> Result<SamplingParams, SamplingError> {
        let d = SamplingParams::default();
        p.min_p = self.min_p.unwrap_or(d.min_p);
        p.typical_p = self.typical_p.unwrap_or(d.typical_p);
        p.top_n_sigma = self.top_n_sigma.unwrap_or(d.top_n_sigma);
        p.xtc_probability = self.xtc_probability.unwrap_or(d.xtc_probability);
        p.xtc_threshold = self.xtc_threshold.unwrap_or(d.xtc_threshold);
        p.dynatemp_range = self.dynatemp_range.unwrap_or(d.dynatemp_range);
        p.dynatemp_exponent = self.dynatemp_exponent.unwrap_or(d.dynatemp_exponent);
        p.penalties = Penalties {
            last_n: match self.repeat_last_n {
                Some(n) => Penalties::window(n, n_ctx)?,
                None => Penalties::DEFAULT_LAST_N,
            },
            repeat: self.repeat_penalty.unwrap_or(d.penalties.repeat),
            frequency: self.frequency_penalty.unwrap_or(d.penalties.frequency),
            presence: self.presence_penalty.unwrap_or(d.penalties.presence),
        };
        let dry = Dry::default();
        p.dry = Dry {
            multiplier: self.dry_multiplier.unwrap_or(dry.multiplier),
            base: self.dry_base.unwrap_or(dry.base),
            allowed_length: self.dry_allowed_length.unwrap_or(dry.allowed_length),
            last_n: Penalties::window(self.dry_penalty_last_n.unwrap_or(-1), n_ctx)
                .map_err(|_| SamplingError::DryWindow(self.dry_penalty_last_n.unwrap_or(-1)))?,
            sequence_breakers: self
                .dry_sequence_breakers
                .clone()
                .unwrap_or(dry.sequence_breakers),
        };
        let (tau, eta) = (
            self.mirostat_tau.unwrap_or(5.0),
            self.mirostat_eta.unwrap_or(0.1),
        );
        p.mirostat = match self.mirostat.unwrap_or(0) {
            0 => Mirostat::Off,
            1 => Mirostat::V1 { tau, eta },
            2 => Mirostat::V2 { tau, eta },
            v => return Err(SamplingError::Mirostat(v)),
        };
        p.ignore_eos = self.ignore_eos.unwrap_or(false);
        if let Some(order) = &self.samplers {
            let (stages, unknown) = order.stages();
            if !unknown.is_empty() {
                tracing::warn!(
                    "`samplers` names {unknown:?}, which llama.cpp does not know or this build does not serve; left out"
                );
            }
            p.order = stages;
        }
        Ok(p)
    }
}

/// What one pick must respect besides the sampler's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The token to force: every other token's logit is taken as -inf first (a reasoning
    /// budget's close), unless the grammar refuses it.
    pub forced: Option<i32>,
    /// Whether the sampler's grammar constrains this pick and sees its token. Not while a
    /// reply is still inside the reasoning block its prompt opened: a constraint is for the
    /// answer, and starts at the block's close.
    pub constrained: bool,
    /// A token the pick may take outside the grammar when the unconstrained chain picks it:
    /// the reasoning block's opening at a constrained reply's first pick, so that a model
    /// whose template leaves the opening to it can still reason before its answer. The
    /// grammar does not see that token.
    pub free: Option<i32>,
}

/// What one pick took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    pub token: i32,
    /// The token is [`Pick::free`], taken outside the grammar, which refused it (and did
    /// not see it).
    pub free: bool,
}

/// A token sampler (the chain of [`SamplingParams`]), and a grammar when constrained
/// ([`Engine::sampler`](crate::Engine::sampler) makes them).
pub struct Sampler {
    chain: LlamaSampler,
    /// The longest window of the chain's samplers that read the history (penalties, DRY),
    /// when there are any: the prompt's last tokens are counted in it before the first pick.
    history_window: Option<u32>,
    grammar: Option<Grammar>,
}

/// A grammar sampler, with where its output stands in UTF-8 and every token's bytes.
struct Grammar {
    sampler: LlamaSampler,
    utf8: Utf8State,
    pieces: Arc<Vec<Vec<u8>>>,
}

impl Sampler {
    /// `p` must have passed [`SamplingParams::check`] for `model`'s vocabulary; `eog` are
    /// its end-of-generation tokens (banned under `ignore_eos`); `grammar` comes with the
    /// bytes of every token of the vocabulary.
    pub(crate) fn new(
        p: &SamplingParams,
        model: &LlamaModel,
        eog: &[i32],
        grammar: Option<(LlamaSampler, Arc<Vec<Vec<u8>>>)>,
    ) -> Sampler {
        let n_vocab = model.n_vocab();
        let grammar = grammar.map(|(sampler, pieces)| Grammar {
            sampler,
            utf8: Utf8State::default(),
            pieces,
        });
        let mut chain = Vec::new();
        let mut biases: Vec<LlamaLogitBias> = p
            .logit_bias
            .iter()
            .map(|b| LlamaLogitBias::new(LlamaToken(b.token), b.bias))
            .collect();
        if p.ignore_eos {
            biases.extend(
                eog.iter()
                    .map(|&t| LlamaLogitBias::new(LlamaToken(t), f32::NEG_INFINITY)),
            );
        }
        if !biases.is_empty() {
            chain.push(LlamaSampler::logit_bias(n_vocab, &biases));
        }
        let window = |n: u32| n.min(i32::MAX as u32) as i32;
        let mut history_window = None;
        match p.mirostat {
            Mirostat::Off => {
                let mut selected = false;
                for stage in &p.order {
                    match stage {
                        Stage::Penalties if !p.penalties.is_off() => {
                            history_window = history_window.max(Some(p.penalties.last_n));
                            chain.push(LlamaSampler::penalties(
                                n_vocab,
                                window(p.penalties.last_n),
                                p.penalties.repeat,
                                p.penalties.frequency,
                                p.penalties.presence,
                            ));
                        }
                        Stage::Dry if p.dry.multiplier > 0.0 && p.dry.last_n > 0 => {
                            history_window = history_window.max(Some(p.dry.last_n));
                            chain.push(LlamaSampler::dry(
                                model,
                                p.dry.multiplier,
                                p.dry.base,
                                window(p.dry.allowed_length),
                                window(p.dry.last_n),
                                &p.dry.sequence_breakers,
                            ));
                        }
                        Stage::TopNSigma if p.top_n_sigma > 0.0 => {
                            chain.push(LlamaSampler::top_n_sigma(p.top_n_sigma));
                        }
                        Stage::TopK if p.top_k > 0 => {
                            chain.push(LlamaSampler::top_k(window(p.top_k)));
                        }
                        Stage::Typical if p.typical_p < 1.0 => {
                            chain.push(LlamaSampler::typical(p.typical_p, 1));
                        }
                        Stage::TopP if p.top_p < 1.0 => {
                            chain.push(LlamaSampler::top_p(p.top_p, 1));
                        }
                        Stage::MinP if p.min_p > 0.0 => {
                            chain.push(LlamaSampler::min_p(p.min_p, 1));
                        }
                        Stage::Xtc if p.xtc_probability > 0.0 => {
                            chain.push(LlamaSampler::xtc(
                                p.xtc_probability,
                                p.xtc_threshold,
                                1,
                                p.seed,
                            ));
                        }
                        Stage::Temperature if p.temperature <= 0.0 && p.dynatemp_range <= 0.0 => {
                            // What llama-server's temperature 0 leaves: the likeliest token,
                            // which no later stage can change.
                            chain.push(LlamaSampler::greedy());
                            selected = true;
                            break;
                        }
                        Stage::Infill => chain.push(LlamaSampler::infill(model)),
                        Stage::Temperature => {
                            chain.push(LlamaSampler::temp_ext(
                                p.temperature,
                                p.dynatemp_range,
                                p.dynatemp_exponent,
                            ));
                        }
                        _ => {}
                    }
                }
                if !selected {
                    chain.push(LlamaSampler::dist(p.seed));
                }
            }
            Mirostat::V1 { tau, eta } => {
                chain.push(LlamaSampler::temp(p.temperature));
                // 100: the tokens llama.cpp's own callers estimate `s_hat` from.
                chain.push(LlamaSampler::mirostat(n_vocab, p.seed, tau, eta, 100));
            }
            Mirostat::V2 { tau, eta } => {
                chain.push(LlamaSampler::temp(p.temperature));
                chain.push(LlamaSampler::mirostat_v2(p.seed, tau, eta));
            }
        }
        Sampler {
            chain: LlamaSampler::chain_simple(chain),
            history_window,
            grammar,
        }
    }

    /// Count the tokens before the first pick (the prompt) in the penalties' and DRY's
    /// windows, as llama-server does; the grammar does not see them.
    pub(crate) fn accept_history(&mut self, history: &[i32]) {
        let Some(window) = self.history_window else {
            return;
        };
        let from = history.len().saturating_sub(window as usize);
        for &t in &history[from..] {
            self.chain.accept(LlamaToken(t));
        }
    }

    /// Pick the token for the logits at `index` of `ctx`, and accept it. A forced token (a
    /// reasoning budget's close) takes every other token's logit as -inf before the chain
    /// runs, as llama.cpp's `reasoning-budget` sampler does, so the chain's state (its
    /// random draws, the penalties' history) moves as it would for any pick; a grammar that
    /// refuses the forced token wins, and the pick is then the grammar's. An unconstrained
    /// pick leaves the grammar out, and the grammar does not see its token.
    pub(crate) fn sample(&mut self, ctx: &LlamaContext<'_>, index: i32, pick: Pick) -> Picked {
        let grammar_applies = self.grammar.is_some() && pick.constrained;
        if !grammar_applies && pick.forced.is_none() {
            return Picked {
                token: self.chain.sample(ctx, index).0,
                free: false,
            };
        }
        self.sample_logits(ctx.get_logits_ith(index), pick)
    }

    /// Sample from `logits` with a forced token, or under the grammar. Under the grammar
    /// the token the unconstrained chain picks is checked first and kept when the grammar
    /// allows it (for greedy sampling that is the grammar's own choice); only otherwise is
    /// the grammar run over the whole vocabulary, which costs a pass of its matcher per
    /// token; the chain's pick is also kept when the grammar refuses it but it is
    /// `pick.free`. The chain and the grammar (unless the token was taken free) then
    /// accept the token.
    fn sample_logits(&mut self, logits: &[f32], pick: Pick) -> Picked {
        let mut grammar = self.grammar.as_mut().filter(|_| pick.constrained);
        let logit = |t: LlamaToken| {
            logits
                .get(t.0 as usize)
                .copied()
                .unwrap_or(f32::NEG_INFINITY)
        };
        let candidates = |only: Option<LlamaToken>| {
            LlamaTokenDataArray::from_iter(
                logits.iter().enumerate().map(|(i, &l)| {
                    let t = LlamaToken(i as i32);
                    let l = match only {
                        Some(f) if f != t => f32::NEG_INFINITY,
                        _ => l,
                    };
                    LlamaTokenData::new(t, l, 0.0)
                }),
                false,
            )
        };
        let forced = pick
            .forced
            .map(LlamaToken)
            .filter(|&f| usize::try_from(f.0).is_ok_and(|i| i < logits.len()))
            .filter(|&f| grammar.as_mut().is_none_or(|g| g.allows(f, logit(f))));
        let mut taken_free = false;
        let token = match (forced, grammar.as_mut()) {
            (Some(f), _) => {
                let mut only = candidates(Some(f));
                only.apply_sampler(&mut self.chain);
                only.selected_token().unwrap_or(f)
            }
            // A forced token outside the vocabulary: an ordinary pick.
            (None, None) => {
                let mut all = candidates(None);
                all.apply_sampler(&mut self.chain);
                all.selected_token().unwrap_or(LlamaToken(0))
            }
            (None, Some(g)) => {
                let mut all = candidates(None);
                all.apply_sampler(&mut self.chain);
                match all.selected_token() {
                    Some(t) if g.allows(t, logit(t)) => t,
                    Some(t) if pick.free == Some(t.0) => {
                        taken_free = true;
                        t
                    }
                    _ => {
                        let mut all = candidates(None);
                        for c in all.data.iter_mut() {
                            if g.utf8_after(c.id()).is_none() {
                                c.set_logit(f32::NEG_INFINITY);
                            }
                        }
                        all.apply_sampler(&mut g.sampler);
                        all.apply_sampler(&mut self.chain);
                        all.selected_token().unwrap_or(LlamaToken(0))
                    }
                }
            }
        };
        if let Some(g) = grammar.filter(|_| !taken_free) {
            g.utf8 = g.utf8_after(token).unwrap_or_default();
            g.sampler.accept(token);
        }
        self.chain.accept(token);
        Picked {
            token: token.0,
            free: taken_free,
        }
    }
}

impl Grammar {
    /// Where the output stands in UTF-8 after `t` (`None`: `t` would make it invalid).
    fn utf8_after(&self, t: LlamaToken) -> Option<Utf8State> {
        let bytes = self.pieces.get(t.0 as usize).map_or(&[][..], Vec::as_slice);
        self.utf8.advance(bytes)
    }

    /// Whether the grammar lets `t` (whose logit is `logit`) come next.
    fn allows(&mut self, t: LlamaToken, logit: f32) -> bool {
        let mut one = LlamaTokenDataArray::new(vec![LlamaTokenData::new(t, logit, 0.0)], false);
        one.apply_sampler(&mut self.sampler);
        one.data[0].logit() > f32::NEG_INFINITY && self.utf8_after(t).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_the_check_and_penalize_nothing() {
        let p = SamplingParams::default();
        assert_eq!(p.check(10), Ok(()));
        assert!(p.penalties.is_off());
    }

    #[test]
    fn penalties_are_off_when_neutral_or_without_a_window() {
        let on = Penalties {
            presence: 0.5,
            ..Penalties::default()
        };
        assert!(!on.is_off());
        assert!(Penalties { last_n: 0, ..on }.is_off());
        assert!(!Penalties {
            repeat: 1.1,
            ..Penalties::default()
        }
        .is_off());
        assert!(!Penalties {
            frequency: -0.5,
            ..Penalties::default()
        }
        .is_off());
    }

    #[test]
    fn the_window_takes_the_context_for_minus_one() {
        assert_eq!(Penalties::window(-1, 4096), Ok(4096));
        assert_eq!(Penalties::window(0, 4096), Ok(0));
        assert_eq!(Penalties::window(64, 4096), Ok(64));
        assert_eq!(Penalties::window(i32::MAX, 4096), Ok(4096));
        assert_eq!(Penalties::window(-2, 4096), Err(SamplingError::Window(-2)));
    }

    #[test]
    fn extras_left_out_keep_llama_cpps_defaults_and_windows_take_the_context() {
        let base = SamplingParams::default();
        let none = Extras::default().apply(base.clone(), 4096).unwrap();
        assert_eq!(
            none,
            SamplingParams {
                dry: Dry {
                    last_n: 4096,
                    ..Dry::default()
                },
                ..base.clone()
            }
        );
        let some = Extras {
            mirostat: Some(2),
            mirostat_tau: Some(3.0),
            repeat_last_n: Some(-1),
            dry_penalty_last_n: Some(10_000),
            ignore_eos: Some(true),
            ..Extras::default()
        }
        .apply(base.clone(), 512)
        .unwrap();
        assert_eq!(some.mirostat, Mirostat::V2 { tau: 3.0, eta: 0.1 });
        assert_eq!((some.penalties.last_n, some.dry.last_n), (512, 512));
        assert!(some.ignore_eos);
        let bad = |x: Extras| x.apply(base.clone(), 512).unwrap_err();
        assert_eq!(
            bad(Extras {
                mirostat: Some(3),
                ..Extras::default()
            }),
            SamplingError::Mirostat(3)
        );
        assert_eq!(
            bad(Extras {
                dry_penalty_last_n: Some(-2),
                ..Extras::default()
            }),
            SamplingError::DryWindow(-2)
        );
    }

    #[test]
    fn sampler_orders_read_llama_cpps_names_and_letters() {
        let names = SamplerOrder::Names(
            [
                "Top-K",
                "nucleus",
                "typ",
                "typ_p",
                "temp",
                "topnsigma",
                "tfs_z",
                "infill",
            ]
            .map(String::from)
            .to_vec(),
        );
        assert_eq!(
            names.stages(),
            (
                vec![
                    Stage::TopK,
                    Stage::TopP,
                    Stage::Typical,
                    Stage::Typical,
                    Stage::Temperature,
                    Stage::TopNSigma,
                    Stage::Infill
                ],
                vec!["tfs_z".to_string()]
            )
        );
        let codes = SamplerOrder::Codes("edskypmxtz".into());
        let (stages, unknown) = codes.stages();
        assert_eq!(stages, Stage::DEFAULT_ORDER.to_vec());
        assert_eq!(unknown, vec!["z".to_string()]);
    }

    #[test]
    fn the_check_names_the_setting_at_fault() {
        let base = SamplingParams::default();
        let bad = |p: SamplingParams| p.check(100).unwrap_err().to_string();
        assert!(bad(SamplingParams {
            top_p: 0.0,
            ..base.clone()
        })
        .starts_with("`top_p` 0 is out of range"));
        assert!(bad(SamplingParams {
            min_p: 1.5,
            ..base.clone()
        })
        .starts_with("`min_p` 1.5"));
        assert!(bad(SamplingParams {
            penalties: Penalties {
                repeat: 0.0,
                ..Penalties::default()
            },
            ..base.clone()
        })
        .starts_with("`repeat_penalty` 0"));
        assert!(bad(SamplingParams {
            penalties: Penalties {
                presence: f32::NAN,
                ..Penalties::default()
            },
            ..base.clone()
        })
        .starts_with("`presence_penalty` is NaN"));
        let bias = |token, bias| SamplingParams {
            logit_bias: vec![LogitBias { token, bias }],
            ..base.clone()
        };
        assert_eq!(
            bias(100, 1.0).check(100),
            Err(SamplingError::BiasToken {
                token: 100,
                n_vocab: 100
            })
        );
        assert!(bias(-1, 1.0).check(100).is_err());
        assert!(bias(3, f32::INFINITY).check(100).is_err());
        assert!(bias(3, f32::NAN).check(100).is_err());
        assert_eq!(bias(99, f32::NEG_INFINITY).check(100), Ok(()));
        assert_eq!(bias(0, -100.0).check(100), Ok(()));
    }
}
