//! Deep-tier verdicts from Python: `Engine.subscribe()` returns a `Subscription` whose
//! `poll` waits (GIL released) for the next verdict.

use crate::engine::PyEngine;
use crate::errors::{err, Kind};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use risk_core::{DeepFailure, DeepVerdict};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

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
/// take turns (a poll waiting holds it).
#[pyclass(module = "risk", name = "Subscription", frozen)]
#[derive(Debug)]
pub struct PySubscription {
    rx: Mutex<Option<Receiver<DeepVerdict>>>,
}

#[pymethods]
impl PySubscription {
    /// The next verdict, waiting at most `timeout_ms` (GIL released); None when none came.
    /// Raises `risk.ClosedError` when no more can come (the engine has no deep tier, was
    /// shut down, or the subscription was closed).
    #[pyo3(signature = (timeout_ms=0))]
    fn poll(&self, py: Python<'_>, timeout_ms: u64) -> PyResult<Option<PyVerdict>> {
        let r = py.detach(|| {
            let slot = self.rx.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_ref() {
                None => Err(RecvTimeoutError::Disconnected),
                Some(rx) => rx.recv_timeout(Duration::from_millis(timeout_ms)),
            }
        });
        match r {
            Ok(v) => Ok(Some(v.into())),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(err(
                Kind::Closed,
                "no more verdicts: the engine has no deep tier, was shut down, or the \
                 subscription was closed",
                0,
            )),
        }
    }

    /// Stops receiving (verdicts are no longer queued for this subscription).
    fn close(&self) {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close();
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
        })
    }
}
