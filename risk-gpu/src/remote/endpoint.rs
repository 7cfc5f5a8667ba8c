//! Replicas, their circuit breakers, recent latencies, and which one gets the next attempt.
//!
//! Time is passed in (`now`), never read here, so the state machines are tested on an
//! injected clock. Locks are held for a few loads and stores, never across I/O.

use super::config::BreakerConfig;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// State of an endpoint's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Traffic flows; counts consecutive failures.
    Closed,
    /// No traffic until the open period ends.
    Open,
    /// One probe attempt is out; its outcome closes or reopens the breaker.
    HalfOpen,
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probe_out: bool },
}

/// A circuit breaker over consecutive attempt failures.
#[derive(Debug)]
pub(crate) struct Breaker {
    cfg: BreakerConfig,
    state: Mutex<State>,
    opens: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(cfg: BreakerConfig) -> Self {
        Self {
            cfg,
            state: Mutex::new(State::Closed { failures: 0 }),
            opens: AtomicU64::new(0),
        }
    }

    /// Whether an attempt may go out now; in half-open, only the one probe may.
    pub(crate) fn try_acquire(&self, now: Instant) -> bool {
        let mut s = self.state.lock();
        match *s {
            State::Closed { .. } => true,
            State::Open { until } if now >= until => {
                *s = State::HalfOpen { probe_out: true };
                true
            }
            State::Open { .. } => false,
            State::HalfOpen { probe_out: false } => {
                *s = State::HalfOpen { probe_out: true };
                true
            }
            State::HalfOpen { probe_out: true } => false,
        }
    }

    /// Whether an attempt could go out now (no state change).
    pub(crate) fn available(&self, now: Instant) -> bool {
        match *self.state.lock() {
            State::Closed { .. } | State::HalfOpen { probe_out: false } => true,
            State::Open { until } => now >= until,
            State::HalfOpen { probe_out: true } => false,
        }
    }

    /// Opens the breaker now (an endpoint found down at load or failing its warm-up).
    pub(crate) fn force_open(&self, now: Instant) {
        *self.state.lock() = State::Open {
            until: now + self.cfg.open_for,
        };
        self.opens.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn success(&self) {
        *self.state.lock() = State::Closed { failures: 0 };
    }

    pub(crate) fn failure(&self, now: Instant) {
        let mut s = self.state.lock();
        let open = match *s {
            State::Closed { failures } if failures + 1 >= self.cfg.failures => true,
            State::Closed { failures } => {
                *s = State::Closed {
                    failures: failures + 1,
                };
                false
            }
            State::HalfOpen { .. } => true,
            // A late failure of an attempt sent before the breaker opened.
            State::Open { .. } => false,
        };
        if open {
            *s = State::Open {
                until: now + self.cfg.open_for,
            };
            self.opens.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An attempt that ended without an outcome (cancelled): a probe slot is returned.
    pub(crate) fn release(&self) {
        let mut s = self.state.lock();
        if let State::HalfOpen { probe_out: true } = *s {
            *s = State::HalfOpen { probe_out: false };
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        match *self.state.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    pub(crate) fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }
}

/// Recent successful attempt latencies and a percentile of them, recomputed every
/// `RECOMPUTE` samples (a selection over 1,024 values, ~10 µs, once per 64 calls) so that
/// reading it is one atomic load.
#[derive(Debug)]
pub(crate) struct LatencyWindow {
    ring: Mutex<Ring>,
    percentile: f64,
    cached_us: AtomicU64,
    samples: AtomicU64,
}

#[derive(Debug)]
struct Ring {
    values: Vec<u32>,
    next: usize,
    scratch: Vec<u32>,
}

const WINDOW: usize = 1024;
const RECOMPUTE: u64 = 64;

impl LatencyWindow {
    pub(crate) fn new(percentile: f64) -> Self {
        Self {
            ring: Mutex::new(Ring {
                values: Vec::with_capacity(WINDOW),
                next: 0,
                scratch: Vec::with_capacity(WINDOW),
            }),
            percentile,
            cached_us: AtomicU64::new(u64::MAX),
            samples: AtomicU64::new(0),
        }
    }

    pub(crate) fn record(&self, d: Duration) {
        let us = d.as_micros().min(u32::MAX as u128) as u32;
        let n = self.samples.fetch_add(1, Ordering::Relaxed) + 1;
        let mut r = self.ring.lock();
        if r.values.len() < WINDOW {
            r.values.push(us);
        } else {
            let i = r.next;
            r.values[i] = us;
            r.next = (i + 1) % WINDOW;
        }
        if n.is_multiple_of(RECOMPUTE) || n <= RECOMPUTE {
            let Ring {
                values, scratch, ..
            } = &mut *r;
            scratch.clear();
            scratch.extend_from_slice(values);
            let k = ((scratch.len() as f64 * self.percentile) as usize).min(scratch.len() - 1);
            let (_, v, _) = scratch.select_nth_unstable(k);
            self.cached_us.store(*v as u64, Ordering::Relaxed);
        }
    }

    /// The percentile, once `min_samples` were recorded.
    pub(crate) fn get(&self, min_samples: usize) -> Option<Duration> {
        (self.samples.load(Ordering::Relaxed) >= min_samples as u64)
            .then(|| Duration::from_micros(self.cached_us.load(Ordering::Relaxed)))
    }
}

/// Allows hedges to be at most `ratio` of calls: every call adds `ratio` tokens (up to a
/// small burst), every hedge takes one. Fixed point (1e-6 tokens) in one atomic.
#[derive(Debug)]
pub(crate) struct HedgeBudget {
    micro_tokens: AtomicU64,
    per_call: u64,
}

const TOKEN: u64 = 1_000_000;
const BURST: u64 = 10 * TOKEN;

impl HedgeBudget {
    pub(crate) fn new(ratio: f64) -> Self {
        Self {
            micro_tokens: AtomicU64::new(0),
            per_call: (ratio * TOKEN as f64).round().max(1.0) as u64,
        }
    }

    pub(crate) fn on_call(&self) {
        let _ = self
            .micro_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some((t + self.per_call).min(BURST))
            });
    }

    pub(crate) fn try_take(&self) -> bool {
        self.micro_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_sub(TOKEN)
            })
            .is_ok()
    }
}

