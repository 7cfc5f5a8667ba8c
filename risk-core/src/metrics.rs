//! Lock-free metrics: latency histograms and counters, read as a [`MetricsSnapshot`].
//!
//! [`Histogram`] is log-linear (HDR-style): 32 linear sub-buckets per power of two, so any
//! recorded value is reported within about 3% relative error, from 1 ns to hours, in a
//! fixed 15 KiB of atomics per stripe. Recording is two relaxed atomic adds on the
//! calling thread's stripe ([`stripe`](crate::stripe::stripe)): two threads deciding at once do not pass the
//! histograms' cache lines back and forth.

use crate::decision::{Action, FallbackCause, Tier};
use crate::stripe::{stripe, Striped, STRIPES};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// What every decision counts, one set per stripe.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct DecideCounts {
    pub by_action: [AtomicU64; 3],
    pub by_tier: [AtomicU64; 3],
    pub by_cause: [AtomicU64; FallbackCause::ALL.len()],
    pub hard_rule: AtomicU64,
}

/// One stripe of a [`Histogram`]: its own buckets, sum and maximum.
#[repr(align(128))]
struct HistStripe {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    max: AtomicU64,
}

/// A concurrent log-linear histogram of `u64` values (nanoseconds here), striped by
/// recording thread ([`STRIPES`] stripes, summed when read).
pub struct Histogram {
    stripes: Box<[HistStripe]>,
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros();
    let sub = (v >> (exp - SUB_BITS)) as usize & (SUB - 1);
    (exp - SUB_BITS + 1) as usize * SUB + sub
}

/// Representative value (midpoint) of a bucket.
fn value_of(idx: usize) -> u64 {
    if idx < SUB {
        return idx as u64;
    }
    let exp = (idx / SUB) as u32 + SUB_BITS - 1;
    let sub = (idx % SUB) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    let lower = (SUB as u64 + sub) << (exp - SUB_BITS);
    lower + width / 2
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        let stripe = || HistStripe {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        };
        Self {
            stripes: (0..STRIPES).map(|_| stripe()).collect(),
        }
    }

    /// Records one value on the calling thread's stripe: two relaxed atomic adds (the
    /// count is the buckets' sum), and a compare-exchange only when a new maximum is
    /// seen.
    #[inline]
    pub fn record(&self, v: u64) {
        let s = &self.stripes[stripe()];
        s.buckets[bucket_of(v)].fetch_add(1, Relaxed);
        s.sum.fetch_add(v, Relaxed);
        if v > s.max.load(Relaxed) {
            s.max.fetch_max(v, Relaxed);
        }
    }

    /// Every bucket's count, summed over the stripes.
    fn counts(&self) -> Vec<u64> {
        let mut c = vec![0u64; BUCKETS];
        for s in self.stripes.iter() {
            for (o, b) in c.iter_mut().zip(s.buckets.iter()) {
                *o += b.load(Relaxed);
            }
        }
        c
    }

    fn sum(&self) -> u64 {
        self.stripes.iter().map(|s| s.sum.load(Relaxed)).sum()
    }

    /// Percentiles and totals at this moment.
    pub fn snapshot(&self) -> LatencySummary {
        let max = self.stripes.iter().map(|s| s.max.load(Relaxed)).max();
        summarize(&self.counts(), self.sum(), max.unwrap_or(0))
    }

    /// The raw bucket counts and the sum: subtract two to get a window's
    /// [`LatencySummary`] ([`HistogramMark::since`]).
    pub fn mark(&self) -> HistogramMark {
        HistogramMark {
            counts: self.counts(),
            sum: self.sum(),
        }
    }
}

/// A histogram's counts at one moment ([`Histogram::mark`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramMark {
    counts: Vec<u64>,
    sum: u64,
}

