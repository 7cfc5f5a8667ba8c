//! How the guards judge with statistics: each guard is a one-sided test that its limit is
//! exceeded (not merely that an observed value crossed it), at a significance level spent
//! over the deploy's looks so that a healthy candidate is rolled back with a stated
//! probability at most, however long it runs and however often the supervisor ticks.
//!
//! - **Looks.** The guards judge when the candidate's decisions have grown by a tenth
//!   ([`GROWTH`]) since the last judged look (and before a stage advances), so a deploy of
//!   `n` decisions has `O(log n)` looks whatever the tick rate. Look `k` (from 1) spends
//!   `α · 6 / (π² k²)` of the deploy's `α` (`guards.false_rollback`): the sum over every look
//!   is `α` (a union bound), shared equally by the [`TESTS`] tests of a look.
//! - **Rates** (errors, decline and review ratios) use exact binomial tails: the failure
//!   count against `Binomial(n, max_error_rate)`, and the two versions' action counts by the
//!   conditional test of two Poisson rates (given `x_c + x_s` events, `x_c` is binomial with
//!   `p = n_c R / (n_c R + n_s)` when the rate ratio is `R`); with small counts (a decline rate
//!   of 1% over 200 decisions is 2 declines) no normal approximation is trusted.
//! - **Score shift** (PSI) subtracts its sampling noise: with equal distributions
//!   `n_eff · PSI` is approximately χ² with `bins − 1` degrees of freedom (`PSI` is the
//!   symmetric Kullback–Leibler divergence, whose second-order term is the χ² statistic of
//!   homogeneity; `n_eff = n_c n_s / (n_c + n_s)`), so the guard breaks when the PSI exceeds
//!   its limit by more than that quantile over `n_eff`.
//! - **Agreement drop** with the rules: a one-sided z-test of the drop against its limit.

use statrs::distribution::{Binomial, ChiSquared, ContinuousCDF, DiscreteCDF, Normal};

/// A look is judged once the candidate's decisions have grown by `1 / GROWTH` (a tenth)
/// since the last judged look.
pub const GROWTH: u64 = 10;

/// Statistical tests per look (error rate, decline ratio, review ratio, score shift,
/// agreement), each at an equal share of the look's level.
pub const TESTS: u32 = 5;

/// The looks of one deploy and the level each spends.
#[derive(Debug, Clone)]
pub(crate) struct Looks {
    alpha: f64,
    looks: u32,
    next_n: u64,
}

impl Looks {
    /// A deploy whose false-rollback probability is at most `alpha`.
    pub(crate) fn new(alpha: f64) -> Self {
        Self {
            alpha,
            looks: 0,
            next_n: 0,
        }
    }

    /// The counters restarted (a new phase): the next look may come at any `n`; the
    /// spending goes on (the deploy's `α` covers every phase).
    pub(crate) fn restart(&mut self) {
        self.next_n = 0;
    }

    /// Whether a look at `n` decisions is due (grown enough since the last one).
    pub(crate) fn due(&self, n: u64) -> bool {
        n >= self.next_n
    }

    /// Takes a look at `n` decisions: the level of each of its tests.
    pub(crate) fn take(&mut self, n: u64) -> f64 {
        self.looks += 1;
        self.next_n = n + (n / GROWTH).max(1);
        level(self.alpha, self.looks)
    }

    /// Looks taken so far.
    pub(crate) fn count(&self) -> u32 {
        self.looks
    }
}

/// The level of each test at look `k` (from 1) of a deploy with false-rollback bound `alpha`.
pub fn level(alpha: f64, k: u32) -> f64 {
    let k = f64::from(k.max(1));
    alpha * 6.0 / (std::f64::consts::PI * std::f64::consts::PI * k * k) / f64::from(TESTS)
}

/// `P(X >= x)` for `X ~ Binomial(n, p)`.
pub fn binomial_upper(x: u64, n: u64, p: f64) -> f64 {
    if x == 0 {
        return 1.0;
    }
    if x > n {
        return 0.0;
    }
    match Binomial::new(p.clamp(0.0, 1.0), n) {
        Ok(b) => b.sf(x - 1),
        Err(_) => 1.0,
    }
}

/// `P(X <= x)` for `X ~ Binomial(n, p)`.
pub fn binomial_lower(x: u64, n: u64, p: f64) -> f64 {
    if x >= n {
        return 1.0;
    }
    match Binomial::new(p.clamp(0.0, 1.0), n) {
        Ok(b) => b.cdf(x),
        Err(_) => 1.0,
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

/// The PSI that sampling alone exceeds with probability `level` when two histograms of
/// `bins` bins and `n_c`, `n_s` counts come from one distribution.
pub fn psi_noise(bins: usize, nc: u64, ns: u64, level: f64) -> f64 {
    if nc == 0 || ns == 0 || bins < 2 {
        return f64::INFINITY;
    }
    let n_eff = (nc as f64 * ns as f64) / (nc as f64 + ns as f64);
    match ChiSquared::new((bins - 1) as f64) {
        Ok(c) => c.inverse_cdf(1.0 - level) / n_eff,
        Err(_) => f64::INFINITY,
    }
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
    fn levels_sum_to_alpha() {
        let total: f64 = (1..200_000).map(|k| level(0.01, k)).sum::<f64>() * TESTS as f64;
        assert!((total - 0.01).abs() < 1e-6, "{total}");
        assert!(level(0.01, 1) > level(0.01, 2));
    }

    #[test]
    fn looks_come_at_geometric_sizes() {
        let mut l = Looks::new(0.01);
        assert!(l.due(200));
        l.take(200);
        assert!(!l.due(219) && l.due(220));
        l.take(220);
        assert_eq!(l.count(), 2);
        l.restart();
        assert!(l.due(1));
    }

    #[test]
    fn binomial_tails_match_hand_values() {
        // P(X >= 1; 10, 0.1) = 1 - 0.9^10.
        assert!((binomial_upper(1, 10, 0.1) - (1.0 - 0.9f64.powi(10))).abs() < 1e-12);
        // P(X <= 0; 10, 0.1) = 0.9^10.
        assert!((binomial_lower(0, 10, 0.1) - 0.9f64.powi(10)).abs() < 1e-12);
        assert_eq!(binomial_upper(0, 10, 0.5), 1.0);
        assert_eq!(binomial_upper(11, 10, 0.5), 0.0);
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

    #[test]
    fn psi_noise_shrinks_with_samples() {
        let small = psi_noise(10, 200, 2000, 1e-3);
        let large = psi_noise(10, 20_000, 200_000, 1e-3);
        assert!(small > 0.1 && small < 0.2, "{small}");
        assert!((small / large - 100.0).abs() < 1e-6);
    }

    #[test]
    fn agreement_drop_is_one_sided() {
        assert!(drop_above(600, 1000, 9000, 10_000, 0.15) < 1e-6);
        assert!(drop_above(700, 1000, 9000, 10_000, 0.15) < 1e-3);
        assert!(drop_above(880, 1000, 9000, 10_000, 0.15) > 0.5);
    }
}
