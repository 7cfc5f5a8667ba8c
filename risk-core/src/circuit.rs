//! Per-tier circuit breaker: closed → open → half-open → closed.
//!
//! *Closed*: calls go through; outcomes are counted in a rolling window of
//! [`BUCKETS`] buckets. When the window holds at least `min_calls` outcomes and the share
//! of failures (errors, panics, timeouts, invalid scores) reaches `failure_rate`, the
//! circuit opens. *Open*: the tier is skipped with zero wait until `open_for` has passed.
//! *Half-open*: up to `half_open_probes` calls are let through; if that many succeed the
//! circuit closes with an empty window, and any failure re-opens it for `open_for`.
//! Time comes from the engine's [`Clock`](crate::clock::Clock).

use crate::clock::{nanos, Nanos};
use crate::error::ConfigError;
use crate::stripe::Striped;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Number of buckets in the rolling window.
pub const BUCKETS: usize = 10;

/// Circuit-breaker settings (the `[circuit]` table of `risk.toml`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CircuitConfig {
    /// Length of the rolling window.
    pub window: Duration,
    /// Fewest outcomes in the window before the rate is judged.
    pub min_calls: u32,
    /// Failure share in `(0, 1]` that opens the circuit.
    pub failure_rate: f32,
    /// How long the circuit stays open before probing.
    pub open_for: Duration,
    /// Successful probes needed to close again.
    pub half_open_probes: u32,
}

impl Default for CircuitConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(10),
            min_calls: 20,
            failure_rate: 0.5,
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
        }
    }
}

impl CircuitConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.window < Duration::from_millis(BUCKETS as u64) {
            return Err(ConfigError::invalid(
                "circuit.window_ms",
                format!("must be at least {BUCKETS} ms"),
            ));
        }
        if self.min_calls == 0 {
            return Err(ConfigError::invalid(
                "circuit.min_calls",
                "must be at least 1",
            ));
        }
        if !(self.failure_rate > 0.0 && self.failure_rate <= 1.0) {
            return Err(ConfigError::invalid(
                "circuit.failure_rate",
                format!("{} is not in (0, 1]", self.failure_rate),
            ));
        }
        if self.open_for.is_zero() {
            return Err(ConfigError::invalid("circuit.open_ms", "must be positive"));
        }
        if self.half_open_probes == 0 {
            return Err(ConfigError::invalid(
                "circuit.half_open_probes",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// The breaker's state as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls go through.
    Closed,
    /// Calls are skipped.
    Open,
    /// A few probe calls go through.
    HalfOpen,
}

impl CircuitState {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }
}

/// Permission to call the tier, to be handed back to [`Circuit::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    Normal,
    Probe,
    Denied,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open { until: Nanos },
    HalfOpen { in_flight: u32, successes: u32 },
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    ok: u32,
    fail: u32,
}

#[derive(Debug)]
struct Inner {
    state: State,
    buckets: [Bucket; BUCKETS],
}

/// Successful calls per bucket, one ring per stripe: each slot packs the bucket's epoch
/// (low 32 bits) above its count, so a thread adds with one compare-exchange on its own
/// cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
struct OkRing([AtomicU64; BUCKETS]);

/// A circuit breaker for one tier.
///
/// The closed state's successful call, every decision's case, takes no lock: `closed`
/// answers `acquire`, and the success is counted on the caller's stripe of `oks`. A lock
/// and a shared line were four atomic operations a decision, on a line that two caller
/// threads passed back and forth (BENCHMARKS [18] part 5). Failures, probes and every
/// change of state take the lock, and count the stripes when they judge the window.
#[derive(Debug)]
pub(crate) struct Circuit {
    /// The tier, for events (`fast`, `deep`).
    name: &'static str,
    cfg: CircuitConfig,
    bucket_ns: u64,
    inner: Mutex<Inner>,
    /// Whether `inner.state` is `Closed` (written under the lock).
    closed: AtomicBool,
    oks: Striped<OkRing>,
}

impl Circuit {
    pub(crate) fn new(cfg: CircuitConfig, name: &'static str) -> Self {
        Self {
            name,
            bucket_ns: (nanos(cfg.window) / BUCKETS as u64).max(1),
            cfg,
            inner: Mutex::new(Inner {
                state: State::Closed,
                buckets: [Bucket::default(); BUCKETS],
            }),
            closed: AtomicBool::new(true),
            oks: Striped::default(),
        }
    }

    /// Moves to `state` (under the lock); entering or leaving `Closed` starts an empty
    /// window.
    fn set(&self, g: &mut Inner, state: State) {
        let closed = matches!(state, State::Closed);
        if closed != matches!(g.state, State::Closed) {
            g.buckets = [Bucket::default(); BUCKETS];
            for r in self.oks.iter() {
                for slot in &r.0 {
                    slot.store(0, Relaxed);
                }
            }
        }
        g.state = state;
        self.closed.store(closed, Relaxed);
    }

