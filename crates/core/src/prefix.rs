//! Prefix reuse that never changes an output: which part of a sequence's KV cache a new
//! prompt may keep.
//!
//! llama.cpp's CPU kernels compute a ubatch of one token with other matrix routines than a
//! ubatch of several (ggml's `vec_dot` against tinyBLAS's tiled `sgemm`, which skips
//! batches under 2 or 4 tokens), and the two round differently. Within one routine each
//! token's row is computed alone, so a token's KV depends on the size class of the ubatch
//! it was evaluated in. A cold run evaluates a prompt in ubatches of `n_ubatch` from
//! position 0. Reusing exactly the KV a cold run would compute therefore means keeping only
//! whole ubatches of that split that were themselves evaluated as prefill: a multiple of
//! `n_ubatch`, no further than the part of the cache filled by prefill (never tokens
//! decoded one at a time), and short of the prompt's end (its last token's logits are
//! needed). The rest is evaluated from that boundary, split as the cold run splits it.

/// What a sequence's KV cache holds.
///
/// Invariants:
/// 1. `tokens` are the tokens whose KV the sequence holds, at positions `0..tokens.len()`;
/// 2. `exact <= tokens.len()`, and positions `0..exact` were evaluated by prefill in whole
///    ubatches aligned at multiples of the ubatch size from 0: their KV is what a cold
///    prefill of those tokens computes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqCache {
    pub tokens: Vec<i32>,
    pub exact: usize,
}

/// How many leading tokens of `prompt` may keep their KV from `cache`, with the ubatch and
/// batch sizes of the session. 0 when batches do not split on ubatch boundaries.
pub fn reusable_prefix(cache: &SeqCache, prompt: &[i32], n_ubatch: usize, n_batch: usize) -> usize {
    if n_ubatch == 0 || n_batch % n_ubatch != 0 || prompt.is_empty() {
        return 0;
    }
    let common = cache
        .tokens
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count();
    let limit = common.min(cache.exact).min(prompt.len() - 1);
    limit / n_ubatch * n_ubatch
}

/// The cache after `prompt` was prefilled from position `kept` (a ubatch boundary): the
/// whole ubatches of the prompt are exact; its partial last one is not (a longer prompt's
/// cold run evaluates those positions in a full ubatch).
pub fn after_prefill(prompt: &[i32], n_ubatch: usize) -> SeqCache {
    SeqCache {
        tokens: prompt.to_vec(),
        exact: prompt.len() / n_ubatch.max(1) * n_ubatch.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(tokens: std::ops::Range<i32>, exact: usize) -> SeqCache {
        SeqCache {
            tokens: tokens.collect(),
            exact,
        }
    }

    #[test]
    fn keeps_whole_prefill_ubatches_only() {
        let prompt: Vec<i32> = (0..300).collect();
        // 300 cached tokens, 256 of them exact (two whole ubatches of 128).
        let c = after_prefill(&prompt, 128);
        assert_eq!(c.exact, 256);
        // The same prompt again: two ubatches kept, the last 44 tokens evaluated again.
        assert_eq!(reusable_prefix(&c, &prompt, 128, 512), 256);
        // A prompt that diverges at 200 keeps one ubatch.
        let mut other = prompt.clone();
        other[200] = -1;
        assert_eq!(reusable_prefix(&c, &other, 128, 512), 128);
        // Decoded tokens after the prompt never count.
        let mut grown = c.clone();
        grown.tokens.extend(300..400);
        let longer: Vec<i32> = (0..500).collect();
        assert_eq!(reusable_prefix(&grown, &longer, 128, 512), 256);
    }

    #[test]
    fn keeps_nothing_when_it_cannot_be_exact() {
        // Shorter than one ubatch; and the whole cache equal to the prompt still leaves the
        // last token to evaluate.
        assert_eq!(
            reusable_prefix(&cache(0..100, 0), &(0..100).collect::<Vec<_>>(), 128, 512),
            0
        );
        assert_eq!(
            reusable_prefix(&cache(0..128, 128), &(0..128).collect::<Vec<_>>(), 128, 512),
            0
        );
        assert_eq!(
            reusable_prefix(&cache(0..128, 128), &(0..129).collect::<Vec<_>>(), 128, 512),
            128
        );
        // Batches that do not split on ubatch boundaries.
        assert_eq!(
            reusable_prefix(
                &cache(0..1000, 896),
                &(0..1000).collect::<Vec<_>>(),
                128,
                300
            ),
            0
        );
        assert_eq!(reusable_prefix(&SeqCache::default(), &[], 128, 512), 0);
    }
}
