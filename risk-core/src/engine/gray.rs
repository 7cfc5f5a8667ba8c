//! The gray zone: a bounded queue to the deep tier, dynamic batching, a budget from
//! enqueue, fallback verdicts, and delivery of verdicts to the feedback store and
//! subscribers.
//!
//! `decide` calls [`GrayZone::try_push`], which never blocks: a full queue sheds and
//! counts. Dispatcher threads take the oldest item, wait up to `max_wait` (from its
//! enqueue) for up to `max_batch` items, drop to a fallback verdict every item whose
//! budget already passed in the queue, and run the rest as one `score_batch` on the deep
//! worker pool with the deadline `min(enqueued) + budget`. A late, failed or refused
//! batch gets fallback verdicts: the entity's cached average, else the global prior.
//!
//! The deep tier has its own circuit breaker (the `[circuit]` settings, its own state):
//! while open, batches are not run and get fallback verdicts at once. The budget reaches
//! the scorer through `score_batch_within`, so a backend that can stop between layers
//! frees its worker when the budget passes instead of blocking the next batch.
//!
//! Shutdown is a hard line: once [`GrayZone::shutdown`] returns, no verdict is delivered
//! to the feedback store, subscribers or the callback, not even from a batch that was
//! still running: a delivery announces itself before it checks `stop`, and shutdown sets
//! `stop` before it waits for the deliveries in progress (a callback that itself calls
//! shutdown is not waited for).

use super::entity::EntityStore;
use super::pool::{DeadlinePool, PoolError, Task};
use super::tier::{guarded_batch_within, Failure};
use crate::audit::{AuditEvent, AuditSink};
use crate::circuit::{Circuit, CircuitConfig, Permit};
use crate::clock::{nanos, wait_for, Clock, Nanos, Notify};
use crate::config::DeepConfig;
use crate::decision::{
    DeepFailure, DeepSource, DeepVerdict, EntityFeedback, ShedReason, ShutdownReport, Ticket,
};
use crate::metrics::Metrics;
use crate::scorer::{Score, Scorer};
use crate::txn::Transaction;
use crate::version::VersionId;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// A deep model version: what the deep slot holds.
pub(crate) struct DeepModel {
    pub scorer: Arc<dyn Scorer>,
    pub id: VersionId,
}

/// A callback receiving every deep verdict (called on a deep worker thread; keep it short).
pub type VerdictCallback = Arc<dyn Fn(&DeepVerdict) + Send + Sync>;

struct Item {
    ticket: Ticket,
    txn: Transaction,
    fast_score: f32,
    enqueued: Nanos,
}

#[derive(Default)]
pub(crate) struct DeepTask {
    scorer: Option<Arc<dyn Scorer>>,
    txns: Vec<Transaction>,
    budget: Duration,
}

impl Task for DeepTask {
    type Output = Result<Vec<Score>, Failure>;
    fn run(&mut self) -> Self::Output {
        let Some(s) = &self.scorer else {
            return Err(Failure::Error);
        };
        let refs: Vec<&Transaction> = self.txns.iter().collect();
        let mut out = Vec::with_capacity(refs.len());
        let r = guarded_batch_within(&**s, &refs, self.budget, &mut out).map(|()| out);
        self.txns.clear();
        r
    }
}

pub(crate) struct GrayShared {
    queue: Mutex<VecDeque<Item>>,
    capacity: usize,
    notify: Arc<Notify>,
    closed: AtomicBool,
    stop: AtomicBool,
    /// Verdict deliveries in progress: shutdown sets `stop` and waits for this to drain,
    /// and a delivery that starts after `stop` drops its verdict.
    delivering: AtomicUsize,
    circuit: Circuit,
    /// The kill switch: while set, batches are not run (verdicts from the fallback).
    pub(crate) forced_open: AtomicBool,
    /// A drill's deep-down fault: batches fail without calling the model.
    down: AtomicBool,
    in_flight: AtomicUsize,
    next_ticket: AtomicU64,
    cfg: DeepConfig,
    /// The deep slot: a batch takes the model serving when it starts.
    model: ArcSwap<DeepModel>,
    pool: DeadlinePool<DeepTask>,
    clock: Arc<dyn Clock>,
    entities: Arc<EntityStore>,
    metrics: Arc<Metrics>,
    subscribers: Mutex<Vec<SyncSender<DeepVerdict>>>,
    callback: Option<VerdictCallback>,
    audit: Option<Arc<dyn AuditSink>>,
}

/// Handle owned by the engine.
pub(crate) struct GrayZone {
    shared: Arc<GrayShared>,
}

impl GrayZone {
    /// The deep scorer's info.
    pub(crate) fn scorer_info(&self) -> crate::scorer::ScorerInfo {
        self.shared.model.load().scorer.info()
    }

