//! The real [`Advisor`]: the pager's decisions become madvise/fadvise calls on llama.cpp's
//! mapping. Evictions that race a read still in flight are found with `cachestat` and
//! dropped again until they are gone (the re-drop list).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use epm_core::assist::{AssistChoice, AssistMode, StepWay};
use epm_core::pager::{Advisor, FileRange};
use epm_core::stats::IoCounters;

use crate::assist::{worth_sharing, Assist, Call, MakeCall, Op};
use crate::mapping::FileMapping;
use crate::populate::PopulatePool;
use crate::worker::{Work, Worker};
use crate::{assist, inward, outward};

/// How missing experts are brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// `MADV_WILLNEED`: asynchronous readahead of the exact ranges; compute then takes a
    /// (minor, or waiting) fault per page.
    WillNeed,
    /// `MADV_WILLNEED`, then `MADV_POPULATE_READ` on a pool of I/O threads, waited for before
    /// the layer computes: the pages arrive by readahead and are mapped by the pool, so
    /// compute takes no faults.
    PopulateRead { threads: usize },
}

pub(crate) fn add_elapsed(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// Evicted ranges that may wait for a re-drop at once. Each is one expert slice; more than
/// this many late evictions between two routing steps is far beyond what was measured.
const REDROP_CAPACITY: usize = 4096;

/// Page ranges collected for the populate pool in one routing step; capacity reserved up
/// front so the hook never allocates.
const BATCH_CAPACITY: usize = 1 << 14;

/// Whole-layer reads listed at once (`reading`); a full list reads the next layer by
/// expert instead. A prompt reads one layer per routing step, and the reader has usually
/// finished the last before the next is asked.
const WHOLE_READS_CAPACITY: usize = 64;

/// Invariants:
/// 1. every range in `redrop` is page-aligned, was evicted, and has not been advised in
///    since: `will_need` trims any part of it that a later read covers, so a re-drop can
///    only drop pages the pager counts as evicted;
/// 2. `redrop` and `batch` never grow past the capacity reserved in `new`, so the hook's
///    calls never allocate;
/// 3. with a readahead thread, every `evict` and `will_need` first cancels the queued
///    speculative reads of its range, so the thread never reads in evicted pages;
/// 4. with an eviction thread, every read (`will_need`, `will_need_ahead`) first takes its
///    pages out of the queued evictions, so the thread never drops pages being read in;
/// 5. with an assisting thread, `step` holds the calls collected since the last `flush` and
///    no two of them touch the same page: a read takes its pages out of the collected
///    evictions, and an eviction drops the collected reads of its bytes, so the calls may be
///    made in any order, on either thread, with the outcome of the order they were asked in;
/// 6. with a whole-layer reader, a range is under `MADV_NORMAL` only while it is listed in
///    `reading` and not yet read (the reader puts it back under `MADV_RANDOM` when done),
///    and every `evict` first takes its pages out of the reader's hands and puts the
///    listed ranges it overlaps back under `MADV_RANDOM`: no eviction races a whole-layer
///    read, and no fault outside one reads around itself.
pub struct OsAdvisor {
    pub files: Arc<Vec<FileMapping>>,
    counters: Arc<IoCounters>,
    pool: Option<PopulatePool>,
    /// Speculative reads go to this thread when present (`with_ahead_thread`).
    ahead: Option<Worker>,
    /// Ranges were queued for `ahead` since the last `flush`.
    ahead_queued: bool,
    /// Evictions go to this thread when present (`with_evict_thread`).
    evictor: Option<Worker>,
    evict_queued: bool,
    /// The step's calls are shared with this thread at `flush` when present
    /// (`with_assist_thread`).
    assist: Option<Assist<OsCalls>>,
    /// The calls collected for `assist` since the last `flush` (invariant 5).
    step: Vec<Op>,
    /// Which way each step of two calls or more is made, from what each way cost.
    assist_choice: AssistChoice,
    /// Reads a prompt's whole layers on a thread of its own when present
    /// (`with_whole_layer_reader`).
    whole_reader: Option<Worker>,
    whole_queued: bool,
    /// Whole-layer reads handed to `whole_reader` and perhaps not done (invariant 6).
    reading: Vec<FileRange>,
    /// The file's readahead window as the kernel applies it to llama.cpp's mapping
    /// (`with_whole_layer_reader`).
    read_around: u64,
    /// Page ranges (file, start, end) collected for the pool until `flush`.
    batch: Vec<(u32, u64, u64)>,
    /// Evicted ranges the page cache still held right after the drop: a wrong speculative
    /// read can be evicted while its I/O is in flight, and the kernel skips pages under I/O.
    /// Dropped again at every `flush` until clean.
    redrop: Vec<FileRange>,
}

impl OsAdvisor {
    pub fn new(
        files: Vec<FileMapping>,
        prefetch: Prefetch,
        counters: Arc<IoCounters>,
    ) -> OsAdvisor {
        let files = Arc::new(files);
        let pool = match prefetch {
            Prefetch::WillNeed => None,
            Prefetch::PopulateRead { threads } => {
                Some(PopulatePool::new(threads.max(1), files.clone()))
            }
        };
        OsAdvisor {
            files,
            counters,
            pool,
            ahead: None,
            ahead_queued: false,
            evictor: None,
            evict_queued: false,
            whole_reader: None,
            whole_queued: false,
            reading: Vec::new(),
            read_around: 0,
            assist: None,
            step: Vec::new(),
            assist_choice: AssistChoice::new(AssistMode::Always),
            batch: Vec::with_capacity(BATCH_CAPACITY),
            redrop: Vec::with_capacity(REDROP_CAPACITY),
        }
    }

    /// Advise speculative reads (`Advisor::will_need_ahead`) from a thread of their own, so
    /// their page allocation and read submission leave the compute thread. Only with
    /// `Prefetch::WillNeed`: the populate pool already reads on its own threads.
    pub fn with_ahead_thread(mut self) -> OsAdvisor {
        if self.pool.is_none() {
            self.ahead = Some(Worker::new(
                Work::ReadAhead,
                self.files.clone(),
                self.counters.clone(),
                u64::MAX,
            ));
        }
        self
    }

    /// Make evictions on a thread of their own, with at most `slack` bytes queued or not yet
    /// dropped: those pages are still resident, so the caller keeps `slack` out of the
    /// pager's budget. Evictions beyond it are made inline.
    pub fn with_evict_thread(mut self, slack: u64) -> OsAdvisor {
        self.evictor = Some(Worker::new(
            Work::Evict,
            self.files.clone(),
            self.counters.clone(),
            slack,
        ));
        self
    }

    /// Read a prompt's whole layers (`Advisor::read_whole`) through the kernel's read-around
    /// on a thread of its own: the middle of the range goes under `MADV_NORMAL` at once, so
    /// compute's own faults read around themselves there too, and the thread faults it all
    /// in (`MADV_POPULATE_READ`) while the layer computes, then puts it back under
    /// `MADV_RANDOM`. The pages come in large folios (`epm-run probe-paging` measures the
    /// kernel's work against 4 KiB pages). The read-around reaches past the pages faulted:
    /// half a window back, and forward the window being read plus the next one that it
    /// starts (measured on W1: up to 27 MiB past a layer's end with a 16 MiB window). So
    /// the range's ends, `whole_read_margins(read_around)`, are read as `will_need` reads
    /// them, exactly. `read_around` is the readahead window the kernel applies to the
    /// mapping. Without a reader, or for a range too short to have a middle, `read_whole`
    /// reads as `will_need`.
    pub fn with_whole_layer_reader(mut self, read_around: u64) -> OsAdvisor {
        self.read_around = read_around;
        self.whole_reader = Some(Worker::new(
            Work::ReadWhole,
            self.files.clone(),
            self.counters.clone(),
            u64::MAX,
        ));
        self.reading = Vec::with_capacity(WHOLE_READS_CAPACITY);
        self
    }

    /// Take `[start, end)` out of the whole-layer reader's hands and put the listed reads
    /// it overlaps back under `MADV_RANDOM` (invariant 6); forget the reads it has done.
    fn end_whole_reads(&mut self, file: u32, start: u64, end: u64) {
        let Some(reader) = &self.whole_reader else {
            return;
        };
        if self.reading.is_empty() {
            return;
        }
        if reader.idle() {
            self.reading.clear();
            return;
        }
        let mut i = 0;
        while i < self.reading.len() {
            let r = self.reading[i];
            if overlaps(&r, file, start, end) {
                reader.cancel(r.file, r.offset, r.offset + r.len);
                self.files[r.file as usize].set_random(r.offset, r.len);
                self.reading.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Share each routing step's reads and evictions (those not handed to the readahead or
    /// eviction thread) with a thread that works only while the hook waits for them, on a
    /// core that is idle between graph splits. Two threads contend in the kernel, so the
    /// hook saves about a third of the calls' time, not half, or loses time where the
    /// kernel's work per page is cheap; `mode` says whether every step is shared or only
    /// where that measures cheaper (`epm_core::assist`).
    pub fn with_assist_thread(mut self, mode: AssistMode) -> OsAdvisor {
        self.assist = Some(Assist::new(OsCalls {
            files: self.files.clone(),
            counters: self.counters.clone(),
        }));
        self.step = Vec::with_capacity(assist::STEP_CAPACITY);
        self.assist_choice = AssistChoice::new(mode);
        self
    }

    /// Collect a call for the assisted step (invariant 5); `false` when there is no
    /// assisting thread or the step is full (the caller makes the call itself).
    fn collect(&mut self, call: Call) -> bool {
        if self.assist.is_none() || self.step.len() == self.step.capacity() {
            return false;
        }
        match call {
            Call::Read(r) => {
                let (s, e) = outward(r.offset, r.len, self.files[r.file as usize].page());
                self.forget_collected_evictions(r.file, s, e);
            }
            Call::Evict(r) => self.step.retain(|op| match op.call {
                Call::Read(q) => !overlaps(&q, r.file, r.offset, r.offset + r.len),
                Call::Evict(_) => true,
            }),
        }
        self.step.push(Op::new(call));
        true
    }

    /// Take `[start, end)` out of the evictions collected for the assisted step.
    fn forget_collected_evictions(&mut self, file: u32, start: u64, end: u64) {
        remove_span_by(
            &mut self.step,
            file,
            start,
            end,
            |op| match op.call {
                Call::Evict(q) => Some(q),
                Call::Read(_) => None,
            },
            |_, q| Op::new(Call::Evict(q)),
        );
    }

    /// Make the step's collected calls on both threads, then list the evictions that found
    /// reads still in flight for a re-drop, as an inline eviction would.
    fn run_step(&mut self) {
        let Some(assist) = &self.assist else {
            return;
        };
        if self.step.is_empty() {
            return;
        }
        // A step not worth sharing is made alone and left untimed.
        if !worth_sharing(self.step.len()) {
            assist.run(&mut self.step, StepWay::Alone);
        } else {
            let way = self.assist_choice.next_way();
            let bytes = self.step.iter().map(|op| op.call.range().len).sum();
            let t = Instant::now();
            assist.run(&mut self.step, way);
            let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let before = self.assist_choice.preferred();
            self.assist_choice.record(way, ns, bytes);
            if self.assist_choice.preferred() != before {
                let mib = |w| {
                    self.assist_choice
                        .per_byte(w)
                        .map(|c| c * (1u64 << 20) as f64 / 1e6)
                };
                tracing::debug!(
                    "the hook's steps are made {:?} now: ms per MiB advised alone {:?}, shared {:?}",
                    self.assist_choice.preferred(),
                    mib(StepWay::Alone),
                    mib(StepWay::Shared)
                );
            }
            let steps = match way {
                StepWay::Alone => &self.counters.assist_steps_alone,
                StepWay::Shared => &self.counters.assist_steps_shared,
            };
            steps.fetch_add(1, Ordering::Relaxed);
        }
        for i in 0..self.step.len() {
            let op = self.step[i];
            self.counters
                .assist_calls
                .fetch_add(u64::from(op.assisted), Ordering::Relaxed);
            let Call::Evict(r) = op.call else {
                continue;
            };
            if op.late {
                self.drop_again(r);
            }
        }
        self.step.clear();
    }

    /// An eviction of `r` found part of it still cached (a read in flight): list its pages
    /// for a re-drop at the next flush.
    fn drop_again(&mut self, r: FileRange) {
        self.counters.late_evictions.fetch_add(1, Ordering::Relaxed);
        let (s, e) = inward(r.offset, r.len, self.files[r.file as usize].page());
        if self.redrop.len() < self.redrop.capacity() {
            self.redrop.push(FileRange {
                file: r.file,
                offset: s,
                len: e - s,
            });
        } else {
            self.counters
                .redrop_overflows
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Take `[start, end)` out of the queued evictions (invariant 4).
    fn cancel_evictions(&self, file: u32, start: u64, end: u64) {
        if let Some(w) = &self.evictor {
            w.cancel(file, start, end);
        }
    }

    /// Cancel the readahead thread's queued reads of `[start, end)` (invariant 3).
    fn cancel_ahead(&self, file: u32, start: u64, end: u64) {
        if let Some(a) = &self.ahead {
            let n = a.cancel(file, start, end);
            self.counters
                .ahead_cancelled
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `r` is about to be read in: its pages leave the re-drop list (invariant 1). Returns
    /// them, rounded outward.
    fn forget_redrops(&mut self, r: FileRange) -> (u64, u64) {
        let (s, e) = outward(r.offset, r.len, self.files[r.file as usize].page());
        if !self.redrop.is_empty() {
            remove_span(&mut self.redrop, r.file, s, e);
        }
        (s, e)
    }

    /// Ranges still waiting to be dropped again (see `redrop`).
    pub fn pending_redrops(&self) -> usize {
        self.redrop.len()
    }

    /// Drop every range of `redrop` again ([`evict_again`]); keep those the page cache still
    /// holds.
    fn retry_redrops(&mut self) {
        if self.redrop.is_empty() {
            return;
        }
        let t = Instant::now();
        let mut i = 0;
        while i < self.redrop.len() {
            let r = self.redrop[i];
            let m = &self.files[r.file as usize];
            if !evict_again(m, r, &self.counters) {
                i += 1;
            } else {
                self.redrop.swap_remove(i);
            }
        }
        add_elapsed(&self.counters.evict_ns, t);
    }
}

/// Makes the assisted calls on llama.cpp's mapping, counting their time as the hook's
/// inline calls are counted.
struct OsCalls {
    files: Arc<Vec<FileMapping>>,
    counters: Arc<IoCounters>,
}

impl OsCalls {
    fn read(files: &[FileMapping], counters: &IoCounters, r: FileRange) {
        let t = Instant::now();
        files[r.file as usize].will_need(r.offset, r.len);
        add_elapsed(&counters.will_need_ns, t);
    }

    /// Drop `r`: the bytes advised, and whether part of it was still cached afterwards (a
    /// read in flight, which the kernel skips).
    fn evict(files: &[FileMapping], r: FileRange) -> (u64, bool) {
        let m = &files[r.file as usize];
        let (s, e) = inward(r.offset, r.len, m.page());
        let dropped = m.evict(r.offset, r.len);
        (dropped, dropped > 0 && m.any_cached(s, e - s))
    }
}

impl MakeCall for OsCalls {
    fn make(&self, call: Call) -> bool {
        match call {
            Call::Read(r) => {
                OsCalls::read(&self.files, &self.counters, r);
                false
            }
            Call::Evict(r) => {
                let t = Instant::now();
                let (_, late) = OsCalls::evict(&self.files, r);
                add_elapsed(&self.counters.evict_ns, t);
                late
            }
        }
    }
}

/// Drop a range again that an eviction left partly cached, counting the attempt; whether
/// none of it is cached now. Pages whose read was in flight are gone once it lands. Pages
/// already read that stay (mincore counts only those) are held by a large folio that also
/// holds a neighbour's pages, cached before the run by a read or a write of the file where
/// the pager kept the page cache it found (every expert fits the budget): the kernel drops
/// a folio only whole, so the folios at the range's ends are split
/// ([`FileMapping::split_folio`], which leaves a page still being read alone) and the
/// range is dropped once more. A range whose only cached pages are still being read (a
/// wrong guess evicted early, the usual late eviction) costs no more than the mincore.
pub(crate) fn evict_again(m: &FileMapping, r: FileRange, counters: &IoCounters) -> bool {
    m.evict(r.offset, r.len);
    counters.redrops.fetch_add(1, Ordering::Relaxed);
    let (s, e) = inward(r.offset, r.len, m.page());
    if e > s && m.resident_bytes(s, e - s) > 0 && (m.split_folio(s) | m.split_folio(e - m.page())) {
        counters.folio_splits.fetch_add(1, Ordering::Relaxed);
        m.evict(r.offset, r.len);
    }
    !m.any_cached(r.offset, r.len)
}

/// The kernel aligns a readahead's large folios to their size, up to 2 MiB: a read-around
/// may reach that much further than its windows.
const FOLIO_ALIGNMENT_REACH: u64 = 2 << 20;

/// The bytes at the head and the tail of a whole-layer read that are read exactly
/// (`MADV_WILLNEED`) rather than around (`OsAdvisor::with_whole_layer_reader`), for the
/// kernel's readahead window `read_around`: a fault reads from half a window back, and a
/// read that reaches a window's marker reads the next window ahead. Each margin takes a
/// whole window more, and a folio's alignment.
pub fn whole_read_margins(read_around: u64) -> (u64, u64) {
    (
        read_around + FOLIO_ALIGNMENT_REACH,
        2 * read_around + FOLIO_ALIGNMENT_REACH,
    )
}

pub(crate) fn overlaps(r: &FileRange, file: u32, start: u64, end: u64) -> bool {
    r.file == file && r.offset < end && start < r.offset + r.len
}

/// Remove `[start, end)` of `file` from every range of `list`, never growing `list` past its
/// capacity: a range cut in two keeps only its larger side when the list is full.
pub(crate) fn remove_span(list: &mut Vec<FileRange>, file: u32, start: u64, end: u64) {
    remove_span_by(list, file, start, end, |r| Some(*r), |_, r| r);
}

/// [`remove_span`] over the items of `list` that `range_of` gives a range (the others stay
/// as they are); `with_range` makes an item's piece.
pub(crate) fn remove_span_by<T>(
    list: &mut Vec<T>,
    file: u32,
    start: u64,
    end: u64,
    range_of: impl Fn(&T) -> Option<FileRange>,
    with_range: impl Fn(&T, FileRange) -> T,
) {
    let mut i = 0;
    while i < list.len() {
        let Some(r) = range_of(&list[i]).filter(|r| overlaps(r, file, start, end)) else {
            i += 1;
            continue;
        };
        let (rs, re) = (r.offset, r.offset + r.len);
        let before = (rs < start).then_some((rs, start));
        let after = (end < re).then_some((end, re));
        let piece = |(s, e): (u64, u64)| FileRange {
            file,
            offset: s,
            len: e - s,
        };
        match (before, after) {
            (None, None) => {
                list.swap_remove(i);
                continue;
            }
            (Some(b), None) => list[i] = with_range(&list[i], piece(b)),
            (None, Some(a)) => list[i] = with_range(&list[i], piece(a)),
            (Some(b), Some(a)) => {
                if list.len() < list.capacity() {
                    let second = with_range(&list[i], piece(a));
                    list[i] = with_range(&list[i], piece(b));
                    list.push(second);
                } else {
                    let larger = if b.1 - b.0 >= a.1 - a.0 { b } else { a };
                    list[i] = with_range(&list[i], piece(larger));
                }
            }
        }
        i += 1;
    }
}

impl Advisor for OsAdvisor {
    fn will_need(&mut self, r: FileRange) {
        let (s, e) = self.forget_redrops(r);
        self.cancel_ahead(r.file, r.offset, r.offset + r.len);
        self.cancel_evictions(r.file, s, e);
        // Readahead of the exact range first, in large requests: with MADV_RANDOM on the
        // mapping, POPULATE_READ alone would fault and read one page at a time.
        if !self.collect(Call::Read(r)) {
            OsCalls::read(&self.files, &self.counters, r);
        }
        if self.pool.is_some() && self.batch.len() < self.batch.capacity() {
            self.batch.push((r.file, s, e));
        }
    }

    fn will_need_ahead(&mut self, r: FileRange) {
        if self.ahead.is_some() {
            let (s, e) = self.forget_redrops(r);
            self.cancel_evictions(r.file, s, e);
        }
        if let Some(a) = &self.ahead {
            if a.push(r) {
                self.ahead_queued = true;
                return;
            }
        }
        self.will_need(r);
    }

    fn read_whole(&mut self, r: FileRange) {
        let page = self.files[r.file as usize].page();
        let (s, e) = outward(r.offset, r.len, page);
        self.end_whole_reads(r.file, s, e);
        let (head, tail) = whole_read_margins(self.read_around);
        let middle = (s + head).next_multiple_of(page)..(e.saturating_sub(tail) / page * page);
        let Some(reader) = self.whole_reader.as_ref().filter(|_| {
            self.reading.len() < self.reading.capacity() && middle.end >= middle.start + page
        }) else {
            return self.will_need(r);
        };
        let whole = FileRange {
            file: r.file,
            offset: middle.start,
            len: middle.end - middle.start,
        };
        let m = &self.files[r.file as usize];
        if !m.set_normal(whole.offset, whole.len) || !reader.push(whole) {
            m.set_random(whole.offset, whole.len);
            return self.will_need(r);
        }
        self.reading.push(whole);
        self.whole_queued = true;
        // The ends as a read by expert reads them (and with it invariants 1, 3, 4, 5 for
        // them); the middle likewise, without its read.
        for end in [s..middle.start, middle.end..e] {
            self.will_need(FileRange {
                file: r.file,
                offset: end.start,
                len: end.end - end.start,
            });
        }
        self.forget_redrops(whole);
        self.cancel_ahead(r.file, middle.start, middle.end);
        self.cancel_evictions(r.file, middle.start, middle.end);
        if self.assist.is_some() {
            self.forget_collected_evictions(r.file, middle.start, middle.end);
        }
    }

    fn evict(&mut self, r: FileRange) -> u64 {
        let t = Instant::now();
        self.end_whole_reads(r.file, r.offset, r.offset + r.len);
        // Only a queued read of these very bytes is cancelled: a neighbour's range may share
        // a page with this one, and its read must go on.
        self.cancel_ahead(r.file, r.offset, r.offset + r.len);
        let (s, e) = inward(r.offset, r.len, self.files[r.file as usize].page());
        if let Some(w) = self.evictor.as_ref().filter(|_| e > s) {
            let whole = FileRange {
                file: r.file,
                offset: s,
                len: e - s,
            };
            if w.push(whole) {
                self.evict_queued = true;
                add_elapsed(&self.counters.evict_ns, t);
                return e - s;
            }
        }
        if e > s && self.collect(Call::Evict(r)) {
            add_elapsed(&self.counters.evict_ns, t);
            return e - s;
        }
        let (dropped, late) = OsCalls::evict(&self.files, r);
        if late {
            self.drop_again(r);
        }
        add_elapsed(&self.counters.evict_ns, t);
        dropped
    }

    fn flush(&mut self) {
        self.run_step();
        if let Some(a) = self.ahead.as_ref().filter(|_| self.ahead_queued) {
            a.wake();
            self.ahead_queued = false;
        }
        if let Some(w) = self.evictor.as_ref().filter(|_| self.evict_queued) {
            w.wake();
            self.evict_queued = false;
        }
        if let Some(w) = self.whole_reader.as_ref().filter(|_| self.whole_queued) {
            w.wake();
            self.whole_queued = false;
        }
        if let Some(pool) = &self.pool {
            let t = Instant::now();
            pool.populate_all(&self.batch);
            add_elapsed(&self.counters.populate_wait_ns, t);
            self.batch.clear();
        }
        self.retry_redrops();
    }

    fn finish(&mut self) {
        self.run_step();
        // The reads still in flight complete within milliseconds; give them a second at most.
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        if let Some(a) = &self.ahead {
            a.clear();
        }
        if let Some(w) = &self.whole_reader {
            w.clear();
            for r in self.reading.drain(..) {
                self.files[r.file as usize].set_random(r.offset, r.len);
            }
        }
        if let Some(w) = &self.evictor {
            w.drain(deadline);
        }
        self.retry_redrops();
        while !self.redrop.is_empty() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
            self.retry_redrops();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::test_support::*;

    #[test]
    fn an_eviction_racing_its_read_is_completed_by_finish() {
        let len = 8u64 << 20;
        let (_map, m) = clean_mapping(len);
        let sees_reads = m.sees_reads_in_flight();
        let counters = Arc::new(IoCounters::default());
        let mut advisor = OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone());
        // A wrong guess evicted at once: its read is still in flight, the kernel skips those
        // pages, and they land in the page cache after the drop.
        let guess = FileRange {
            file: 0,
            offset: 1 << 20,
            len: 4 << 20,
        };
        advisor.will_need(guess);
        assert!(advisor.evict(guess) > 0);
        advisor.finish();
        if !sees_reads {
            eprintln!("note: no cachestat here; reads in flight are invisible to the pager");
            return;
        }
        assert_eq!(advisor.pending_redrops(), 0);
        // cachestat counts pages still being read: none of the range is cached or coming.
        assert!(!advisor.files[0].any_cached(0, len));
        assert_eq!(advisor.files[0].resident_bytes(0, len), 0);
        eprintln!(
            "late evictions {}, re-drops {}",
            counters.late_evictions.load(Ordering::Relaxed),
            counters.redrops.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn a_redrop_splits_a_large_folio_that_an_evicted_range_shares_with_a_neighbour() {
        // A file read whole is cached in large folios; where every expert fits the budget,
        // the pager keeps them.
        let (_map, m) = read_whole(32 << 20);
        let mib = 1u64 << 20;
        let counters = Arc::new(IoCounters::default());
        let mut advisor = OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone());
        // An expert in the first half of a 2 MiB block, its neighbour in the second half.
        let (expert, neighbour) = (16 * mib, 17 * mib);
        let r = FileRange {
            file: 0,
            offset: expert,
            len: mib,
        };
        assert!(advisor.evict(r) > 0);
        let late = advisor.pending_redrops() > 0;
        if !late {
            eprintln!(
                "note: no large page-cache folio here; the eviction dropped the range at once"
            );
        }
        advisor.flush();
        assert_eq!(advisor.pending_redrops(), 0, "the range stays listed");
        let m = &advisor.files[0];
        assert_eq!(
            m.resident_bytes(expert, mib),
            0,
            "the evicted range stayed cached"
        );
        assert_eq!(
            m.resident_bytes(neighbour, mib),
            mib,
            "the neighbour's pages were dropped with it"
        );
        assert_eq!(
            counters.folio_splits.load(Ordering::Relaxed) > 0,
            late,
            "a late eviction here is a large folio, and only a split drops it"
        );
    }

    #[test]
    fn a_read_cancels_the_redrop_of_its_pages() {
        let len = 8u64 << 20;
        let (_map, m) = clean_mapping(len);
        let mut advisor = OsAdvisor::new(vec![m], Prefetch::WillNeed, Arc::default());
        let expert = FileRange {
            file: 0,
            offset: 1 << 20,
            len: 2 << 20,
        };
        advisor.will_need(expert);
        advisor.evict(expert);
        // Selected again right away: the pages are the pager's again and must stay cached.
        advisor.will_need(expert);
        assert_eq!(advisor.pending_redrops(), 0);
        advisor.finish();
        wait_for("the re-read expert is cached", || {
            advisor.files[0].resident_bytes(expert.offset, expert.len) >= expert.len
        });
    }

    #[test]
    fn populate_maps_the_missing_ranges_before_flush_returns() {
        let len = 8u64 << 20;
        let (_map, m) = clean_mapping(len);
        let counters = Arc::new(IoCounters::default());
        let mut advisor = OsAdvisor::new(
            vec![m],
            Prefetch::PopulateRead { threads: 2 },
            counters.clone(),
        );
        let r = FileRange {
            file: 0,
            offset: 3 << 20,
            len: 2 << 20,
        };
        advisor.will_need(r);
        advisor.flush();
        // POPULATE_READ waits for the reads: the range is cached when flush returns.
        assert_eq!(advisor.files[0].resident_bytes(r.offset, r.len), r.len);
        assert!(counters.populate_wait_ns.load(Ordering::Relaxed) > 0);
    }

    /// The `i`-th 2 MiB range of file 0.
    fn two_mib(i: u64) -> FileRange {
        FileRange {
            file: 0,
            offset: i * (2 << 20),
            len: 2 << 20,
        }
    }

    #[test]
    fn the_readahead_thread_reads_guesses_and_never_an_evicted_one() {
        let len = 16u64 << 20;
        let (_map, m) = clean_mapping(len);
        let counters = Arc::new(IoCounters::default());
        let mut advisor =
            OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone()).with_ahead_thread();
        // Eight guesses; the odd ones are evicted at once, before or while they are read.
        for i in 0..8 {
            advisor.will_need_ahead(two_mib(i));
        }
        advisor.flush();
        for i in (1..8).step_by(2) {
            advisor.evict(two_mib(i));
        }
        advisor.flush();
        for i in (0..8).step_by(2) {
            let r = two_mib(i);
            wait_for(&format!("guess {i} read in"), || {
                advisor.files[0].resident_bytes(r.offset, r.len) >= r.len
            });
        }
        advisor.finish();
        if advisor.files[0].sees_reads_in_flight() {
            for i in (1..8).step_by(2) {
                let r = two_mib(i);
                assert!(
                    !advisor.files[0].any_cached(r.offset, r.len),
                    "evicted guess {i} is cached or being read"
                );
            }
        }
        let read = counters.ahead_reads.load(Ordering::Relaxed);
        let cancelled = counters.ahead_cancelled.load(Ordering::Relaxed);
        assert!(read >= 4, "{read} reads on the thread");
        assert_eq!(read + cancelled, 8, "{read} read, {cancelled} cancelled");
    }

    #[test]
    fn the_eviction_thread_drops_every_range_within_its_slack() {
        let len = 16u64 << 20;
        let (_map, m) = clean_mapping(len);
        m.will_need(0, len);
        wait_for("the file is read in", || m.resident_bytes(0, len) == len);
        let counters = Arc::new(IoCounters::default());
        let slack = 4u64 << 20;
        let mut advisor =
            OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone()).with_evict_thread(slack);
        // Eight 2 MiB evictions against a 4 MiB slack: some go to the thread, the ones
        // that find it full are made inline. Either way all are dropped by `finish`.
        for i in 0..8 {
            advisor.evict(two_mib(i));
            // Invariant 3 of the worker: queued bytes never exceed the slack.
            let pending = advisor.evictor.as_ref().unwrap().pending_bytes();
            assert!(pending <= slack, "{pending} bytes queued");
        }
        advisor.flush();
        advisor.finish();
        assert_eq!(advisor.evictor.as_ref().unwrap().pending_bytes(), 0);
        assert_eq!(advisor.files[0].resident_bytes(0, len), 0);
        let on_thread = counters.worker_evictions.load(Ordering::Relaxed);
        assert!(on_thread >= 2, "{on_thread} evictions on the thread");
    }

    #[test]
    fn a_read_takes_its_pages_out_of_the_queued_evictions() {
        let len = 8u64 << 20;
        let (_map, m) = clean_mapping(len);
        m.will_need(0, len);
        wait_for("the file is read in", || m.resident_bytes(0, len) == len);
        let counters = Arc::new(IoCounters::default());
        let mut advisor =
            OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone()).with_evict_thread(len);
        let whole = FileRange {
            file: 0,
            offset: 0,
            len,
        };
        // Queued (no flush yet, so the thread has not been woken for it) and then read
        // again: the middle 2 MiB must stay, the rest must go.
        assert_eq!(advisor.evict(whole), len);
        let wanted = FileRange {
            file: 0,
            offset: 2 << 20,
            len: 2 << 20,
        };
        advisor.will_need(wanted);
        advisor.flush();
        advisor.finish();
        let m = &advisor.files[0];
        assert_eq!(m.resident_bytes(wanted.offset, wanted.len), wanted.len);
        assert_eq!(m.resident_bytes(0, 2 << 20), 0);
        assert_eq!(m.resident_bytes(4 << 20, 4 << 20), 0);
        assert_eq!(advisor.evictor.as_ref().unwrap().pending_bytes(), 0);
    }

    #[test]
    fn an_assisted_step_ends_as_its_calls_were_asked_either_way() {
        let len = 16u64 << 20;
        let (_map, m) = clean_mapping(len);
        let counters = Arc::new(IoCounters::default());
        let mut advisor = OsAdvisor::new(vec![m], Prefetch::WillNeed, counters.clone())
            .with_assist_thread(AssistMode::Measured);
        // The measured choice times both ways from the start: shared, then alone.
        for (round, way) in [StepWay::Shared, StepWay::Alone].into_iter().enumerate() {
            let m = &advisor.files[0];
            m.evict(0, len);
            m.will_need(0, 8 << 20);
            wait_for("the first half is read in", || {
                m.resident_bytes(0, 8 << 20) == 8 << 20 && m.resident_bytes(8 << 20, 8 << 20) == 0
            });
            // One step: two evictions, a range evicted then read again (it stays), two
            // reads, and a range read then evicted (never read at all), among neighbours
            // left alone.
            advisor.evict(two_mib(0));
            advisor.evict(two_mib(1));
            advisor.evict(two_mib(2));
            advisor.will_need(two_mib(2));
            advisor.will_need(two_mib(4));
            advisor.will_need(two_mib(5));
            advisor.will_need(two_mib(6));
            advisor.evict(two_mib(6));
            // Invariant 5: the step holds no two calls on one page.
            assert_eq!(advisor.step.len(), 6, "{:?}", advisor.step);
            advisor.flush();
            assert!(advisor.step.is_empty());
            let steps = |c: &AtomicU64| c.load(Ordering::Relaxed);
            let (shared, alone) = (
                steps(&counters.assist_steps_shared),
                steps(&counters.assist_steps_alone),
            );
            assert_eq!((shared, alone), (1, round as u64), "{way:?}");
            for i in [2, 4, 5] {
                let r = two_mib(i);
                wait_for(&format!("range {i} read in"), || {
                    advisor.files[0].resident_bytes(r.offset, r.len) == r.len
                });
            }
            advisor.finish();
            let m = &advisor.files[0];
            for i in [0, 1, 6, 7] {
                let r = two_mib(i);
                assert_eq!(m.resident_bytes(r.offset, r.len), 0, "{way:?}: range {i}");
            }
            assert_eq!(m.resident_bytes(two_mib(3).offset, 2 << 20), 2 << 20);
        }
        assert!(counters.will_need_ns.load(Ordering::Relaxed) > 0);
        assert!(counters.evict_ns.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn remove_span_trims_splits_and_keeps_its_capacity() {
        let r = |file, offset, end| FileRange {
            file,
            offset,
            len: end - offset,
        };
        let mut list = Vec::with_capacity(4);
        list.extend([r(0, 0, 100), r(0, 200, 300), r(1, 0, 100), r(0, 400, 500)]);
        // Covers all of [200, 300), the end of [0, 100) and nothing of file 1.
        remove_span(&mut list, 0, 50, 300);
        list.sort_by_key(|x| (x.file, x.offset));
        assert_eq!(list, vec![r(0, 0, 50), r(0, 400, 500), r(1, 0, 100)]);
        // The middle of a range splits it in two while there is room.
        remove_span(&mut list, 0, 420, 440);
        list.sort_by_key(|x| (x.file, x.offset));
        assert_eq!(
            list,
            vec![r(0, 0, 50), r(0, 400, 420), r(0, 440, 500), r(1, 0, 100)]
        );
        // Full: the larger side stays, the list does not grow.
        remove_span(&mut list, 0, 10, 20);
        list.sort_by_key(|x| (x.file, x.offset));
        assert_eq!(list.len(), 4);
        assert_eq!(list.capacity(), 4);
        assert_eq!(list[0], r(0, 20, 50));
        // Disjoint spans change nothing.
        let before = list.clone();
        remove_span(&mut list, 0, 50, 400);
        remove_span(&mut list, 2, 0, 1000);
        assert_eq!(list, before);
    }
}
