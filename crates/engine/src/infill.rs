//! Fill-in-the-middle: a vocabulary's FIM tokens and the prompts built from them. Two
//! layouts: llama-server's `/infill` prompt (the repository-level pattern of the
//! Qwen2.5-Coder report, with other files as context and the parts cut to fit a batch), and
//! the plain `PRE prefix SUF suffix MID` that Ollama's templates render for a `suffix`.
//! Pure: tokenizing is the caller's, passed in as a function.

/// A vocabulary's fill-in-the-middle tokens (llama.cpp's `FIM_PRE` ... found in the GGUF's
/// metadata or by their text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    pub prefix: i32,
    pub suffix: i32,
    pub middle: i32,
    /// Starts the repository's name (`<|repo_name|>`), where the vocabulary has one.
    pub repo: Option<i32>,
    /// Starts each file's name (`<|file_sep|>`), where the vocabulary has one.
    pub file_sep: Option<i32>,
}

/// A file given as context before the one being edited (llama-server's `input_extra`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    pub filename: String,
    pub text: String,
}

impl ContextFile {
    /// The name of a file given without one, as llama-server names it.
    pub const UNNAMED: &'static str = "tmp";
}

/// What an `/infill` request fills in: the text around the cursor (tokenized without
/// special tokens) and what is typed at it.
#[derive(Debug, Clone, Copy)]
pub struct InfillParts<'a> {
    pub prefix: &'a [i32],
    pub suffix: &'a [i32],
    /// Text the completion must start with; llama-server puts it right after the prefix.
    pub prompt: &'a [i32],
    pub files: &'a [ContextFile],
}

/// The sizes llama-server fits an `/infill` prompt to: its batch, its default `n_predict`
/// (-1: none) and a slot's context.
#[derive(Debug, Clone, Copy)]
pub struct InfillFit {
    pub n_batch: u32,
    pub n_predict: i32,
    pub n_ctx: u32,
}

/// The repository's name in the pattern; llama-server does not take one from the request.
const REPO_NAME: &str = "myproject\n";
/// The name the pattern gives the file being edited.
const CURRENT_FILE: &str = "filename\n";
/// Between context files, where the vocabulary has no file separator.
const SNIPPET_SEPARATOR: &str = "\n\n--- snippet ---\n\n";

impl FimTokens {
    /// `[BOS] PRE prefix SUF suffix MID`: the prompt of a completion with a `suffix`, as
    /// Ollama's fill-in-the-middle templates write it.
    pub fn plain_prompt(&self, bos: Option<i32>, prefix: &[i32], suffix: &[i32]) -> Vec<i32> {
        let mut out = Vec::with_capacity(prefix.len() + suffix.len() + 4);
        out.extend(bos);
        out.push(self.prefix);
        out.extend_from_slice(prefix);
        out.push(self.suffix);
        out.extend_from_slice(suffix);
        out.push(self.middle);
        out
    }