    /// The deep model serving.
    pub(crate) fn model(&self) -> Arc<DeepModel> {
        self.shared.model.load_full()
    }

    /// Replaces the deep model; batches already running finish on the old one.
    pub(crate) fn swap(&self, m: Arc<DeepModel>) {
        self.shared.model.store(m);
    }
}

impl std::fmt::Debug for GrayZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrayZone")
            .field("capacity", &self.shared.capacity)
            .field("len", &self.len())
            .finish()
    }
}

impl GrayZone {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        cfg: DeepConfig,
        capacity: usize,
        scorer: Arc<dyn Scorer>,
        clock: Arc<dyn Clock>,
        entities: Arc<EntityStore>,
        metrics: Arc<Metrics>,
        callback: Option<VerdictCallback>,
        spin: Duration,
        circuit: CircuitConfig,
        audit: Option<Arc<dyn AuditSink>>,
    ) -> std::io::Result<Self> {
        let model = ArcSwap::from_pointee(DeepModel {
            id: scorer.info().version_id(),
            scorer,
        });
        let late = Arc::clone(&metrics.gray.late_discarded);
        let skipped = Arc::clone(&metrics.gray.skipped);
        let shared = Arc::new(GrayShared {
            queue: Mutex::new(VecDeque::with_capacity(capacity.min(1 << 16))),
            capacity,
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            delivering: AtomicUsize::new(0),
            circuit: Circuit::new(circuit, "deep"),
            forced_open: AtomicBool::new(false),
            down: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            next_ticket: AtomicU64::new(1),
            // The deep budget is hundreds of ms: its waits need no polled margin.
            pool: DeadlinePool::new(
                "risk-deep",
                cfg.workers,
                spin,
                Duration::ZERO,
                late,
                skipped,
            )?,
            cfg,
            model,
            clock,
            entities,
            metrics,
            subscribers: Mutex::new(Vec::new()),
            callback,
            audit,
        });
        for i in 0..cfg.workers {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("risk-gray-{i}"))
                .spawn(move || dispatch_loop(&s))?;
        }
        Ok(Self { shared })
    }

    pub(crate) fn len(&self) -> usize {
        self.shared.queue.lock().len()
    }

    /// Sets or clears the deep tier's kill switch.
    pub(crate) fn force_open(&self, on: bool) {
        self.shared.forced_open.store(on, Ordering::Relaxed);
    }

    /// Waits (up to `timeout` on the engine clock) until nothing is queued or running.
    pub(crate) fn wait_idle(&self, timeout: Duration) {
        let s = &self.shared;
        let until = s.clock.now().saturating_add(nanos(timeout));
        wait_for(&*s.clock, &s.notify, until, || {
            s.queue.lock().is_empty() && s.in_flight.load(Ordering::Acquire) == 0
        });
    }

    /// Sets or clears a drill's deep-down fault.
    pub(crate) fn set_down(&self, on: bool) {
        self.shared.down.store(on, Ordering::Relaxed);
    }

    /// Whether the kill switch is set.
    pub(crate) fn forced_open(&self) -> bool {
        self.shared.forced_open.load(Ordering::Relaxed)
    }

    /// State of the deep tier's circuit breaker.
    pub(crate) fn circuit_state(&self) -> super::CircuitState {
        self.shared.circuit.state(self.shared.clock.now())
    }

    /// Queues a gray-zone transaction without blocking.
    pub(crate) fn try_push(
        &self,
        txn: &Transaction,
        fast_score: f32,
    ) -> Result<Ticket, ShedReason> {
        let s = &self.shared;
        if s.closed.load(Ordering::Acquire) {
            return Err(ShedReason::ShuttingDown);
        }
        let mut q = s.queue.lock();
        if q.len() >= s.capacity {
            return Err(ShedReason::QueueFull);
        }
        let ticket = Ticket(s.next_ticket.fetch_add(1, Ordering::Relaxed));
        q.push_back(Item {
            ticket,
            txn: txn.clone(),
            fast_score,
            enqueued: s.clock.now(),
        });
        drop(q);
        s.notify.notify();
        Ok(ticket)
    }

    /// A verdict channel; after shutdown the channel is closed (disconnected) at once.
    pub(crate) fn subscribe(&self) -> Receiver<DeepVerdict> {
        let (tx, rx) = std::sync::mpsc::sync_channel(self.shared.cfg.subscriber_capacity);
        let mut subs = self.shared.subscribers.lock();
        if !self.shared.stop.load(Ordering::Acquire) {
            subs.push(tx);
        }
        rx
    }

    /// Stops accepting work, drains or abandons the queue, and stops the dispatchers.
    pub(crate) fn shutdown(&self, drain: Option<Duration>) -> ShutdownReport {
        let s = &self.shared;
        s.closed.store(true, Ordering::Release);
        let g = &s.metrics.gray;
        let verdicts = || {
            g.completed.load(Ordering::Relaxed)
                + g.timed_out.load(Ordering::Relaxed)
                + g.failed.load(Ordering::Relaxed)
                + g.saturated.load(Ordering::Relaxed)
                + g.circuit_open.load(Ordering::Relaxed)
        };
        let before = verdicts();
        if let Some(t) = drain {
            let until = s.clock.now().saturating_add(nanos(t));
            wait_for(&*s.clock, &s.notify, until, || {
                s.queue.lock().is_empty() && s.in_flight.load(Ordering::Acquire) == 0
            });
        }
        let abandoned = {
            let mut q = s.queue.lock();
            let n = q.len() as u64;
            q.clear();
            n
        };
        g.abandoned.fetch_add(abandoned, Ordering::Relaxed);
        // Every delivery that starts from now on sees `stop` and drops its verdict; wait for
        // those in progress (except this thread's own, when a verdict callback shuts the
        // engine down). Then subscribers read what is buffered and see their channel
        // closed: no verdict comes after this returns.
        s.stop.store(true, Ordering::SeqCst);
        let own = DELIVERING.with(|d| d.get() == Arc::as_ptr(s) as usize) as usize;
        wait_for(&*s.clock, &s.notify, Nanos::MAX, || {
            s.delivering.load(Ordering::SeqCst) <= own
        });
        s.subscribers.lock().clear();
        s.notify.notify();
        s.pool.shutdown();
        ShutdownReport {
            drained: verdicts() - before,
            abandoned,
        }
    }
}

