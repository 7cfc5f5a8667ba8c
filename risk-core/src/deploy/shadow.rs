//! The shadow: a candidate scores copies of live decisions on its own thread.
//!
//! The caller's cost is a hash of the transaction id (the sample), one buffer taken from
//! a free list, a copy of the transaction into it, and one `try_send`: no allocation once
//! the buffers exist, no wake-up (the worker polls; waking a parked thread is a syscall
//! the caller would pay), never a wait. A full queue sheds the copy and counts it.

use super::slot::{mix, SHARE_SCALE};
use super::stats::{Outcome, VersionStats};
use crate::decision::Action;
use crate::scorer::Score;
use crate::txn::Transaction;
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the worker sleeps when its queue is empty.
const POLL: Duration = Duration::from_micros(500);

/// One copied decision: the transaction and what the serving tiers answered.
pub(crate) struct ShadowItem {
    pub txn: Transaction,
    pub rules: Option<Score>,
    pub model: Option<Score>,
    pub shift: f32,
    pub action: Action,
}

/// Scores one item with the candidate: `(candidate, serving)` outcomes for the same
/// transaction (the candidate's would-be action, the serving version's actual one).
pub(crate) type Eval = Box<dyn Fn(&ShadowItem) -> (Outcome, Outcome) + Send + Sync>;

/// A running shadow.
pub(crate) struct Shadow {
    work: (Sender<Box<ShadowItem>>, Receiver<Box<ShadowItem>>),
    free: (Sender<Box<ShadowItem>>, Receiver<Box<ShadowItem>>),
    allocated: AtomicUsize,
    capacity: usize,
    sample: u32,
    /// The candidate's would-be outcomes.
    pub cand: VersionStats,
    /// The serving side of the same transactions.
    pub serving: VersionStats,
    /// Copies dropped because the queue was full.
    pub shed: AtomicU64,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shadow {
    /// Starts the worker. `sample` is the share of decisions copied, `capacity` the
    /// queue bound.
    pub(crate) fn start(sample: f64, capacity: usize, eval: Eval) -> std::io::Result<Arc<Self>> {
        let s = Arc::new(Self {
            work: bounded(capacity),
            free: bounded(capacity),
            allocated: AtomicUsize::new(0),
            capacity,
            sample: (sample * SHARE_SCALE as f64).round() as u32,
            cand: VersionStats::default(),
            serving: VersionStats::default(),
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
            while let Ok(item) = self.work.1.try_recv() {
                // A panicking candidate must not kill the shadow: count it as a failure.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eval(&item)));
                match r {
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
                let _ = self.free.0.try_send(item);
                if self.stop.load(Relaxed) {
                    return;
                }
            }
            std::thread::park_timeout(POLL);
        }
    }

    /// Offers a copy of one decision (caller's thread; never blocks).
    #[inline]
    pub(crate) fn offer(
        &self,
        txn: &Transaction,
        rules: Option<Score>,
        model: Option<Score>,
        shift: f32,
        action: Action,
    ) {
        if (mix(txn.id.0 ^ 0x5eed) % SHARE_SCALE as u64) as u32 >= self.sample {
            return;
        }
        let item = match self.free.1.try_recv() {
            Ok(mut b) => {
                b.txn.copy_from(txn);
                b.rules = rules;
                b.model = model;
                b.shift = shift;
                b.action = action;
                b
            }
            Err(_) if self.allocated.load(Relaxed) < self.capacity => {
                self.allocated.fetch_add(1, Relaxed);
                Box::new(ShadowItem {
                    txn: txn.clone(),
                    rules,
                    model,
                    shift,
                    action,
                })
            }
            Err(_) => {
                self.shed.fetch_add(1, Relaxed);
                return;
            }
        };
        if let Err(e) = self.work.0.try_send(item) {
            self.shed.fetch_add(1, Relaxed);
            let _ = self.free.0.try_send(e.into_inner());
        }
    }

    /// Stops the worker and waits for it (it finishes the item in hand).
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
