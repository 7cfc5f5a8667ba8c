//! The shadow: a candidate scores copies of live decisions on its own thread.
//!
//! The caller's cost is a hash of the transaction id (the sample) and a copy of the
//! transaction into a batch that its own thread holds (a thread-local: no shared cache
//! line is touched); only when the batch is full (`BATCH` copies) is it handed to the
//! worker with one `try_send`, and an empty batch taken back from a free list. No
//! allocation once the buffers exist, no wake-up (the worker polls; waking a parked thread
//! is a syscall the caller would pay), never a wait: when the worker is behind and no
//! empty batch is free, the copies are shed and counted. Measured: a per-decision channel
//! hand-off cost the caller 65–300 ns (two cache lines shared with the worker per call);
//! batching amortises that over `BATCH` decisions.

use super::stats::{Outcome, VersionStats};
use super::SHARE_SCALE;
use crate::decision::Action;
use crate::hash::splitmix_finalize;
use crate::scorer::Score;
use crate::txn::Transaction;
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the worker sleeps when its queue is empty.
const POLL: Duration = Duration::from_micros(500);

/// Copies per hand-off to the worker.
pub(crate) const BATCH: usize = 32;

/// Shadows a thread keeps a batch for at once (older ones are dropped from it).
const PER_THREAD: usize = 4;

/// What a tier answered, as much as a shadow needs (a whole `Score` is ~170 bytes of
/// reasons the shadow never reads: copying less is most of the caller's cost).
#[derive(Clone, Copy)]
pub(crate) struct Slim {
    p: f32,
    directive: Option<Action>,
}

impl Slim {
    #[inline]
    fn of(s: Option<&Score>) -> Option<Self> {
        s.map(|s| Slim {
            p: s.probability,
            directive: s.directive,
        })
    }
}

/// One copied decision: the transaction and what the serving tiers answered.
pub(crate) struct ShadowItem {
    pub txn: Transaction,
    rules: Option<Slim>,
    model: Option<Slim>,
    pub shift: f32,
    pub action: Action,
}

impl ShadowItem {
    fn rebuild(s: Option<Slim>) -> Option<Score> {
        s.map(|s| {
            let mut x = Score::new(s.p);
            x.directive = s.directive;
            x
        })
    }

    /// The rule tier's answer (probability and directive).
    pub(crate) fn rules(&self) -> Option<Score> {
        Self::rebuild(self.rules)
    }

    /// The fast tier's answer (probability).
    pub(crate) fn model(&self) -> Option<Score> {
        Self::rebuild(self.model)
    }
}

/// Up to [`BATCH`] items; `items[..len]` are live, the rest are reusable buffers.
pub(crate) struct Batch {
    items: Vec<ShadowItem>,
    len: usize,
}

impl Batch {
    fn new() -> Box<Self> {
        Box::new(Self {
            items: Vec::with_capacity(BATCH),
            len: 0,
        })
    }
}

/// Scores one item with the candidate: `(candidate, serving)` outcomes for the same
/// transaction (the candidate's would-be action, the serving version's actual one).
pub(crate) type Eval = Box<dyn Fn(&ShadowItem) -> (Outcome, Outcome) + Send + Sync>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's partly filled batch per shadow id.
    static LOCAL: RefCell<Vec<(u64, Box<Batch>)>> = const { RefCell::new(Vec::new()) };
}