impl HistogramMark {
    /// The summary of what was recorded between `base` and `self` (the maximum is that of
    /// the window's highest bucket, within its ~3% width).
    pub fn since(&self, base: &HistogramMark) -> LatencySummary {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .zip(&base.counts)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let max = counts.iter().rposition(|&c| c > 0).map_or(0, upper_of);
        summarize(&counts, self.sum.saturating_sub(base.sum), max)
    }
}

fn summarize(counts: &[u64], sum: u64, max: u64) -> LatencySummary {
    {
        let total: u64 = counts.iter().sum();
        let q = |p: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = ((p * total as f64).ceil() as u64).clamp(1, total);
            let mut seen = 0;
            for (i, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return value_of(i);
                }
            }
            0
        };
        LatencySummary {
            count: total,
            mean_ns: if total == 0 {
                0.0
            } else {
                sum as f64 / total as f64
            },
            p50_ns: q(0.50).min(max),
            p99_ns: q(0.99).min(max),
            p999_ns: q(0.999).min(max),
            max_ns: max,
        }
    }
}

impl Histogram {
    /// Cumulative counts at each bound (`values <= bound`, bounds ascending), the sum and
    /// the count: a Prometheus histogram. A bucket is counted at the first bound at or above
    /// its largest value, so a count is never attributed to a bound below the value (values
    /// within the ~3% bucket width under a bound may land at the next one).
    pub fn cumulative(&self, bounds: &[u64]) -> (Vec<u64>, u64, u64) {
        let mut out = vec![0u64; bounds.len()];
        let mut total = 0u64;
        for (i, c) in self.counts().into_iter().enumerate() {
            if c == 0 {
                continue;
            }
            total += c;
            let hi = upper_of(i);
            let k = bounds.partition_point(|&x| x < hi);
            for o in &mut out[k..] {
                *o += c;
            }
        }
        (out, self.sum(), total)
    }
}

/// Largest value of a bucket.
fn upper_of(idx: usize) -> u64 {
    if idx < SUB {
        return idx as u64;
    }
    let exp = (idx / SUB) as u32 + SUB_BITS - 1;
    let sub = (idx % SUB) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    ((SUB as u64 + sub) << (exp - SUB_BITS)).saturating_add(width - 1)
}

/// Percentiles of one histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencySummary {
    /// Values recorded.
    pub count: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest value.
    pub max_ns: u64,
}

/// The engine's counters and histograms.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub rules: Histogram,
    pub fast: Histogram,
    pub total: Histogram,
    pub deep: Histogram,
    /// By action, tier, fallback cause; hard rules (striped: every decision adds).
    pub counts: Striped<DecideCounts>,
    pub rules_failed: AtomicU64,
    pub late_discarded: std::sync::Arc<AtomicU64>,
    pub fast_skipped: std::sync::Arc<AtomicU64>,
    pub async_shed: AtomicU64,
    pub gray: GrayCounters,
}

/// Gray-zone counters (shared with the deep workers).
#[derive(Debug, Default)]
pub(crate) struct GrayCounters {
    pub enqueued: AtomicU64,
    pub shed: AtomicU64,
    pub completed: AtomicU64,
    pub timed_out: AtomicU64,
    pub failed: AtomicU64,
    pub saturated: AtomicU64,
    pub abandoned: AtomicU64,
    pub batches: AtomicU64,
    pub subscriber_dropped: AtomicU64,
    pub skipped: std::sync::Arc<AtomicU64>,
    pub circuit_open: AtomicU64,
    pub late_discarded: std::sync::Arc<AtomicU64>,
}

