//! Helpers shared by the benchmark modules: trivial tiers whose own cost is known, so
//! the engine's overhead can be measured against calling them directly.
#![deny(missing_docs)]

pub mod filter;

use risk_core::{Latency, ReasonCode, Score, ScoreError, Scorer, ScorerInfo, Slot, Transaction};
use std::time::Duration;

/// A cheap scorer: a threshold on one slot (about what a trivial rule or model costs).
#[derive(Debug)]
pub struct Trivial {
    slot: Slot,
    latency: Latency,
    code: ReasonCode,
}

impl Trivial {
    /// Reads `slot`; declares `latency`.
    pub fn new(slot: Slot, latency: Latency) -> Self {
        Self {
            slot,
            latency,
            code: ReasonCode::intern("BENCH_TRIVIAL"),
        }
    }
}

impl Scorer for Trivial {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("trivial", "1", self.latency)
    }
    #[inline]
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let v = t.features.get(self.slot);
        let mut s = Score::new(if v > 100.0 { 0.2 } else { 0.1 });
        s.reasons.push(self.code, 0.1);
        Ok(s)
    }
}

/// A scorer that sleeps `stall` on every call: a stalled model.
#[derive(Debug)]
pub struct Stalls {
    /// How long each call takes.
    pub stall: Duration,
}

impl Scorer for Stalls {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("stalls", "1", Latency::Unbounded)
    }
    fn score(&self, _t: &Transaction) -> Result<Score, ScoreError> {
        std::thread::sleep(self.stall);
        Ok(Score::new(0.5))
    }
}

/// Two threads deciding `per_thread` transactions each (interleaved rows of `txns`) as
/// fast as they can; the wall time of the whole run (the throughput benches' one step).
pub fn two_threads(
    e: &risk_core::Engine,
    txns: &[Transaction],
    per_thread: u64,
) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for k in 0..2usize {
            s.spawn(move || {
                for j in 0..per_thread as usize {
                    std::hint::black_box(e.decide(&txns[(j * 2 + k) % txns.len()]).unwrap());
                }
            });
        }
    });
    t0.elapsed()
}
