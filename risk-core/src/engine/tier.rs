//! Running a scorer so that nothing it does escapes: panics are caught, invalid scores and
//! wrong-length batches become failures, and (for the fast tier) the deadline is hard.

use super::pool::{DeadlinePool, PoolError, Task};
use crate::circuit::Permit;
use crate::clock::{Clock, Nanos};
use crate::decision::FallbackCause;
use crate::deploy::slot::FastModel;
use crate::error::ScoreError;
use crate::scorer::Latency;
use crate::scorer::{Score, Scorer};
use crate::txn::Transaction;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

/// Why a tier call produced no usable score. Stays inside the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Error,
    Panic,
    Invalid,
    /// The backend stopped its own run at the budget (e.g. ONNX Runtime terminate).
    Cancelled,
}

impl Failure {
    pub(crate) fn cause(self) -> FallbackCause {
        match self {
            Failure::Error => FallbackCause::Error,
            Failure::Panic => FallbackCause::Panic,
            Failure::Invalid => FallbackCause::InvalidScore,
            Failure::Cancelled => FallbackCause::Timeout,
        }
    }
}

/// Calls `scorer.score(txn)` with panics caught and the score validated.
#[inline]
pub(crate) fn guarded_score(scorer: &dyn Scorer, txn: &Transaction) -> Result<Score, Failure> {
    classify(catch_unwind(AssertUnwindSafe(|| scorer.score(txn))))
}

#[inline(always)]
fn classify(r: std::thread::Result<Result<Score, ScoreError>>) -> Result<Score, Failure> {
    match r {
        Ok(Ok(s)) if s.is_valid() => Ok(s),
        Ok(Ok(_)) => Err(Failure::Invalid),
        Ok(Err(ScoreError::Cancelled)) => Err(Failure::Cancelled),
        Ok(Err(_)) => Err(Failure::Error),
        Err(payload) => {
            panicked(&payload);
            Err(Failure::Panic)
        }
    }
}

/// Reports a caught scorer panic with its message (cold path).
#[cold]
pub(crate) fn panicked(payload: &Box<dyn std::any::Any + Send>) {
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)");
    tracing::error!(target: "risk::tier", panic = msg, "a scorer panicked; the decision fell back");
}

/// [`guarded_score`] as a fast-tier outcome written to `out`: the score is moved once
/// after the scorer returns it (a `Score` is ~240 bytes; see [`FastTier::run`]).
#[inline]
fn guarded_score_into(
    scorer: &dyn Scorer,
    txn: &Transaction,
    out: &mut Result<Score, FallbackCause>,
) {
    match catch_unwind(AssertUnwindSafe(|| scorer.score(txn))) {
        Ok(Ok(s)) if s.is_valid() => *out = Ok(s),
        Ok(Ok(_)) => *out = Err(FallbackCause::InvalidScore),
        Ok(Err(ScoreError::Cancelled)) => *out = Err(FallbackCause::Timeout),
        Ok(Err(_)) => *out = Err(FallbackCause::Error),
        Err(payload) => {
            panicked(&payload);
            *out = Err(FallbackCause::Panic);
        }
    }
}

/// [`guarded_score`] written to `out` (`None` for any failure); whether it scored.
#[inline]
pub(crate) fn guarded_score_opt(
    scorer: &dyn Scorer,
    txn: &Transaction,
    out: &mut Option<Score>,
) -> bool {
    match catch_unwind(AssertUnwindSafe(|| scorer.score(txn))) {
        Ok(Ok(s)) if s.is_valid() => {
            *out = Some(s);
            true
        }
        Ok(_) => {
            *out = None;
            false
        }
        Err(payload) => {
            panicked(&payload);
            *out = None;
            false
        }
    }
}

/// Calls `scorer.score_batch` with panics caught and the output length checked.
/// Individual scores are not validated here (the caller decides per item).
pub(crate) fn guarded_batch(
    scorer: &dyn Scorer,
    txns: &[&Transaction],
    out: &mut Vec<Score>,
) -> Result<(), Failure> {
    match catch_unwind(AssertUnwindSafe(|| scorer.score_batch(txns, out))) {
        Ok(Ok(())) if out.len() == txns.len() => Ok(()),
        Ok(Ok(())) | Ok(Err(_)) => Err(Failure::Error),
        Err(payload) => {
            panicked(&payload);
            Err(Failure::Panic)
        }
    }
}

