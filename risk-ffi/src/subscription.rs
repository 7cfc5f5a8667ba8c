//! Subscriptions to deep-tier verdicts: `risk_engine_subscribe`, `risk_subscription_poll`,
//! `risk_subscription_free`.

use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::handle::{register_handle, unregister_handle, with_handle};
use std::sync::Mutex;
use std::time::Duration;

/// A subscription to deep-tier verdicts (opaque). A `risk_subscription *` is a handle id,
/// not an address: never dereference it.
#[derive(Debug)]
pub struct risk_subscription {
    rx: Mutex<std::sync::mpsc::Receiver<risk_core::DeepVerdict>>,
}

impl risk_subscription {
    /// A subscription reading `rx`.
    pub(crate) fn new(rx: std::sync::mpsc::Receiver<risk_core::DeepVerdict>) -> Self {
        Self { rx: Mutex::new(rx) }
    }
}

/// A deep-tier verdict.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct risk_verdict {
    /// Ticket of the decision that enqueued it.
    pub ticket: u64,
    /// Transaction id.
    pub txn: u64,
    /// Entity.
    pub entity: u64,
    /// Deep score.
    pub score: f32,
    /// The fast tier's score that sent it to the gray zone.
    pub fast_score: f32,
    /// 0 model, 1 cached average, 2 global prior.
    pub source: u8,
    /// 0 none, 1 timeout, 2 error, 3 saturated.
    pub failure: u8,
    /// Enqueue to verdict (ns).
    pub latency_ns: u64,
}

/// Subscribes to deep-tier verdicts from now on (bounded channel: a slow reader loses
/// verdicts, counted by the engine, rather than blocking the deep tier).
///
/// # Safety
/// `e` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_subscribe(
    e: *const risk_engine,
    out: *mut *mut risk_subscription,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        let mut rx = None;
        let r = with_handle(e, |h| {
            rx = Some(h.engine.subscribe());
            RISK_OK
        });
        // Registered after `with_handle` released the live set's read lock (registering
        // takes the write lock).
        if let Some(rx) = rx {
            let s = register_handle(risk_subscription::new(rx));
            // SAFETY: `out` is non-NULL and writable per the caller.
            unsafe { *out = s };
        }
        r
    })
}

/// Waits up to `timeout_ms` for the next verdict: `RISK_OK` with `*out` set,
/// `RISK_ERR_EMPTY` when none came in time, or `RISK_ERR_CLOSED` (at once) when none ever
/// will. Several threads may poll one subscription; they take turns.
///
/// # Safety
/// `s` is a live subscription; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_subscription_poll(
    s: *const risk_subscription,
    timeout_ms: u32,
    out: *mut risk_verdict,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        with_handle(s, |h| {
            let rx = h.rx.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv_timeout(Duration::from_millis(timeout_ms as u64)) {
                Ok(v) => {
                    let c = risk_verdict {
                        ticket: v.ticket.0,
                        txn: v.txn.0,
                        entity: v.entity.0,
                        score: v.score,
                        fast_score: v.fast_score,
                        source: match v.source {
                            risk_core::DeepSource::Model => 0,
                            risk_core::DeepSource::CachedAverage => 1,
                            risk_core::DeepSource::GlobalPrior => 2,
                            _ => 255,
                        },
                        failure: match v.failure {
                            None => 0,
                            Some(risk_core::DeepFailure::Timeout) => 1,
                            Some(risk_core::DeepFailure::Error) => 2,
                            Some(risk_core::DeepFailure::Saturated) => 3,
                            Some(_) => 255,
                        },
                        latency_ns: v.latency.as_nanos() as u64,
                    };
                    // SAFETY: `out` is non-NULL and writable per the caller.
                    unsafe { *out = c };
                    RISK_OK
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    fail(RISK_ERR_EMPTY, "no verdict within the timeout")
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => fail(
                    RISK_ERR_CLOSED,
                    "no more verdicts: the engine has no deep tier or was shut down",
                ),
            }
        })
    })
}

/// Releases a subscription. NULL or an already freed handle is ignored. Does not wait for
/// polls in flight on other threads: they hold their own reference and return as usual
/// (a verdict, `RISK_ERR_EMPTY` at their timeout, or `RISK_ERR_CLOSED`); polls made after
/// this returns get `RISK_ERR_HANDLE`.
///
/// # Safety
/// `s` is NULL or a pointer returned by `risk_engine_subscribe`.
#[no_mangle]
pub unsafe extern "C" fn risk_subscription_free(s: *mut risk_subscription) {
    let _ = guard(|| {
        drop(unregister_handle(s));
        RISK_OK
    });
}
