//! One call: attempts on endpoints, a hedge after the latency percentile, retries within
//! the budget, the first answer wins and the others are aborted (their connections are
//! dropped, which is how HTTP/1.1 cancels).

use super::attempt::AttemptError;
use super::config::{HedgeConfig, RetryConfig};
use super::endpoint::{pick, Endpoint, HedgeBudget, LatencyWindow};
use super::stats::Counters;
use super::v2::{self, DecodeError, Want, HEADER_LENGTH};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The budget ran out with attempts still out.
    Deadline,
    /// Every endpoint's breaker is open.
    NoEndpoint,
    /// The last attempt's failure, with its endpoint.
    Attempt(String, AttemptError),
}

/// What the attempts of every call share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub client: reqwest::Client,
    pub endpoints: Vec<Endpoint>,
    pub window: LatencyWindow,
    pub hedge_budget: HedgeBudget,
    pub hedge: Option<HedgeConfig>,
    pub retry: RetryConfig,
    pub max_response_bytes: usize,
    pub output: Option<String>,
    pub positive: usize,
    pub counters: Counters,
    pub next: AtomicUsize,
}

/// One encoded infer request (cheap to clone: the body is shared).
#[derive(Debug, Clone)]
pub(crate) struct Req {
    /// The body.
    pub body: Bytes,
    /// Its JSON part's length when it carries binary tensor data.
    pub header_len: Option<usize>,
    /// The request id the response must echo.
    pub id: u64,
    /// Rows in the input tensor.
    pub rows: usize,
}

/// Decrements the endpoint's in-flight count however the attempt ends, and hands a
/// half-open probe slot back when it ends without an outcome (aborted). Made when the
/// attempt is launched and owned by its future, so an attempt dropped before it was
/// ever polled (a hedge launched in the wake-up that brought the first answer) still
/// gives its probe slot back: a slot kept would hold the endpoint half-open for good.
struct Flight {
    sh: Arc<Shared>,
    ep: usize,
    settled: bool,
}

impl Drop for Flight {
    fn drop(&mut self) {
        let e = &self.sh.endpoints[self.ep];
        e.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.settled {
            e.breaker.release();
        }
    }
}

/// One request to endpoint `ep`. Counts it (on the endpoint and, when `record`, in the
/// tier's counters) now, at launch, not when first polled: the counts stay consistent
/// (attempts = calls + hedges + retries) whether or not the future is ever polled. The
/// future records the outcome on the endpoint (breaker, latency) and, when `record` (not
/// for warm-up), in the tier's counters and the latency window hedge delays come from.
pub(crate) fn attempt(
    sh: Arc<Shared>,
    ep: usize,
    req: Req,
    deadline: Instant,
    record: bool,
) -> impl Future<Output = Result<Vec<f32>, AttemptError>> + Send + 'static {
    let e = &sh.endpoints[ep];
    e.attempts.fetch_add(1, Ordering::Relaxed);
    if record {
        sh.counters.attempts.fetch_add(1, Ordering::Relaxed);
    }
    e.in_flight.fetch_add(1, Ordering::Relaxed);
    let flight = Flight {
        sh: sh.clone(),
        ep,
        settled: false,
    };
    async move {
        // The whole guard moves in (a use of one field would move only that field,
        // and the guard would drop here, at launch).
        let mut flight = flight;
        let e = &sh.endpoints[ep];
        let start = Instant::now();
        let r = send(&sh, e, req, deadline).await;
        flight.settled = true;
        let took = start.elapsed();
        match &r {
            Ok(_) => {
                e.breaker.success();
                e.observe(took);
                if record {
                    sh.window.record(took);
                }
            }
            Err(err) => {
                e.failures.fetch_add(1, Ordering::Relaxed);
                e.breaker.failure(Instant::now());
                if record {
                    sh.counters.failure(err);
                }
            }
        }
        r
    }
}