/// [`guarded_batch`] through `scorer.score_batch_within(txns, budget, out)`; a
/// cancellation is [`Failure::Cancelled`].
pub(crate) fn guarded_batch_within(
    scorer: &dyn Scorer,
    txns: &[&Transaction],
    budget: std::time::Duration,
    out: &mut Vec<Score>,
) -> Result<(), Failure> {
    match catch_unwind(AssertUnwindSafe(|| {
        scorer.score_batch_within(txns, budget, out)
    })) {
        Ok(Ok(())) if out.len() == txns.len() => Ok(()),
        Ok(Err(ScoreError::Cancelled)) => Err(Failure::Cancelled),
        Ok(Ok(())) | Ok(Err(_)) => Err(Failure::Error),
        Err(payload) => {
            panicked(&payload);
            Err(Failure::Panic)
        }
    }
}

/// Calls `scorer.score_within(txn, budget)` with panics caught and the score validated.
pub(crate) fn guarded_score_within(
    scorer: &dyn Scorer,
    txn: &Transaction,
    budget: std::time::Duration,
) -> Result<Score, Failure> {
    classify(catch_unwind(AssertUnwindSafe(|| {
        scorer.score_within(txn, budget)
    })))
}

/// The fast tier's pool task: the scorer, a reused transaction buffer, and the time left.
#[derive(Default)]
pub(crate) struct FastTask {
    scorer: Option<Arc<dyn Scorer>>,
    txn: Option<Transaction>,
    budget: std::time::Duration,
    /// A drilled slow model's added latency (0: none).
    stall_ns: u64,
}

impl Task for FastTask {
    type Output = Result<Score, Failure>;
    fn run(&mut self) -> Self::Output {
        if self.stall_ns > 0 {
            super::drill::stall(self.stall_ns);
        }
        match (&self.scorer, &self.txn) {
            (Some(s), Some(t)) => guarded_score_within(&**s, t, self.budget),
            _ => Err(Failure::Error),
        }
    }
}

/// The fast tier: how it runs (its pool, created when a model that needs one first
/// serves) and its deadline. The models themselves are versioned slots
/// ([`FastModel`]): each brings its scorer, calibration and circuit breaker.
pub(crate) struct FastTier {
    /// The kill switch: while set, no model is called and the rules decide
    /// ([`FallbackCause::CircuitOpen`]).
    pub forced_open: std::sync::atomic::AtomicBool,
    /// A drill's fault (`drill::FAULT_*`) and a slow fault's added latency.
    pub fault: std::sync::atomic::AtomicU8,
    pub fault_delay_ns: std::sync::atomic::AtomicU64,
    pub pool: OnceLock<DeadlinePool<FastTask>>,
    pub deadline: Nanos,
    /// Calls skipped because the deadline had passed ([`MetricsSnapshot::fast_skipped`](crate::MetricsSnapshot)).
    pub skipped: Arc<std::sync::atomic::AtomicU64>,
    pub late: Arc<std::sync::atomic::AtomicU64>,
    pub workers: usize,
    pub spin: std::time::Duration,
    /// `pool.deadline_spin`: the last stretch before the deadline a caller polls.
    pub deadline_spin: std::time::Duration,
}

impl std::fmt::Debug for FastTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastTier")
            .field("pool", &self.pool.get())
            .field("deadline_ns", &self.deadline)
            .finish()
    }
}

impl FastTier {
    /// Starts the pool if `latency` needs one and it is not running yet.
    pub(crate) fn ensure_pool(&self, latency: Latency) -> std::io::Result<()> {
        if latency == Latency::Bounded || self.pool.get().is_some() {
            return Ok(());
        }
        let p = DeadlinePool::new(
            "risk-fast",
            self.workers,
            self.spin,
            self.deadline_spin,
            Arc::clone(&self.late),
            Arc::clone(&self.skipped),
        )?;
        // A concurrent caller may have won the race: its pool serves, this one stops.
        if let Err(p) = self.pool.set(p) {
            p.shutdown();
        }
        Ok(())
    }