    /// llama-server's `/infill` prompt:
    ///
    /// ```text
    /// [REPO]myproject\n [SEP]name0\n text0 ... [SEP]filename\n [BOS] [PRE]prefix prompt [SUF]suffix [MID]
    /// ```
    ///
    /// The prefix keeps its last `3/4` of a batch, the suffix its first `1/4` less the
    /// prompt and two tokens, and the context files the end of what the slot's context
    /// leaves after a batch and twice `n_predict`. `tokenize` turns text into tokens without
    /// BOS or special tokens.
    pub fn repo_prompt(
        &self,
        parts: InfillParts<'_>,
        fit: InfillFit,
        bos: Option<i32>,
        tokenize: impl Fn(&str) -> Vec<i32>,
    ) -> Vec<i32> {
        let mut context = Vec::new();
        if let Some(repo) = self.repo {
            context.push(repo);
            context.extend(tokenize(REPO_NAME));
        }
        for file in parts.files {
            match self.file_sep {
                Some(sep) => {
                    context.push(sep);
                    context.extend(tokenize(&format!("{}\n", file.filename)));
                }
                None => context.extend(tokenize(SNIPPET_SEPARATOR)),
            }
            context.extend(tokenize(&file.text));
        }
        if let Some(sep) = self.file_sep {
            context.push(sep);
            context.extend(tokenize(CURRENT_FILE));
        }
        // llama-server's arithmetic, in signed integers as it does it.
        let n_batch = i64::from(fit.n_batch);
        let len = |s: &[i32]| s.len() as i64;
        let prefix_take = len(parts.prefix).min(3 * (n_batch / 4));
        let suffix_take = len(parts.suffix).min((n_batch / 4 - (2 + len(parts.prompt))).max(0));
        let context_take = len(&context)
            .min((i64::from(fit.n_ctx) - n_batch - 2 * i64::from(fit.n_predict)).max(0));
        let tail = |s: &[i32], n: i64| s[s.len() - n as usize..].to_vec();

        let mut out = tail(&context, context_take);
        out.extend(bos);
        out.push(self.prefix);
        out.extend(tail(parts.prefix, prefix_take));
        out.extend_from_slice(parts.prompt);
        out.push(self.suffix);
        out.extend_from_slice(&parts.suffix[..suffix_take as usize]);
        out.push(self.middle);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRE: i32 = -10;
    const SUF: i32 = -11;
    const MID: i32 = -12;
    const REPO: i32 = -13;
    const SEP: i32 = -14;
    const BOS: i32 = -15;

    fn fim(repo: bool) -> FimTokens {
        FimTokens {
            prefix: PRE,
            suffix: SUF,
            middle: MID,
            repo: repo.then_some(REPO),
            file_sep: repo.then_some(SEP),
        }
    }

    /// One token per byte: lengths are easy to count.
    fn bytes(s: &str) -> Vec<i32> {
        s.bytes().map(i32::from).collect()
    }

    fn fit(n_batch: u32, n_ctx: u32) -> InfillFit {
        InfillFit {
            n_batch,
            n_predict: -1,
            n_ctx,
        }
    }

    #[test]
    fn the_plain_prompt_is_prefix_suffix_middle() {
        let p = fim(true).plain_prompt(None, &[1, 2], &[3]);
        assert_eq!(p, [PRE, 1, 2, SUF, 3, MID]);
        let p = fim(false).plain_prompt(Some(BOS), &[], &[]);
        assert_eq!(p, [BOS, PRE, SUF, MID]);
    }

    #[test]
    fn the_repo_prompt_names_the_files_and_puts_the_prompt_after_the_prefix() {
        let files = [ContextFile {
            filename: "a.rs".into(),
            text: "xy".into(),
        }];
        let parts = InfillParts {
            prefix: &[1, 2],
            suffix: &[3, 4],
            prompt: &[5],
            files: &files,
        };
        let p = fim(true).repo_prompt(parts, fit(2048, 4096), None, bytes);
        let mut want = vec![REPO];
        want.extend(bytes("myproject\n"));
        want.push(SEP);
        want.extend(bytes("a.rs\nxy"));
        want.push(SEP);
        want.extend(bytes("filename\n"));
        want.extend([PRE, 1, 2, 5, SUF, 3, 4, MID]);
        assert_eq!(p, want);
    }

    #[test]
    fn without_separators_files_are_snippets_and_bos_follows_the_context() {
        let files = [
            ContextFile {
                filename: "a".into(),
                text: "x".into(),
            },
            ContextFile {
                filename: "b".into(),
                text: "y".into(),
            },
        ];
        let parts = InfillParts {
            prefix: &[1],
            suffix: &[],
            prompt: &[],
            files: &files,
        };
        let p = fim(false).repo_prompt(parts, fit(64, 4096), Some(BOS), bytes);
        let mut want = bytes("\n\n--- snippet ---\n\nx\n\n--- snippet ---\n\ny");
        want.extend([BOS, PRE, 1, SUF, MID]);
        assert_eq!(p, want);
    }

    #[test]
    fn parts_are_cut_to_fit_the_batch_and_the_context() {
        let prefix: Vec<i32> = (0..100).collect();
        let suffix: Vec<i32> = (100..200).collect();
        let files = [ContextFile {
            filename: "f".into(),
            text: "0123456789".repeat(10),
        }];
        let parts = InfillParts {
            prefix: &prefix,
            suffix: &suffix,
            prompt: &[7, 7, 7],
            files: &files,
        };
        // Batch 64: the prefix keeps its last 48, the suffix its first 16 - 2 - 3 = 11; the
        // context 128 - 64 + 2 = 66 tokens of its end.
        let p = fim(true).repo_prompt(parts, fit(64, 128), None, bytes);
        let pre = p.iter().position(|&t| t == PRE).unwrap();
        let suf = p.iter().position(|&t| t == SUF).unwrap();
        assert_eq!(pre, 66);
        assert_eq!(p[pre + 1..suf - 3], prefix[52..]);
        assert_eq!(p[suf - 3..suf], [7, 7, 7]);
        assert_eq!(p[suf + 1..p.len() - 1], suffix[..11]);
        assert_eq!(*p.last().unwrap(), MID);
        let mut context = bytes("0123456789").repeat(10);
        context.push(SEP);
        context.extend(bytes("filename\n"));
        assert_eq!(p[..pre], context[context.len() - 66..]);
        // A prompt longer than the suffix's share leaves no suffix; a context smaller than
        // a batch leaves no files.
        let long = [9; 20];
        let parts = InfillParts {
            prompt: &long,
            ..parts
        };
        let p = fim(true).repo_prompt(parts, fit(64, 32), None, bytes);
        assert_eq!(p[0], PRE);
        assert_eq!(&p[p.len() - 2..], [SUF, MID]);
    }
}
