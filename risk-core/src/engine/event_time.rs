//! Event-time replay: rows decided as they would have been decided live, one by one.
//!
//! A replay engine is built on a [`ManualClock`] ([`EngineBuilder::for_replay`] or
//! [`EngineBuilder::replay_keeping_deep`]); before each row the clock is set to the row's
//! event time, so windows, label delays and list expiries follow the data, and no
//! deadline expires (the clock stands still while a decision runs: every tier answers).
//! Labels are reported when the replayed time reaches the moment they became known, at
//! their own time. With `deep`, the replay waits for the verdict of every escalated row
//! before the next row (the clock stands still meanwhile): the verdict reaches the
//! entity's feedback at the row's event time, and its wall latency is measured beside.
//! `risk.backtest` (Python) and the quickstart's tier comparison both replay through it.
//!
//! [`EngineBuilder::for_replay`]: super::EngineBuilder::for_replay
//! [`EngineBuilder::replay_keeping_deep`]: super::EngineBuilder::replay_keeping_deep

use super::Engine;
use crate::clock::ManualClock;
use crate::decision::{Decision, DeepVerdict, Escalation, Ticket};
use crate::error::DecideError;
use crate::txn::{Transaction, TxnId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a replay waits for one deep verdict before counting it lost.
pub const DEEP_WAIT: Duration = Duration::from_secs(60);

/// A label to report once the replay reaches `known_ms` (epoch ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLabel {
    /// When the label became known.
    pub known_ms: i64,
    /// The labelled transaction.
    pub txn: TxnId,
    /// Fraud (`true`) or cleared (`false`).
    pub fraud: bool,
}

/// What a replay did besides deciding.
#[derive(Debug, Default, Clone)]
pub struct EventReplayStats {
    /// Labels reported to entity state before the replay ended.
    pub labels_fed: u64,
    /// Labels whose time came after the last row (never reported).
    pub labels_after_end: u64,
    /// Labels entity state refused (an unknown transaction, no `[state]`).
    pub labels_refused: u64,
    /// Why the first refused label was refused.
    pub first_refusal: Option<String>,
    /// The deep tier's verdicts, when the replay waited for them.
    pub deep: Option<DeepReplayStats>,
}

/// The deep verdicts a replay waited for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeepReplayStats {
    /// Verdicts received.
    pub verdicts: u64,
    /// Escalations whose verdict never came within [`DEEP_WAIT`].
    pub lost: u64,
    /// Median wall time from the start of the escalated row's `decide` to its verdict, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
}

/// A replay in progress over one replay engine (see the module).
pub struct EventReplay<'e> {
    engine: &'e Engine,
    clock: Arc<ManualClock>,
    origin: i64,
    /// `(known at, input order, txn, fraud)`: popped by time, then in the order given (a
    /// `false` after a `true` for the same transaction at the same time clears it).
    heap: BinaryHeap<Reverse<(i64, usize, u64, bool)>>,
    verdicts: Option<Receiver<DeepVerdict>>,
    latencies: Vec<u64>,
    lost: u64,
    stats: EventReplayStats,
}

impl std::fmt::Debug for EventReplay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReplay")
            .field("origin", &self.origin)
            .field("labels_pending", &self.heap.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'e> EventReplay<'e> {
    /// The clock to build the replay engine on: its wall time starts at `first_ms`, the
    /// first row's event time (at least 1 ms: a `ManualClock` reads 0 as "the system's").
    pub fn clock(first_ms: i64) -> Arc<ManualClock> {
        let clock = ManualClock::new();
        clock.set_unix_origin_ms(first_ms.max(1));
        clock
    }

    /// A replay through `engine`, built on `clock` from [`EventReplay::clock`] with the
    /// same `first_ms`; `labels` in any order; `deep` waits for every escalated row's
    /// verdict (the engine must keep its deep tier: `replay_keeping_deep`).
    pub fn new(
        engine: &'e Engine,
        clock: Arc<ManualClock>,
        first_ms: i64,
        labels: impl IntoIterator<Item = ReplayLabel>,
        deep: bool,
    ) -> Self {
        let heap = labels
            .into_iter()
            .enumerate()
            .map(|(k, l)| Reverse((l.known_ms, k, l.txn.0, l.fraud)))
            .collect();
        Self {
            engine,
            clock,
            origin: first_ms.max(1),
            heap,
            verdicts: deep.then(|| engine.subscribe()),
            latencies: Vec::new(),
            lost: 0,
            stats: EventReplayStats::default(),
        }
    }

    fn set_clock(&self, ms: i64) {
        let since = (ms.max(self.origin) - self.origin) as u64;
        self.clock.set(since.saturating_mul(1_000_000));
    }

    /// Reports every label known by `time_ms`, each at its own time, then sets the clock
    /// to `time_ms` (the clock never goes back: an earlier time leaves it where it is).
    pub fn advance_to(&mut self, time_ms: i64) {
        while let Some(&Reverse((at, _, txn, fraud))) = self.heap.peek() {
            if at > time_ms {
                break;
            }
            self.heap.pop();
            // The label's own time, not the row's: it was known then.
            self.set_clock(at);
            match self.engine.report_label(TxnId(txn), fraud, at) {
                Ok(_) => self.stats.labels_fed += 1,
                Err(e) => {
                    self.stats.labels_refused += 1;
                    if self.stats.first_refusal.is_none() {
                        self.stats.first_refusal = Some(e.to_string());
                    }
                }
            }
        }
        self.set_clock(time_ms);
    }

    /// Decides `txn` at the current replayed time (after [`EventReplay::advance_to`]);
    /// with `deep`, returns once its verdict (if it was escalated) has been applied.
    pub fn decide(&mut self, txn: &Transaction) -> Result<Decision, DecideError> {
        // Wall time: the engine's clock stands still during a replay.
        let began = Instant::now();
        let d = self.engine.decide(txn)?;
        if let (Some(rx), Escalation::Enqueued(ticket)) = (&self.verdicts, d.escalation) {
            if wait_verdict(rx, ticket) {
                self.latencies.push(began.elapsed().as_micros() as u64);
            } else {
                self.lost += 1;
            }
        }
        Ok(d)
    }

    /// [`EventReplay::advance_to`] the transaction's own event time, then decide it.
    pub fn decide_in_time(&mut self, txn: &Transaction) -> Result<Decision, DecideError> {
        self.advance_to(txn.timestamp_ms);
        self.decide(txn)
    }

    /// The replay's figures; labels still pending count as after the end.
    pub fn finish(mut self) -> EventReplayStats {
        self.stats.labels_after_end = self.heap.len() as u64;
        if self.verdicts.is_some() {
            let mut l = std::mem::take(&mut self.latencies);
            l.sort_unstable();
            let q = |p: f64| {
                l.get(((l.len().max(1) - 1) as f64 * p) as usize)
                    .copied()
                    .unwrap_or(0)
            };
            self.stats.deep = Some(DeepReplayStats {
                verdicts: l.len() as u64,
                lost: self.lost,
                p50_us: q(0.5),
                p99_us: q(0.99),
            });
        }
        self.stats
    }
}

/// Waits for the verdict of `ticket` (verdicts arrive in escalation order; earlier ones
/// are skipped); `false` when none came within [`DEEP_WAIT`].
fn wait_verdict(rx: &Receiver<DeepVerdict>, ticket: Ticket) -> bool {
    let until = Instant::now() + DEEP_WAIT;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(v) if v.ticket == ticket => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}
