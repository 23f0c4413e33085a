//! The streaming output parser: generated text in (special tokens' text included where the
//! family marks calls with them), [`Piece`]s out: content, reasoning and whole tool calls.
//! Text that could still become a marker is held back until it is decided; nothing is
//! lost: a call that does not parse, or is cut off, comes out as content.

use serde_json::{Deserializer, Value};

use crate::family::*;

/// A part of the reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
    ToolCall(ToolCall),
}

/// One parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as compact JSON text.
    pub arguments: String,
    /// The id the model wrote, where its format has one (Mistral).
    pub id: Option<String>,
}

/// Where reasoning starts and ends, decided by the chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasoningSplit {
    pub open: String,
    pub close: String,
    /// The rendered prompt already opened the reasoning block (the template forces it).
    pub starts_open: bool,
}

impl ReasoningSplit {
    /// The `<think>` split, when the template writes `<think>` blocks; `starts_open` when the
    /// rendered `prompt` ends inside one.
    pub fn for_template(template: &str, prompt: &str) -> Option<ReasoningSplit> {
        let (open, close) = ("<think>", "</think>");
        if !template.contains(close) {
            return None;
        }
        let tail = prompt.trim_end();
        let starts_open = tail.ends_with(open);
        Some(ReasoningSplit {
            open: open.into(),
            close: close.into(),
            starts_open,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Reasoning,
    Call,
    /// Harmony: reading a message header, up to `<|message|>`.
    Header,
    /// Harmony: a message body of this kind, up to its end marker.
    Body(BodyKind),
}

#[derive(Debug, Clone, PartialEq, Eq, Copy)]
enum BodyKind {
    Content,
    Reasoning,
    Call,
}

/// What a family's call parser made of the buffered text (which starts at a call's opening).
enum Parsed {
    /// Not decided yet.
    NeedMore,
    /// Calls, and the bytes of the buffer they took.
    Calls(Vec<ToolCall>, usize),
    /// Not a call: the first `n` bytes are content.
    NotACall(usize),
}

/// Cloned before its first token, it parses another reply to the same prompt (a request's
/// further choices).
#[derive(Debug, Clone)]
pub struct OutputParser {
    family: Option<ToolFamily>,
    reasoning: Option<ReasoningSplit>,
    mode: Mode,
    buf: String,
    /// No content, reasoning or call has come out yet.
    at_start: bool,
    /// Drop the whitespace that opens the next content (after a reasoning block).
    trim_next: bool,
    /// Harmony: the function named by the current message's header.
    harmony_call: Option<String>,
    calls: usize,
}

impl OutputParser {
    /// A parser for `family`'s calls (`None`: none parsed) and `reasoning` blocks (`None`:
    /// reasoning stays in the content).
    pub fn new(family: Option<ToolFamily>, reasoning: Option<ReasoningSplit>) -> OutputParser {
        let mode = match (&family, &reasoning) {
            (Some(ToolFamily::Harmony), _) => Mode::Header,
            (_, Some(r)) if r.starts_open => Mode::Reasoning,
            _ => Mode::Content,
        };
        OutputParser {
            family,
            reasoning,
            mode,
            buf: String::new(),
            at_start: true,
            trim_next: false,
            harmony_call: None,
            calls: 0,
        }
    }

    /// Whether special tokens' text must be fed (the family marks calls with them).
    pub fn wants_special_tokens(&self) -> bool {
        self.family.is_some()
    }

    /// Calls parsed so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.buf.push_str(text);
        self.drain(false, out);
    }

    /// The generation ended: release what is held.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        self.drain(true, out);
        let rest = std::mem::take(&mut self.buf);
        let rest = if self.calls > 0 {
            rest.trim().to_string()
        } else {
            rest
        };
        match self.mode {
            Mode::Reasoning | Mode::Body(BodyKind::Reasoning) => self.emit_reasoning(rest, out),
            _ => self.emit_content(rest, out),
        }
    }

    fn emit_content(&mut self, mut s: String, out: &mut Vec<Piece>) {
        if self.trim_next {
            s = s.trim_start().to_string();
            if s.is_empty() {
                return;
            }
            self.trim_next = false;
        }
        if s.is_empty() {
            return;
        }
        self.at_start = false;
        match out.last_mut() {
            Some(Piece::Content(c)) => c.push_str(&s),
            _ => out.push(Piece::Content(s)),
        }
    }

    fn emit_reasoning(&mut self, s: String, out: &mut Vec<Piece>) {
        if s.is_empty() {
            return;
        }
        self.at_start = false;
        match out.last_mut() {
            Some(Piece::Reasoning(c)) => c.push_str(&s),
            _ => out.push(Piece::Reasoning(s)),
        }
    }

    fn emit_calls(&mut self, calls: Vec<ToolCall>, out: &mut Vec<Piece>) {
        self.at_start = false;
        self.calls += calls.len();
        out.extend(calls.into_iter().map(Piece::ToolCall));
    }

    /// The markers that end content here.
    fn content_markers(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        match self.family {
            Some(ToolFamily::Hermes) => m.push(HERMES_OPEN),
            Some(ToolFamily::Mistral) => m.push(MISTRAL_OPEN),
            Some(ToolFamily::DeepSeek) => m.extend([DEEPSEEK_CALLS_BEGIN, DEEPSEEK_CALL_BEGIN]),
            Some(ToolFamily::Llama3) => m.push(LLAMA3_PYTHON_TAG),
            Some(ToolFamily::Harmony) | None => {}
        }
        m
    }

    fn drain(&mut self, last: bool, out: &mut Vec<Piece>) {
        loop {
            let progressed = match self.mode {
                Mode::Reasoning => self.drain_reasoning(out),
                Mode::Content => self.drain_content(last, out),
                Mode::Call => self.drain_call(last, out),
                Mode::Header => self.drain_header(last),
                Mode::Body(kind) => self.drain_body(kind, last, out),
            };
            if !progressed {
                return;
            }
        }
    }

    fn drain_reasoning(&mut self, out: &mut Vec<Piece>) -> bool {
        let Some(r) = self.reasoning.clone() else {
            self.mode = Mode::Content;
            return true;
        };
        if let Some(i) = self.buf.find(&r.close) {
            let text: String = self.buf[..i].to_string();
            self.buf.drain(..i + r.close.len());
            self.emit_reasoning(text, out);
            self.mode = Mode::Content;
            self.trim_next = true;
            return true;
        }
        let keep = held_suffix(&self.buf, &[r.close.as_str()]);
        let text: String = self.buf.drain(..self.buf.len() - keep).collect();
        self.emit_reasoning(text, out);
        false
    }

    fn drain_content(&mut self, last: bool, out: &mut Vec<Piece>) -> bool {
        // A reasoning block opens a reply, before any content.
        if let Some(r) = self.reasoning.clone() {
            let lead = self.buf.trim_start();
            if self.at_start && !self.trim_next {
                if let Some(rest) = lead.strip_prefix(r.open.as_str()) {
                    self.buf = rest.to_string();
                    self.mode = Mode::Reasoning;
                    return true;
                }
                if !last && !lead.is_empty() && r.open.starts_with(lead) {
                    return false;
                }
            }
        }
        // Llama 3 writes a bare JSON call as the whole reply.
        if self.family == Some(ToolFamily::Llama3) && (self.at_start || self.calls > 0) {
            let mut lead = self.buf.trim_start();
            if self.calls > 0 {
                // Calls are separated by `;`.
                lead = lead.strip_prefix(';').unwrap_or(lead).trim_start();
            }
            if lead.starts_with('{') {
                let skip = self.buf.len() - lead.len();
                self.buf.drain(..skip);
                self.mode = Mode::Call;
                return true;
            }
            if lead.is_empty() && !last {
                return false;
            }
        }
        let markers = self.content_markers();
        let found = markers.iter().filter_map(|m| self.buf.find(m)).min();
        if let Some(i) = found {
            let text: String = self.buf.drain(..i).collect();
            // Whitespace between calls is not content.
            if !(self.calls > 0 && text.trim().is_empty()) {
                self.emit_content(text, out);
            }
            self.mode = Mode::Call;
            return true;
        }
        if last {
            return false;
        }
        let keep = held_suffix(&self.buf, &markers);
        let n = self.buf.len() - keep;
        // Whitespace after a call is held: it is content only if content follows.
        if self.calls > 0 && self.buf[..n].trim().is_empty() {
            return false;
        }
        let text: String = self.buf.drain(..n).collect();
        self.emit_content(text, out);
        false
    }

    fn drain_call(&mut self, last: bool, out: &mut Vec<Piece>) -> bool {
        let parsed = match self.family {
            Some(ToolFamily::Hermes) => parse_hermes(&self.buf, last),
            Some(ToolFamily::Mistral) => parse_mistral(&self.buf, last),
            Some(ToolFamily::DeepSeek) => parse_deepseek(&self.buf, last),
            Some(ToolFamily::Llama3) => parse_llama3(&self.buf),
            _ => Parsed::NotACall(self.buf.len()),
        };
        match parsed {
            Parsed::NeedMore if last => {
                // Cut off: what there is, is content.
                let text = std::mem::take(&mut self.buf);
                self.mode = Mode::Content;
                self.emit_content(text, out);
                false
            }
            Parsed::NeedMore => false,
            Parsed::Calls(calls, n) => {
                self.buf.drain(..n);
                self.emit_calls(calls, out);
                self.mode = Mode::Content;
                true
            }
            Parsed::NotACall(n) => {
                let n = n.max(1).min(self.buf.len());
                let n = (n..=self.buf.len())
                    .find(|&i| self.buf.is_char_boundary(i))
                    .unwrap_or(self.buf.len());
                let text: String = self.buf.drain(..n).collect();
                self.mode = Mode::Content;
                // The text is content even if it starts like a marker.
                self.emit_content(text, out);
                true
            }
        }
    }

    fn drain_header(&mut self, last: bool) -> bool {
        let lead = self.buf.trim_start();
        let structured = lead.starts_with(HARMONY_CHANNEL)
            || lead.starts_with(HARMONY_START)
            || lead.starts_with("to=");
        if !structured {
            if !last && (HARMONY_CHANNEL.starts_with(lead) || HARMONY_START.starts_with(lead)) {
                return false;
            }
            if lead.is_empty() {
                return false;
            }
            // Plain text with no channel: content.
            self.mode = Mode::Body(BodyKind::Content);
            return true;
        }
        let Some(i) = self.buf.find(HARMONY_MESSAGE) else {
            return false;
        };
        let header: String = self.buf[..i].to_string();
        self.buf.drain(..i + HARMONY_MESSAGE.len());
        let recipient = header.split("to=").nth(1).map(|r| {
            r.chars()
                .take_while(|c| !c.is_whitespace() && *c != '<')
                .collect::<String>()
        });
        let channel = header
            .split(HARMONY_CHANNEL)
            .nth(1)
            .map(|c| {
                c.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .unwrap_or_default();
        let kind = match recipient
            .as_deref()
            .and_then(|r| r.strip_prefix("functions."))
        {
            Some(name) => {
                self.harmony_call = Some(name.to_string());
                BodyKind::Call
            }
            None if channel == "analysis" && self.reasoning.is_some() => BodyKind::Reasoning,
            None => BodyKind::Content,
        };
        self.mode = Mode::Body(kind);
        true
    }

    fn drain_body(&mut self, kind: BodyKind, last: bool, out: &mut Vec<Piece>) -> bool {
        let end = HARMONY_ENDS
            .iter()
            .filter_map(|m| self.buf.find(m).map(|i| (i, m.len())))
            .min();
        let (text, closed) = match end {
            Some((i, len)) => {
                let t = self.buf[..i].to_string();
                self.buf.drain(..i + len);
                (t, true)
            }
            None if kind == BodyKind::Call && !last => return false,
            None => {
                let keep = if last {
                    0
                } else {
                    held_suffix(&self.buf, HARMONY_ENDS)
                };
                let t: String = self.buf.drain(..self.buf.len() - keep).collect();
                (t, false)
            }
        };
        match kind {
            BodyKind::Content => self.emit_content(text, out),
            BodyKind::Reasoning => self.emit_reasoning(text, out),
            BodyKind::Call => {
                let name = self.harmony_call.take().unwrap_or_default();
                match first_json(&text) {
                    Some((args, n)) if text[n..].trim().is_empty() && args.is_object() => {
                        self.emit_calls(vec![call(name, &args, None)], out)
                    }
                    _ => self.emit_content(text, out),
                }
            }
        }
        if closed || last {
            self.mode = Mode::Header;
            return true;
        }
        false
    }
}

/// How many bytes at the end of `buf` could begin one of `markers` (and are held back).
fn held_suffix(buf: &str, markers: &[&str]) -> usize {
    let mut best = 0;
    for m in markers {
        for (k, _) in m.char_indices().skip(1) {
            if k > best && buf.ends_with(&m[..k]) {
                best = k;
            }
        }
    }
    best
}

fn call(name: String, args: &Value, id: Option<String>) -> ToolCall {
    ToolCall {
        name,
        arguments: serde_json::to_string(args).unwrap_or_else(|_| "{}".into()),
        id,
    }
}

/// The first JSON value in `s` (after whitespace) and the bytes it took; `None` when it is
/// not JSON.
fn first_json(s: &str) -> Option<(Value, usize)> {
    let mut it = Deserializer::from_str(s).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Some((v, it.byte_offset())),
        _ => None,
    }
}

/// Whether `s` (after whitespace) is JSON cut off before its end.
fn json_incomplete(s: &str) -> bool {
    if s.trim().is_empty() {
        return true;
    }
    let mut it = Deserializer::from_str(s).into_iter::<Value>();
    matches!(it.next(), Some(Err(e)) if e.is_eof())
}

/// A `{"name": ..., "arguments"|"parameters": {...}}` object as a call.
fn object_call(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").or_else(|| v.get("parameters"))?;
    // Some models write the arguments as a JSON string.
    let args = match args {
        Value::String(s) => serde_json::from_str(s).ok()?,
        a => a.clone(),
    };
    if !args.is_object() {
        return None;
    }
    let id = v.get("id").and_then(Value::as_str).map(str::to_string);
    Some(call(name, &args, id))
}

fn parse_hermes(buf: &str, last: bool) -> Parsed {
    let body = &buf[HERMES_OPEN.len().min(buf.len())..];
    if !buf.starts_with(HERMES_OPEN) {
        return if last {
            Parsed::NotACall(buf.len())
        } else {
            Parsed::NeedMore
        };
    }
    let (inner, taken) = match body.find(HERMES_CLOSE) {
        Some(i) => (&body[..i], HERMES_OPEN.len() + i + HERMES_CLOSE.len()),
        // Some models end the reply right after the JSON.
        None if last => (body, buf.len()),
        None => {
            return if json_incomplete(body) || first_json(body).is_some() {
                Parsed::NeedMore
            } else {
                Parsed::NotACall(buf.len())
            };
        }
    };
    match first_json(inner) {
        Some((v, n)) if inner[n..].trim().is_empty() => match object_call(&v) {
            Some(c) => Parsed::Calls(vec![c], taken),
            None => Parsed::NotACall(taken),
        },
        _ if last && json_incomplete(inner) => Parsed::NeedMore,
        _ => Parsed::NotACall(taken),
    }
}

fn parse_llama3(buf: &str) -> Parsed {
    let body = buf.strip_prefix(LLAMA3_PYTHON_TAG).unwrap_or(buf);
    let skip = buf.len() - body.len();
    if json_incomplete(body) {
        return Parsed::NeedMore;
    }
    match first_json(body) {
        Some((v, n)) => match object_call(&v) {
            Some(c) => {
                // Calls are separated by `;`.
                let rest = &body[n..];
                let more = rest.trim_start();
                let sep = if more.starts_with(';') {
                    rest.len() - more.len() + 1
                } else {
                    0
                };
                Parsed::Calls(vec![c], skip + n + sep)
            }
            None => Parsed::NotACall(skip + n),
        },
        None => Parsed::NotACall(buf.len()),
    }
}

fn parse_mistral(buf: &str, last: bool) -> Parsed {
    let Some(body) = buf.strip_prefix(MISTRAL_OPEN) else {
        return Parsed::NotACall(buf.len());
    };
    let lead = body.trim_start();
    let skip = MISTRAL_OPEN.len() + body.len() - lead.len();
    if lead.is_empty() {
        return if last {
            Parsed::NotACall(buf.len())
        } else {
            Parsed::NeedMore
        };
    }
    if lead.starts_with('[') {
        if json_incomplete(lead) {
            return Parsed::NeedMore;
        }
        return match first_json(lead) {
            Some((Value::Array(items), n)) => {
                let calls: Option<Vec<ToolCall>> = items.iter().map(object_call).collect();
                match calls {
                    Some(c) if !c.is_empty() => Parsed::Calls(c, skip + n),
                    _ => Parsed::NotACall(skip + n),
                }
            }
            Some((_, n)) => Parsed::NotACall(skip + n),
            None => Parsed::NotACall(buf.len()),
        };
    }
    // NAME[ARGS]{...}
    let Some(i) = lead.find(MISTRAL_ARGS) else {
        let plausible = lead
            .chars()
            .all(|c| c.is_alphanumeric() || "_-.[".contains(c));
        return if plausible && !last {
            Parsed::NeedMore
        } else {
            Parsed::NotACall(buf.len())
        };
    };
    let name = lead[..i].trim().to_string();
    let args = &lead[i + MISTRAL_ARGS.len()..];
    if json_incomplete(args) {
        return Parsed::NeedMore;
    }
    match first_json(args) {
        Some((v, n)) if v.is_object() && !name.is_empty() => Parsed::Calls(
            vec![call(name, &v, None)],
            skip + i + MISTRAL_ARGS.len() + n,
        ),
        Some((_, n)) => Parsed::NotACall(skip + i + MISTRAL_ARGS.len() + n),
        None => Parsed::NotACall(buf.len()),
    }
}

fn parse_deepseek(buf: &str, last: bool) -> Parsed {
    let (body, mut taken) = match buf.strip_prefix(DEEPSEEK_CALLS_BEGIN) {
        Some(b) => (b, DEEPSEEK_CALLS_BEGIN.len()),
        None => (buf, 0),
    };
    let region_end = body.find(DEEPSEEK_CALLS_END);
    if region_end.is_none() && !last {
        return Parsed::NeedMore;
    }
    let region = &body[..region_end.unwrap_or(body.len())];
    let mut calls = Vec::new();
    let mut rest = region;
    loop {
        let lead = rest.trim_start();
        let Some(after) = lead.strip_prefix(DEEPSEEK_CALL_BEGIN) else {
            break;
        };
        let Some(end) = after.find(DEEPSEEK_CALL_END) else {
            break;
        };
        let one = &after[..end];
        let Some((head, tail)) = one.split_once(DEEPSEEK_SEP) else {
            break;
        };
        let (name, json_text) = if head.trim() == "function" {
            // R1/V3: NAME, then a fenced JSON block.
            let (name, fenced) = tail.split_once('\n').unwrap_or((tail, ""));
            let fenced = fenced.trim();
            let inner = fenced
                .strip_prefix("```json")
                .or_else(|| fenced.strip_prefix("```"))
                .unwrap_or(fenced);
            (name.trim(), inner.trim().trim_end_matches("```").trim())
        } else {
            (head.trim(), tail.trim())
        };
        match first_json(json_text) {
            Some((v, n)) if v.is_object() && json_text[n..].trim().is_empty() => {
                calls.push(call(name.to_string(), &v, None));
            }
            _ => break,
        }
        let used =
            rest.len() - lead.len() + DEEPSEEK_CALL_BEGIN.len() + end + DEEPSEEK_CALL_END.len();
        rest = &rest[used..];
    }
    let parsed_len = region.len() - rest.len();
    if calls.is_empty() {
        let n = taken + region.len() + region_end.map_or(0, |_| DEEPSEEK_CALLS_END.len());
        return Parsed::NotACall(n);
    }
    taken += parsed_len;
    if region_end.is_some() && rest.trim().is_empty() {
        taken += rest.len() + DEEPSEEK_CALLS_END.len();
    }
    Parsed::Calls(calls, taken)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
