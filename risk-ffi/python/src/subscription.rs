//! Deep-tier verdicts from Python: `Engine.subscribe()` returns a `Subscription` whose
//! `poll` waits (GIL released) for the next verdict.

use crate::engine::PyEngine;
use crate::errors::{err, Kind};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use risk_core::{DeepFailure, DeepVerdict};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A deep-tier verdict: `ticket` (the decision's), `txn`, `entity`, `score`,
/// `fast_score` (the score that escalated it), `source` (`model`, `cached_average`,
/// `global_prior`), `failure` (None, `timeout`, `error`, `saturated`, `circuit_open`),
/// `latency_ns` (enqueue to verdict), `decided_at_ms`.
#[pyclass(module = "risk", name = "Verdict", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct PyVerdict {
    ticket: u64,
    txn: u64,
    entity: u64,
    score: f32,
    fast_score: f32,
    source: &'static str,
    failure: Option<&'static str>,
    latency_ns: u64,
    decided_at_ms: i64,
}

impl From<DeepVerdict> for PyVerdict {
    fn from(v: DeepVerdict) -> Self {
        PyVerdict {
            ticket: v.ticket.0,
            txn: v.txn.0,
            entity: v.entity.0,
            score: v.score,
            fast_score: v.fast_score,
            source: v.source.as_str(),
            failure: v.failure.map(|f| match f {
                DeepFailure::Timeout => "timeout",
                DeepFailure::Error => "error",
                DeepFailure::Saturated => "saturated",
                DeepFailure::CircuitOpen => "circuit_open",
                _ => "unknown",
            }),
            latency_ns: u64::try_from(v.latency.as_nanos()).unwrap_or(u64::MAX),
            decided_at_ms: v.decided_at_ms,
        }
    }
}

#[pymethods]
impl PyVerdict {
    fn __repr__(&self) -> String {
        format!(
            "Verdict(ticket={}, txn={}, score={:.4}, source={:?}, failure={:?})",
            self.ticket, self.txn, self.score, self.source, self.failure
        )
    }
}

/// Deep-tier verdicts delivered after `Engine.subscribe()`. Pollers of one subscription
/// take turns; `close` ends every poll within a slice (100 ms) and never holds the GIL
/// while it waits for one.
#[pyclass(module = "risk", name = "Subscription", frozen)]
#[derive(Debug)]
pub struct PySubscription {
    rx: Mutex<Option<Receiver<DeepVerdict>>>,
    closed: AtomicBool,
}

/// The longest a poll waits on the channel before it looks at `closed` again.
const POLL_SLICE: Duration = Duration::from_millis(100);

fn closed_err() -> PyErr {
    err(
        Kind::Closed,
        "no more verdicts: the engine has no deep tier, was shut down, or the \
         subscription was closed",
        0,
    )
}

#[pymethods]
impl PySubscription {
    /// The next verdict, waiting at most `timeout_ms` (GIL released); None when none came.
    /// Raises `risk.ClosedError` when no more can come (the engine has no deep tier, was
    /// shut down, or the subscription was closed, also while this poll waited).
    #[pyo3(signature = (timeout_ms=0))]
    fn poll(&self, py: Python<'_>, timeout_ms: u64) -> PyResult<Option<PyVerdict>> {
        let deadline = Instant::now().checked_add(Duration::from_millis(timeout_ms));
        let r = py.detach(|| loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(RecvTimeoutError::Disconnected);
            }
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let slot = self.rx.lock().unwrap_or_else(|e| e.into_inner());
            let Some(rx) = slot.as_ref() else {
                return Err(RecvTimeoutError::Disconnected);
            };
            match rx.recv_timeout(left.min(POLL_SLICE)) {
                Err(RecvTimeoutError::Timeout) if left > POLL_SLICE => continue,
                other => return other,
            }
        });
        match r {
            Ok(v) => Ok(Some(v.into())),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(closed_err()),
        }
    }

    /// Stops receiving (verdicts are no longer queued for this subscription); a poll in
    /// progress raises `risk.ClosedError` within 100 ms.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::SeqCst);
        py.detach(|| self.rx.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }
}

#[pymethods]
impl PyEngine {
    /// A subscription to deep-tier verdicts from now on.
    ///
    /// >>> with engine.subscribe() as sub:
    /// ...     v = sub.poll(timeout_ms=1000)
    fn subscribe(&self) -> PyResult<PySubscription> {
        Ok(PySubscription {
            rx: Mutex::new(Some(self.live()?.subscribe())),
            closed: AtomicBool::new(false),
        })
    }
}
