//! How the guards judge with statistics: each guard is a one-sided test that its limit is
//! exceeded (not merely that an observed value crossed it), at a significance level spent
//! over the deploy's looks so that a healthy candidate is rolled back with a stated
//! probability at most, however long it runs and however often the supervisor ticks.
//!
//! - **Looks.** The guards judge when the candidate's decisions have grown by a tenth
//!   ([`GROWTH`]) since the last judged look (and before a stage ends), so a phase of `n`
//!   decisions has `O(log n)` looks whatever the tick rate. Each phase (shadow, canary) has
//!   an equal share of the deploy's `α` (`guards.false_rollback`) and its own look count;
//!   within a phase, the error-rate test has a fifth of it and the four comparisons with the
//!   serving version (decline ratio, review ratio, score shift, agreement) the rest, each
//!   with its own look count (a comparison look is taken only once the serving side has
//!   enough decisions to compare). Look `k` (from 1) of a test spends `a · 6 / (π² k²)` of
//!   its share `a`: the sum over every look is `a` (a union bound).
//! - **Rates** (errors, decline and review ratios) use exact binomial tails: the failure
//!   count against `Binomial(n, max_error_rate)`, and the two versions' action counts by the
//!   conditional test of two Poisson rates (given `x_c + x_s` events, `x_c` is binomial with
//!   `p = n_c R / (n_c R + n_s)` when the rate ratio is `R`); with small counts (a decline rate
//!   of 1% over 200 decisions is 2 declines) no normal approximation is trusted.
//! - **Score shift** (PSI): `n_eff · PSI` is approximately χ² with `bins − 1` degrees of
//!   freedom and non-centrality `n_eff · PSI_true` (`PSI` is the symmetric Kullback–Leibler
//!   divergence, whose second-order term is the χ² statistic of homogeneity; `n_eff = n_c
//!   n_s / (n_c + n_s)`), so the guard breaks when `n_eff · PSI` exceeds the upper quantile of
//!   that distribution at the limit (normal approximation of the non-central χ²: mean
//!   `k + λ`, variance `2 (k + 2λ)`).
//! - **Agreement drop** with the rules: a one-sided z-test of the drop against its limit.
//!
//! Latency p99 is not a test: it is compared with its ceiling at every tick.

use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::gamma::ln_gamma;

/// A look is judged once the candidate's decisions have grown by `1 / GROWTH` (a tenth)
/// since the last judged look.
pub const GROWTH: u64 = 10;

/// The comparison tests of a look (decline ratio, review ratio, score shift, agreement);
/// the error-rate test has a share of the phase's `α` equal to theirs together over four.
pub const COMPARISONS: u32 = 4;

/// Each test's significance level at one look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Levels {
    /// The error-rate test's.
    pub error: f64,
    /// Each comparison test's, when the serving side can be compared at this look.
    pub compare: Option<f64>,
}

/// The looks of one deploy and the level each spends.
#[derive(Debug, Clone)]
pub(crate) struct Looks {
    /// The share of `α` of each phase.
    alpha: f64,
    own: u32,
    compared: u32,
    next_n: u64,
    total: u32,
}

impl Looks {
    /// A deploy of `phases` phases (shadow, canary) whose false-rollback probability is at
    /// most `alpha`.
    pub(crate) fn new(alpha: f64, phases: u32) -> Self {
        Self {
            alpha: alpha / f64::from(phases.max(1)),
            own: 0,
            compared: 0,
            next_n: 0,
            total: 0,
        }
    }

    /// A new phase: its own looks, from its own share of `α`.
    pub(crate) fn restart(&mut self) {
        self.own = 0;
        self.compared = 0;
        self.next_n = 0;
    }

    /// Whether a look at `n` decisions is due (grown enough since the last one).
    pub(crate) fn due(&self, n: u64) -> bool {
        n >= self.next_n
    }

    /// Takes a look at `n` candidate decisions; `comparable`: the serving side has enough
    /// decisions for the comparison tests.
    pub(crate) fn take(&mut self, n: u64, comparable: bool) -> Levels {
        self.own += 1;
        self.total += 1;
        self.next_n = n + (n / GROWTH).max(1);
        let share = self.alpha / f64::from(COMPARISONS + 1);
        Levels {
            error: spend(share, self.own),
            compare: comparable.then(|| {
                self.compared += 1;
                spend(share, self.compared)
            }),
        }
    }

    /// Looks taken so far, every phase together.
    pub(crate) fn count(&self) -> u32 {
        self.total
    }
}