impl Drop for GrayZone {
    fn drop(&mut self) {
        if !self.shared.stop.load(Ordering::Acquire) {
            self.shutdown(None);
        }
    }
}

fn dispatch_loop(s: &GrayShared) {
    let max_wait = nanos(s.cfg.max_wait);
    let budget = nanos(s.cfg.budget);
    let mut batch: Vec<Item> = Vec::with_capacity(s.cfg.max_batch);
    loop {
        wait_for(&*s.clock, &s.notify, Nanos::MAX, || {
            s.stop.load(Ordering::Acquire) || !s.queue.lock().is_empty()
        });
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        // Let a batch form: until max_batch items or max_wait after the oldest's enqueue.
        let first = match s.queue.lock().front() {
            Some(i) => i.enqueued,
            None => continue,
        };
        wait_for(&*s.clock, &s.notify, first.saturating_add(max_wait), || {
            s.stop.load(Ordering::Acquire) || s.queue.lock().len() >= s.cfg.max_batch
        });
        {
            let mut q = s.queue.lock();
            let n = q.len().min(s.cfg.max_batch);
            batch.extend(q.drain(..n));
            s.in_flight.fetch_add(batch.len(), Ordering::AcqRel);
        }
        if batch.is_empty() {
            continue;
        }
        let taken = batch.len();
        run_batch(s, &mut batch, budget);
        s.in_flight.fetch_sub(taken, Ordering::AcqRel);
        s.notify.notify();
    }
}