async fn send(
    sh: &Shared,
    e: &Endpoint,
    req: Req,
    deadline: Instant,
) -> Result<Vec<f32>, AttemptError> {
    let Req {
        body,
        header_len,
        id,
        rows,
    } = req;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(AttemptError::Timeout);
    }
    // The call's own deadline aborts attempts in `call`; this bound (a little later, so
    // that one is the one that fires there) is for attempts outside a call (warm-up).
    let mut rb = sh
        .client
        .post(&e.infer_url)
        .timeout(left + GRACE)
        .body(body);
    rb = match header_len {
        Some(n) => rb
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .header(HEADER_LENGTH, n),
        None => rb.header(reqwest::header::CONTENT_TYPE, "application/json"),
    };
    let mut resp = rb.send().await.map_err(AttemptError::from_reqwest)?;
    let status = resp.status();
    let resp_header = match resp.headers().get(HEADER_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    AttemptError::Malformed(format!("{HEADER_LENGTH}: {v:?} is not a length"))
                })?,
        ),
    };
    let buf = super::http::read_body(&mut resp, sh.max_response_bytes).await?;
    if !status.is_success() {
        return Err(super::http::status_error(status, &buf));
    }
    let want = Want {
        id,
        output: sh.output.as_deref(),
        rows,
        positive: sh.positive,
    };
    v2::decode(&buf, resp_header, &want).map_err(|d| match d {
        DecodeError::Malformed(m) => AttemptError::Malformed(m),
        DecodeError::Shape(m) => AttemptError::Shape(m),
    })
}

const GRACE: Duration = Duration::from_millis(20);

type Flying = Pin<Box<dyn Future<Output = (usize, bool, Result<Vec<f32>, AttemptError>)> + Send>>;