/// What look `k` (from 1) of a test whose share of `α` is `a` spends.
pub fn spend(a: f64, k: u32) -> f64 {
    let k = f64::from(k.max(1));
    a * 6.0 / (std::f64::consts::PI * std::f64::consts::PI * k * k)
}

/// The levels of a deploy's first look (one phase, both sides comparable).
pub fn first_levels(alpha: f64) -> Levels {
    Looks::new(alpha, 1).take(0, true)
}

/// `ln P(X = k)` for `X ~ Binomial(n, p)`, `0 < p < 1`.
fn ln_pmf(k: u64, n: u64, p: f64) -> f64 {
    let (k, n) = (k as f64, n as f64);
    ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0)
        + k * p.ln()
        + (n - k) * (1.0 - p).ln()
}

/// `Σ P(X = j)` for `j` from `from` away from the mode (`up`: `from..=n`, else `0..=from`),
/// where the terms only shrink: summed from the first, each from the last by the ratio of
/// consecutive terms, until they no longer change the sum.
///
/// Hand-written rather than statrs' `Binomial::cdf`: its regularised incomplete beta stops
/// after 140 continued-fraction steps without saying so, and is wrong from counts of ~15,000
/// on (statrs issues 417, 434, 456: `Binomial(0.5, 2e6).cdf(1e6)` = 0.4916 for 0.5003),
/// which a long canary reaches.
fn tail_from(from: u64, n: u64, p: f64, up: bool) -> f64 {
    let mut t = ln_pmf(from, n, p).exp();
    let mut sum = t;
    let mut k = from;
    let odds = p / (1.0 - p);
    while t > sum * 1e-17 {
        if up {
            if k == n {
                break;
            }
            t *= (n - k) as f64 / (k + 1) as f64 * odds;
            k += 1;
        } else {
            if k == 0 {
                break;
            }
            t *= k as f64 / (n - k + 1) as f64 / odds;
            k -= 1;
        }
        sum += t;
    }
    sum
}

/// A probability from a sum: in `[0, 1]`, and `1` (nothing shown) when not a number.
fn prob(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        1.0
    }
}

/// `P(X >= x)` for `X ~ Binomial(n, p)`.
pub fn binomial_upper(x: u64, n: u64, p: f64) -> f64 {
    let p = if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) };
    if x == 0 {
        return 1.0;
    }
    if x > n || p == 0.0 {
        return 0.0;
    }
    if p == 1.0 {
        return 1.0;
    }
    let mode = ((n + 1) as f64 * p).floor() as u64;
    if x > mode {
        prob(tail_from(x, n, p, true))
    } else {
        prob(1.0 - tail_from(x - 1, n, p, false))
    }
}

/// `P(X <= x)` for `X ~ Binomial(n, p)`.
pub fn binomial_lower(x: u64, n: u64, p: f64) -> f64 {
    let p = if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) };
    if x >= n || p == 0.0 {
        return 1.0;
    }
    if p == 1.0 {
        return 0.0;
    }
    let mode = ((n + 1) as f64 * p).floor() as u64;
    if x < mode {
        prob(tail_from(x, n, p, false))
    } else {
        prob(1.0 - tail_from(x + 1, n, p, true))
    }
}

/// One-sided p-value that the candidate's rate of an event (`xc` of `nc`) is more than
/// `ratio` times the serving version's (`xs` of `ns`); `1` when nothing can be said.
pub fn ratio_above(xc: u64, nc: u64, xs: u64, ns: u64, ratio: f64) -> f64 {
    if nc == 0 || ns == 0 {
        return 1.0;
    }
    let p = nc as f64 * ratio / (nc as f64 * ratio + ns as f64);
    binomial_upper(xc, xc + xs, p)
}

/// One-sided p-value that the candidate's rate is less than `1 / ratio` times serving's.
pub fn ratio_below(xc: u64, nc: u64, xs: u64, ns: u64, ratio: f64) -> f64 {
    if nc == 0 || ns == 0 || xs == 0 {
        return 1.0;
    }
    let p = nc as f64 / (nc as f64 + ns as f64 * ratio);
    binomial_lower(xc, xc + xs, p)
}

