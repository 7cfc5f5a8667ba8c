//! Fixed-memory distribution sketches for drift: counts over bins whose edges are the
//! baseline's quantiles, so each baseline bin holds an equal share and the KS statistic
//! and PSI are read off the bin counts.
//!
//! Hand-written: a sketch is a sorted edge array and one atomic counter per bin (what the
//! decide path touches must be a relaxed add, with no allocation and no lock); the
//! statistics are ten lines each.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The most bins a sketch has.
pub const MAX_BINS: usize = 64;

/// Bin edges from a baseline sample and the baseline's share in each bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Edges {
    /// Ascending inner edges: bin `i` holds values in `[edges[i-1], edges[i])`.
    edges: Vec<f32>,
    /// The baseline's share of values in each bin (`edges.len() + 1` bins).
    reference: Vec<f64>,
}

impl Edges {
    /// Edges at the baseline's quantiles (`bins` bins, fewer when values repeat); `None`
    /// when the sample has no finite value.
    pub fn fit(sample: &[f32], bins: usize) -> Option<Self> {
        let mut v: Vec<f32> = sample.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f32::total_cmp);
        let bins = bins.clamp(2, MAX_BINS);
        let mut edges: Vec<f32> = (1..bins)
            .map(|k| v[(k * v.len() / bins).min(v.len() - 1)])
            .collect();
        edges.dedup();
        let mut counts = vec![0u64; edges.len() + 1];
        for x in &v {
            counts[edges.partition_point(|e| e <= x)] += 1;
        }
        let n = v.len() as f64;
        Some(Self {
            reference: counts.iter().map(|&c| c as f64 / n).collect(),
            edges,
        })
    }

    /// Number of bins.
    pub fn bins(&self) -> usize {
        self.edges.len() + 1
    }

    #[inline]
    fn bin(&self, x: f32) -> usize {
        self.edges.partition_point(|e| *e <= x)
    }

    /// KS statistic (largest CDF gap at the edges) and PSI of `counts` against the baseline.
    pub fn compare(&self, counts: &[u64]) -> (f64, f64) {
        let n: u64 = counts.iter().sum();
        if n == 0 {
            return (0.0, 0.0);
        }
        let (mut fr, mut fc, mut ks, mut psi) = (0.0, 0.0, 0.0f64, 0.0);
        for (r, &c) in self.reference.iter().zip(counts) {
            let c = c as f64 / n as f64;
            fr += r;
            fc += c;
            ks = ks.max((fr - fc).abs());
            let (p, q) = (c.max(1e-4), r.max(1e-4));
            psi += (p - q) * (p / q).ln();
        }
        (ks, psi)
    }
}

/// Live counts over one [`Edges`].
#[derive(Debug)]
pub(crate) struct Sketch {
    pub edges: Edges,
    counts: Vec<AtomicU64>,
}

impl Sketch {
    pub(crate) fn new(edges: Edges) -> Self {
        Self {
            counts: (0..edges.bins()).map(|_| AtomicU64::new(0)).collect(),
            edges,
        }
    }

    /// Counts one value (NaN: missing, not counted).
    #[inline]
    pub(crate) fn record(&self, x: f32) {
        if x.is_finite() {
            self.counts[self.edges.bin(x)].fetch_add(1, Relaxed);
        }
    }

    /// Takes the counts since the last take (resetting them).
    pub(crate) fn take(&self) -> Vec<u64> {
        self.counts.iter().map(|c| c.swap(0, Relaxed)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_distribution_is_quiet_and_a_shift_is_not() {
        let base: Vec<f32> = (0..10_000).map(|i| (i % 1000) as f32).collect();
        let e = Edges::fit(&base, 20).unwrap();
        let s = Sketch::new(e.clone());
        for i in 0..5000 {
            s.record(((i * 7) % 1000) as f32);
        }
        let (ks, psi) = e.compare(&s.take());
        assert!(ks < 0.02 && psi < 0.01, "{ks} {psi}");
        for i in 0..5000 {
            s.record(((i * 7) % 1000) as f32 * 0.5 + 500.0);
        }
        let (ks, psi) = e.compare(&s.take());
        assert!(ks > 0.4 && psi > 1.0, "{ks} {psi}");
        assert!(Edges::fit(&[f32::NAN], 10).is_none());
    }
}
