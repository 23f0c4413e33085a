//! Turning sampled tokens into the text a client sees: bytes into whole UTF-8 characters
//! (a token may end inside one), and stop strings found and cut off even when they span
//! tokens, holding back only what could still become one.

/// Accumulates bytes and hands out the longest prefix that is valid UTF-8; an incomplete
/// character at the end waits for the next bytes. Invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or(""));
                    match e.error_len() {
                        // An incomplete character at the end: keep it for later.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whether the bytes so far end on a whole character (none held back).
    pub fn at_char_boundary(&self) -> bool {
        self.pending.is_empty()
    }

    /// What is left at the end of a generation (an incomplete character), as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = if self.pending.is_empty() {
            String::new()
        } else {
            String::from_utf8_lossy(&self.pending).into_owned()
        };
        self.pending.clear();
        out
    }
}

/// Where a byte stream stands in UTF-8 (RFC 3629): whether appending a token's bytes keeps
/// it valid. A grammar's matcher decodes bytes leniently (a lone continuation byte reads as
/// a character), so constrained sampling also asks this, and never emits invalid UTF-8
/// that the client would see as U+FFFD and a schema would count differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Utf8State {
    /// Continuation bytes still due.
    remaining: u8,
    /// The range the next continuation byte must be in.
    lo: u8,
    hi: u8,
}

impl Utf8State {
    /// The state after `bytes`, or `None` when they make the stream invalid.
    pub fn advance(self, bytes: &[u8]) -> Option<Utf8State> {
        let mut s = self;
        for &b in bytes {
            if s.remaining > 0 {
                if !(s.lo..=s.hi).contains(&b) {
                    return None;
                }
                s = match s.remaining - 1 {
                    0 => Utf8State::default(),
                    remaining => Utf8State {
                        remaining,
                        lo: 0x80,
                        hi: 0xBF,
                    },
                };
                continue;
            }
            let (remaining, lo, hi) = match b {
                0x00..=0x7F => (0, 0, 0),
                0xC2..=0xDF => (1, 0x80, 0xBF),
                0xE0 => (2, 0xA0, 0xBF),
                0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
                0xED => (2, 0x80, 0x9F),
                0xF0 => (3, 0x90, 0xBF),
                0xF1..=0xF3 => (3, 0x80, 0xBF),
                0xF4 => (3, 0x80, 0x8F),
                _ => return None,
            };
            s = Utf8State { remaining, lo, hi };
        }
        Some(s)
    }
}

/// Finds the first of several stop strings in a text that arrives in pieces.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not yet released: it ends with a prefix of some stop string.
    held: String,
    /// The stop string found, once one is.
    matched: Option<usize>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// The stop string that ended the text, once one has.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// Add `text`; returns what can be released now. Once a stop string appears, the text
    /// before it is released and everything from it on is dropped.
    pub fn push(&mut self, text: &str) -> String {
        if self.matched.is_some() {
            return String::new();
        }
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at, i)))
            .min();
        if let Some((at, i)) = first {
            self.matched = Some(i);
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        // Hold back the longest suffix that is a proper prefix of a stop string.
        let keep = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        out
    }

    /// The generation ended without a stop string: release what was held.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`, at a
/// character boundary.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = (stop.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && stop.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

/// llama-server's limits for code completion at an editor's cursor: `n_indent` (a line
/// after the first that starts less indented ends the text, a blank line too) and
/// `t_max_predict_ms` (once the text has a line break, the first token after this long ends
/// it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineLimits {
    /// Spaces and tabs a later line must start with (0: no limit).
    pub min_indent: u32,
    /// Since the first token was sampled.
    pub max_time: Option<std::time::Duration>,
}

impl LineLimits {
    pub fn is_off(&self) -> bool {
        self.min_indent == 0 && self.max_time.is_none()
    }
}

/// Watches the text against [`LineLimits`].
#[derive(Debug)]
pub struct LineWatch {
    limits: LineLimits,
    started: std::time::Instant,
    /// A line break has been seen.
    newline: bool,
    /// One had been seen before the latest [`LineWatch::push`].
    newline_before: bool,
    /// Counting the current line's indentation: no other character yet.
    in_indent: bool,
    indent: u32,
}

impl LineWatch {
    pub fn new(limits: LineLimits) -> LineWatch {
        LineWatch {
            limits,
            started: std::time::Instant::now(),
            newline: false,
            newline_before: false,
            in_indent: false,
            indent: 0,
        }
    }

    /// Add `text`; `Some(n)` when the indentation limit ends it after its first `n` bytes
    /// (where the short line's text would start: its indentation stays, as llama-server
    /// leaves it). Nothing after a cut is read.
    pub fn push(&mut self, text: &str) -> Option<usize> {
        self.newline_before = self.newline;
        for (at, c) in text.char_indices() {
            if self.in_indent {
                if c == ' ' || c == '\t' {
                    self.indent += 1;
                    continue;
                }
                if self.indent < self.limits.min_indent {
                    return Some(at);
                }
                self.in_indent = false;
            }
            if c == '\n' {
                self.newline = true;
                self.in_indent = true;
                self.indent = 0;
            }
        }
        None
    }

