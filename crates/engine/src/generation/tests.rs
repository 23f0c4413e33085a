//! The generation core against a fake backend: slot choice, batching, stop handling,
//! cancellation and shutdown, without llama.cpp.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::sampling::Picked;

/// Token 0 ends a generation; token `t` > 0 reads as `PIECES[t]`.
const PIECES: [&str; 12] = [
    "",
    "a",
    "b",
    "ST",
    "OP",
    "c",
    "\u{e9}",
    "</",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>",
    "<think>",
    "\n",
    " ",
];
const EOG: i32 = 0;

/// A backend whose sequences emit a script chosen by their prompt's first token.
struct Fake {
    n_slots: usize,
    n_ctx: u32,
    scripts: HashMap<i32, Vec<i32>>,
    /// Per sequence: its script and how much of it was sampled.
    running: HashMap<i32, (Vec<i32>, usize)>,
    /// The sequence behind each logits index of the latest evaluation.
    batch: Vec<i32>,
    decodes: Vec<Vec<Step>>,
    prefills: Vec<(i32, Prefilled)>,
    logits: Vec<f32>,
    stats: Arc<RunStats>,
    /// What each prefill's gone probe said, if it had one; set just before it is asked.
    probed_gone: Vec<Option<bool>>,
    /// Set before the probe is asked: a client that goes while its ubatch computes.
    close_during_prefill: Option<Arc<AtomicBool>>,
    /// Saved prefixes by file, and whether loading them fails.
    fail_loads: bool,
    /// Whether each pick was constrained (its grammar applied), in order.
    constrained: Vec<bool>,
    /// Prompt tokens per ubatch: a prefill evaluates its prompt in pieces of this many from
    /// the kept part, and hears `progress` after each.
    n_ubatch: usize,
    /// What [`Backend::can_pause_prefill`] says.
    pausable: bool,
    /// Every evaluation in order: a prefill's ubatch as `p<seq>:<start>..<end>`, a decode
    /// step as `d<seq>,<seq>...`.
    timeline: Vec<String>,
    /// The token each pick could take outside the grammar, in order.
    free: Vec<Option<i32>>,
}

impl Fake {
    fn new(n_slots: usize, scripts: &[(i32, &[i32])]) -> Fake {
        Fake {
            n_slots,
            n_ctx: 64,
            scripts: scripts.iter().map(|(k, v)| (*k, v.to_vec())).collect(),
            running: HashMap::new(),
            batch: Vec::new(),
            decodes: Vec::new(),
            prefills: Vec::new(),
            logits: vec![0.5, -1.0, 2.0, 0.0, 1.5, -3.0, 0.25, 0.0, 1.0, -0.5],
            stats: Arc::default(),
            probed_gone: Vec::new(),
            close_during_prefill: None,
            fail_loads: false,
            constrained: Vec::new(),
            free: Vec::new(),
            n_ubatch: usize::MAX,
            pausable: true,
            timeline: Vec::new(),
        }
    }
}

impl Backend for Fake {
    type Sampler = ();
    fn n_slots(&self) -> usize {
        self.n_slots
    }
    fn n_ctx_per_seq(&self) -> u32 {
        self.n_ctx
    }
    fn sampler(
        &self,
        _: &SamplingParams,
        _: Option<&Constraint>,
        _: &[i32],
    ) -> Result<(), EngineError> {
        Ok(())
    }
    fn prefill(
        &mut self,
        seq: i32,
        cache: &mut SeqCache,
        prompt: &[i32],
        progress: &mut dyn FnMut(PrefillProgress) -> ControlFlow<()>,
        gone: Option<GoneProbe<'_>>,
    ) -> Result<Prefilled, EngineError> {
        if let Some(c) = &self.close_during_prefill {
            c.store(true, Ordering::Relaxed);
        }
        self.probed_gone.push(gone.map(|g| g()));
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let reused =
            epm_core::prefix::shared_prefix_len(&cache.tokens, prompt).min(prompt.len() - 1);
        let to_evaluate = prompt.len() - reused;
        let mut at = PrefillProgress {
            cached: reused,
            evaluated: 0,
            to_evaluate,
        };
        if progress(at).is_break() {
            cache.tokens = prompt[..reused].to_vec();
            return Err(EngineError::Cancelled);
        }
        while at.evaluated < to_evaluate {
            let start = reused + at.evaluated;
            let end = start.saturating_add(self.n_ubatch).min(prompt.len());
            self.timeline.push(format!("p{seq}:{start}..{end}"));
            at.evaluated = end - reused;
            if progress(at).is_break() && end < prompt.len() {
                cache.tokens = prompt[..end].to_vec();
                cache.exact = end;
                return Err(EngineError::Cancelled);
            }
        }
        cache.tokens = prompt.to_vec();
        cache.exact = prompt.len();
        let script = self.scripts.get(&prompt[0]).cloned().unwrap_or_default();
        self.running.insert(seq, (script, 0));
        self.batch = vec![seq];
        let p = Prefilled {
            reused,
            evaluated: prompt.len() - reused,
            logits: 0,
        };
        self.prefills.push((seq, p));
        Ok(p)
    }
    fn can_pause_prefill(&self) -> bool {
        self.pausable
    }
    fn reusable_prefix(&self, cache: &SeqCache, prompt: &[i32]) -> usize {
        let common = epm_core::prefix::shared_prefix_len(&cache.tokens, prompt);
        common.min(cache.exact).min(prompt.len().saturating_sub(1))
    }
    fn can_store_prefixes(&self) -> bool {
        true
    }
    /// A file of 100 bytes per token that starts with the tokens, as a real one would
    /// (another run's fake reads it back), and its checksum.
    fn save_prefix(
        &mut self,
        _: i32,
        tokens: &[i32],
        path: &Path,
        max_bytes: u64,
    ) -> Result<SavedFile, EngineError> {
        let failed = |e: std::io::Error| EngineError::PromptStore {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let size = tokens.len() as u64 * 100;
        if size > max_bytes {
            return Err(EngineError::PrefixLargerThanStore {
                tokens: tokens.len(),
                bytes: size,
                capacity: max_bytes,
            });
        }
        let mut bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        bytes.resize(tokens.len() * 100, 0);
        std::fs::write(path, &bytes).map_err(failed)?;
        Ok(SavedFile {
            bytes: bytes.len() as u64,
            sum: crate::integrity::bytes_sum(&bytes),
        })
    }
    fn load_prefix(
        &mut self,
        _: i32,
        tokens: &[i32],
        path: &Path,
        file: SavedFile,
    ) -> Result<(), EngineError> {
        let bytes = std::fs::read(path).unwrap_or_default();
        let held: Vec<i32> = bytes
            .chunks_exact(4)
            .take(tokens.len())
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        if held == tokens
            && bytes.len() as u64 == file.bytes
            && crate::integrity::bytes_sum(&bytes) == file.sum
            && !self.fail_loads
        {
            Ok(())
        } else {
            Err(EngineError::PromptStore {
                path: path.to_path_buf(),
                reason: "not saved".into(),
            })
        }
    }
    fn decode(&mut self, steps: &[Step]) -> Result<(), EngineError> {
        self.decodes.push(steps.to_vec());
        let seqs: Vec<String> = steps.iter().map(|s| s.seq.to_string()).collect();
        self.timeline.push(format!("d{}", seqs.join(",")));
        self.batch = steps.iter().map(|s| s.seq).collect();
        Ok(())
    }
    fn logits(&self, _: i32) -> &[f32] {
        &self.logits
    }
    fn sample(&mut self, _: &mut (), index: i32, pick: Pick) -> Picked {
        self.constrained.push(pick.constrained);
        self.free.push(pick.free);
        let seq = self.batch[index as usize];
        let (script, at) = self.running.get_mut(&seq).expect("a prefilled sequence");
        // A forced step takes the place of the script's pick.
        let t = script.get(*at).copied().unwrap_or(EOG);
        *at += 1;
        let token = pick.forced.unwrap_or(t);
        // Its grammar (the fake has none) refuses whatever is offered free.
        Picked {
            token,
            free: pick.free == Some(token),
        }
    }
    fn is_eog(&self, token: i32) -> bool {
        token == EOG
    }
    fn piece(&self, token: i32, _special: bool, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(PIECES[token as usize].as_bytes());
    }
    fn clear(&mut self, seq: i32) {
        self.running.remove(&seq);
    }
    fn stats(&self) -> &Arc<RunStats> {
        &self.stats
    }
}

/// Records a job's events; `close` makes it look like a client that went away, and
/// `close_on_progress` like one that goes away once its prompt's progress arrives.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
    closed: Arc<AtomicBool>,
    close_on_progress: Arc<AtomicBool>,
}

