//! A real byte-level BPE tokenizer (GPT-2 style, `pre = qwen2`), trained at synthesis time
//! on a small embedded English text, then padded with unused tokens to the preset's vocab.

use std::collections::HashMap;

const CORPUS: &str = "The quick brown fox jumps over the lazy dog. A model of experts routes each \
token to a few of its many feed forward networks, and only those weights are read. When the \
weights do not fit in memory, the operating system pages them in from the disk as they are \
touched. This is the simple story of paging, and the details are where the time goes. The \
reader should know that the routing changes from token to token, and that the hot experts of \
one layer are not the hot experts of the next. There is a time to read and a time to compute, \
and the best systems do both at once. In the beginning there was the file, and the file was \
mapped, and the pages were faulted in one at a time. Then the pager came, and it said what \
would be needed next, and the kernel read it before the compute asked. This is a test of the \
tokenizer, with numbers like 1, 2, 3, 42 and 2026, with punctuation: commas, colons; and \
questions? Yes! Hello world, hello there, hello again. What is the answer to the question \
of life, the universe and everything? It is forty two, or so the story goes.";

/// llama.cpp token types.
pub const TYPE_NORMAL: i32 = 1;
pub const TYPE_CONTROL: i32 = 3;
pub const TYPE_USER_DEFINED: i32 = 4;
pub const TYPE_UNUSED: i32 = 5;

/// The chat format a preset's model speaks: its template and the special tokens it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// Qwen3's ChatML with its system, tool and tool-call blocks and thinking sections.
    ChatMl,
    /// gpt-oss's harmony: channels (`analysis`, `commentary`, `final`) and tool calls
    /// addressed `to=functions.NAME`.
    Harmony,
}