/// The PSI that two histograms of `bins` bins and `nc`, `ns` counts exceed with
/// probability about `level` when their true PSI is `limit`: the upper `level` quantile of
/// the non-central χ² (`k = bins − 1`, `λ = n_eff · limit`, normal approximation) over `n_eff`.
pub fn psi_bound(bins: usize, nc: u64, ns: u64, limit: f64, level: f64) -> f64 {
    if nc == 0 || ns == 0 || bins < 2 {
        return f64::INFINITY;
    }
    let n_eff = (nc as f64 * ns as f64) / (nc as f64 + ns as f64);
    let (k, lambda) = ((bins - 1) as f64, n_eff * limit);
    let z = Normal::standard().inverse_cdf(1.0 - level);
    (k + lambda + z * (2.0 * (k + 2.0 * lambda)).sqrt()) / n_eff
}

/// Population stability index of two histograms over the same bins (`a.len() ==
/// b.len()`), each bin's proportion smoothed by half a count (so that a bin empty on one
/// side by chance adds a bounded term).
pub fn psi(a: &[u64], b: &[u64]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let (na, nb) = (a.iter().sum::<u64>(), b.iter().sum::<u64>());
    if na == 0 || nb == 0 {
        return 0.0;
    }
    let half = a.len() as f64 / 2.0;
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let p = (x as f64 + 0.5) / (na as f64 + half);
            let q = (y as f64 + 0.5) / (nb as f64 + half);
            (p - q) * (p / q).ln()
        })
        .sum()
}