/// Scores the rows of `req` within `budget`. The attempts are futures polled by this one,
/// not spawned tasks (no hand-off to the runtime's thread per attempt; it measured the same,
/// BENCHMARKS.md [14]); dropping one aborts it and closes its connection.
pub(crate) async fn call(
    sh: Arc<Shared>,
    req: Req,
    budget: Duration,
) -> Result<Vec<f32>, CallError> {
    let start = Instant::now();
    let deadline = start + budget;
    let c = &sh.counters;
    sh.hedge_budget.on_call();
    let eps = &sh.endpoints;
    let rr = sh.next.fetch_add(1, Ordering::Relaxed);
    let Some(first) = pick(eps, rr, None, start) else {
        c.no_endpoint.fetch_add(1, Ordering::Relaxed);
        return Err(CallError::NoEndpoint);
    };
    let mut set: FuturesUnordered<Flying> = FuturesUnordered::new();
    let spawn = |set: &mut FuturesUnordered<Flying>, ep: usize, hedge: bool| {
        let a = attempt(sh.clone(), ep, req.clone(), deadline, true);
        set.push(Box::pin(async move { (ep, hedge, a.await) }));
    };
    spawn(&mut set, first, false);
    let mut flight = vec![first];
    let hedge_at = sh.hedge.as_ref().and_then(|h| {
        sh.window
            .get(h.min_samples)
            .map(|p| start + p.max(h.min_delay))
    });
    let mut hedge_pending = hedge_at.is_some_and(|t| t < deadline);
    let mut retries_left = sh.retry.max;
    let mut last: Option<(usize, AttemptError)> = None;
    let to_tokio = tokio::time::Instant::from_std;
    loop {
        if set.is_empty() {
            let (ep, err) = last.take().expect("an attempt ended");
            let left = deadline.saturating_duration_since(Instant::now());
            if err == AttemptError::Timeout {
                c.deadline.fetch_add(1, Ordering::Relaxed);
                return Err(CallError::Deadline);
            }
            if retries_left > 0 && err.retryable() && left >= sh.retry.min_left {
                if let Some(next) = pick(eps, rr + 1, Some(ep), Instant::now()) {
                    retries_left -= 1;
                    c.retries.fetch_add(1, Ordering::Relaxed);
                    spawn(&mut set, next, false);
                    flight.push(next);
                    continue;
                }
            }
            return Err(CallError::Attempt(eps[ep].base.clone(), err));
        }
        tokio::select! {
            biased;
            joined = set.next() => {
                let (ep, hedge, r) = joined.expect("set is not empty");
                if let Some(k) = flight.iter().position(|&f| f == ep) {
                    flight.swap_remove(k);
                }
                match r {
                    Ok(p) => {
                        if hedge {
                            c.hedge_wins.fetch_add(1, Ordering::Relaxed);
                        }
                        // Returning drops (aborts) the others.
                        c.cancelled.fetch_add(set.len() as u64, Ordering::Relaxed);
                        return Ok(p);
                    }
                    Err(e) => last = Some((ep, e)),
                }
            }
            _ = tokio::time::sleep_until(to_tokio(hedge_at.unwrap_or(deadline))), if hedge_pending => {
                hedge_pending = false;
                if sh.hedge_budget.try_take() {
                    if let Some(ep) = pick(eps, rr + 1, Some(first), Instant::now()) {
                        c.hedges.fetch_add(1, Ordering::Relaxed);
                        spawn(&mut set, ep, true);
                        flight.push(ep);
                    }
                }
            }
            _ = tokio::time::sleep_until(to_tokio(deadline)) => {
                c.deadline.fetch_add(1, Ordering::Relaxed);
                c.cancelled.fetch_add(set.len() as u64, Ordering::Relaxed);
                drop(set);
                // What was out ran past the budget: a failure of its endpoint (a slow
                // replica must open its breaker, not just lose races).
                let now = Instant::now();
                for ep in flight {
                    eps[ep].failures.fetch_add(1, Ordering::Relaxed);
                    eps[ep].breaker.failure(now);
                    c.failure(&AttemptError::Timeout);
                }
                return Err(CallError::Deadline);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::config::BreakerConfig;

    fn shared() -> Arc<Shared> {
        let breaker = BreakerConfig {
            failures: 1,
            open_for: Duration::ZERO,
        };
        Arc::new(Shared {
            client: reqwest::Client::new(),
            endpoints: vec![Endpoint::new("http://127.0.0.1:9", "/v2/models/m", breaker)],
            window: LatencyWindow::new(0.5),
            hedge_budget: HedgeBudget::new(0.1),
            hedge: None,
            retry: RetryConfig::default(),
            max_response_bytes: 1 << 20,
            output: None,
            positive: 1,
            counters: Counters::default(),
            next: AtomicUsize::new(0),
        })
    }

    #[test]
    fn an_attempt_dropped_unpolled_is_counted_and_gives_its_probe_back() {
        let sh = shared();
        let t0 = Instant::now();
        sh.endpoints[0].breaker.failure(t0);
        // Half-open: the probe slot is taken by the pick, as `call` does for a hedge.
        assert_eq!(pick(&sh.endpoints, 0, None, t0), Some(0));
        assert_eq!(pick(&sh.endpoints, 0, None, t0), None, "one probe only");
        let req = Req {
            body: Bytes::from_static(b"{}"),
            header_len: None,
            id: 1,
            rows: 1,
        };
        let a = attempt(sh.clone(), 0, req, t0 + Duration::from_secs(1), true);
        assert_eq!(sh.endpoints[0].in_flight.load(Ordering::Relaxed), 1);
        // Dropped before its first poll: the call's answer came in the same wake-up.
        drop(a);
        let e = &sh.endpoints[0];
        assert_eq!(e.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(e.attempts.load(Ordering::Relaxed), 1);
        assert_eq!(sh.counters.attempts.load(Ordering::Relaxed), 1);
        assert_eq!(
            pick(&sh.endpoints, 0, None, t0),
            Some(0),
            "the probe slot was given back, not held for good"
        );
    }
}
