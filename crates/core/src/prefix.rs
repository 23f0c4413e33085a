//! Prefix reuse that never changes an output: how a prompt is split into ubatches, and
//! which part of a sequence's KV cache a new prompt may keep.
//!
//! llama.cpp's CPU kernels compute a ubatch with routines chosen by its shape: a ubatch of
//! one token runs ggml's `vec_dot` where a longer one runs tinyBLAS's `sgemm`; flash
//! attention tiles ubatches of 64 tokens or more; and `mul_mat_id` runs an expert through
//! the tiled K-quant kernel only when at least 8 of the ubatch's tokens chose it. The
//! routines round differently, so a token's KV depends on the ubatch it was evaluated in,
//! down to which other tokens shared it. Reusing exactly the KV a cold run would compute
//! therefore means keeping only whole ubatches of the very split a cold run makes, evaluated
//! as prefill (never tokens decoded one at a time), and short of the prompt's end (its last
//! token's logits are needed). The rest is evaluated from that boundary, split as the cold
//! run splits it.
//!
//! The split ([`PromptSplit`]) is a function of the prompt's tokens alone, and *prefix
//! stable*: where it puts a boundary depends only on the tokens before it, so a prompt
//! that extends another is split as that one was up to where they part. Two kinds:
//!
//! - [`PromptCuts::Grid`]: ubatches of `n_ubatch` from position 0, as upstream splits a
//!   prompt; a later prompt re-evaluates up to a ubatch less one of what it shares.
//! - [`PromptCuts::Turns`]: the prompt is also cut after an end-of-turn token (the chat
//!   template's `<|im_end|>`, `<|eot_id|>`, ...) once the piece since the last cut holds
//!   [`TURN_PIECE_MIN_TOKENS`], and each piece is split into ubatches of `n_ubatch` from its
//!   start. A conversation's messages then end on ubatch boundaries, and a request that
//!   shares a system prompt or the earlier turns of a conversation keeps all of them: it
//!   evaluates only its new messages (and the last piece, when that is still short). The
//!   cost is at most one more, shorter, ubatch per piece in a cold prefill.
//!
//! Either way the output equals upstream llama.cpp's given the same ubatches, and a request
//! gives the same output whatever the cache held before it.

use std::sync::Arc;

/// Where a prompt may be cut besides every `n_ubatch` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptCuts {
    /// Ubatches of `n_ubatch` from position 0 only: upstream's split.
    #[default]
    Grid,
    /// Also after an end-of-turn token, once the piece holds [`TURN_PIECE_MIN_TOKENS`].
    Turns,
}

/// A piece shorter than this is not cut at an end-of-turn token: every prompt ubatch reads
/// most of each layer's experts at a small budget, and many short messages cut one by one
/// would each cost such a ubatch in a cold prefill. It is also the most a later request
/// re-evaluates of a conversation it extends, besides its new messages.
pub const TURN_PIECE_MIN_TOKENS: usize = 256;

/// How prompts are split into ubatches ([module docs](self)).
///
/// Invariants:
/// 1. `n_ubatch >= 1`;
/// 2. `cut_after` is sorted and holds no duplicates (it is searched by bisection);
/// 3. [`boundaries`](Self::boundaries) is prefix stable: the boundaries of `p[..k]` are
///    those of `p` that are `<= k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSplit {
    n_ubatch: usize,
    cut_after: Arc<[i32]>,
    min_piece: usize,
}

impl PromptSplit {
    /// Upstream's split: ubatches of `n_ubatch` (at least 1) from position 0.
    pub fn grid(n_ubatch: usize) -> PromptSplit {
        PromptSplit {
            n_ubatch: n_ubatch.max(1),
            cut_after: Arc::from(Vec::new()),
            min_piece: 0,
        }
    }

    /// The split `cuts` asks for, where `end_of_turn` lists the tokens a turn ends with (the
    /// vocabulary's end-of-generation tokens, and message ends such as harmony's `<|end|>`);
    /// with none, the grid.
    pub fn new(n_ubatch: usize, cuts: PromptCuts, end_of_turn: &[i32]) -> PromptSplit {
        let mut s = PromptSplit::grid(n_ubatch);
        if cuts == PromptCuts::Turns {
            let mut tokens = end_of_turn.to_vec();
            tokens.sort_unstable();
            tokens.dedup();
            s.cut_after = Arc::from(tokens);
            s.min_piece = TURN_PIECE_MIN_TOKENS;
        }
        s
    }

    pub fn n_ubatch(&self) -> usize {
        self.n_ubatch
    }

    /// Whether any prompt can be cut elsewhere than every `n_ubatch` tokens.
    pub fn cuts_at_turns(&self) -> bool {
        !self.cut_after.is_empty()
    }