    /// The time limit has passed and a line break came before the latest text.
    pub fn out_of_time(&self) -> bool {
        self.newline_before
            && self
                .limits
                .max_time
                .is_some_and(|t| self.started.elapsed() >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(min_indent: u32) -> LineWatch {
        LineWatch::new(LineLimits {
            min_indent,
            max_time: None,
        })
    }

    #[test]
    fn a_later_line_less_indented_ends_the_text_where_its_text_starts() {
        let mut w = watch(4);
        // The first line is never held to the limit.
        assert_eq!(w.push("x = 1"), None);
        assert_eq!(w.push("\n    y = 2\n  "), None);
        // The cut falls in the token that starts the short line's text; its indentation
        // stays.
        assert_eq!(w.push("  \tz\n    w"), None);
        assert_eq!(w.push("q\n  }"), Some(4));
        // A blank line ends it too.
        let mut w = watch(2);
        assert_eq!(w.push("a\n  b\n"), None);
        assert_eq!(w.push("\nc"), Some(0));
        // Indentation split across tokens counts as one.
        let mut w = watch(3);
        assert_eq!(w.push("a\n "), None);
        assert_eq!(w.push(" "), None);
        assert_eq!(w.push(" b"), None);
        // No limit: nothing is cut.
        let mut w = watch(0);
        assert_eq!(w.push("a\n\nb\n"), None);
    }

    #[test]
    fn the_time_limit_waits_for_a_line_break_before_the_latest_text() {
        let mut w = LineWatch::new(LineLimits {
            min_indent: 0,
            max_time: Some(std::time::Duration::ZERO),
        });
        w.push("a");
        assert!(!w.out_of_time());
        w.push("b\n");
        assert!(!w.out_of_time(), "the break is in the latest text");
        w.push("c");
        assert!(w.out_of_time());
        let mut w = LineWatch::new(LineLimits {
            min_indent: 0,
            max_time: Some(std::time::Duration::from_secs(3600)),
        });
        w.push("a\n");
        w.push("b");
        assert!(!w.out_of_time());
    }

    #[test]
    fn utf8_state_accepts_valid_sequences_across_tokens_only() {
        let s = Utf8State::default();
        let mid = s
            .advance("a\u{e9}".as_bytes())
            .and_then(|s| s.advance(&[0xE2, 0x82]))
            .unwrap();
        assert_eq!(
            mid.advance(&[0xAC]),
            Some(Utf8State::default()),
            "the euro sign completes"
        );
        assert_eq!(mid.advance(b"x"), None, "an ASCII byte inside a character");
        assert_eq!(s.advance(&[0xB0]), None, "a lone continuation byte");
        assert_eq!(s.advance(&[0xC0, 0x80]), None, "an overlong form");
        assert_eq!(s.advance(&[0xED, 0xA0, 0x80]), None, "a surrogate");
        assert_eq!(s.advance(&[0xF5]), None);
        assert!(s.advance("\u{1F600}".as_bytes()).is_some());
    }

    #[test]
    fn utf8_waits_for_the_rest_of_a_character() {
        let mut u = Utf8Stream::default();
        let euro = "€".as_bytes(); // 3 bytes
        assert_eq!(u.push(&[b'a', euro[0]]), "a");
        assert_eq!(u.push(&euro[1..2]), "");
        assert_eq!(u.push(&euro[2..]), "€");
        assert_eq!(u.push(&[0xff, b'b']), "\u{FFFD}b");
        assert_eq!(u.push(&euro[..1]), "");
        assert_eq!(u.finish(), "\u{FFFD}");
    }

    #[test]
    fn stop_strings_spanning_pieces_are_cut() {
        let mut m = StopMatcher::new(vec!["</answer>".into(), "STOP".into()]);
        assert_eq!(m.push("The answer is 42</ans"), "The answer is 42");
        assert_eq!(m.matched(), None);
        assert_eq!(m.push("wer> and more"), "");
        assert_eq!(m.matched(), Some("</answer>"));
        assert_eq!(m.push("ignored"), "");
    }

    #[test]
    fn a_false_start_is_released() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("ST"), "");
        assert_eq!(m.push("ART"), "START");
        assert_eq!(m.push("S"), "");
        assert_eq!(m.finish(), "S");
        // No stop strings: everything passes through.
        let mut none = StopMatcher::new(vec![]);
        assert_eq!(none.push("abc"), "abc");
    }

    #[test]
    fn the_earliest_stop_wins() {
        let mut m = StopMatcher::new(vec!["cd".into(), "b".into()]);
        assert_eq!(m.push("abcd"), "a");
        assert_eq!(m.matched(), Some("b"));
    }
}