impl EventSink for Recorder {
    fn send(&mut self, event: Event) -> bool {
        if matches!(event, Event::Progress(_)) && self.close_on_progress.load(Ordering::Relaxed) {
            self.closed.store(true, Ordering::Relaxed);
        }
        self.events.lock().unwrap().push(event);
        true
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
    fn gone_probe(&self) -> Option<SinkGoneProbe> {
        let closed = self.closed.clone();
        Some(Arc::new(move || closed.load(Ordering::Relaxed)))
    }
}

impl Recorder {
    fn text(&self) -> String {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn reasoning(&self) -> String {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::Reasoning(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The prompt tokens its `Started` event said were cached.
    fn cached_tokens(&self) -> Option<usize> {
        self.events.lock().unwrap().iter().find_map(|e| match e {
            Event::Started { cached_tokens, .. } => Some(*cached_tokens),
            _ => None,
        })
    }

    fn reasoning_tokens(&self) -> Option<usize> {
        self.events.lock().unwrap().iter().find_map(|e| match e {
            Event::Done {
                reasoning_tokens, ..
            } => Some(*reasoning_tokens),
            _ => None,
        })
    }

    fn done(&self) -> Option<(FinishReason, usize)> {
        self.events.lock().unwrap().iter().find_map(|e| match e {
            Event::Done {
                finish_reason,
                completion_tokens,
                ..
            } => Some((finish_reason.clone(), *completion_tokens)),
            _ => None,
        })
    }

    fn failed(&self) -> Option<String> {
        self.events.lock().unwrap().iter().find_map(|e| match e {
            Event::Failed(e) => Some(e.to_string()),
            _ => None,
        })
    }
}

fn job(prompt: &[i32], max_tokens: u32, stop: &[&str]) -> (Job, Recorder) {
    let rec = Recorder::default();
    let job = Job::new(prompt.to_vec(), max_tokens, Box::new(rec.clone()))
        .with_stop(stop.iter().map(|s| s.to_string()).collect());
    (job, rec)
}

fn generator(fake: &mut Fake) -> Generator<'_, Fake> {
    let n = fake.n_slots;
    Generator::new(fake, Arc::new(GenerationCounters::with_slots(n)))
}

#[test]
fn one_slot_generates_its_script_and_never_decodes_the_last_token() {
    let mut fake = Fake::new(1, &[(9, &[1, 2, 5, 1, 2])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9, 8, 7], 4, &[]);
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.text(), "abca");
    assert_eq!(rec.done(), Some((FinishReason::Length, 4)));
    // 4 tokens sampled: the first from the prompt's logits, 3 decode steps, and the 4th
    // token is never evaluated.
    let fake = g.backend();
    assert_eq!(fake.decodes.len(), 3);
    assert_eq!(
        fake.decodes[0],
        vec![Step {
            seq: 0,
            token: 1,
            pos: 3
        }]
    );
    assert_eq!(fake.stats.generated_tokens.get(), 4);
    assert_eq!(fake.stats.decode_steps.get(), 3);
    assert_eq!(*fake.stats.generated_ids.lock().unwrap(), vec![1, 2, 5, 1]);
    let c = g.counters();
    assert_eq!(c.completed.load(Ordering::Relaxed), 1);
    assert_eq!(c.completion_tokens.load(Ordering::Relaxed), 4);
    assert!(g.idle());
}

/// Prefill progress reaches the job before it starts, and the slot's view follows it.
#[test]
fn prefill_progress_comes_before_started_and_reaches_the_slot_view() {
    let mut fake = Fake::new(1, &[(9, &[1, EOG])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9, 8, 7, 6], 4, &[]);
    g.submit(j);
    g.run_until_idle();
    let events = rec.events.lock().unwrap();
    let progress: Vec<PrefillProgress> = events
        .iter()
        .take_while(|e| !matches!(e, Event::Started { .. }))
        .filter_map(|e| match e {
            Event::Progress(p) => Some(*p),
            _ => None,
        })
        .collect();
    let whole = PrefillProgress {
        cached: 0,
        evaluated: 4,
        to_evaluate: 4,
    };
    assert_eq!(
        progress,
        vec![
            PrefillProgress {
                evaluated: 0,
                ..whole
            },
            whole
        ]
    );
    let started = events
        .iter()
        .position(|e| matches!(e, Event::Started { .. }))
        .unwrap();
    assert!(
        !events[started..]
            .iter()
            .any(|e| matches!(e, Event::Progress(_))),
        "no progress after the prefill"
    );
    let view = &g.counters().slots[0];
    assert_eq!(view.prefilled.load(Ordering::Relaxed), 4);
}

#[test]
fn end_of_generation_releases_text_held_for_a_stop_string_or_a_character() {
    // "ST" could begin "STOP": it is held back, and the end-of-generation token must
    // release it (it used to be dropped unless the job ended by length).
    let mut fake = Fake::new(1, &[(9, &[1, 3, EOG])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 10, &["STOP"]);
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.text(), "aST");
    assert_eq!(rec.done(), Some((FinishReason::EndOfGeneration, 3)));
}

#[test]
fn a_stop_string_across_tokens_ends_the_job_and_is_cut_off() {
    let mut fake = Fake::new(1, &[(9, &[1, 3, 4, 2, 2])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 10, &["STOP", "zz"]);
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.text(), "a");
    assert_eq!(
        rec.done(),
        Some((FinishReason::StopSequence("STOP".into()), 3))
    );
}

#[test]
fn text_is_whole_characters_and_logits_go_to_the_job_sink() {
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut fake = Fake::new(1, &[(9, &[6, 1, 6])]);
    let mut g = generator(&mut fake);
    let (mut j, rec) = job(&[9], 3, &[]);
    let bytes = Arc::new(Mutex::new(Vec::new()));
    j.logits = Some(Box::new(Shared(bytes.clone())));
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.text(), "\u{e9}a\u{e9}");
    // Ten f32 logits per sampled position, little-endian.
    let b = bytes.lock().unwrap();
    assert_eq!(b.len(), 3 * 10 * 4);
    assert_eq!(&b[..4], &0.5f32.to_le_bytes());
}

#[test]
fn active_slots_decode_in_one_batch_and_each_gets_its_own_output() {
    let mut fake = Fake::new(2, &[(1, &[1, 1, 1]), (2, &[2, 2])]);
    let mut g = generator(&mut fake);
    let (a, ra) = job(&[1, 5], 3, &[]);
    let (b, rb) = job(&[2, 5], 3, &[]);
    g.submit(a);
    g.submit(b);
    g.run_until_idle();
    assert_eq!(ra.text(), "aaa");
    assert_eq!(rb.text(), "bb");
    assert_eq!(rb.done(), Some((FinishReason::EndOfGeneration, 3)));
    let fake = g.backend();
    // Both slots in the first two steps; the first job's last token is not evaluated and
    // the second's end token was sampled after step 2.
    assert_eq!(fake.decodes[0].len(), 2);
    assert_eq!(fake.decodes[1].len(), 2);
    assert_eq!(fake.decodes.len(), 2);
}

/// A warm-up (`max_tokens` 0) evaluates its prompt and samples nothing; the next prompt
/// sharing its prefix reuses it.
#[test]
fn a_job_of_no_tokens_evaluates_its_prompt_for_the_next_one() {
    let mut fake = Fake::new(1, &[(9, &[1, 2, 5])]);
    let mut g = generator(&mut fake);
    let (warm, warm_rec) = job(&[9, 8, 7, 6], 0, &[]);
    g.submit(warm);
    g.run_until_idle();
    assert_eq!(warm_rec.done(), Some((FinishReason::Length, 0)));
    assert_eq!(warm_rec.text(), "");
    assert_eq!(
        g.backend().decodes.len(),
        0,
        "nothing decoded after the prompt"
    );
    assert_eq!(g.backend().stats.generated_tokens.get(), 0);
    let (j, rec) = job(&[9, 8, 7, 6, 5], 2, &[]);
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.done(), Some((FinishReason::Length, 2)));
    let p = &g.backend().prefills;
    assert_eq!((p[1].1.reused, p[1].1.evaluated), (4, 1));
    let c = g.counters();
    assert_eq!(c.completed.load(Ordering::Relaxed), 2);
    assert!(g.idle());
}