/// One replica.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// `http://host:port` without a trailing slash.
    pub base: String,
    /// `base` + the model's infer path.
    pub infer_url: String,
    pub breaker: Breaker,
    /// Smoothed attempt latency in µs (EWMA, 1/8), 0 before the first.
    ewma_us: AtomicU64,
    pub in_flight: AtomicUsize,
    pub attempts: AtomicU64,
    pub failures: AtomicU64,
}

impl Endpoint {
    pub(crate) fn new(base: &str, model_path: &str, breaker: BreakerConfig) -> Self {
        let base = base.trim_end_matches('/').to_owned();
        Self {
            infer_url: format!("{base}{model_path}/infer"),
            base,
            breaker: Breaker::new(breaker),
            ewma_us: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128 / 16) as u64;
        let _ = self
            .ewma_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| {
                Some(if e == 0 { us } else { e - e / 8 + us / 8 })
            });
    }

    /// Lower is better: smoothed latency scaled by the attempts already out.
    fn load(&self) -> u64 {
        let e = self.ewma_us.load(Ordering::Relaxed).max(1);
        e.saturating_mul(1 + self.in_flight.load(Ordering::Relaxed) as u64)
    }

    pub(crate) fn ewma(&self) -> Duration {
        Duration::from_micros(self.ewma_us.load(Ordering::Relaxed))
    }
}