/// Gray-zone statistics in a [`MetricsSnapshot`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrayStats {
    /// Handed to the deep queue.
    pub enqueued: u64,
    /// In the gray band but not queued (queue full, no deep tier, shutting down).
    pub shed: u64,
    /// Verdicts from the deep model.
    pub completed: u64,
    /// Verdicts from the cached average because the budget passed.
    pub timed_out: u64,
    /// Verdicts from the cached average because the model failed.
    pub failed: u64,
    /// Verdicts from the cached average because every deep worker was stalled.
    pub saturated: u64,
    /// Dropped at shutdown.
    pub abandoned: u64,
    /// Deep batches run.
    pub batches: u64,
    /// Verdicts a full subscriber channel did not take.
    pub subscriber_dropped: u64,
    /// Deep batches not run because their budget had passed before a worker took them.
    pub skipped: u64,
    /// Verdicts from the cached average because the deep tier's circuit was open.
    pub circuit_open: u64,
    /// Deep batches that finished after their budget (results discarded).
    pub late_discarded: u64,
    /// In the queue now.
    pub queue_len: u64,
}

/// A point-in-time copy of every engine metric.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// Decisions made.
    pub decisions: u64,
    /// By action, in [`Action::ALL`] order.
    pub by_action: [(Action, u64); 3],
    /// By deciding tier, in [`Tier::ALL`] order.
    pub by_tier: [(Tier, u64); 3],
    /// Fast-tier fallbacks by cause, in [`FallbackCause::ALL`] order.
    pub fallbacks: [(FallbackCause, u64); 7],
    /// Decisions set by a hard rule.
    pub hard_rule: u64,
    /// Rule-tier failures (errors, panics, invalid scores).
    pub rules_failed: u64,
    /// Fast-tier answers that arrived after their deadline and were discarded.
    pub late_discarded: u64,
    /// Fast-tier calls not made because the deadline had already passed: the rule stage
    /// used it up, or the job waited past it before a pool worker could start it.
    pub fast_skipped: u64,
    /// `decide_async` calls answered `Overloaded` because the async queue was full.
    pub async_shed: u64,
    /// Rule stage latency.
    pub rules_latency: LatencySummary,
    /// Fast stage latency (including waits).
    pub fast_latency: LatencySummary,
    /// Whole `decide` latency.
    pub total_latency: LatencySummary,
    /// Enqueue-to-verdict latency of the deep tier.
    pub deep_latency: LatencySummary,
    /// Gray zone.
    pub gray: GrayStats,
    /// Fast-tier circuit state name (`closed`, `open`, `half_open`; `absent`).
    pub fast_circuit: &'static str,
    /// Deep-tier circuit state name (`closed`, `open`, `half_open`; `absent`).
    pub deep_circuit: &'static str,
    /// Fast-tier pool workers busy now (running or stuck in a stalled call); 0 inline.
    pub fast_workers_busy: usize,
}

impl MetricsSnapshot {
    /// Count for an action.
    pub fn action(&self, a: Action) -> u64 {
        self.by_action.iter().find(|x| x.0 == a).map_or(0, |x| x.1)
    }
    /// Count for a tier.
    pub fn tier(&self, t: Tier) -> u64 {
        self.by_tier.iter().find(|x| x.0 == t).map_or(0, |x| x.1)
    }
    /// Count for a fallback cause.
    pub fn fallback(&self, c: FallbackCause) -> u64 {
        self.fallbacks.iter().find(|x| x.0 == c).map_or(0, |x| x.1)
    }
}

impl Metrics {
    /// Deep verdicts delivered so far, and how many of them were fallbacks.
    pub(crate) fn gray_verdicts(&self) -> (u64, u64) {
        let g = &self.gray;
        let l = |a: &AtomicU64| a.load(Relaxed);
        let fallbacks = l(&g.timed_out) + l(&g.failed) + l(&g.saturated) + l(&g.circuit_open);
        (l(&g.completed) + fallbacks, fallbacks)
    }