#[test]
fn a_job_goes_to_the_slot_that_shares_its_prefix() {
    let mut fake = Fake::new(2, &[(1, &[1]), (2, &[2])]);
    let mut g = generator(&mut fake);
    for p in [[1, 4, 4, 4], [2, 4, 4, 4]] {
        let (j, _) = job(&p, 1, &[]);
        g.submit(j);
    }
    g.run_until_idle();
    // The same prompts again, in the other order: each finds its own slot's cache.
    for p in [[2, 4, 4, 4], [1, 4, 4, 4]] {
        let (j, _) = job(&p, 1, &[]);
        g.submit(j);
        g.run_until_idle();
    }
    let p = &g.backend().prefills;
    assert_ne!(p[0].0, p[1].0, "two jobs at once take two slots");
    assert_eq!((p[2].0, p[2].1.reused), (p[1].0, 3));
    assert_eq!((p[3].0, p[3].1.reused), (p[0].0, 3));
}

/// Slot 0 replies with ten tokens; then a prompt of nine tokens, in ubatches of two,
/// arrives for slot 1. Returns the fake, the long prompt's progress events, both texts and
/// the long prompt's recorder.
fn long_prompt_beside_a_reply(
    pausable: bool,
) -> (Fake, Vec<PrefillProgress>, String, String, Recorder) {
    let mut fake = Fake::new(2, &[(1, &[1; 10]), (2, &[2, 2])]);
    fake.n_ubatch = 2;
    fake.pausable = pausable;
    let counters = Arc::new(GenerationCounters::with_slots(2));
    let mut g = Generator::new(&mut fake, Arc::clone(&counters));
    let (a, ra) = job(&[1, 4], 10, &[]);
    g.submit(a);
    g.step();
    let (b, rb) = job(&[2, 4, 4, 4, 4, 4, 4, 4, 4], 2, &[]);
    g.submit(b);
    g.run_until_idle();
    let progress = rb
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Progress(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(
        counters.prefill_pauses.load(Ordering::Relaxed),
        if pausable { 4 } else { 0 }
    );
    drop(g);
    (fake, progress, ra.text(), rb.text(), rb)
}

#[test]
fn a_long_prompt_pauses_after_each_ubatch_for_a_decode_step_of_the_running_reply() {
    let (fake, progress, a, b, rb) = long_prompt_beside_a_reply(true);
    assert_eq!((a.as_str(), b.as_str()), ("aaaaaaaaaa", "bb"));
    // The reply (sequence `a`) took its first token at admission and one more in the
    // first step; the prompt of sequence `b` is evaluated in the ubatches of one prefill,
    // with a decode step of `a` between each two, and none after the last.
    let (a, b) = (fake.prefills[0].0, fake.prefills[1].0);
    let expected =
        format!(
        "p{a}:0..2 d{a} p{b}:0..2 d{a} p{b}:2..4 d{a} p{b}:4..6 d{a} p{b}:6..8 d{a} p{b}:8..9 d{}",
        if a < b { format!("{a},{b}") } else { format!("{b},{a}") }
    );
    assert_eq!(fake.timeline[..12].join(" "), expected);
    // The client hears the job's progress, from where its first call found the cache, once
    // per ubatch.
    let evaluated: Vec<usize> = progress.iter().map(|p| p.evaluated).collect();
    assert_eq!(evaluated, [0, 2, 4, 6, 8, 9]);
    assert!(progress.iter().all(|p| p.cached == 0 && p.to_evaluate == 9));
    // The job counts as one prefill of nine tokens, none reused.
    assert_eq!(rb.cached_tokens(), Some(0));
    // Its last call kept what the pauses had evaluated.
    let last = fake.prefills[1].1;
    assert_eq!((last.reused, last.evaluated), (8, 1));
    assert_eq!(fake.stats.prompt_tokens.get(), 2 + 9);
    assert_eq!(fake.stats.reused_prompt_tokens.get(), 0);
}

#[test]
fn a_prefill_that_cannot_keep_its_ubatches_does_not_pause() {
    let (fake, progress, a, b, _) = long_prompt_beside_a_reply(false);
    assert_eq!((a.as_str(), b.as_str()), ("aaaaaaaaaa", "bb"));
    let (a, b) = (fake.prefills[0].0, fake.prefills[1].0);
    assert_eq!(
        fake.timeline[..7].join(" "),
        format!("p{a}:0..2 d{a} p{b}:0..2 p{b}:2..4 p{b}:4..6 p{b}:6..8 p{b}:8..9")
    );
    assert_eq!(progress.len(), 6);
    assert_eq!(fake.stats.prompt_tokens.get(), 2 + 9);
}

#[test]
fn a_prompt_alone_pauses_after_each_ubatch_and_is_evaluated_in_the_same_ubatches() {
    let mut fake = Fake::new(2, &[(2, &[2, 2])]);
    fake.n_ubatch = 2;
    let counters = Arc::new(GenerationCounters::with_slots(2));
    let mut g = Generator::new(&mut fake, Arc::clone(&counters));
    let (b, rb) = job(&[2, 4, 4, 4, 4], 2, &[]);
    g.submit(b);
    g.run_until_idle();
    assert_eq!(rb.text(), "bb");
    // Between its ubatches the core looked for other work: there was none.
    assert_eq!(counters.prefill_pauses.load(Ordering::Relaxed), 2);
    drop(g);
    let b = fake.prefills[0].0;
    assert_eq!(
        fake.timeline[..3].join(" "),
        format!("p{b}:0..2 p{b}:2..4 p{b}:4..5")
    );
    assert_eq!(fake.stats.prompt_tokens.get(), 5);
}

#[test]
fn a_short_prompt_that_arrives_during_a_long_one_is_evaluated_first() {
    let mut fake = Fake::new(2, &[(2, &[2, 2]), (5, &[5; 6])]);
    fake.n_ubatch = 2;
    let mut g = generator(&mut fake);
    let (long, r_long) = job(&[2, 4, 4, 4, 4, 4, 4, 4, 4], 2, &[]);
    g.submit(long);
    g.step();
    let (short, r_short) = job(&[5, 4], 6, &[]);
    g.submit(short);
    g.run_until_idle();
    assert_eq!(
        (r_long.text().as_str(), r_short.text().as_str()),
        ("bb", "cccccc")
    );
    drop(g);
    // The short prompt (one ubatch left) goes before the long one's seven tokens left; once
    // it ends, the long one goes on in the same step, and the short one's reply decodes
    // between the long prompt's ubatches.
    let (l, sh) = (fake.prefills[1].0, fake.prefills[0].0);
    assert_eq!(
        fake.prefills[0].1.evaluated, 2,
        "the short one finished first"
    );
    assert_eq!(
        fake.timeline[..6].join(" "),
        format!("p{l}:0..2 p{sh}:0..2 p{l}:2..4 d{sh} p{l}:4..6 d{sh}")
    );
}

#[test]
fn a_turn_sent_with_its_warm_up_waits_for_the_warm_up_and_takes_its_slot() {
    let mut fake = Fake::new(2, &[(2, &[2, 2])]);
    fake.n_ubatch = 2;
    let mut g = generator(&mut fake);
    let (warm, warm_rec) = job(&[2, 4, 4, 4, 4, 4], 0, &[]);
    let (turn, turn_rec) = job(&[2, 4, 4, 4, 4, 4, 6, 6], 2, &[]);
    g.submit(warm);
    g.submit(turn);
    g.run_until_idle();
    assert_eq!(warm_rec.done(), Some((FinishReason::Length, 0)));
    assert_eq!(turn_rec.text(), "bb");
    // A free slot shares nothing with it: the turn waited for the warm-up's slot.
    assert_eq!(turn_rec.cached_tokens(), Some(6));
    let p = &g.backend().prefills;
    assert_eq!(p[0].0, p[1].0);
}

#[test]
fn a_client_gone_during_its_prompt_stops_the_prefill_and_counts_as_cancelled() {
    let mut fake = Fake::new(1, &[(1, &[1; 20]), (2, &[2, 2])]);
    let mut g = generator(&mut fake);
    let (a, ra) = job(&[1, 4, 4], 20, &[]);
    ra.close_on_progress.store(true, Ordering::Relaxed);
    let (b, rb) = job(&[2], 2, &[]);
    g.submit(a);
    g.submit(b);
    g.run_until_idle();
    assert!(
        ra.failed().unwrap().contains("client went away"),
        "{:?}",
        ra.failed()
    );
    assert_eq!(rb.text(), "bb");
    let c = g.counters();
    assert_eq!(c.cancelled.load(Ordering::Relaxed), 1);
    assert_eq!(c.failed.load(Ordering::Relaxed), 0);
    // The cancelled prompt never reached a decode step.
    let fake = g.backend();
    assert!(fake.decodes.iter().all(|d| d.iter().all(|s| s.token != 1)));
    assert_eq!(
        fake.prefills.len(),
        1,
        "only the second job's prefill finished"
    );
}

#[test]
fn each_prefill_gets_its_own_jobs_live_gone_probe() {
    let mut fake = Fake::new(1, &[(1, &[1, 1]), (2, &[2, 2])]);
    let mut g = generator(&mut fake);
    let (a, _) = job(&[1, 4], 2, &[]);
    g.submit(a);
    g.run_until_idle();
    // A sink without a probe: the prefill stops only between ubatches.
    let (tx, _rx) = std::sync::mpsc::channel();
    g.submit(Job::new(vec![2, 4], 2, Box::new(tx)));
    g.run_until_idle();
    assert_eq!(g.backend().probed_gone, [Some(false), None]);
    // The probe reads the sink as it is when asked, not as it was when the prefill began.
    let (b, rb) = job(&[1, 5], 2, &[]);
    g.backend().close_during_prefill = Some(rb.closed.clone());
    g.submit(b);
    g.run_until_idle();
    assert_eq!(g.backend().probed_gone[2], Some(true));
}

/// A conversation of 301 tokens, then a short request in the only slot, then the
/// conversation again with a new turn, with a store of `capacity` bytes.
fn conversation_around_a_side_request(fake: &mut Fake, capacity: u64) -> Vec<Prefilled> {
    let parent = tempfile::tempdir().unwrap();
    let (folder, store) = PromptFolder::private(parent.path(), capacity).unwrap();
    let dir = folder.dir().to_path_buf();
    let mut g = generator(fake).with_prompt_store(folder, store);
    let mut first: Vec<i32> = vec![1];
    first.extend([4; 300]);
    let mut next = first.clone();
    next.extend([5, 5]);
    for p in [first, vec![2, 4], next] {
        let (j, _) = job(&p, 1, &[]);
        g.submit(j);
        g.run_until_idle();
    }
    // A folder of the run's own: nothing is put aside for a next run, and it goes.
    g.put_aside_for_next_run();
    drop(g);
    assert!(!dir.exists());
    fake.prefills.iter().map(|p| p.1).collect()
}

#[test]
fn a_conversation_put_aside_at_the_end_of_a_run_is_loaded_back_by_the_next_run() {
    let parent = tempfile::tempdir().unwrap();
    let key = crate::prompt_folder::StoreKey::for_tests("run");
    let mut conversation: Vec<i32> = vec![1];
    conversation.extend([4; 300]);
    let mut next_turn = conversation.clone();
    next_turn.extend([5, 5]);
    let run = |prompt: &[i32]| {
        let mut fake = Fake::new(1, &[(1, &[1])]);
        fake.n_ctx = 4096;
        let (folder, store, restored) = PromptFolder::open(parent.path(), &key, 1 << 20).unwrap();
        let mut g = generator(&mut fake).with_prompt_store(folder, store);
        let (j, _) = job(prompt, 1, &[]);
        g.submit(j);
        g.run_until_idle();
        g.put_aside_for_next_run();
        drop(g);
        let st = fake.stats.snapshot(Default::default()).prompt_store;
        (fake.prefills[0].1, restored, st)
    };
    let (first, restored, st) = run(&conversation);
    assert_eq!((first.reused, restored.entries), (0, 0));
    assert_eq!((st.saved, st.loaded), (1, 0), "put aside at the end");
    // The next run starts with it and keeps the whole conversation.
    let (second, restored, st) = run(&next_turn);
    assert_eq!((restored.entries, restored.bytes), (1, 30_100));
    assert_eq!((second.reused, second.evaluated), (301, 2));
    assert_eq!((st.loaded, st.failures), (1, 0));
    // Its own cache adds two tokens to the stored prefix: not worth writing it all again.
    assert_eq!(st.saved, 0);
    let mut long_turn = next_turn.clone();
    long_turn.extend([6; 300]);
    let (third, restored, st) = run(&long_turn);
    assert_eq!((restored.entries, restored.bytes), (1, 30_100));
    assert_eq!(third.reused, 301);
    // This one adds 300: the longer prefix replaces the stored one.
    assert_eq!(st.saved, 1);
    let (fourth, restored, _) = run(&long_turn);
    assert_eq!((restored.entries, restored.bytes), (1, 60_300));
    assert_eq!(fourth.reused, 602);
}

#[test]
fn an_idle_server_puts_a_conversation_aside_once_it_has_grown_enough() {
    let parent = tempfile::tempdir().unwrap();
    let key = crate::prompt_folder::StoreKey::for_tests("idle");
    let mut conversation: Vec<i32> = vec![1];
    conversation.extend([4; 300]);
    // One server's run: a job, then idle (the save is due at once), then the channel
    // closes. Returns the stats and the index a server killed then would leave.
    let serve = |prompt: &[i32]| {
        let mut fake = Fake::new(1, &[(1, &[1])]);
        fake.n_ctx = 4096;
        let (folder, store, _) = PromptFolder::open(parent.path(), &key, 1 << 20).unwrap();
        let index = folder.dir().join("index.json");
        let mut g = generator(&mut fake)
            .with_prompt_store(folder, store)
            .with_save_when_idle(Duration::ZERO);
        let (tx, rx) = std::sync::mpsc::channel();
        let (j, rec) = job(prompt, 1, &[]);
        tx.send(j).unwrap();
        drop(tx);
        g.serve(&rx, &AtomicBool::new(false));
        assert_eq!(rec.text(), "a");
        let left: epm_core::prompt_store::StoreIndex = std::fs::read(&index)
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or_default();
        drop(g);
        let st = fake.stats.snapshot(Default::default()).prompt_store;
        let lengths: Vec<usize> = left.entries.iter().map(|e| e.tokens.len()).collect();
        (st, lengths, fake.prefills[0].1)
    };
    let (st, left, _) = serve(&conversation);
    assert_eq!((st.saved, st.saved_idle), (1, 1), "{st:?}");
    assert_eq!(left, [301], "the index lists it before any stop");
    // A turn that adds less than MIN_STORED_GAIN_TOKENS is not written again.
    let mut turn = conversation.clone();
    turn.extend([5; 10]);
    let (st, left, prefilled) = serve(&turn);
    assert_eq!((prefilled.reused, prefilled.evaluated), (301, 10));
    assert_eq!((st.saved, st.saved_idle, st.loaded), (0, 0, 1), "{st:?}");
    assert_eq!(left, [301]);
    // One that adds that much replaces the shorter entry.
    let mut long_turn = turn.clone();
    long_turn.extend([6; 300]);
    let (st, left, prefilled) = serve(&long_turn);
    assert_eq!(prefilled.reused, 301);
    assert_eq!((st.saved, st.saved_idle), (1, 1), "{st:?}");
    assert_eq!(left, [long_turn.len()]);
}

#[test]
fn a_conversation_put_aside_for_a_side_request_is_loaded_back_for_its_next_turn() {
    let mut fake = Fake::new(1, &[(1, &[1]), (2, &[2])]);
    fake.n_ctx = 4096;
    let p = conversation_around_a_side_request(&mut fake, 1 << 20);
    assert_eq!(p[1].reused, 0, "the side request shares nothing");
    assert_eq!(
        p[2].reused, 301,
        "the next turn keeps the whole conversation"
    );
    let st = fake.stats.snapshot(Default::default()).prompt_store;
    assert_eq!((st.saved, st.loaded, st.failures), (1, 1, 0));
    assert_eq!(st.written_bytes, 30_100);
    // Without a store the side request's prompt takes the slot's cache.
    let mut plain = Fake::new(1, &[(1, &[1]), (2, &[2])]);
    plain.n_ctx = 4096;
    let mut g = generator(&mut plain);
    for p in [vec![1; 301], vec![2, 4], vec![1; 303]] {
        let (j, _) = job(&p, 1, &[]);
        g.submit(j);
        g.run_until_idle();
    }
    assert_eq!(g.backend().prefills[2].1.reused, 0);
}

#[test]
fn a_prefix_larger_than_the_whole_store_is_not_written() {
    let mut fake = Fake::new(1, &[(1, &[1]), (2, &[2])]);
    fake.n_ctx = 4096;
    // The conversation's 301 tokens take 30,100 bytes.
    let p = conversation_around_a_side_request(&mut fake, 30_099);
    assert_eq!((p[2].reused, p[2].evaluated), (0, 303));
    let st = fake.stats.snapshot(Default::default()).prompt_store;
    assert_eq!((st.saved, st.too_large, st.failures), (0, 1, 0), "{st:?}");
    assert_eq!(st.written_bytes, 0);
    // A store that holds exactly its bytes keeps it.
    let mut fake = Fake::new(1, &[(1, &[1]), (2, &[2])]);
    fake.n_ctx = 4096;
    let p = conversation_around_a_side_request(&mut fake, 30_100);
    assert_eq!(p[2].reused, 301);
    let st = fake.stats.snapshot(Default::default()).prompt_store;
    assert_eq!((st.saved, st.too_large), (1, 0));
}

#[test]
fn a_prefix_that_cannot_be_loaded_is_forgotten_and_the_prompt_evaluated_whole() {
    let mut fake = Fake::new(1, &[(1, &[1]), (2, &[2])]);
    fake.n_ctx = 4096;
    fake.fail_loads = true;
    let p = conversation_around_a_side_request(&mut fake, 1 << 20);
    assert_eq!(p[2].reused, 0);
    assert_eq!(p[2].evaluated, 303);
    let st = fake.stats.snapshot(Default::default()).prompt_store;
    assert_eq!((st.saved, st.loaded, st.failures), (1, 0, 1));
}

#[test]
fn a_closed_receiver_frees_its_slot_for_the_next_job() {
    let mut fake = Fake::new(1, &[(1, &[1; 20]), (2, &[2, 2])]);
    let mut g = generator(&mut fake);
    let (a, ra) = job(&[1], 20, &[]);
    let (b, rb) = job(&[2], 2, &[]);
    g.submit(a);
    g.submit(b);
    g.step();
    g.step();
    assert_eq!(g.counters().active_slots.load(Ordering::Relaxed), 1);
    assert_eq!(g.counters().waiting.load(Ordering::Relaxed), 1);
    ra.closed.store(true, Ordering::Relaxed);
    g.run_until_idle();
    assert_eq!(ra.done(), None);
    assert_eq!(rb.text(), "bb");
    let c = g.counters();
    assert_eq!(c.cancelled.load(Ordering::Relaxed), 1);
    assert_eq!(c.completed.load(Ordering::Relaxed), 1);
}

#[test]
fn shutdown_ends_every_job_and_bad_jobs_fail_alone() {
    let mut fake = Fake::new(1, &[(1, &[1; 20])]);
    let mut g = generator(&mut fake);
    let (too_long, rt) = job(&[1], 100, &[]);
    let (empty, re) = job(&[], 1, &[]);
    let (running, rr) = job(&[1], 20, &[]);
    let (queued, rq) = job(&[1], 20, &[]);
    for j in [too_long, empty, running, queued] {
        g.submit(j);
    }
    g.step();
    assert!(rt.failed().unwrap().contains("context too small"));
    assert!(re.failed().unwrap().contains("empty"));
    assert_eq!(g.counters().failed.load(Ordering::Relaxed), 2);
    g.shut_down();
    for r in [&rr, &rq] {
        assert!(
            r.failed().unwrap().contains("shutting down"),
            "{:?}",
            r.failed()
        );
    }
    assert!(g.idle());
    assert_eq!(g.counters().cancelled.load(Ordering::Relaxed), 2);
}

#[test]
fn serve_runs_jobs_from_a_channel_until_stopped() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (a, ra) = job(&[1], 2, &[]);
    tx.send(a).unwrap();
    drop(tx);
    let mut fake = Fake::new(1, &[(1, &[1, 2])]);
    let mut g = generator(&mut fake);
    // The channel closes once its job is done: serve returns.
    g.serve(&rx, &AtomicBool::new(false));
    assert_eq!(ra.text(), "ab");
    let (tx, rx) = std::sync::mpsc::channel();
    let (b, rb) = job(&[1], 2, &[]);
    tx.send(b).unwrap();
    g.serve(&rx, &AtomicBool::new(true));
    assert!(rb.failed().unwrap().contains("shutting down"));
}

