//! `decide_async`: a runtime-agnostic future over the same `decide` path.
//!
//! The call is handed to a small pool of engine threads (started on first use); the
//! future completes through its `Waker`, so it works under tokio, async-std, smol or a
//! hand-written executor, and never blocks the executor's thread for the fast-tier
//! deadline.

use super::Engine;
use crate::decision::Decision;
use crate::error::DecideError;
use crate::txn::Transaction;
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct AsyncPool {
    tx: Mutex<Sender<Job>>,
}

impl std::fmt::Debug for AsyncPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AsyncPool")
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

impl AsyncPool {
    pub(crate) fn new(n: usize) -> Self {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n {
            let rx: Arc<Mutex<Receiver<Job>>> = Arc::clone(&rx);
            // If a thread cannot start, the others serve; with none, jobs run inline.
            let _ = std::thread::Builder::new()
                .name(format!("risk-async-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().recv();
                    match job {
                        Ok(j) => j(),
                        Err(_) => return,
                    }
                });
        }
        Self { tx: Mutex::new(tx) }
    }

    pub(crate) fn submit(&self, engine: Engine, txn: Transaction) -> DecisionFuture {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let s2 = Arc::clone(&slot);
        let job: Job = Box::new(move || {
            let r = engine.decide(&txn);
            let waker = {
                let mut s = s2.lock();
                s.result = Some(r);
                s.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        });
        if let Err(e) = self.tx.lock().send(job) {
            (e.0)();
        }
        DecisionFuture { slot }
    }
}