/// Picks the endpoint for the next attempt: of those whose breaker lets an attempt out,
/// not `avoid` when another is available, the lower load of two candidates taken round
/// robin from `start` (two random choices, deterministic). Acquires the breaker (a
/// half-open probe slot) of the one returned.
pub(crate) fn pick(
    eps: &[Endpoint],
    start: usize,
    avoid: Option<usize>,
    now: Instant,
) -> Option<usize> {
    let n = eps.len();
    let mut cands = (0..n)
        .map(|k| (start + k) % n)
        .filter(|&i| Some(i) != avoid && eps[i].breaker.available(now));
    let chosen = match (cands.next(), cands.next()) {
        (Some(a), Some(b)) => {
            let (first, second) = if eps[b].load() < eps[a].load() {
                (b, a)
            } else {
                (a, b)
            };
            [first, second]
                .into_iter()
                .find(|&i| eps[i].breaker.try_acquire(now))
        }
        (Some(a), None) => eps[a].breaker.try_acquire(now).then_some(a),
        _ => None,
    };
    chosen.or_else(|| {
        // Only `avoid` is left (or the candidates raced): use it if its breaker allows.
        avoid.filter(|&i| eps[i].breaker.try_acquire(now))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(failures: u32, open_ms: u64) -> BreakerConfig {
        BreakerConfig {
            failures,
            open_for: Duration::from_millis(open_ms),
        }
    }

    #[test]
    fn breaker_opens_probes_once_and_closes_or_reopens() {
        let t0 = Instant::now();
        let b = Breaker::new(cfg(3, 100));
        for _ in 0..2 {
            assert!(b.try_acquire(t0));
            b.failure(t0);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        b.success(); // a success resets the count
        for _ in 0..3 {
            b.failure(t0);
        }
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opens(), 1);
        assert!(!b.try_acquire(t0 + Duration::from_millis(99)));
        // Half-open: one probe only.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.try_acquire(t1));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(!b.try_acquire(t1));
        // A cancelled probe gives its slot back.
        b.release();
        assert!(b.try_acquire(t1));
        b.failure(t1);
        assert_eq!((b.state(), b.opens()), (BreakerState::Open, 2));
        let t2 = t1 + Duration::from_millis(100);
        assert!(b.try_acquire(t2));
        b.success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.try_acquire(t2));
    }

    #[test]
    fn latency_percentile_tracks_the_window() {
        let w = LatencyWindow::new(0.9);
        assert_eq!(w.get(1), None);
        // Recomputed at every sample up to 64, then every 64th: at 128 here.
        for i in 1..=128u64 {
            w.record(Duration::from_micros(i * 10));
        }
        let p = w.get(50).unwrap();
        assert_eq!(p, Duration::from_micros(1160), "p90 of 10, 20, ..., 1280");
        assert_eq!(w.get(129), None);
        // The window forgets: after 1,024 fast samples the percentile is fast.
        for _ in 0..WINDOW {
            w.record(Duration::from_micros(5));
        }
        assert_eq!(w.get(1).unwrap(), Duration::from_micros(5));
    }

    #[test]
    fn hedge_budget_bounds_extra_load() {
        let b = HedgeBudget::new(0.05);
        let mut hedges = 0;
        for _ in 0..10_000 {
            b.on_call();
            hedges += b.try_take() as u32;
        }
        assert!((495..=505).contains(&hedges), "{hedges}");
        // Idle calls save at most a burst of 10.
        let b = HedgeBudget::new(1.0);
        for _ in 0..100 {
            b.on_call();
        }
        assert_eq!((0..100).filter(|_| b.try_take()).count(), 10);
    }

    #[test]
    fn pick_skips_open_endpoints_and_prefers_the_less_loaded() {
        let t = Instant::now();
        let eps: Vec<Endpoint> = (0..3)
            .map(|i| Endpoint::new(&format!("http://h{i}:1"), "/v2/models/m", cfg(1, 1000)))
            .collect();
        assert_eq!(eps[0].infer_url, "http://h0:1/v2/models/m/infer");
        eps[0].observe(Duration::from_millis(10));
        eps[1].observe(Duration::from_millis(1));
        eps[2].observe(Duration::from_millis(5));
        assert_eq!(pick(&eps, 0, None, t), Some(1));
        assert_eq!(pick(&eps, 0, Some(1), t), Some(2));
        eps[1].breaker.failure(t);
        eps[2].breaker.failure(t);
        assert_eq!(pick(&eps, 1, None, t), Some(0));
        eps[0].breaker.failure(t);
        assert_eq!(pick(&eps, 0, None, t), None);
        // After the open period one probe per endpoint.
        let later = t + Duration::from_secs(1);
        let a = pick(&eps, 0, None, later).unwrap();
        let b = pick(&eps, 0, None, later).unwrap();
        let c = pick(&eps, 0, None, later).unwrap();
        assert_eq!(pick(&eps, 0, None, later), None);
        let mut all = [a, b, c];
        all.sort();
        assert_eq!(all, [0, 1, 2]);
    }
}
