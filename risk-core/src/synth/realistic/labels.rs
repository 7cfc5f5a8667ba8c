//! When fraud labels arrive: one delay per episode (the cardholder or issuer reports
//! the episode's charges together), log-normal with median 7 days and σ 1.14, so half
//! arrive within a week and 90% within 30 days, capped at 120 days; 7% never arrive.

use super::super::rng::Rng;
use super::super::{DAY_MS, NO_LABEL};

/// Median delay, days.
pub const MEDIAN_DAYS: f64 = 7.0;
/// Log-scale spread: Φ(ln(30/7)/1.14) = 0.90 by 30 days.
pub const SIGMA: f64 = 1.14;
/// Longest delay, days (card-scheme chargeback windows).
pub const CAP_DAYS: f64 = 120.0;
/// Share of episodes never reported.
pub const NEVER: f64 = 0.07;

/// One episode's label delay in ms, or [`NO_LABEL`].
pub(super) fn delay(rng: &mut Rng) -> i64 {
    if rng.chance(NEVER) {
        return NO_LABEL;
    }
    let days = rng.lognormal(MEDIAN_DAYS, SIGMA).min(CAP_DAYS);
    (days * DAY_MS as f64) as i64
}