#[test]
fn slot_views_follow_each_job() {
    let mut fake = Fake::new(2, &[(1, &[1; 10])]);
    let mut g = generator(&mut fake);
    let (a, _) = job(&[1, 4, 4], 5, &[]);
    g.submit(a);
    g.step();
    let c = g.counters().clone();
    let busy: Vec<usize> = (0..2)
        .filter(|&i| c.slots[i].state() == SlotState::Decode)
        .collect();
    assert_eq!(busy.len(), 1, "one slot decodes");
    let v = &c.slots[busy[0]];
    assert_eq!(v.prompt_tokens.load(Ordering::Relaxed), 3);
    assert_eq!(v.generated.load(Ordering::Relaxed), 2);
    g.run_until_idle();
    assert_eq!(v.state(), SlotState::Idle);
    assert_eq!(v.generated.load(Ordering::Relaxed), 5);
    // The same prompt again reuses its prefix, and the view says so.
    let (b, _) = job(&[1, 4, 4], 1, &[]);
    g.submit(b);
    g.run_until_idle();
    assert_eq!(v.reused_tokens.load(Ordering::Relaxed), 2);
}

#[test]
fn parsed_tool_calls_end_with_the_tool_calls_reason() {
    let mut fake = Fake::new(1, &[(9, &[1, 8])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 10, &[]);
    let j = j.with_parser(OutputParser::new(Some(epm_chat::ToolFamily::Hermes), None));
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.text(), "a");
    let calls: Vec<epm_chat::ToolCall> = rec
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].name.as_str(), calls[0].arguments.as_str()),
        ("f", r#"{"x":1}"#)
    );
    assert_eq!(rec.done(), Some((FinishReason::ToolCalls, 3)));
    // Cut off by max_tokens before the end, the same reply is a call but ends by length.
    let mut fake = Fake::new(1, &[(9, &[1, 8, 1])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 3, &[]);
    g.submit(j.with_parser(OutputParser::new(Some(epm_chat::ToolFamily::Hermes), None)));
    g.run_until_idle();
    assert_eq!(rec.done(), Some((FinishReason::Length, 3)));
}