impl ChatFormat {
    /// The chat template written to `tokenizer.chat_template`.
    pub fn template(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => include_str!("templates/qwen3-chatml.jinja"),
            ChatFormat::Harmony => include_str!("templates/harmony.jinja"),
        }
    }

    /// The control tokens, appended after the trained ones: the first is BOS (and padding),
    /// the one [`ChatFormat::eos`] names is EOS. llama.cpp finds harmony's other
    /// end-of-generation tokens (`<|call|>`) and ChatML's fill-in-the-middle tokens by their
    /// text.
    pub fn specials(self) -> &'static [&'static str] {
        match self {
            // Qwen's fill-in-the-middle tokens follow its chat markers, as in its vocabulary;
            // llama.cpp finds them by their text.
            ChatFormat::ChatMl => &[
                "<|endoftext|>",
                "<|im_start|>",
                "<|im_end|>",
                "<|fim_prefix|>",
                "<|fim_middle|>",
                "<|fim_suffix|>",
                "<|fim_pad|>",
                "<|repo_name|>",
                "<|file_sep|>",
            ],
            ChatFormat::Harmony => &[
                "<|startoftext|>",
                "<|endoftext|>",
                "<|return|>",
                "<|constrain|>",
                "<|channel|>",
                "<|start|>",
                "<|end|>",
                "<|message|>",
                "<|call|>",
            ],
        }
    }

    /// Added tokens that are not control tokens, appended after [`ChatFormat::specials`]:
    /// Qwen's `<think>`, `</think>`, `<tool_call>` and `<tool_response>` tags, each one
    /// token in its vocabulary (USER_DEFINED in its GGUFs). llama.cpp tokenizes them as one
    /// token wherever they appear, without parsing specials, and prints them even when
    /// special tokens are not rendered, so thinking and tool calls tokenize here as they do
    /// on the real model. Harmony's tags are all control tokens.
    pub fn added(self) -> &'static [&'static str] {
        match self {
            ChatFormat::ChatMl => &[
                "<tool_call>",
                "</tool_call>",
                "<tool_response>",
                "</tool_response>",
                "<think>",
                "</think>",
            ],
            ChatFormat::Harmony => &[],
        }
    }

    /// `tokenizer.ggml.pre`: the pre-tokenizer of the family's tokenizer (Qwen2's, or
    /// o200k's for harmony models).
    pub fn pre_tokenizer(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "qwen2",
            ChatFormat::Harmony => "gpt-4o",
        }
    }

    /// The end-of-sequence token among [`ChatFormat::specials`].
    pub fn eos(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "<|im_end|>",
            ChatFormat::Harmony => "<|return|>",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Tokenizer {
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
    /// Ids of the ordinary tokens that print as ASCII: the ones generated text walks through.
    pub normal_ids: Vec<u32>,
    pub eos_id: u32,
    pub bos_id: u32,
}

/// GPT-2's reversible byte -> printable unicode mapping.
pub fn byte_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        map[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    map
}

/// Train `n_merges` BPE merges on the corpus, add `format`'s control and added tokens and
/// pad the vocabulary to `n_vocab` tokens.
pub fn build(n_vocab: usize, n_merges: usize, format: ChatFormat) -> Tokenizer {
    let specials = format.specials();
    let added = format.added();
    let b2u = byte_to_unicode();
    let mut tokens: Vec<String> = b2u.iter().map(|c| c.to_string()).collect();
    let mut types = vec![TYPE_NORMAL; 256];

    // Pre-tokenize as GPT-2 does for plain words: a word carries its leading space.
    let mut words: HashMap<Vec<String>, u64> = HashMap::new();
    for (i, w) in CORPUS.split(' ').enumerate() {
        let text = if i == 0 {
            w.to_string()
        } else {
            format!(" {w}")
        };
        let syms: Vec<String> = text.bytes().map(|b| b2u[b as usize].to_string()).collect();
        *words.entry(syms).or_default() += 1;
    }
    let mut words: Vec<(Vec<String>, u64)> = words.into_iter().collect();
    words.sort();

    let budget = n_vocab.saturating_sub(256 + specials.len() + added.len());
    let mut merges = Vec::new();
    while merges.len() < n_merges.min(budget) {
        let mut pairs: HashMap<(String, String), u64> = HashMap::new();
        for (syms, count) in &words {
            for w in syms.windows(2) {
                *pairs.entry((w[0].clone(), w[1].clone())).or_default() += count;
            }
        }
        // Most frequent pair, ties broken by the pair itself so training is deterministic.
        let Some(((a, b), count)) = pairs
            .into_iter()
            .max_by(|x, y| x.1.cmp(&y.1).then(y.0.cmp(&x.0)))
        else {
            break;
        };
        if count < 2 {
            break;
        }
        let joined = format!("{a}{b}");
        for (syms, _) in &mut words {
            let mut i = 0;
            while i + 1 < syms.len() {
                if syms[i] == a && syms[i + 1] == b {
                    syms[i] = joined.clone();
                    syms.remove(i + 1);
                }
                i += 1;
            }
        }
        merges.push(format!("{a} {b}"));
        tokens.push(joined);
        types.push(TYPE_NORMAL);
    }
    // Generated text walks through tokens that print as plain ASCII.
    let u2b: HashMap<char, u8> = b2u.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
    let normal_ids = (0..tokens.len() as u32)
        .filter(|&i| {
            tokens[i as usize].chars().all(|c| {
                u2b.get(&c)
                    .is_some_and(|b| b.is_ascii_graphic() || *b == b' ')
            })
        })
        .collect();
    let bos_id = tokens.len() as u32;
    let mut eos_id = bos_id;
    for &s in specials {
        if s == format.eos() {
            eos_id = tokens.len() as u32;
        }
        tokens.push(s.to_string());
        types.push(TYPE_CONTROL);
    }
    // Their text is stored as is, not byte-mapped: llama.cpp prints an added token's text raw.
    for &s in added {
        tokens.push(s.to_string());
        types.push(TYPE_USER_DEFINED);
    }
    let mut k = 0;
    while tokens.len() < n_vocab {
        tokens.push(format!("<|unused_{k}|>"));
        types.push(TYPE_UNUSED);
        k += 1;
    }
    Tokenizer {
        tokens,
        types,
        merges,
        normal_ids,
        eos_id,
        bos_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_a_bijection() {
        let m = byte_to_unicode();
        let mut seen = std::collections::HashSet::new();
        for c in m {
            assert!(seen.insert(c));
        }
        assert_eq!(m[b'A' as usize], 'A');
        assert_eq!(m[b' ' as usize], '\u{120}');
    }

    #[test]
    fn merges_produce_tokens_and_vocab_is_padded() {
        let t = build(1024, 300, ChatFormat::ChatMl);
        assert_eq!(t.tokens.len(), 1024);
        assert!(t.merges.len() > 100, "{} merges", t.merges.len());
        assert!(t.tokens.contains(&"\u{120}the".to_string()));
        for m in &t.merges {
            let (a, b) = m.split_once(' ').unwrap();
            assert!(t.tokens.contains(&format!("{a}{b}")));
        }
        assert_eq!(t.tokens[t.eos_id as usize], "<|im_end|>");
        assert_eq!(t.tokens[t.bos_id as usize], "<|endoftext|>");
        let h = build(1024, 300, ChatFormat::Harmony);
        assert_eq!(h.tokens[h.eos_id as usize], "<|return|>");
        assert_eq!(h.tokens[h.bos_id as usize], "<|startoftext|>");
        for s in ChatFormat::Harmony.specials() {
            let i = h.tokens.iter().position(|t| t == s).unwrap();
            assert_eq!(h.types[i], TYPE_CONTROL, "{s}");
        }
        for s in ChatFormat::ChatMl.added() {
            let i = t.tokens.iter().position(|x| x == s).unwrap();
            assert_eq!(t.types[i], TYPE_USER_DEFINED, "{s}");
            assert!(!t.normal_ids.contains(&(i as u32)), "{s}");
        }
    }
}