    /// The positions in `1..=prompt.len()` where a ubatch of a cold prefill ends and any
    /// prompt that starts with `prompt` starts a new one, ascending. The prompt's own end
    /// is among them only when a ubatch ends there whatever follows.
    pub fn boundaries(&self, prompt: &[i32]) -> Vec<usize> {
        let mut out = Vec::with_capacity(prompt.len() / self.n_ubatch + 4);
        let (mut piece_start, mut ubatch_start) = (0, 0);
        for (i, t) in prompt.iter().enumerate() {
            let end = i + 1;
            let cut =
                end - piece_start >= self.min_piece && self.cut_after.binary_search(t).is_ok();
            if cut {
                piece_start = end;
            }
            if cut || end - ubatch_start == self.n_ubatch {
                ubatch_start = end;
                out.push(end);
            }
        }
        out
    }

    /// The ubatches a prefill of `prompt` from `start` (one of its boundaries, or 0)
    /// evaluates, as ranges of positions: exactly those of a cold prefill past `start`.
    pub fn ubatches_from(&self, prompt: &[i32], start: usize) -> Vec<std::ops::Range<usize>> {
        let mut at = start;
        let mut out = Vec::new();
        for b in self.boundaries(prompt).into_iter().filter(|&b| b > start) {
            out.push(at..b);
            at = b;
        }
        if at < prompt.len() {
            out.push(at..prompt.len());
        }
        out
    }
}

/// What a sequence's KV cache holds.
///
/// Invariants:
/// 1. `tokens` are the tokens whose KV the sequence holds, at positions `0..tokens.len()`;
/// 2. `exact <= tokens.len()`, and positions `0..exact` were evaluated by prefill in the
///    ubatches a cold prefill of those tokens makes with the session's split, `exact` being
///    one of the split's boundaries (or 0): their KV is what such a prefill computes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqCache {
    pub tokens: Vec<i32>,
    pub exact: usize,
}