#[test]
fn reasoning_is_split_out_of_the_content() {
    let split = epm_chat::ReasoningSplit {
        open: "<think>".into(),
        close: "</think>".into(),
        starts_open: false,
    };
    // "<think>" "a" "b" "</" ... never closes: all reasoning.
    let mut fake = Fake::new(1, &[(9, &[9, 1, 2])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 10, &[]);
    g.submit(j.with_parser(OutputParser::new(None, Some(split))));
    g.run_until_idle();
    assert_eq!((rec.reasoning().as_str(), rec.text().as_str()), ("ab", ""));
}

/// A budget for blocks between "<think>" (token 9) and "</" (token 7), which forces
/// `forced`.
fn think_budget(
    limit: Option<u32>,
    forced: Vec<i32>,
    starts_open: bool,
) -> Result<ReasoningBudget, crate::generation::BudgetError> {
    ReasoningBudget::new(
        limit,
        (vec![9], PIECES[9].as_bytes()),
        PIECES[7].as_bytes(),
        forced,
        starts_open,
    )
}

#[test]
fn a_reasoning_budget_forces_the_close_and_the_text_goes_on_after_it() {
    let split = || epm_chat::ReasoningSplit {
        open: "<think>".into(),
        close: "</".into(),
        starts_open: false,
    };
    // The model opens a block ("<think>") and would think on: "a" "b" "c" "a" "b" "c".
    let script: &[i32] = &[9, 1, 2, 5, 1, 2, 5, 1];
    let mut fake = Fake::new(1, &[(9, script)]);
    let mut g = generator(&mut fake);
    // Budget 2: after "ab", " " (the message) and "</" (the close) are forced; the model's
    // own picks go on after them.
    let budget = think_budget(Some(2), vec![11, 7], false).unwrap();
    let (j, rec) = job(&[9], 8, &[]);
    g.submit(
        j.with_parser(OutputParser::new(None, Some(split())))
            .with_reasoning_budget(Some(budget)),
    );
    g.run_until_idle();
    assert_eq!(
        (rec.reasoning().as_str(), rec.text().as_str()),
        ("ab ", "bca")
    );
    assert_eq!(rec.done(), Some((FinishReason::Length, 8)));
    assert_eq!(rec.reasoning_tokens(), Some(2));
    assert_eq!(
        *g.backend().stats.generated_ids.lock().unwrap(),
        [9, 1, 2, 11, 7, 2, 5, 1]
    );
    // Without a limit the same script thinks to the end, every token after the opening
    // counted.
    let (j, rec) = job(&[9], 8, &[]);
    let counter = think_budget(None, vec![7], false).unwrap();
    g.submit(
        j.with_parser(OutputParser::new(None, Some(split())))
            .with_reasoning_budget(Some(counter)),
    );
    g.run_until_idle();
    assert_eq!(
        (rec.reasoning().as_str(), rec.text().as_str()),
        ("abcabca", "")
    );
    assert_eq!(rec.reasoning_tokens(), Some(7));
}

/// A constraint is for the answer: when the prompt opened a reasoning block, the picks up
/// to and including its close are free, and every pick after it is constrained. A reply
/// that starts outside a block is constrained from its first pick.
#[test]
fn a_constraint_waits_for_the_close_of_the_block_the_prompt_opened() {
    let grammar = || Some(Constraint::Grammar("root ::= \"b\"+".into()));
    let run = |starts_open: bool, budget: Option<u32>, constraint: Option<Constraint>| {
        // "a" "b" "</" "c" "a": the model closes the block itself at the third token.
        let mut fake = Fake::new(1, &[(9, &[1, 2, 7, 5, 1])]);
        let mut g = generator(&mut fake);
        let b = think_budget(budget, vec![7], starts_open).unwrap();
        let (j, _) = job(&[9], 5, &[]);
        g.submit(j.with_constraint(constraint).with_reasoning_budget(Some(b)));
        g.run_until_idle();
        let ids = g.backend().stats.generated_ids.lock().unwrap().clone();
        (g.backend().constrained.clone(), ids)
    };
    let (free, held, after) = (false, false, true);
    assert_eq!(
        run(true, None, grammar()).0,
        [free, held, held, after, after]
    );
    // A budget of 1 forces the close at the second pick (in place of the script's "b"),
    // and the constraint follows it.
    let (picks, ids) = run(true, Some(1), grammar());
    assert_eq!(ids, [1, 7, 7, 5, 1]);
    assert_eq!(picks, [free, held, after, after, after]);
    // Outside a block, or without a constraint, every pick is as before.
    assert_eq!(run(false, None, grammar()).0, [true; 5]);
    assert_eq!(run(true, None, None).0, [true; 5]);
}

/// A constrained reply that starts outside a block may open one at its first pick (a
/// template that leaves the opening to the model): only that pick offers the opening free
/// of the grammar, and when taken, the reasoning is free and the constraint holds from the
/// block's close on, a budget's close forced as in a block the prompt opened. When the
/// first pick is the answer's, a strict grammar's later "opening" is text of the answer,
/// into which no close is forced; a lazy grammar's is a block, as without a constraint.
#[test]
fn a_constrained_reply_may_open_its_block_at_its_first_pick() {
    let strict = || Some(Constraint::Grammar("root ::= \"b\"+".into()));
    let lazy = || {
        Some(Constraint::Lazy {
            grammar: "root ::= \"b\"+".into(),
            triggers: vec!["c".into()],
        })
    };
    let run = |script: &[i32], budget: Option<u32>, constraint: Option<Constraint>| {
        let mut fake = Fake::new(1, &[(9, script)]);
        let mut g = generator(&mut fake);
        let b = think_budget(budget, vec![7], false).unwrap();
        let (j, _) = job(&[9], script.len() as u32, &[]);
        g.submit(j.with_constraint(constraint).with_reasoning_budget(Some(b)));
        g.run_until_idle();
        let ids = g.backend().stats.generated_ids.lock().unwrap().clone();
        let b = g.backend();
        (b.constrained.clone(), b.free.clone(), ids)
    };
    let (opening, held, after) = (true, false, true);
    // The model opens the block ("<think>" = 9), reasons "a", closes it ("</" = 7).
    let (picks, free, ids) = run(&[9, 1, 7, 5, 1], None, strict());
    assert_eq!(picks, [opening, held, held, after, after]);
    assert_eq!(free, [Some(9), None, None, None, None]);
    assert_eq!(ids, [9, 1, 7, 5, 1]);
    // A budget of 1 forces the close in place of the script's "b".
    let (picks, _, ids) = run(&[9, 1, 2, 7, 5], Some(1), strict());
    assert_eq!(ids, [9, 1, 7, 7, 5]);
    assert_eq!(picks, [opening, held, held, after, after]);
    // The answer starts at once: a later 9 is its text, counted but never closed for it.
    let (picks, free, ids) = run(&[1, 9, 2, 2, 2], Some(1), strict());
    assert_eq!(ids, [1, 9, 2, 2, 2]);
    assert_eq!(picks, [true; 5]);
    assert_eq!(free, [Some(9), None, None, None, None]);
    // Under a lazy grammar it is a block, closed at its budget; opened at the first pick,
    // the lazy grammar does not watch the reasoning for its trigger either.
    assert_eq!(run(&[1, 9, 2, 2, 2], Some(1), lazy()).2, [1, 9, 2, 7, 2]);
    assert_eq!(
        run(&[9, 1, 7, 5, 1], None, lazy()).0,
        [opening, held, held, after, after]
    );
    // Without a constraint nothing is offered free.
    assert_eq!(run(&[9, 1, 7, 5, 1], None, None).1, [None; 5]);
}

#[test]
fn logprobs_are_the_log_softmax_of_the_logits_sorted() {
    let mut fake = Fake::new(1, &[(9, &[2, 1])]);
    let logits = fake.logits.clone();
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 2, &[]);
    g.submit(j.with_logprobs(Some(3)));
    g.run_until_idle();
    let lps: Vec<TokenLogprob> = rec
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Logprob(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(lps.len(), 2);
    let lse = logits.iter().map(|&x| f64::from(x).exp()).sum::<f64>().ln();
    for (lp, token) in lps.iter().zip([2, 1]) {
        assert_eq!(lp.token.id, token);
        let want = (f64::from(logits[token as usize]) - lse) as f32;
        assert!((lp.logprob - want).abs() < 1e-6, "{} vs {want}", lp.logprob);
        let ids: Vec<i32> = lp.top.iter().map(|(t, _)| t.id).collect();
        assert_eq!(ids, vec![2, 4, 8], "the 3 largest logits, largest first");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}

#[test]
fn line_limits_cut_a_less_indented_line_and_stop_after_the_time_with_a_break() {
    // "a\n  a\n c": the third line starts with one space where two are asked for.
    let mut fake = Fake::new(1, &[(9, &[1, 10, 11, 11, 1, 10, 11, 5, 10, 1, 2])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 20, &[]);
    g.submit(j.with_line_limits(LineLimits {
        min_indent: 2,
        max_time: None,
    }));
    g.run_until_idle();
    assert_eq!(rec.text(), "a\n  a\n ");
    assert_eq!(rec.done(), Some((FinishReason::Length, 8)));

    // Without the limit the whole script is text.
    let mut fake = Fake::new(1, &[(9, &[1, 10, 11, 11, 1, 10, 11, 5, 10, 1, 2])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 11, &[]);
    g.submit(j);
    g.run_until_idle();
    assert_eq!(rec.text(), "a\n  a\n c\nab");

    // A time limit already passed: the first token after the one with the break ends it.
    let mut fake = Fake::new(1, &[(9, &[1, 10, 2, 5, 1])]);
    let mut g = generator(&mut fake);
    let (j, rec) = job(&[9], 20, &[]);
    g.submit(j.with_line_limits(LineLimits {
        min_indent: 0,
        max_time: Some(std::time::Duration::ZERO),
    }));
    g.run_until_idle();
    assert_eq!(rec.text(), "a\nb");
    assert_eq!(rec.done(), Some((FinishReason::Length, 3)));
}
