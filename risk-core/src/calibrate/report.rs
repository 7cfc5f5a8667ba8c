//! Reliability tables, expected calibration error, and the before/after report.

use super::{Calibration, Method};
use serde::Serialize;
use std::fmt;

/// One bin of a reliability table (equal-width over `[0, 1]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bin {
    /// Lower edge (inclusive).
    pub lo: f32,
    /// Upper edge (exclusive, inclusive for the last bin).
    pub hi: f32,
    /// Rows whose score fell here.
    pub count: u64,
    /// Mean predicted probability of those rows.
    pub mean_score: f64,
    /// Observed fraud rate of those rows.
    pub fraud_rate: f64,
}

/// Predicted against observed, bin by bin, and the expected calibration error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReliabilityTable {
    /// The bins (empty ones included, with `count == 0`).
    pub bins: Vec<Bin>,
    /// ECE: the count-weighted mean of `|mean_score - fraud_rate|` over the bins.
    pub ece: f64,
    /// Brier score (mean squared error of the probabilities).
    pub brier: f64,
}

/// The reliability table of `scores` against `labels` in `bins` equal-width bins.
/// Rows with a score outside `[0, 1]` are ignored.
pub fn reliability(scores: &[f32], labels: &[bool], bins: usize) -> ReliabilityTable {
    let bins = bins.max(1);
    let mut acc = vec![(0u64, 0f64, 0f64); bins];
    let (mut n, mut sq) = (0u64, 0f64);
    for (&s, &l) in scores.iter().zip(labels) {
        if !(0.0..=1.0).contains(&s) {
            continue;
        }
        let y = if l { 1.0 } else { 0.0 };
        let i = ((s as f64 * bins as f64) as usize).min(bins - 1);
        acc[i].0 += 1;
        acc[i].1 += s as f64;
        acc[i].2 += y;
        n += 1;
        sq += (s as f64 - y).powi(2);
    }
    let mut ece = 0.0;
    let bins: Vec<Bin> = acc
        .iter()
        .enumerate()
        .map(|(i, &(c, s, y))| {
            let (mean_score, fraud_rate) = if c == 0 {
                (0.0, 0.0)
            } else {
                (s / c as f64, y / c as f64)
            };
            if n > 0 {
                ece += c as f64 / n as f64 * (mean_score - fraud_rate).abs();
            }
            Bin {
                lo: i as f32 / bins as f32,
                hi: (i + 1) as f32 / bins as f32,
                count: c,
                mean_score,
                fraud_rate,
            }
        })
        .collect();
    ReliabilityTable {
        bins,
        ece,
        brier: if n == 0 { 0.0 } else { sq / n as f64 },
    }
}

impl fmt::Display for ReliabilityTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  bin          rows   predicted  observed")?;
        for b in &self.bins {
            writeln!(
                f,
                "  [{:.1}, {:.1})  {:>6}   {:>9.4}  {:>8.4}",
                b.lo, b.hi, b.count, b.mean_score, b.fraud_rate
            )?;
        }
        write!(f, "  ECE {:.4}   Brier {:.4}", self.ece, self.brier)
    }
}

/// A calibration's effect on held-out rows: the reliability table before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationReport {
    /// The method fitted.
    pub method: Method,
    /// Held-out rows evaluated.
    pub rows: usize,
    /// Raw scores.
    pub before: ReliabilityTable,
    /// Calibrated scores.
    pub after: ReliabilityTable,
}

impl CalibrationReport {
    /// Evaluates `cal` on held-out `scores` / `labels` with 10 bins.
    pub fn evaluate(cal: &Calibration, scores: &[f32], labels: &[bool]) -> Self {
        let after: Vec<f32> = scores.iter().map(|&s| cal.apply(s)).collect();
        Self {
            method: cal.method(),
            rows: scores.len(),
            before: reliability(scores, labels, 10),
            after: reliability(&after, labels, 10),
        }
    }
}

impl fmt::Display for CalibrationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:?} calibration on {} held-out rows",
            self.method, self.rows
        )?;
        writeln!(f, "before:\n{}", self.before)?;
        write!(f, "after:\n{}", self.after)
    }
}
