//! Subscriptions to deep-tier verdicts: `risk_engine_subscribe`, `risk_subscription_poll`,
//! `risk_subscription_free`.
//!
//! Any number of threads may poll one subscription, and each waits at most its own timeout.
//! The channel's receiver cannot be shared (`std::sync::mpsc::Receiver` is not `Sync`, and
//! it is what `Engine::subscribe` returns), so it is passed like a baton: one poller takes it
//! out of `slot` and waits on the channel until its own deadline; the others wait on the
//! `returned` condition variable, each until its own deadline, and the receiver is handed
//! on when the holder puts it back. No lock is held while anyone waits, so a long poll never
//! stretches a short one, and no forwarding thread is needed.

use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::handle::{register_handle, unregister_handle, with_handle, Handle};
use risk_core::{DeepFailure, DeepSource, DeepVerdict};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// A subscription to deep-tier verdicts (opaque). A `risk_subscription *` is a handle id,
/// not an address: never dereference it. Any number of threads may poll it; each waits at
/// most its own timeout.
#[derive(Debug)]
pub struct risk_subscription {
    /// The receiver while no poller holds it.
    slot: Mutex<Option<Receiver<DeepVerdict>>>,
    /// Signalled whenever the receiver is put back.
    returned: Condvar,
    /// Polls waiting on the channel itself now (0 or 1); read by tests.
    receiving: AtomicUsize,
}

impl Handle for risk_subscription {
    const NAME: &'static str = "subscription";
}

/// The receiver taken out of a subscription; put back on drop (a panic included), with one
/// waiting poller woken to take it.
struct Baton<'a> {
    sub: &'a risk_subscription,
    rx: Option<Receiver<DeepVerdict>>,
}

impl Drop for Baton<'_> {
    fn drop(&mut self) {
        *self.sub.slot.lock().unwrap_or_else(|e| e.into_inner()) = self.rx.take();
        // A woken poller always takes the receiver if it finds it, even past its deadline
        // (it then only collects a verdict already there), and puts it back in turn: the
        // wake-up is never lost on a poller that gives up.
        self.sub.returned.notify_one();
    }
}

impl risk_subscription {
    /// A subscription reading `rx`.
    pub(crate) fn new(rx: Receiver<DeepVerdict>) -> Self {
        Self {
            slot: Mutex::new(Some(rx)),
            returned: Condvar::new(),
            receiving: AtomicUsize::new(0),
        }
    }

