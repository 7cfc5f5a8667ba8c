//! What a version did while a deploy watched it: lock-free counters on the decide path
//! (only while a deploy is active), snapshots, windows, and the guards' judgement.

use super::judge;
use super::plan::Guards;
use crate::calibrate::Calibration;
use crate::decision::Action;
use crate::metrics::Histogram;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Score histogram bins (equal width over `[0, 1]`), for the PSI.
pub const SCORE_BINS: usize = 10;

/// Counters of one version during a deploy.
#[derive(Debug, Default)]
pub(crate) struct VersionStats {
    n: AtomicU64,
    failed: AtomicU64,
    actions: [AtomicU64; 3],
    scores: [AtomicU64; SCORE_BINS],
    agree: AtomicU64,
    compared: AtomicU64,
    latency: Histogram,
    /// Applied to scores before they are binned: the other version's calibration, when
    /// only that one brings one (so that both histograms are on one scale).
    score_map: Option<Arc<Calibration>>,
}

/// One decision as a version saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// The version's output failed (error, timeout, panic, invalid, open circuit).
    pub failed: bool,
    /// Its probability, when it produced one.
    pub score: Option<f32>,
    /// Its latency, when measured.
    pub latency_ns: Option<u64>,
    /// The decision's (or would-be) action.
    pub action: Action,
    /// Whether the model's threshold action equals the rules', when both answered.
    pub agrees_with_rules: Option<bool>,
}

#[inline]
pub(crate) fn bin(p: f32) -> usize {
    ((p.clamp(0.0, 1.0) * SCORE_BINS as f32) as usize).min(SCORE_BINS - 1)
}

impl VersionStats {
    /// Counters whose scores pass through `map` before they are binned.
    pub(crate) fn mapped(map: Option<Arc<Calibration>>) -> Self {
        Self {
            score_map: map,
            ..Self::default()
        }
    }

    /// Records one outcome; returns how many this version has recorded (for the
    /// supervisor's poke).
    #[inline]
    pub(crate) fn record(&self, o: &Outcome) -> u64 {
        if o.failed {
            self.failed.fetch_add(1, Relaxed);
        }
        if let Some(p) = o.score {
            let p = self.score_map.as_ref().map_or(p, |c| c.apply(p));
            self.scores[bin(p)].fetch_add(1, Relaxed);
        }
        if let Some(l) = o.latency_ns {
            self.latency.record(l);
        }
        self.actions[o.action as usize].fetch_add(1, Relaxed);
        if let Some(a) = o.agrees_with_rules {
            self.compared.fetch_add(1, Relaxed);
            if a {
                self.agree.fetch_add(1, Relaxed);
            }
        }
        self.n.fetch_add(1, Relaxed) + 1
    }

    pub(crate) fn snapshot(&self) -> StatsSnap {
        let lat = self.latency.snapshot();
        StatsSnap {
            n: self.n.load(Relaxed),
            failed: self.failed.load(Relaxed),
            actions: std::array::from_fn(|i| self.actions[i].load(Relaxed)),
            scores: std::array::from_fn(|i| self.scores[i].load(Relaxed)),
            agree: self.agree.load(Relaxed),
            compared: self.compared.load(Relaxed),
            p99_ns: lat.p99_ns,
        }
    }
}

/// Counters at one moment, or the difference of two (a window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StatsSnap {
    /// Decisions (or shadow scores).
    pub n: u64,
    /// Failures among them.
    pub failed: u64,
    /// By action: approve, review, decline.
    pub actions: [u64; 3],
    /// Score histogram.
    pub scores: [u64; SCORE_BINS],
    /// Decisions where the model's action agreed with the rules'.
    pub agree: u64,
    /// Decisions where both answered.
    pub compared: u64,
    /// Latency p99 in nanoseconds (of the whole history, not the window: histograms do
    /// not subtract).
    pub p99_ns: u64,
}