/// How many leading tokens `a` and `b` have in common.
pub fn shared_prefix_len(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many leading tokens of `prompt` may keep their KV from `cache`, with the session's
/// split and batch size: the last boundary of the prompt's split within the part both share
/// exactly. 0 when batches do not split on ubatch boundaries.
pub fn reusable_prefix(
    cache: &SeqCache,
    prompt: &[i32],
    split: &PromptSplit,
    n_batch: usize,
) -> usize {
    if n_batch % split.n_ubatch() != 0 || prompt.is_empty() {
        return 0;
    }
    let common = shared_prefix_len(&cache.tokens, prompt);
    let limit = common.min(cache.exact).min(prompt.len() - 1);
    split
        .boundaries(&prompt[..limit])
        .last()
        .copied()
        .unwrap_or(0)
}

/// The cache after `prompt` was prefilled from one of its boundaries: exact up to its last
/// boundary; a partial last ubatch is not (a longer prompt's cold run evaluates those
/// positions in a longer ubatch).
pub fn after_prefill(prompt: &[i32], split: &PromptSplit) -> SeqCache {
    SeqCache {
        tokens: prompt.to_vec(),
        exact: split.boundaries(prompt).last().copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EOT: i32 = -7;

    fn cache(tokens: std::ops::Range<i32>, exact: usize) -> SeqCache {
        SeqCache {
            tokens: tokens.collect(),
            exact,
        }
    }

    fn grid(n: usize) -> PromptSplit {
        PromptSplit::grid(n)
    }

    fn turns(n: usize) -> PromptSplit {
        PromptSplit::new(n, PromptCuts::Turns, &[EOT, 3, EOT])
    }

    /// A prompt of `len` ordinary tokens with end-of-turn tokens at `eots`.
    fn with_eots(len: usize, eots: &[usize]) -> Vec<i32> {
        (0..len)
            .map(|i| {
                if eots.contains(&i) {
                    EOT
                } else {
                    1000 + i as i32
                }
            })
            .collect()
    }

    #[test]
    fn keeps_whole_prefill_ubatches_only() {
        let prompt: Vec<i32> = (0..300).collect();
        // 300 cached tokens, 256 of them exact (two whole ubatches of 128).
        let c = after_prefill(&prompt, &grid(128));
        assert_eq!(c.exact, 256);
        // The same prompt again: two ubatches kept, the last 44 tokens evaluated again.
        assert_eq!(reusable_prefix(&c, &prompt, &grid(128), 512), 256);
        // A prompt that diverges at 200 keeps one ubatch.
        let mut other = prompt.clone();
        other[200] = -1;
        assert_eq!(reusable_prefix(&c, &other, &grid(128), 512), 128);
        // Decoded tokens after the prompt never count.
        let mut grown = c.clone();
        grown.tokens.extend(300..400);
        let longer: Vec<i32> = (0..500).collect();
        assert_eq!(reusable_prefix(&grown, &longer, &grid(128), 512), 256);
    }

    #[test]
    fn keeps_nothing_when_it_cannot_be_exact() {
        let g = grid(128);
        // Shorter than one ubatch; and the whole cache equal to the prompt still leaves the
        // last token to evaluate.
        let p100: Vec<i32> = (0..100).collect();
        assert_eq!(reusable_prefix(&cache(0..100, 0), &p100, &g, 512), 0);
        let p128: Vec<i32> = (0..128).collect();
        assert_eq!(reusable_prefix(&cache(0..128, 128), &p128, &g, 512), 0);
        let p129: Vec<i32> = (0..129).collect();
        assert_eq!(reusable_prefix(&cache(0..128, 128), &p129, &g, 512), 128);
        // Batches that do not split on ubatch boundaries.
        let p1000: Vec<i32> = (0..1000).collect();
        assert_eq!(reusable_prefix(&cache(0..1000, 896), &p1000, &g, 300), 0);
        assert_eq!(reusable_prefix(&SeqCache::default(), &[], &g, 512), 0);
    }

    #[test]
    fn the_grid_is_upstreams_split() {
        let p: Vec<i32> = (0..300).collect();
        assert_eq!(grid(128).boundaries(&p), vec![128, 256]);
        assert_eq!(
            grid(128).ubatches_from(&p, 0),
            vec![0..128, 128..256, 256..300]
        );
        assert_eq!(grid(128).ubatches_from(&p, 256), vec![256..300]);
        // End-of-turn tokens change nothing on the grid, nor without any such token.
        let e = with_eots(300, &[10, 140, 299]);
        assert_eq!(grid(128).boundaries(&e), vec![128, 256]);
        assert_eq!(
            PromptSplit::new(128, PromptCuts::Turns, &[]).boundaries(&e),
            vec![128, 256]
        );
        assert!(!PromptSplit::new(128, PromptCuts::Turns, &[]).cuts_at_turns());
        assert!(turns(128).cuts_at_turns());
    }

    #[test]
    fn turns_cut_after_an_end_of_turn_once_the_piece_is_long_enough() {
        let m = TURN_PIECE_MIN_TOKENS;
        // An end of turn too early in the piece is no cut; the first one at or past the
        // minimum is, and ubatches count from it.
        let p = with_eots(2 * m + 150, &[10, m + 19, m + 40, 2 * m + 100]);
        let b = turns(128).boundaries(&p);
        assert_eq!(b, vec![128, 256, m + 20, m + 148, m + 276, 2 * m + 101]);
        assert_eq!(
            turns(128).ubatches_from(&p, m + 20).first(),
            Some(&(m + 20..m + 148))
        );
        // A cut that falls on a full ubatch is one boundary.
        let q = with_eots(600, &[255]);
        assert_eq!(turns(128).boundaries(&q), vec![128, 256, 384, 512]);
    }

    #[test]
    fn every_split_is_prefix_stable() {
        // Invariant 3, over pseudo-random prompts with end-of-turn tokens here and there.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..40 {
            let len = 50 + (next() % 1500) as usize;
            let p: Vec<i32> = (0..len)
                .map(|_| {
                    if next() % 40 == 0 {
                        EOT
                    } else {
                        (next() % 50) as i32 + 10
                    }
                })
                .collect();
            let n_ubatch = [1, 7, 64, 128, 512][round % 5];
            for split in [grid(n_ubatch), turns(n_ubatch)] {
                let all = split.boundaries(&p);
                assert!(all.windows(2).all(|w| w[0] < w[1]));
                assert!(all.iter().all(|&b| b >= 1 && b <= len));
                for k in (0..=len).step_by(7) {
                    let head: Vec<usize> = all.iter().copied().filter(|&b| b <= k).collect();
                    assert_eq!(split.boundaries(&p[..k]), head, "{split:?} at {k}");
                }
                // Ubatches are never longer than n_ubatch and tile the prompt.
                let u = split.ubatches_from(&p, 0);
                assert!(u.iter().all(|r| !r.is_empty() && r.len() <= n_ubatch));
                assert_eq!(u.iter().map(|r| r.len()).sum::<usize>(), len);
            }
        }
    }

    #[test]
    fn a_shared_system_prompt_is_kept_whole_when_turns_cut() {
        let m = TURN_PIECE_MIN_TOKENS;
        // A system message of 3m + 50 tokens ending in an end of turn, then a short turn.
        let sys = 3 * m + 50;
        let first = with_eots(sys + 30, &[sys - 1, sys + 20]);
        let mut second = first.clone();
        for t in &mut second[sys + 5..] {
            *t += 1;
        }
        second.extend([5, 6, 7]);
        for split in [grid(128), turns(128)] {
            let c = after_prefill(&first, &split);
            let kept = reusable_prefix(&c, &second, &split, 512);
            let cold = split.ubatches_from(&second, 0);
            let warm = split.ubatches_from(&second, kept);
            // Whatever is kept, the rest is the cold run's own ubatches.
            assert!(cold.ends_with(&warm));
            if split.cuts_at_turns() {
                assert_eq!(kept, sys, "the whole system message");
            } else {
                assert_eq!(kept, sys / 128 * 128);
            }
        }
        // The same request twice keeps every boundary before its last token.
        let c = after_prefill(&first, &turns(128));
        assert_eq!(c.exact, sys);
        assert_eq!(reusable_prefix(&c, &first, &turns(128), 512), sys);
    }
}