    /// The next verdict within `timeout`, measured from now whatever other pollers do.
    fn recv(&self, timeout: Duration) -> Result<DeepVerdict, RecvTimeoutError> {
        // `None`: further away than `Instant` can express, i.e. never.
        let deadline = Instant::now().checked_add(timeout);
        let left = || {
            deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            })
        };
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let baton = loop {
            if let Some(rx) = slot.take() {
                break Baton {
                    sub: self,
                    rx: Some(rx),
                };
            }
            let wait = left();
            if wait.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            slot = self
                .returned
                .wait_timeout(slot, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(slot);
        let rx = baton.rx.as_ref().expect("the baton holds the receiver");
        self.receiving.fetch_add(1, Ordering::SeqCst);
        // Past the deadline this still returns a verdict already queued, or `Disconnected`.
        let r = rx.recv_timeout(left());
        self.receiving.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Polls waiting on the channel itself now.
    #[cfg(test)]
    pub(crate) fn receiving(&self) -> usize {
        self.receiving.load(Ordering::SeqCst)
    }
}

fn to_c(v: &DeepVerdict) -> risk_verdict {
    risk_verdict {
        ticket: v.ticket.0,
        txn: v.txn.0,
        entity: v.entity.0,
        score: v.score,
        fast_score: v.fast_score,
        source: match v.source {
            DeepSource::Model => 0,
            DeepSource::CachedAverage => 1,
            DeepSource::GlobalPrior => 2,
            _ => 255,
        },
        failure: match v.failure {
            None => 0,
            Some(DeepFailure::Timeout) => 1,
            Some(DeepFailure::Error) => 2,
            Some(DeepFailure::Saturated) => 3,
            Some(DeepFailure::CircuitOpen) => 4,
            Some(_) => 255,
        },
        latency_ns: v.latency.as_nanos() as u64,
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
    /// 0 none, 1 timeout, 2 error, 3 saturated, 4 circuit open (the deep tier's breaker); 255 a
    /// cause this header version does not know.
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
/// will. Several threads may poll one subscription: each verdict goes to one of them, and
/// `timeout_ms` bounds every caller's wait, however long the others wait.
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
            match h.recv(Duration::from_millis(timeout_ms as u64)) {
                Ok(v) => {
                    // SAFETY: `out` is non-NULL and writable per the caller.
                    unsafe { *out = to_c(&v) };
                    RISK_OK
                }
                Err(RecvTimeoutError::Timeout) => {
                    fail(RISK_ERR_EMPTY, "no verdict within the timeout")
                }
                Err(RecvTimeoutError::Disconnected) => fail(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{risk_engine_free, risk_engine_new_from_toml, risk_engine_shutdown};
    use crate::handle::lookup;
    use std::sync::mpsc;
    use std::thread;

    /// Constant tiers and a deep tier: the subscription stays open until shutdown.
    const DEEP: &str = r#"
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "constant"
probability = 0.1
[deep.scorer]
kind = "constant"
probability = 0.9
"#;

    /// Hang detector: a bound on waiting for another thread, never met by a passing run.
    const HANG: Duration = Duration::from_secs(60);

    /// A handle value that crosses threads (handles are ids).
    fn id<T>(p: *mut T) -> usize {
        p.addr()
    }

    fn poll_on_thread(s: usize, timeout_ms: u32) -> mpsc::Receiver<risk_result> {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut v = risk_verdict::default();
            let s = std::ptr::without_provenance::<risk_subscription>(s);
            // SAFETY: `v` is writable; `s` is a subscription handle (or a stale one, refused).
            let _ = tx.send(unsafe { risk_subscription_poll(s, timeout_ms, &mut v) });
        });
        rx
    }

    #[test]
    fn a_poll_waits_at_most_its_own_timeout_while_another_poll_waits() {
        let mut e = std::ptr::null_mut();
        // SAFETY: `DEEP` is `len` readable bytes, `base_dir` may be NULL, `e` is writable.
        let r = unsafe {
            risk_engine_new_from_toml(DEEP.as_ptr(), DEEP.len(), std::ptr::null(), &mut e)
        };
        assert_eq!(r, RISK_OK);
        let mut s = std::ptr::null_mut();
        // SAFETY: `e` is a live engine and `s` is writable.
        assert_eq!(unsafe { risk_engine_subscribe(e, &mut s) }, RISK_OK);
        let sub = lookup(s).unwrap();

        // A waits as long as the ABI allows (49 days); wait until it is on the channel.
        let a = poll_on_thread(id(s), u32::MAX);
        while sub.receiving() == 0 {
            if let Ok(r) = a.try_recv() {
                panic!("the long poll returned {r:?} with no verdict and an open channel");
            }
            thread::yield_now();
        }
        // B and C must give up at their own deadlines, not A's.
        for timeout_ms in [0, 200] {
            let b = poll_on_thread(id(s), timeout_ms);
            assert_eq!(
                b.recv_timeout(HANG),
                Ok(RISK_ERR_EMPTY),
                "a {timeout_ms} ms poll waited behind a longer one"
            );
        }
        assert_eq!(
            a.try_recv(),
            Err(mpsc::TryRecvError::Empty),
            "A is still waiting"
        );

        // Freeing the subscription does not cut A short (it holds its own reference);
        // shutting the engine down closes the channel and releases it.
        // SAFETY: `s` is a live subscription, released once.
        unsafe { risk_subscription_free(s) };
        assert_eq!(
            a.try_recv(),
            Err(mpsc::TryRecvError::Empty),
            "A is still waiting"
        );
        // SAFETY: `e` is live; NULL counters are allowed.
        let r = unsafe { risk_engine_shutdown(e, 0, std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(r, RISK_OK);
        assert_eq!(a.recv_timeout(HANG), Ok(RISK_ERR_CLOSED));
        // SAFETY: `e` is a live engine, released once.
        unsafe { risk_engine_free(e) };
    }
}