    /// Scores with model `m` under its circuit breaker with a hard deadline `until`;
    /// `now` is the current time. Writes the outcome (calibrated) to `out` and returns
    /// the time after it (one clock read). Written in place: a `Score` is ~240 bytes,
    /// and moving it through `Result`s and tuples was a tenth of the engine's own time
    /// (`perf`, BENCHMARKS [18] part 5).
    pub(crate) fn run(
        &self,
        clock: &dyn Clock,
        m: &FastModel,
        txn: &Transaction,
        now: Nanos,
        until: Nanos,
        out: &mut Result<Score, FallbackCause>,
    ) -> Nanos {
        if now >= until {
            // The rule stage used up the deadline: calling the tier could only produce a
            // discarded answer. Says nothing about the model's health (no permit taken).
            self.skipped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            *out = Err(FallbackCause::Timeout);
            return now;
        }
        if self.forced_open.load(std::sync::atomic::Ordering::Relaxed) {
            *out = Err(FallbackCause::CircuitOpen);
            return now;
        }
        let permit = m.circuit.acquire(now);
        if permit == Permit::Denied {
            *out = Err(FallbackCause::CircuitOpen);
            return now;
        }
        use super::drill::{FAULT_DOWN, FAULT_NAN, FAULT_NONE, FAULT_SLOW};
        let fault = self.fault.load(std::sync::atomic::Ordering::Relaxed);
        let stall_ns = if fault == FAULT_SLOW {
            self.fault_delay_ns
                .load(std::sync::atomic::Ordering::Relaxed)
        } else {
            0
        };
        *out = match (m.latency, self.pool.get()) {
            _ if fault == FAULT_DOWN => Err(FallbackCause::Error),
            _ if fault == FAULT_NAN => Err(FallbackCause::InvalidScore),
            (Latency::Bounded, _) => {
                if fault != FAULT_NONE {
                    super::drill::stall(stall_ns);
                }
                guarded_score_into(&*m.scorer, txn, out);
                return self.finish(clock, m, permit, until, out);
            }
            (Latency::Unbounded, None) => Err(FallbackCause::Saturated),
            (Latency::Unbounded, Some(pool)) => match pool.run(clock, until, |t| {
                if !t.scorer.as_ref().is_some_and(|s| Arc::ptr_eq(s, &m.scorer)) {
                    t.scorer = Some(Arc::clone(&m.scorer));
                }
                match &mut t.txn {
                    Some(buf) => buf.copy_from(txn),
                    None => t.txn = Some(txn.clone()),
                }
                t.budget = std::time::Duration::from_nanos(until.saturating_sub(now));
                t.stall_ns = stall_ns;
            }) {
                Ok(r) => r.map_err(Failure::cause),
                Err(PoolError::Timeout) => Err(FallbackCause::Timeout),
                Err(PoolError::Saturated) => Err(FallbackCause::Saturated),
            },
        };
        self.finish(clock, m, permit, until, out)
    }

    /// After the call: the deadline applied to the answer, the breaker told, the score
    /// calibrated; returns the time (one clock read).
    #[inline]
    fn finish(
        &self,
        clock: &dyn Clock,
        m: &FastModel,
        permit: Permit,
        until: Nanos,
        out: &mut Result<Score, FallbackCause>,
    ) -> Nanos {
        let end = clock.now();
        // An inline scorer cannot be interrupted; an answer past the deadline is treated
        // as a timeout so the decision does not depend on where the tier ran.
        if end > until && out.is_ok() {
            *out = Err(FallbackCause::Timeout);
        }
        // Saturation says nothing about the model's health: do not count it.
        if matches!(out, Err(FallbackCause::Saturated)) {
            m.circuit.release(permit);
        } else {
            m.circuit.record(permit, out.is_ok(), end);
        }
        if let (Ok(s), Some(c)) = (out, &m.calibration) {
            s.probability = c.apply(s.probability);
        }
        end
    }
}

impl FastModel {
    /// `s` with this version's calibration applied.
    #[inline]
    pub(crate) fn calibrated(&self, mut s: Score) -> Score {
        if let Some(c) = &self.calibration {
            s.probability = c.apply(s.probability);
        }
        s
    }
}