    /// Counts `oks` successes at `epoch` on the caller's stripe.
    #[inline]
    fn add_oks(&self, epoch: u64, oks: u32) {
        let slot = &self.oks.mine().0[(epoch % BUCKETS as u64) as usize];
        let e = (epoch as u32 as u64) << 32;
        let mut cur = slot.load(Relaxed);
        loop {
            let next = if cur >> 32 == e >> 32 {
                e | (cur as u32).saturating_add(oks) as u64
            } else {
                e | oks as u64
            };
            match slot.compare_exchange_weak(cur, next, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Successes counted on the stripes within the window ending at `epoch`.
    fn striped_oks(&self, epoch: u64) -> u64 {
        let e = epoch as u32;
        let mut n = 0;
        for r in self.oks.iter() {
            for slot in &r.0 {
                let v = slot.load(Relaxed);
                if e.wrapping_sub((v >> 32) as u32) < BUCKETS as u32 {
                    n += u64::from(v as u32);
                }
            }
        }
        n
    }

    pub(crate) fn state(&self, now: Nanos) -> CircuitState {
        match self.inner.lock().state {
            State::Closed => CircuitState::Closed,
            State::Open { until } if now < until => CircuitState::Open,
            State::Open { .. } | State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Asks to call the tier at `now`.
    #[inline]
    pub(crate) fn acquire(&self, now: Nanos) -> Permit {
        if self.closed.load(Relaxed) {
            return Permit::Normal;
        }
        let mut g = self.inner.lock();
        match g.state {
            State::Closed => Permit::Normal,
            State::Open { until } if now < until => Permit::Denied,
            State::Open { .. } => {
                g.state = State::HalfOpen {
                    in_flight: 1,
                    successes: 0,
                };
                tracing::info!(target: "risk::circuit", tier = self.name, "circuit half-open: probing");
                Permit::Probe
            }
            State::HalfOpen {
                in_flight,
                successes,
            } => {
                if in_flight + successes < self.cfg.half_open_probes {
                    g.state = State::HalfOpen {
                        in_flight: in_flight + 1,
                        successes,
                    };
                    Permit::Probe
                } else {
                    Permit::Denied
                }
            }
        }
    }

    /// Hands back a permit whose call said nothing about the tier's health (it never ran).
    pub(crate) fn release(&self, permit: Permit) {
        if permit != Permit::Probe {
            return;
        }
        let mut g = self.inner.lock();
        if let State::HalfOpen {
            in_flight,
            successes,
        } = g.state
        {
            g.state = State::HalfOpen {
                in_flight: in_flight.saturating_sub(1),
                successes,
            };
        }
    }

    /// Records the outcome of a permitted call.
    #[inline]
    pub(crate) fn record(&self, permit: Permit, ok: bool, now: Nanos) {
        self.record_n(permit, u32::from(ok), u32::from(!ok), now);
    }

    /// Records the outcomes of a permitted call that scored several items (a batch):
    /// each item counts, so one bad row in a batch of 64 weighs 1/64, not a whole failure.
    /// A probe fails if any item failed.
    pub(crate) fn record_n(&self, permit: Permit, oks: u32, fails: u32, now: Nanos) {
        if oks == 0 && fails == 0 {
            return self.release(permit);
        }
        let ok = fails == 0;
        if ok && permit == Permit::Normal && self.closed.load(Relaxed) {
            return self.add_oks(now / self.bucket_ns, oks);
        }
        let mut g = self.inner.lock();
        match (permit, g.state) {
            (Permit::Denied, _) => {}
            (
                Permit::Probe,
                State::HalfOpen {
                    in_flight,
                    successes,
                },
            ) => {
                if !ok {
                    let until = now.saturating_add(nanos(self.cfg.open_for));
                    self.set(&mut g, State::Open { until });
                    tracing::warn!(target: "risk::circuit", tier = self.name, "probe failed: circuit open again");
                } else if successes + 1 >= self.cfg.half_open_probes {
                    self.set(&mut g, State::Closed);
                    tracing::info!(target: "risk::circuit", tier = self.name, "circuit closed");
                } else {
                    g.state = State::HalfOpen {
                        in_flight: in_flight.saturating_sub(1),
                        successes: successes + 1,
                    };
                }
            }
            // A probe finishing after the state moved on, or a normal call finishing
            // while open: nothing to add.
            (Permit::Probe, _) | (Permit::Normal, State::Open { .. } | State::HalfOpen { .. }) => {}
            (Permit::Normal, State::Closed) => {
                let epoch = now / self.bucket_ns;
                let b = &mut g.buckets[(epoch % BUCKETS as u64) as usize];
                if b.epoch != epoch {
                    *b = Bucket {
                        epoch,
                        ok: 0,
                        fail: 0,
                    };
                }
                b.ok = b.ok.saturating_add(oks);
                if ok {
                    return;
                }
                b.fail = b.fail.saturating_add(fails);
                let (mut oks, mut fails) = (self.striped_oks(epoch), 0u64);
                for b in &g.buckets {
                    if b.epoch + (BUCKETS as u64) > epoch {
                        oks += b.ok as u64;
                        fails += b.fail as u64;
                    }
                }
                let total = oks + fails;
                if total >= self.cfg.min_calls as u64
                    && fails as f64 >= self.cfg.failure_rate as f64 * total as f64
                {
                    let until = now.saturating_add(nanos(self.cfg.open_for));
                    self.set(&mut g, State::Open { until });
                    tracing::warn!(
                        target: "risk::circuit",
                        tier = self.name,
                        failures = fails,
                        calls = total,
                        "circuit opened"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cfg() -> CircuitConfig {
        CircuitConfig {
            window: Duration::from_secs(1),
            min_calls: 4,
            failure_rate: 0.5,
            open_for: Duration::from_millis(100),
            half_open_probes: 2,
        }
    }

    #[test]
    fn opens_half_opens_and_closes() {
        let c = Circuit::new(cfg(), "test");
        for _ in 0..2 {
            let p = c.acquire(0);
            c.record(p, true, 0);
        }
        let p = c.acquire(MS);
        c.record(p, false, MS);
        assert_eq!(c.state(MS), CircuitState::Closed);
        let p = c.acquire(2 * MS);
        c.record(p, false, 2 * MS); // 2 of 4 failed
        assert_eq!(c.state(2 * MS), CircuitState::Open);
        assert_eq!(c.acquire(50 * MS), Permit::Denied);
        // After open_for: two probes allowed, a third denied.
        let p1 = c.acquire(102 * MS);
        let p2 = c.acquire(102 * MS);
        assert_eq!((p1, p2), (Permit::Probe, Permit::Probe));
        assert_eq!(c.acquire(102 * MS), Permit::Denied);
        c.record(p1, true, 103 * MS);
        c.record(p2, true, 103 * MS);
        assert_eq!(c.state(103 * MS), CircuitState::Closed);
    }

    #[test]
    fn failed_probe_reopens() {
        let c = Circuit::new(cfg(), "test");
        for _ in 0..4 {
            let p = c.acquire(0);
            c.record(p, false, 0);
        }
        assert_eq!(c.state(0), CircuitState::Open);
        let p = c.acquire(100 * MS);
        assert_eq!(p, Permit::Probe);
        c.record(p, false, 100 * MS);
        assert_eq!(c.state(150 * MS), CircuitState::Open);
        assert_eq!(c.acquire(199 * MS), Permit::Denied);
        assert_eq!(c.acquire(200 * MS), Permit::Probe);
    }

    #[test]
    fn successes_of_every_thread_count_and_old_ones_leave_the_window() {
        let c = Circuit::new(cfg(), "test");
        // Six successes on other threads (their own stripes), three failures here: 3 of
        // 9 is under the rate.
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..3 {
                        let p = c.acquire(0);
                        assert_eq!(p, Permit::Normal);
                        c.record(p, true, 0);
                    }
                });
            }
        });
        for _ in 0..3 {
            let p = c.acquire(500 * MS);
            c.record(p, false, 500 * MS);
        }
        assert_eq!(c.state(500 * MS), CircuitState::Closed);
        // At 1.05 s the successes have left the 1 s window and the failures have not:
        // one more failure makes 4 of 4 and opens the circuit.
        let p = c.acquire(1050 * MS);
        c.record(p, false, 1050 * MS);
        assert_eq!(c.state(1050 * MS), CircuitState::Open);
        // Opening emptied the window: after the probes close it, old successes do not
        // come back.
        for t in [1200, 1201] {
            let p = c.acquire(t * MS);
            assert_eq!(p, Permit::Probe);
            c.record(p, true, t * MS);
        }
        assert_eq!(c.state(1202 * MS), CircuitState::Closed);
        assert_eq!(c.striped_oks(1202 * MS / c.bucket_ns), 0);
    }

    #[test]
    fn old_failures_leave_the_window() {
        let c = Circuit::new(cfg(), "test");
        for _ in 0..3 {
            let p = c.acquire(0);
            c.record(p, false, 0);
        }
        // 1.5 s later the old failures are out of the 1 s window.
        let p = c.acquire(1500 * MS);
        c.record(p, false, 1500 * MS);
        assert_eq!(c.state(1500 * MS), CircuitState::Closed);
    }

    #[test]
    fn config_validation_names_keys() {
        let bad = CircuitConfig {
            failure_rate: 0.0,
            ..cfg()
        };
        assert_eq!(
            bad.validate().unwrap_err().key(),
            Some("circuit.failure_rate")
        );
    }
}