/// One-sided p-value that the serving version's agreement (`as_` of `ns`) exceeds the
/// candidate's (`ac` of `nc`) by more than `limit` (normal approximation; proportions
/// smoothed by half a count so that 0 and 1 keep a variance).
pub fn drop_above(ac: u64, nc: u64, as_: u64, ns: u64, limit: f64) -> f64 {
    if nc == 0 || ns == 0 {
        return 1.0;
    }
    let p = |a: u64, n: u64| (a as f64 + 0.5) / (n as f64 + 1.0);
    let (c, s) = (p(ac, nc), p(as_, ns));
    let se = (c * (1.0 - c) / nc as f64 + s * (1.0 - s) / ns as f64).sqrt();
    let z = ((s - c) - limit) / se;
    if z.is_finite() {
        Normal::standard().sf(z)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spending_sums_to_the_share() {
        let total: f64 = (1..200_000).map(|k| spend(0.01, k)).sum();
        assert!((total - 0.01).abs() < 1e-6, "{total}");
        let first = first_levels(0.01);
        assert!((first.error - 0.01 / 5.0 * 6.0 / std::f64::consts::PI.powi(2)).abs() < 1e-12);
        assert_eq!(first.compare, Some(first.error));
    }

    #[test]
    fn looks_come_at_geometric_sizes_per_phase() {
        let mut l = Looks::new(0.01, 2);
        assert!(l.due(200));
        let a = l.take(200, false);
        assert_eq!(a.compare, None);
        assert!(!l.due(219) && l.due(220));
        let b = l.take(220, true);
        // The comparisons' first look spends their first share, the error test its second.
        assert!(b.compare.unwrap() > b.error);
        assert_eq!(l.count(), 2);
        l.restart();
        assert!(l.due(1));
        assert_eq!(l.take(200, true).error, a.error);
        assert_eq!(l.count(), 3);
    }

    #[test]
    fn binomial_tails_match_hand_values() {
        // P(X >= 1; 10, 0.1) = 1 - 0.9^10.
        assert!((binomial_upper(1, 10, 0.1) - (1.0 - 0.9f64.powi(10))).abs() < 1e-12);
        // P(X <= 0; 10, 0.1) = 0.9^10.
        assert!((binomial_lower(0, 10, 0.1) - 0.9f64.powi(10)).abs() < 1e-12);
        assert_eq!(binomial_upper(0, 10, 0.5), 1.0);
        assert_eq!(binomial_upper(11, 10, 0.5), 0.0);
        assert_eq!(binomial_upper(3, 10, 0.0), 0.0);
        assert_eq!(binomial_lower(3, 10, 1.0), 0.0);
        // Every tail of Binomial(20, 0.3) against the sum of its terms, both ways.
        let pmf = |k: u64| ln_pmf(k, 20, 0.3).exp();
        for x in 0..=20u64 {
            let up: f64 = (x..=20).map(pmf).sum();
            let low: f64 = (0..=x).map(pmf).sum();
            assert!((binomial_upper(x, 20, 0.3) - up).abs() < 1e-12, "{x}");
            assert!((binomial_lower(x, 20, 0.3) - low).abs() < 1e-12, "{x}");
        }
    }

    #[test]
    fn binomial_tails_stay_exact_on_a_long_canary() {
        // P(X <= n/2) for Binomial(2e6, 0.5) = 1/2 + P(X = n/2)/2 (symmetry), where
        // statrs 0.19's incomplete beta answers 0.4916. (The first term's log comes from
        // differences of ln Γ near 2.7e7: ~1e-8 relative, far below what a level needs.)
        let n = 2_000_000;
        let half = 0.5 + 0.5 * ln_pmf(n / 2, n, 0.5).exp();
        assert!((binomial_lower(n / 2, n, 0.5) - half).abs() < 1e-7);
        assert!((binomial_upper(n / 2 + 1, n, 0.5) - (1.0 - half)).abs() < 1e-7);
        // Far tails: tiny, in [0, 1], never negative.
        let p = binomial_upper(30_000, 1_000_000, 0.02);
        assert!((0.0..1e-100).contains(&p), "{p}");
        assert!(binomial_lower(10_000, 1_000_000, 0.02) < 1e-100);
        assert!(binomial_upper(20_000, 1_000_000, 0.02) > 0.49);
    }

    #[test]
    fn ratio_tests_need_evidence_not_a_crossing() {
        // 2.09x on 258 decisions (5 vs ~2.4 declines expected): no evidence of > 2x.
        assert!(ratio_above(5, 258, 24, 2580, 2.0) > 0.1);
        // 10x on 1,000: overwhelming.
        assert!(ratio_above(100, 1000, 100, 10_000, 2.0) < 1e-20);
        assert!(ratio_below(0, 1000, 200, 10_000, 2.0) < 1e-4);
        assert_eq!(ratio_below(0, 1000, 0, 10_000, 2.0), 1.0);
    }

    /// Two histograms drawn from distributions whose PSI is `psi_true` (one multinomial
    /// draw each, inverse CDF on a splitmix stream).
    fn draw_pair(seed: u64, nc: u64, ns: u64, tilt: f64) -> ([u64; 10], [u64; 10]) {
        let mut z = seed;
        let mut uniform = move || {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((x ^ (x >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let base: Vec<f64> = (0..10).map(|i| 1.0 + i as f64).collect();
        let tilted: Vec<f64> = base
            .iter()
            .enumerate()
            .map(|(i, w)| w * (tilt * i as f64).exp())
            .collect();
        let mut hist = |w: &[f64], n: u64| {
            let total: f64 = w.iter().sum();
            let mut h = [0u64; 10];
            for _ in 0..n {
                let mut u = uniform() * total;
                let mut b = 0;
                while b < 9 && u >= w[b] {
                    u -= w[b];
                    b += 1;
                }
                h[b] += 1;
            }
            h
        };
        (hist(&tilted, nc), hist(&base, ns))
    }

    #[test]
    fn the_psi_test_holds_its_level_just_inside_the_limit() {
        // The tilt whose population PSI is 0.225 (0.9x the default limit 0.25).
        let psi_of = |t: f64| {
            let b: Vec<f64> = (0..10).map(|i| 1.0 + i as f64).collect();
            let c: Vec<f64> = b
                .iter()
                .enumerate()
                .map(|(i, w)| w * (t * i as f64).exp())
                .collect();
            let (sb, sc): (f64, f64) = (b.iter().sum(), c.iter().sum());
            b.iter()
                .zip(&c)
                .map(|(x, y)| (y / sc - x / sb) * ((y / sc) / (x / sb)).ln())
                .sum::<f64>()
        };
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if psi_of(mid) < 0.225 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let level = first_levels(0.01).compare.unwrap();
        let trials = 400;
        let broken = (0..trials)
            .filter(|&s| {
                let (c, v) = draw_pair(s, 1000, 9000, lo);
                psi(&c, &v) > psi_bound(10, 1000, 9000, 0.25, level)
            })
            .count();
        // At level 1.2e-3 a 0.9x candidate must almost never break (the central
        // allowance of before broke ~1% a look).
        assert!(broken <= 2, "{broken} of {trials}");
        // A candidate at 2x the limit breaks at once.
        let (c, v) = draw_pair(7, 1000, 9000, 1.2);
        assert!(psi_of(1.2) > 0.5 && psi(&c, &v) > psi_bound(10, 1000, 9000, 0.25, level));
    }

    #[test]
    fn agreement_drop_is_one_sided() {
        assert!(drop_above(600, 1000, 9000, 10_000, 0.15) < 1e-6);
        assert!(drop_above(700, 1000, 9000, 10_000, 0.15) < 1e-3);
        assert!(drop_above(880, 1000, 9000, 10_000, 0.15) > 0.5);
    }
}