/// A running shadow.
pub(crate) struct Shadow {
    id: u64,
    work: (Sender<Box<Batch>>, Receiver<Box<Batch>>),
    free: (Sender<Box<Batch>>, Receiver<Box<Batch>>),
    allocated: AtomicUsize,
    batches: usize,
    sample: u32,
    /// The candidate's would-be outcomes.
    pub cand: VersionStats,
    /// The serving side of the same transactions.
    pub serving: VersionStats,
    /// Copies dropped because the worker was behind.
    pub shed: AtomicU64,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shadow {
    /// Starts the worker. `sample` is the share of decisions copied, `capacity` the
    /// most copies waiting (rounded up to whole batches); `stats` the candidate's and the
    /// serving side's counters.
    pub(crate) fn start(
        sample: f64,
        capacity: usize,
        eval: Eval,
        stats: (VersionStats, VersionStats),
    ) -> std::io::Result<Arc<Self>> {
        let batches = capacity.div_ceil(BATCH).max(2);
        let s = Arc::new(Self {
            id: NEXT_ID.fetch_add(1, Relaxed),
            work: bounded(batches),
            free: bounded(batches),
            allocated: AtomicUsize::new(0),
            batches,
            sample: (sample * SHARE_SCALE as f64).round() as u32,
            cand: stats.0,
            serving: stats.1,
            shed: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let w = Arc::clone(&s);
        let h = std::thread::Builder::new()
            .name("risk-shadow".into())
            .spawn(move || w.run(eval))?;
        *s.thread.lock() = Some(h);
        Ok(s)
    }

    fn run(&self, eval: Eval) {
        while !self.stop.load(Relaxed) {
            while let Ok(mut b) = self.work.1.try_recv() {
                for item in &b.items[..b.len] {
                    self.one(&eval, item);
                    if self.stop.load(Relaxed) {
                        return;
                    }
                }
                b.len = 0;
                let _ = self.free.0.try_send(b);
            }
            std::thread::park_timeout(POLL);
        }
    }

    fn one(&self, eval: &Eval, item: &ShadowItem) {
        // A panicking candidate must not kill the shadow: count it as a failure.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eval(item))) {
            Ok((c, s)) => {
                self.cand.record(&c);
                self.serving.record(&s);
            }
            Err(_) => {
                self.cand.record(&Outcome {
                    failed: true,
                    score: None,
                    latency_ns: None,
                    action: item.action,
                    agrees_with_rules: None,
                });
            }
        }
    }

    /// Offers a copy of one decision (caller's thread; never blocks).
    #[inline]
    pub(crate) fn offer(
        &self,
        txn: &Transaction,
        rules: Option<&Score>,
        model: Option<&Score>,
        shift: f32,
        action: Action,
    ) {
        let (rules, model) = (Slim::of(rules), Slim::of(model));
        if (splitmix_finalize(txn.id.0 ^ 0x5eed) % SHARE_SCALE as u64) as u32 >= self.sample {
            return;
        }
        LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            let k = match l.iter().position(|(id, _)| *id == self.id) {
                Some(k) => k,
                None => match self.take_free() {
                    Some(b) => {
                        if l.len() == PER_THREAD {
                            // A batch of a shadow this thread has not fed lately (most
                            // likely one that ended): its copies are dropped.
                            l.remove(0);
                        }
                        l.push((self.id, b));
                        l.len() - 1
                    }
                    None => {
                        self.shed.fetch_add(1, Relaxed);
                        return;
                    }
                },
            };
            let b = &mut l[k].1;
            if b.len < b.items.len() {
                let it = &mut b.items[b.len];
                it.txn.copy_from(txn);
                it.rules = rules;
                it.model = model;
                it.shift = shift;
                it.action = action;
            } else {
                b.items.push(ShadowItem {
                    txn: txn.clone(),
                    rules,
                    model,
                    shift,
                    action,
                });
            }
            b.len += 1;
            if b.len == BATCH {
                let (_, full) = l.swap_remove(k);
                if let Err(e) = self.work.0.try_send(full) {
                    // The worker is behind: these copies are shed, the buffers kept.
                    self.shed.fetch_add(BATCH as u64, Relaxed);
                    let mut b = e.into_inner();
                    b.len = 0;
                    l.push((self.id, b));
                }
            }
        });
    }

    fn take_free(&self) -> Option<Box<Batch>> {
        if let Ok(b) = self.free.1.try_recv() {
            return Some(b);
        }
        if self.allocated.fetch_add(1, Relaxed) < self.batches {
            return Some(Batch::new());
        }
        self.allocated.fetch_sub(1, Relaxed);
        None
    }

    /// Stops the worker and waits for it (it finishes the item in hand). Copies still in
    /// callers' partly filled batches are not scored.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Relaxed);
        if let Some(h) = self.thread.lock().take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}
