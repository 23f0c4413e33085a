//! Responses run in the background (the Responses API's `background: true`): the request is
//! answered at once, `queued`, and its generation goes on without a client. A [`Run`] keeps
//! what a client may ask of it meanwhile: the response as it stands (`GET
//! /v1/responses/{id}` polls it), every stream event with its sequence number (`?stream=true`
//! replays them from any `starting_after` and follows the rest), and the request to stop
//! (`POST /v1/responses/{id}/cancel`).
//!
//! A run's events are kept while it runs and, once it is done, for the last
//! [`FINISHED_RUNS_KEPT`] finished runs; the response itself goes to the response store as any
//! stored response does. This module holds the bookkeeping only: the Responses adapter
//! writes the events and the response.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::stream::{self, Stream};
use serde_json::Value;
use tokio::sync::watch;

/// Finished runs whose events stay for a late `?stream=true` (each holds a reply's events,
/// typically some hundred KB).
pub const FINISHED_RUNS_KEPT: usize = 16;

/// One stream event: its type and its JSON. Its sequence number is its place in the log.
pub type LoggedEvent = (String, String);

#[derive(Debug)]
struct Log {
    /// 1. `events[i]`'s `sequence_number` is `i`.
    events: Vec<LoggedEvent>,
    /// The response object as it stands: `queued`, `in_progress` with the output items
    /// finished so far, then its final state.
    response: Value,
    /// 2. Once true, `events` and `response` no longer change.
    done: bool,
}

/// One response running (or run) in the background.
#[derive(Debug)]
pub struct Run {
    log: Mutex<Log>,
    /// The number of events, bumped with every change, for followers to wake on.
    changed: watch::Sender<usize>,
    /// Set once a client cancels.
    cancel: watch::Sender<bool>,
}