impl StatsSnap {
    /// `self - base`, counter by counter (p99 is `self`'s).
    pub fn since(&self, base: &StatsSnap) -> StatsSnap {
        StatsSnap {
            n: self.n - base.n.min(self.n),
            failed: self.failed.saturating_sub(base.failed),
            actions: std::array::from_fn(|i| self.actions[i].saturating_sub(base.actions[i])),
            scores: std::array::from_fn(|i| self.scores[i].saturating_sub(base.scores[i])),
            agree: self.agree.saturating_sub(base.agree),
            compared: self.compared.saturating_sub(base.compared),
            p99_ns: self.p99_ns,
        }
    }

    /// Share of `a` among the decisions.
    pub fn rate(&self, a: Action) -> f64 {
        self.actions[a as usize] as f64 / self.n.max(1) as f64
    }

    /// Failure share.
    pub fn error_rate(&self) -> f64 {
        self.failed as f64 / self.n.max(1) as f64
    }

    /// Agreement with the rules, when any were compared.
    pub fn agreement(&self) -> Option<f64> {
        (self.compared > 0).then(|| self.agree as f64 / self.compared as f64)
    }
}

/// The first guard `cand` breaks against `base` (the serving version over the same
/// window), or `None`. `budget` is the latency ceiling when the guards name none; `latency`
/// says whether latency is judged (at every call); `levels` are the tests' significance
/// levels when this call is a look ([`judge::Looks`]), `None` between looks (latency only).
pub(crate) fn broken_guard(
    g: &Guards,
    cand: &StatsSnap,
    base: Option<&StatsSnap>,
    budget: Duration,
    latency: bool,
    levels: Option<judge::Levels>,
) -> Option<String> {
    if cand.n < g.min_decisions {
        return None;
    }
    let ceiling = g.max_p99.unwrap_or(budget);
    if latency && cand.p99_ns > 0 && Duration::from_nanos(cand.p99_ns) > ceiling {
        return Some(format!(
            "latency p99 {:?} above {:?}",
            Duration::from_nanos(cand.p99_ns),
            ceiling
        ));
    }
    let levels = levels?;
    if cand.error_rate() > g.max_error_rate {
        let p = judge::binomial_upper(cand.failed, cand.n, g.max_error_rate);
        if p <= levels.error {
            return Some(format!(
                "error/timeout rate {:.4} above {:.4} ({} of {}; p = {p:.1e} at level {:.1e})",
                cand.error_rate(),
                g.max_error_rate,
                cand.failed,
                cand.n,
                levels.error
            ));
        }
    }
    let level = levels.compare?;
    let base = base.filter(|b| b.n >= g.min_decisions)?;
    let (hc, hs) = (cand.scores.iter().sum(), base.scores.iter().sum());
    let psi = judge::psi(&cand.scores, &base.scores);
    if psi > g.max_score_psi {
        let bound = judge::psi_bound(SCORE_BINS, hc, hs, g.max_score_psi, level);
        if psi > bound {
            return Some(format!(
                "score distribution shift: PSI {psi:.3} above {:.3} beyond sampling noise (bound {bound:.3} at level {level:.1e}; {hc} vs {hs} scores)",
                g.max_score_psi
            ));
        }
    }
    for a in [Action::Decline, Action::Review] {
        let (c, s) = (cand.rate(a), base.rate(a));
        if (c - s).abs() <= g.min_action_delta {
            continue;
        }
        let (xc, xs) = (cand.actions[a as usize], base.actions[a as usize]);
        let r = g.max_action_ratio;
        let (p, dir) = if c > s {
            (judge::ratio_above(xc, cand.n, xs, base.n, r), "above")
        } else {
            (judge::ratio_below(xc, cand.n, xs, base.n, r), "below")
        };
        // Two one-sided tests share the test's level.
        if p <= level / 2.0 {
            return Some(format!(
                "{} rate {c:.4} vs {s:.4} serving ({xc} of {} vs {xs} of {}): ratio {dir} the {r:.2}x limit, p = {p:.1e} at level {:.1e}",
                a.as_str(),
                cand.n,
                base.n,
                level / 2.0
            ));
        }
    }
    if let (Some(c), Some(s)) = (cand.agreement(), base.agreement()) {
        if s - c > g.max_agreement_drop {
            let p = judge::drop_above(
                cand.agree,
                cand.compared,
                base.agree,
                base.compared,
                g.max_agreement_drop,
            );
            if p <= level {
                return Some(format!(
                    "agreement with the rules {c:.3} vs {s:.3} serving (drop limit {:.3}; p = {p:.1e} at level {level:.1e})",
                    g.max_agreement_drop
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::judge::psi;
    use super::*;

    fn snap(n: u64, declines: u64, failed: u64) -> StatsSnap {
        let mut s = StatsSnap {
            n,
            failed,
            ..Default::default()
        };
        s.actions = [n - declines, 0, declines];
        s.scores[1] = n - declines;
        s.scores[9] = declines;
        s
    }

    #[test]
    fn guards_judge_rates_shift_and_counts() {
        let g = Guards::default();
        let b = Duration::from_millis(15);
        let l = Some(judge::first_levels(g.false_rollback));
        let base = snap(1000, 20, 0);
        let judge = |c: &StatsSnap, lat: bool| broken_guard(&g, c, Some(&base), b, lat, l);
        assert_eq!(judge(&snap(100, 50, 50), true), None);
        assert_eq!(judge(&snap(1000, 22, 0), true), None);
        let r = judge(&snap(1000, 100, 0), true).unwrap();
        assert!(r.contains("PSI") || r.contains("decline"), "{r}");
        let r = judge(&snap(1000, 20, 100), true).unwrap();
        assert!(r.contains("error"), "{r}");
        let mut slow = snap(1000, 20, 0);
        slow.p99_ns = 20_000_000;
        assert!(judge(&slow, true).unwrap().contains("p99"));
        assert_eq!(judge(&slow, false), None);
        // Between looks only latency is judged.
        assert!(broken_guard(&g, &slow, Some(&base), b, true, None)
            .unwrap()
            .contains("p99"));
        assert_eq!(
            broken_guard(&g, &snap(1000, 20, 100), Some(&base), b, true, None),
            None
        );
    }

    #[test]
    fn a_crossing_on_few_decisions_is_not_evidence() {
        // The quickstart's false rollback: 2.09x the serving decline rate after 258
        // candidate decisions (a handful of declines), and 25 failures of 1,000 where 2%
        // are allowed.
        let g = Guards::default();
        let b = Duration::from_millis(15);
        let l = Some(judge::first_levels(g.false_rollback));
        let base = snap(2580, 40, 0);
        // 10 declines of 258 against 40 of 2,580: 2.5x observed.
        let c = snap(258, 10, 0);
        assert_eq!(broken_guard(&g, &c, Some(&base), b, true, l), None);
        assert_eq!(
            broken_guard(&g, &snap(1000, 20, 25), Some(&base), b, true, l),
            None
        );
        // A 3x shift over 100 times the decisions is.
        let big = snap(25_800, 1200, 0);
        let big_base = snap(258_000, 4000, 0);
        let r = broken_guard(&g, &big, Some(&big_base), b, true, l).unwrap();
        assert!(r.contains("decline") || r.contains("PSI"), "{r}");
    }

    #[test]
    fn psi_of_equal_is_zero() {
        let a = [10; SCORE_BINS];
        assert!(psi(&a, &a).abs() < 1e-12);
        let mut b = a;
        b[0] = 100;
        assert!(psi(&a, &b) > 0.1);
        // A bin empty on one side by chance adds a bounded term.
        let mut c = [1000; SCORE_BINS];
        c[9] = 0;
        let mut d = c;
        d[9] = 1;
        assert!(psi(&c, &d) < 1e-3);
    }
}