fn run_batch(s: &GrayShared, batch: &mut Vec<Item>, budget: Nanos) {
    let now = s.clock.now();
    let model = s.model.load_full();
    let deep = model.id;
    // Items whose budget passed while queued are not worth scoring.
    let (expired, live): (Vec<Item>, Vec<Item>) = batch
        .drain(..)
        .partition(|i| now >= i.enqueued.saturating_add(budget));
    for i in expired {
        fallback(s, &i, DeepFailure::Timeout, deep);
    }
    if live.is_empty() {
        return;
    }
    if s.down.load(Ordering::Relaxed) {
        // A drilled outage: the batch fails as a failing model's would.
        let permit = s.circuit.acquire(now);
        s.circuit.record_n(permit, 0, live.len() as u32, now);
        live.iter()
            .for_each(|i| fallback(s, i, DeepFailure::Error, deep));
        return;
    }
    let permit = if s.forced_open.load(Ordering::Relaxed) {
        Permit::Denied
    } else {
        s.circuit.acquire(now)
    };
    if permit == Permit::Denied {
        live.iter()
            .for_each(|i| fallback(s, i, DeepFailure::CircuitOpen, deep));
        return;
    }
    s.metrics.gray.batches.fetch_add(1, Ordering::Relaxed);
    let deadline = live
        .iter()
        .map(|i| i.enqueued)
        .min()
        .unwrap_or(now)
        .saturating_add(budget);
    let r = s.pool.run(&*s.clock, deadline, |t| {
        t.scorer = Some(Arc::clone(&model.scorer));
        t.txns.clear();
        t.txns.extend(live.iter().map(|i| i.txn.clone()));
        t.budget = Duration::from_nanos(deadline.saturating_sub(now));
    });
    let n = live.len() as u32;
    let end = s.clock.now();
    match r {
        Ok(Ok(scores)) => {
            // Recorded before delivery: a subscriber that sees the verdicts sees the
            // breaker's state that they caused.
            let oks = scores.iter().filter(|sc| sc.is_valid()).count() as u32;
            s.circuit.record_n(permit, oks, n - oks, end);
            for (i, sc) in live.iter().zip(scores.iter()) {
                if sc.is_valid() {
                    emit(s, i, sc.probability, DeepSource::Model, None, deep);
                } else {
                    fallback(s, i, DeepFailure::Error, deep);
                }
            }
        }
        Ok(Err(f)) => {
            let why = match f {
                Failure::Cancelled => DeepFailure::Timeout,
                _ => DeepFailure::Error,
            };
            s.circuit.record_n(permit, 0, n, end);
            live.iter().for_each(|i| fallback(s, i, why, deep));
        }
        Err(PoolError::Timeout) => {
            s.circuit.record_n(permit, 0, n, end);
            live.iter()
                .for_each(|i| fallback(s, i, DeepFailure::Timeout, deep));
        }
        Err(PoolError::Saturated) => {
            // Stalled workers: a health signal already counted by their own timeouts.
            s.circuit.release(permit);
            live.iter()
                .for_each(|i| fallback(s, i, DeepFailure::Saturated, deep));
        }
    }
}

fn fallback(s: &GrayShared, i: &Item, why: DeepFailure, deep: VersionId) {
    let (score, source) = match s.entities.cached_average(&i.txn) {
        Some(avg) => (avg, DeepSource::CachedAverage),
        None => (s.cfg.global_prior, DeepSource::GlobalPrior),
    };
    emit(s, i, score, source, Some(why), deep);
}

thread_local! {
    /// The gray zone (its address) whose verdict this thread is delivering, or 0.
    static DELIVERING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn emit(
    s: &GrayShared,
    i: &Item,
    score: f32,
    source: DeepSource,
    failure: Option<DeepFailure>,
    deep: VersionId,
) {
    s.delivering.fetch_add(1, Ordering::SeqCst);
    if !s.stop.load(Ordering::SeqCst) {
        DELIVERING.with(|d| d.set(s as *const GrayShared as usize));
        deliver(s, i, score, source, failure, deep);
        DELIVERING.with(|d| d.set(0));
    } else {
        // Shutdown has reported (or is waiting for deliveries): nothing is delivered.
        s.metrics.gray.abandoned.fetch_add(1, Ordering::Relaxed);
    }
    s.delivering.fetch_sub(1, Ordering::SeqCst);
    s.notify.notify();
}

fn deliver(
    s: &GrayShared,
    i: &Item,
    score: f32,
    source: DeepSource,
    failure: Option<DeepFailure>,
    deep: VersionId,
) {
    let now = s.clock.now();
    let latency = now.saturating_sub(i.enqueued);
    let g = &s.metrics.gray;
    let counter = match failure {
        None => &g.completed,
        Some(DeepFailure::Timeout) => &g.timed_out,
        Some(DeepFailure::Error) => &g.failed,
        Some(DeepFailure::Saturated) => &g.saturated,
        Some(DeepFailure::CircuitOpen) => &g.circuit_open,
    };
    s.metrics.deep.record(latency);
    let v = DeepVerdict {
        ticket: i.ticket,
        txn: i.txn.id,
        entity: i.txn.entity,
        score,
        source,
        failure,
        fast_score: i.fast_score,
        latency: Duration::from_nanos(latency),
        deep,
        decided_at_ms: s.clock.unix_ms(),
    };
    s.entities.set_feedback(
        &i.txn,
        EntityFeedback {
            deep_score: score,
            source,
            at_ms: i.txn.timestamp_ms,
            threshold_shift: s.entities.cfg().shift(score),
        },
    );
    // Counted after the feedback is stored: a reader that sees the counter sees the state.
    counter.fetch_add(1, Ordering::Release);
    if let Some(a) = &s.audit {
        let _ = a.offer(&AuditEvent::Verdict(&v));
    }
    {
        let mut subs = s.subscribers.lock();
        subs.retain(|tx| match tx.try_send(v) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                g.subscriber_dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
    }
    if let Some(cb) = &s.callback {
        // A panicking callback must not take the deep worker down.
        let _ = catch_unwind(AssertUnwindSafe(|| cb(&v)));
    }
}