impl Run {
    fn new(response: Value) -> Run {
        Run {
            log: Mutex::new(Log {
                events: Vec::new(),
                response,
                done: false,
            }),
            changed: watch::Sender::new(0),
            cancel: watch::Sender::new(false),
        }
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        // A panic while holding the log leaves it as consistent as any append leaves it.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append `events` (numbered from the log's length on) and set the response as it now
    /// stands; `done` makes both final. Nothing changes once done.
    pub fn record(
        &self,
        events: impl IntoIterator<Item = LoggedEvent>,
        response: Value,
        done: bool,
    ) {
        let n = {
            let mut log = self.log();
            if log.done {
                return;
            }
            log.events.extend(events);
            log.response = response;
            log.done = done;
            log.events.len()
        };
        self.changed.send_replace(n);
    }

    /// The response as it stands.
    pub fn response(&self) -> Value {
        self.log().response.clone()
    }

    /// Whether the run is over (completed, incomplete, failed or cancelled).
    pub fn is_done(&self) -> bool {
        self.log().done
    }

    /// Ask the run to stop; its generation sees it at its next event.
    pub fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// A receiver that changes once the run is cancelled.
    pub fn cancelled(&self) -> watch::Receiver<bool> {
        self.cancel.subscribe()
    }

    /// Wait until the run is over.
    pub async fn finished(&self) {
        let mut changed = self.changed.subscribe();
        while !self.is_done() {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// The events after sequence number `after` (all of them without it), then each as it
    /// comes, until the run is over.
    pub fn follow(self: Arc<Self>, after: Option<u64>) -> impl Stream<Item = LoggedEvent> + Send {
        let next = after.map_or(0, |a| {
            usize::try_from(a).unwrap_or(usize::MAX).saturating_add(1)
        });
        let changed = self.changed.subscribe();
        stream::unfold(
            (self, next, changed),
            |(run, next, mut changed)| async move {
                loop {
                    {
                        let log = run.log();
                        if let Some(e) = log.events.get(next) {
                            let e = e.clone();
                            drop(log);
                            return Some((e, (run, next + 1, changed)));
                        }
                        if log.done {
                            return None;
                        }
                        // Marked seen under the lock: a change after this wakes the wait below.
                        changed.borrow_and_update();
                    }
                    if changed.changed().await.is_err() {
                        return None;
                    }
                }
            },
        )
    }
}

/// Every background run a client may still ask about, by response id.
#[derive(Debug, Default)]
pub struct Runs {
    inner: Mutex<RunsInner>,
}

#[derive(Debug, Default)]
struct RunsInner {
    /// 3. Holds every running run, and every finished one named in `finished` (a run
    ///    just over stays until the adapter retires it).
    runs: HashMap<String, Arc<Run>>,
    /// 4. Finished runs' ids, oldest first, at most [`FINISHED_RUNS_KEPT`].
    finished: VecDeque<String>,
}

impl Runs {
    fn inner(&self) -> MutexGuard<'_, RunsInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register response `id`, standing as `response`.
    pub fn start(&self, id: &str, response: Value) -> Arc<Run> {
        let run = Arc::new(Run::new(response));
        self.inner().runs.insert(id.to_string(), run.clone());
        run
    }

    /// Run `id`, running or among the last finished.
    pub fn get(&self, id: &str) -> Option<Arc<Run>> {
        self.inner().runs.get(id).cloned()
    }

    /// Run `id` is over: keep its events among the last finished, forgetting the oldest.
    pub fn retire(&self, id: &str) {
        let mut inner = self.inner();
        if !inner.runs.contains_key(id) || inner.finished.iter().any(|f| f == id) {
            return;
        }
        inner.finished.push_back(id.to_string());
        while inner.finished.len() > FINISHED_RUNS_KEPT {
            if let Some(old) = inner.finished.pop_front() {
                inner.runs.remove(&old);
            }
        }
    }

    /// Forget finished run `id` (its response was deleted): whether it was kept, or `None`
    /// (and nothing forgotten) while it runs.
    pub fn forget(&self, id: &str) -> Option<bool> {
        let mut inner = self.inner();
        if inner.runs.get(id).is_some_and(|r| !r.is_done()) {
            return None;
        }
        inner.finished.retain(|f| f != id);
        Some(inner.runs.remove(id).is_some())
    }

    /// Check the numbered invariants (tests).
    #[cfg(test)]
    fn check(&self) {
        let inner = self.inner();
        for id in &inner.finished {
            assert!(inner.runs.contains_key(id), "3");
        }
        assert!(inner.finished.len() <= FINISHED_RUNS_KEPT, "4");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use serde_json::json;

    fn ev(n: usize) -> LoggedEvent {
        (
            "response.output_text.delta".into(),
            json!({"sequence_number": n}).to_string(),
        )
    }

    #[tokio::test]
    async fn a_follower_gets_every_event_after_its_start_then_the_end() {
        let runs = Runs::default();
        let run = runs.start("resp-1", json!({"status": "queued"}));
        run.record([ev(0), ev(1)], json!({"status": "in_progress"}), false);
        let early = tokio::spawn(run.clone().follow(None).collect::<Vec<_>>());
        let late = tokio::spawn(run.clone().follow(Some(1)).collect::<Vec<_>>());
        tokio::task::yield_now().await;
        run.record([ev(2)], json!({"status": "in_progress"}), false);
        run.record([ev(3)], json!({"status": "completed"}), true);
        // Nothing is recorded once done.
        run.record([ev(4)], json!({"status": "failed"}), true);
        runs.retire("resp-1");
        assert_eq!(early.await.unwrap(), vec![ev(0), ev(1), ev(2), ev(3)]);
        assert_eq!(late.await.unwrap(), vec![ev(2), ev(3)]);
        assert_eq!(run.response()["status"], "completed");
        // A finished run replays whole, and past its end gives nothing.
        assert_eq!(run.clone().follow(None).collect::<Vec<_>>().await.len(), 4);
        assert!(run
            .clone()
            .follow(Some(9))
            .collect::<Vec<_>>()
            .await
            .is_empty());
        run.finished().await;
        runs.check();
    }

    #[tokio::test]
    async fn cancel_reaches_the_run_and_finished_waits_for_its_end() {
        let runs = Runs::default();
        let run = runs.start("resp-1", json!({"status": "queued"}));
        let mut cancelled = run.cancelled();
        let worker = {
            let run = run.clone();
            tokio::spawn(async move {
                cancelled.changed().await.unwrap();
                run.record([ev(0)], json!({"status": "cancelled"}), true);
            })
        };
        assert_eq!(
            runs.forget("resp-1"),
            None,
            "a running run is not forgotten"
        );
        run.cancel();
        run.finished().await;
        worker.await.unwrap();
        assert_eq!(run.response()["status"], "cancelled");
        runs.retire("resp-1");
        assert_eq!(runs.forget("resp-1"), Some(true));
        assert!(runs.get("resp-1").is_none());
        assert_eq!(runs.forget("resp-1"), Some(false));
        runs.check();
    }

    #[test]
    fn only_the_last_finished_runs_are_kept() {
        let runs = Runs::default();
        for i in 0..FINISHED_RUNS_KEPT + 3 {
            let id = format!("resp-{i}");
            let run = runs.start(&id, json!({}));
            run.record([], json!({}), true);
            runs.retire(&id);
            runs.retire(&id);
            runs.check();
        }
        let running = runs.start("resp-running", json!({}));
        assert!(runs.get("resp-0").is_none());
        assert!(runs.get("resp-3").is_some());
        assert!(runs.get("resp-running").is_some());
        assert!(!running.is_done());
        assert_eq!(runs.inner().finished.len(), FINISHED_RUNS_KEPT);
        runs.check();
    }
}