    pub(crate) fn snapshot(
        &self,
        queue_len: u64,
        fast_circuit: &'static str,
        deep_circuit: &'static str,
        fast_workers_busy: usize,
    ) -> MetricsSnapshot {
        let l = |a: &AtomicU64| a.load(Relaxed);
        let g = &self.gray;
        let sum = |f: &dyn Fn(&DecideCounts) -> &AtomicU64| -> u64 {
            self.counts.iter().map(|k| l(f(k))).sum()
        };
        let by_action = Action::ALL.map(|a| (a, sum(&|k| &k.by_action[a as usize])));
        MetricsSnapshot {
            decisions: by_action.iter().map(|x| x.1).sum(),
            by_action,
            by_tier: Tier::ALL.map(|t| (t, sum(&|k| &k.by_tier[t as usize]))),
            fallbacks: FallbackCause::ALL.map(|c| (c, sum(&|k| &k.by_cause[c.index()]))),
            hard_rule: sum(&|k| &k.hard_rule),
            rules_failed: l(&self.rules_failed),
            late_discarded: l(&self.late_discarded),
            fast_skipped: l(&self.fast_skipped),
            async_shed: l(&self.async_shed),
            rules_latency: self.rules.snapshot(),
            fast_latency: self.fast.snapshot(),
            total_latency: self.total.snapshot(),
            deep_latency: self.deep.snapshot(),
            gray: GrayStats {
                enqueued: l(&g.enqueued),
                shed: l(&g.shed),
                completed: l(&g.completed),
                timed_out: l(&g.timed_out),
                failed: l(&g.failed),
                saturated: l(&g.saturated),
                abandoned: l(&g.abandoned),
                batches: l(&g.batches),
                subscriber_dropped: l(&g.subscriber_dropped),
                skipped: l(&g.skipped),
                circuit_open: l(&g.circuit_open),
                late_discarded: l(&g.late_discarded),
                queue_len,
            },
            fast_circuit,
            deep_circuit,
            fast_workers_busy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_tight() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            100,
            1_000,
            12_345,
            1 << 40,
            u64::MAX / 2,
        ] {
            let b = bucket_of(v);
            assert!(b >= last, "bucket order at {v}");
            last = b;
            let rep = value_of(b);
            let err = (rep as f64 - v as f64).abs() / (v.max(1) as f64);
            assert!(err <= 0.035, "value {v} reported as {rep}");
        }
    }

    #[test]
    fn cumulative_counts_respect_bounds() {
        let h = Histogram::new();
        for v in [5u64, 900, 1_000, 1_100, 50_000, 2_000_000] {
            h.record(v);
        }
        let (c, sum, n) = h.cumulative(&[10, 1_000, 100_000, 1_000_000]);
        assert_eq!((sum, n), (2_053_005, 6));
        // 1_000's bucket reaches above 1_000, so it counts at the next bound.
        assert_eq!(c, vec![1, 2, 5, 5]);
    }

    #[test]
    fn every_threads_values_are_counted() {
        let h = Histogram::new();
        // More threads than stripes: some share one.
        std::thread::scope(|s| {
            for t in 0..(STRIPES as u64 + 3) {
                let h = &h;
                s.spawn(move || (1..=100).for_each(|v| h.record(v * 10 + t)));
            }
        });
        let n = STRIPES as u64 + 3;
        let snap = h.snapshot();
        assert_eq!(snap.count, 100 * n);
        assert_eq!(snap.max_ns, 1000 + n - 1);
        let (cum, sum, count) = h.cumulative(&[u64::MAX]);
        assert_eq!((cum[0], count), (100 * n, 100 * n));
        assert_eq!(
            sum,
            (1..=100u64).map(|v| v * 10).sum::<u64>() * n + 100 * (0..n).sum::<u64>()
        );
    }

    #[test]
    fn percentiles() {
        let h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 1000);
        let close = |a: u64, b: u64| (a as f64 - b as f64).abs() / b as f64 <= 0.035;
        assert!(close(s.p50_ns, 500_000), "{s:?}");
        assert!(close(s.p99_ns, 990_000), "{s:?}");
        assert!(close(s.p999_ns, 999_000), "{s:?}");
        assert_eq!(s.max_ns, 1_000_000);
    }
}
