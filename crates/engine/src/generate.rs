//! Generation on one sequence of a session: `generate`'s run and each `--chat` turn. The
//! text goes to a sink the caller gives; the stats record the timings.

use std::io::Write;
use std::time::Instant;

use epm_sys::proc::{self, Pid};

use crate::error::EngineError;
use crate::session::{Sampler, SamplingParams, Session};
use crate::SeqCache;

/// What to generate.
pub struct Request<'a> {
    /// The prompt's tokens (see [`crate::Engine::tokenize`]).
    pub prompt: &'a [i32],
    pub n_predict: usize,
    pub sampling: SamplingParams,
    /// Receives the f32 little-endian logits of every sampled position.
    pub logits: Option<&'a mut dyn Write>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the sequence's cache.
    pub reused_tokens: usize,
    pub generated: Vec<i32>,
}

/// Generate on sequence `seq` (whose cache is `cache`): prefill what the cache lacks,
/// then sample up to `n_predict` tokens, stopping at an end-of-generation token. Each
/// token's text goes to `text` as it is sampled. `cache` ends holding what the sequence's
/// KV holds (prompt and generated tokens but the last).
pub fn generate(
    session: &mut Session<'_>,
    seq: i32,
    cache: &mut SeqCache,
    mut req: Request<'_>,
    text: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<Outcome, EngineError> {
    let engine = session.engine();
    let stats = engine.stats().clone();
    if req.prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    let n_ctx = session.n_ctx_per_seq();
    if req.prompt.len() + req.n_predict > n_ctx as usize {
        return Err(EngineError::ContextTooSmall {
            prompt: req.prompt.len(),
            predict: req.n_predict,
            n_ctx,
        });
    }
    let t0 = Instant::now();
    let filled = session.prefill_reusing(seq, cache, req.prompt)?;
    stats.prefill_us.add(t0.elapsed().as_micros() as u64);

    let mut sampler = Sampler::new(req.sampling);
    let mut generated = Vec::new();
    let t1 = Instant::now();
    let decode_us_before = stats.decode_us.get();
    if stats.read_bytes_at_decode.get() == 0 {
        stats
            .read_bytes_at_decode
            .set(proc::read_bytes(Pid::This).unwrap_or(0).max(1));
    }
    if let Ok(mut ids) = stats.generated_ids.lock() {
        ids.clear();
    }
    let mut idx = filled.logits;
    let mut piece = Vec::new();
    let mut pos = req.prompt.len() as u32;
    loop {
        if let Some(w) = req.logits.as_mut() {
            for &x in session.logits(idx) {
                w.write_all(&x.to_le_bytes()).map_err(EngineError::Output)?;
            }
        }
        let token = session.sample(&mut sampler, idx);
        generated.push(token);
        if let Ok(mut ids) = stats.generated_ids.lock() {
            ids.push(token);
        }
        stats.generated_tokens.inc();
        if engine.is_eog(token) {
            break;
        }
        engine.output_piece(token, &mut piece);
        text(&piece).map_err(EngineError::Output)?;
        if generated.len() == req.n_predict {
            break; // the last token's logits would never be used
        }
        session.decode(&[crate::Step { seq, token, pos }])?;
        cache.tokens.push(token);
        pos += 1;
        idx = 0;
        stats.decode_steps.inc();
        stats
            .decode_us
            .set(decode_us_before + t1.elapsed().as_micros() as u64);
    }
    stats
        .decode_us
        .set(decode_us_before + t1.elapsed().as_micros() as u64);
    Ok(Outcome {
        prompt_tokens: req.prompt.len(),
        reused_tokens: filled.reused,
        generated,
    })
}
