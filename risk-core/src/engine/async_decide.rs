//! `decide_async`: a runtime-agnostic future over the same `decide` path.
//!
//! The call is handed to a small pool of engine threads (started on first use) through a
//! bounded queue; the future completes through its `Waker`, so it works under tokio,
//! async-std, smol or a hand-written executor, and never blocks the executor's thread for
//! the fast-tier deadline.
//!
//! The deadline starts at the call, not when a worker picks the job up: time spent queued
//! counts against the fast tier's budget (a job that waited past it is decided by the
//! rules without calling the fast tier). When the queue is full the call is shed at once:
//! the rules alone decide on the caller's thread (microseconds, no I/O, no wait) and the
//! decision says `FallbackCause::Saturated`; `MetricsSnapshot::async_shed` counts it.

use super::Engine;
use crate::decision::Decision;
use crate::error::DecideError;
use crate::txn::Transaction;
use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

struct Job {
    engine: Engine,
    txn: Transaction,
    /// Clock time of the `decide_async` call: the deadline counts from here.
    called: u64,
    slot: Arc<Mutex<Slot>>,
}

pub(crate) struct AsyncPool {
    tx: Sender<Job>,
}

impl std::fmt::Debug for AsyncPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncPool")
            .field("queued", &self.tx.len())
            .finish()
    }
}

#[derive(Default)]
struct Slot {
    result: Option<Result<Decision, DecideError>>,
    waker: Option<Waker>,
}

/// The future returned by [`Engine::decide_async`].
#[must_use = "futures do nothing unless polled"]
pub struct DecisionFuture {
    slot: Arc<Mutex<Slot>>,
}

impl std::fmt::Debug for DecisionFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionFuture")
            .field("ready", &self.slot.lock().result.is_some())
            .finish()
    }
}

impl Future for DecisionFuture {
    type Output = Result<Decision, DecideError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.lock();
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

fn complete(slot: &Mutex<Slot>, r: Result<Decision, DecideError>) {
    let waker = {
        let mut s = slot.lock();
        s.result = Some(r);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

impl AsyncPool {
    /// `n` workers (at least one thread is attempted each) over a queue of `capacity`.
    pub(crate) fn new(n: usize, capacity: usize) -> Self {
        let (tx, rx) = bounded::<Job>(capacity);
        for i in 0..n {
            let rx = rx.clone();
            // If a thread cannot start, the others serve; with none, every call is shed.
            let _ = std::thread::Builder::new()
                .name(format!("risk-async-{i}"))
                .spawn(move || {
                    for j in rx {
                        let r = j.engine.decide_from(&j.txn, j.called);
                        complete(&j.slot, r);
                    }
                });
        }
        Self { tx }
    }

    pub(crate) fn submit(&self, engine: Engine, txn: Transaction, called: u64) -> DecisionFuture {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let job = Job {
            engine,
            txn,
            called,
            slot: Arc::clone(&slot),
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => {
                let r = j.engine.decide_shed(&j.txn, j.called);
                complete(&slot, r);
            }
        }
        DecisionFuture { slot }
    }
}
