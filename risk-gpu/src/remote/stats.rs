//! What a remote tier has done: calls, attempts, hedges, retries, failures by cause.

use super::attempt::AttemptError;
use super::endpoint::BreakerState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub calls: AtomicU64,
    pub rows: AtomicU64,
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub attempts: AtomicU64,
    pub hedges: AtomicU64,
    pub hedge_wins: AtomicU64,
    pub retries: AtomicU64,
    pub cancelled: AtomicU64,
    pub deadline: AtomicU64,
    pub no_endpoint: AtomicU64,
    pub transport: AtomicU64,
    pub timeout: AtomicU64,
    pub status: AtomicU64,
    pub body: AtomicU64,
    pub malformed: AtomicU64,
    pub shape: AtomicU64,
    pub too_large: AtomicU64,
}

impl Counters {
    pub(crate) fn failure(&self, e: &AttemptError) {
        let c = match e {
            AttemptError::Transport(_) => &self.transport,
            AttemptError::Timeout => &self.timeout,
            AttemptError::Status { .. } => &self.status,
            AttemptError::Body(_) => &self.body,
            AttemptError::Malformed(_) => &self.malformed,
            AttemptError::Shape(_) => &self.shape,
            AttemptError::TooLarge(_) => &self.too_large,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RemoteStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RemoteStats {
            calls: g(&self.calls),
            rows: g(&self.rows),
            ok: g(&self.ok),
            failed: g(&self.failed),
            attempts: g(&self.attempts),
            hedges: g(&self.hedges),
            hedge_wins: g(&self.hedge_wins),
            retries: g(&self.retries),
            cancelled: g(&self.cancelled),
            deadline: g(&self.deadline),
            no_endpoint: g(&self.no_endpoint),
            failures: AttemptFailures {
                transport: g(&self.transport),
                timeout: g(&self.timeout),
                status: g(&self.status),
                body: g(&self.body),
                malformed: g(&self.malformed),
                shape: g(&self.shape),
                too_large: g(&self.too_large),
            },
        }
    }
}

/// Failed attempts by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttemptFailures {
    /// Connection refused or reset, closed before a response.
    pub transport: u64,
    /// Ran out of the budget (including attempts still out when the call's budget ended).
    pub timeout: u64,
    /// Non-2xx status.
    pub status: u64,
    /// Body broken off.
    pub body: u64,
    /// Not the protocol's JSON.
    pub malformed: u64,
    /// Wrong tensor: missing output, shape, datatype or length.
    pub shape: u64,
    /// Body over the size limit.
    pub too_large: u64,
}

impl AttemptFailures {
    /// All failed attempts.
    pub fn total(&self) -> u64 {
        self.transport
            + self.timeout
            + self.status
            + self.body
            + self.malformed
            + self.shape
            + self.too_large
    }
}

/// Counters of a [`RemoteScorer`](super::RemoteScorer) since it was loaded (warm-up
/// excluded). A call is one `score*` request (a batch larger than `max_batch` is several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Calls.
    pub calls: u64,
    /// Rows scored or asked for.
    pub rows: u64,
    /// Calls answered.
    pub ok: u64,
    /// Calls failed (any cause).
    pub failed: u64,
    /// Attempts launched (first attempts, hedges, retries). One aborted before its
    /// request went out (its call answered in the same wake-up) counts here and in
    /// `cancelled`.
    pub attempts: u64,
    /// Hedge attempts launched.
    pub hedges: u64,
    /// Calls a hedge answered first.
    pub hedge_wins: u64,
    /// Retries sent.
    pub retries: u64,
    /// Attempts aborted: losers of a hedge race, and attempts out when the budget ended.
    pub cancelled: u64,
    /// Calls whose budget ran out.
    pub deadline: u64,
    /// Calls refused because every endpoint's breaker was open (nothing sent).
    pub no_endpoint: u64,
    /// Failed attempts by cause.
    pub failures: AttemptFailures,
}

/// One endpoint's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    /// Base URL.
    pub url: String,
    /// Its breaker.
    pub breaker: BreakerState,
    /// Times its breaker opened.
    pub opens: u64,
    /// Requests sent to it.
    pub attempts: u64,
    /// Of which failed.
    pub failures: u64,
    /// Smoothed latency of its answered requests.
    pub latency: Duration,
}
