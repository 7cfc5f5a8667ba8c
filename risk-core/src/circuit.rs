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
use parking_lot::Mutex;
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

/// A circuit breaker for one tier.
#[derive(Debug)]
pub(crate) struct Circuit {
    /// The tier, for events (`fast`, `deep`).
    name: &'static str,
    cfg: CircuitConfig,
    bucket_ns: u64,
    inner: Mutex<Inner>,
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
        }
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
                    g.state = State::Open {
                        until: now.saturating_add(nanos(self.cfg.open_for)),
                    };
                    tracing::warn!(target: "risk::circuit", tier = self.name, "probe failed: circuit open again");
                } else if successes + 1 >= self.cfg.half_open_probes {
                    g.state = State::Closed;
                    g.buckets = [Bucket::default(); BUCKETS];
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
                let (mut oks, mut fails) = (0u64, 0u64);
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
                    g.state = State::Open {
                        until: now.saturating_add(nanos(self.cfg.open_for)),
                    };
                    g.buckets = [Bucket::default(); BUCKETS];
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
