//! The gray band set by a traffic budget (`gray.budget`): instead of a fixed score range,
//! the band holds the `budget` share of scored traffic whose fast scores are highest below
//! the decline threshold (the transactions closest to being declined, and the ones a miss
//! hides among), read off the recent score distribution.
//!
//! `decide` adds the fast score to a histogram (one relaxed add to the calling thread's
//! stripe; no lock, no allocation). A background thread (`risk-gray-band`, every
//! `gray.budget_refresh_ms`) takes the counts, decays the window by its half-life in
//! scores, and stores the new band in one atomic word that `decide` reads. Until the
//! window holds [`WARM`] scores (decayed) at a refresh the fixed band (`gray.band`)
//! serves. Memory is fixed: [`BINS`] 32-bit counters a stripe (a refresh every 60 s at most
//! keeps them from wrapping at any decision rate a core reaches). The share that escalates
//! is at most the budget: hard-rule decisions in the band do not escalate, and a full deep
//! queue sheds, but their scores count in the window.
//!
//! Hand-written rather than a quantile-sketch crate: the recording side must be a relaxed
//! atomic add from many threads (the sketch crates of the field take `&mut self`, so a lock
//! or a channel on the decide path), and the bins come from the score's float bits (no
//! logarithm per decision): 128 bins an octave from 2^-20 to 1, a relative resolution of
//! 0.8% wherever calibrated fraud scores fall.

use super::{Engine, Inner};
use crate::config::GrayBudget;
use crate::stripe::Striped;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};

/// The float bits (shifted right by 16: sign, exponent, 7 mantissa bits) of 2^-20: bin 0
/// holds every score below 2^-20 · (1 + 1/128), bin `b` scores from [`lower_edge`]`(b)`.
const BASE: u32 = 107 << 7;
/// Bins: 20 octaves of 128, and one for 1.0.
pub(crate) const BINS: usize = 20 * 128 + 1;
/// Scores the window must hold before the budget band replaces the fixed one.
pub const WARM: f64 = 1000.0;

/// The bin of score `p` (clamped to [0, 1]; NaN to 0).
#[inline]
pub(crate) fn bin(p: f32) -> usize {
    // NaN, -0.0 and negatives to 0 (-0.0's sign bit would read as the top bin).
    let p = if p > 0.0 { p.min(1.0) } else { 0.0 };
    ((p.to_bits() >> 16).saturating_sub(BASE) as usize).min(BINS - 1)
}

/// The lowest score of bin `b`.
pub(crate) fn lower_edge(b: usize) -> f32 {
    if b == 0 {
        0.0
    } else {
        f32::from_bits((BASE + b as u32) << 16)
    }
}

/// One stripe's counters.
struct Row(Box<[AtomicU32]>);

impl Default for Row {
    fn default() -> Self {
        Self((0..BINS).map(|_| AtomicU32::new(0)).collect())
    }
}

/// The decayed window, owned by whoever refreshes.
struct Window {
    counts: Vec<f64>,
    total: f64,
}

/// The band in use and how it was set, for metrics and `health()`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GrayBandView {
    /// Lowest fast score that escalates.
    pub lo: f32,
    /// Highest fast score that escalates.
    pub hi: f32,
    /// `fixed` (`gray.band`, or the budget's window not yet warm) or `budget`.
    pub source: &'static str,
    /// The budget (share of scored traffic), when one is set.
    pub budget: Option<f64>,
    /// Scores in the budget's window (decayed), 0 without a budget.
    pub window_scores: f64,
}

/// The budget band of one engine.
pub(crate) struct BudgetBand {
    cfg: GrayBudget,
    counts: Striped<Row>,
    window: Mutex<Window>,
    /// `lo` bits in the low half, `hi` bits in the high half; 0 until warm.
    band: AtomicU64,
    /// The window's total, as f64 bits (for the view).
    total: AtomicU64,
    /// The refresh thread, woken at shutdown.
    thread: Mutex<Option<std::thread::Thread>>,
}

impl BudgetBand {
    pub(crate) fn new(cfg: GrayBudget) -> Self {
        Self {
            cfg,
            counts: Striped::default(),
            window: Mutex::new(Window {
                counts: vec![0.0; BINS],
                total: 0.0,
            }),
            band: AtomicU64::new(0),
            total: AtomicU64::new(0),
            thread: Mutex::new(None),
        }
    }

    /// The refresh interval.
    pub(crate) fn refresh_every(&self) -> std::time::Duration {
        self.cfg.refresh
    }

    /// Wakes the refresh thread (at shutdown, so that it ends now, not an interval later).
    pub(crate) fn wake(&self) {
        if let Some(t) = self.thread.lock().as_ref() {
            t.unpark();
        }
    }

    /// Counts one fast score (decide path).
    #[inline]
    pub(crate) fn record(&self, p: f32) {
        self.counts.mine().0[bin(p)].fetch_add(1, Relaxed);
    }

    /// The budget band, once warm.
    #[inline]
    pub(crate) fn band(&self) -> Option<(f32, f32)> {
        let w = self.band.load(Relaxed);
        (w != 0).then(|| (f32::from_bits(w as u32), f32::from_bits((w >> 32) as u32)))
    }

    /// What serves now, given the fixed band.
    pub(crate) fn view(&self, fixed: (f32, f32)) -> GrayBandView {
        let total = f64::from_bits(self.total.load(Relaxed));
        let (band, source) = match self.band() {
            Some(b) => (b, "budget"),
            None => (fixed, "fixed"),
        };
        GrayBandView {
            lo: band.0,
            hi: band.1,
            source,
            budget: Some(self.cfg.share),
            window_scores: total,
        }
    }

    /// Takes the new counts into the window (decayed by the half-life) and sets the band
    /// below `decline_at` (off the decide path: the refresh thread, or a caller's tick).
    pub(crate) fn refresh(&self, decline_at: f32) {
        let mut w = self.window.lock();
        let mut fresh = vec![0u64; BINS];
        let mut n = 0u64;
        for row in self.counts.iter() {
            for (f, c) in fresh.iter_mut().zip(row.0.iter()) {
                let x = u64::from(c.swap(0, Relaxed));
                *f += x;
                n += x;
            }
        }
        let keep = 0.5f64.powf(n as f64 / self.cfg.half_life as f64);
        for (c, f) in w.counts.iter_mut().zip(&fresh) {
            *c = *c * keep + *f as f64;
        }
        w.total = w.total * keep + n as f64;
        self.total.store(w.total.to_bits(), Relaxed);
        if w.total < WARM {
            return;
        }
        let lo = band_below(&w.counts, w.total * self.cfg.share, decline_at);
        let word = u64::from(lo.to_bits()) | (u64::from(decline_at.to_bits()) << 32);
        // A band of [0, 0] (decline_at 0) would read as "not warm": keep it non-zero.
        self.band.store(word.max(1), Relaxed);
    }
}

impl Inner {
    /// Starts the thread that refreshes the budget band (with `gray.budget` and a deep
    /// tier); it ends at shutdown (woken), or within an interval of the engine's drop.
    pub(super) fn start_gray_band(me: &Arc<Inner>) -> std::io::Result<()> {
        let Some(b) = &me.gray_band else {
            return Ok(());
        };
        let every = b.refresh_every();
        let weak: Weak<Inner> = Arc::downgrade(me);
        let h = std::thread::Builder::new()
            .name("risk-gray-band".into())
            .spawn(move || loop {
                // Woken early at shutdown (or spuriously: then it refreshes early).
                std::thread::park_timeout(every);
                let Some(inner) = weak.upgrade() else { return };
                if inner.shut.load(Relaxed) {
                    return;
                }
                inner.refresh_gray_band();
            })?;
        *b.thread.lock() = Some(h.thread().clone());
        Ok(())
    }

    fn refresh_gray_band(&self) {
        if let Some(b) = &self.gray_band {
            let decline_at = self.routing.load().policy.serving.body.policy.decline_at;
            b.refresh(decline_at);
        }
    }

    pub(super) fn gray_band_view(&self) -> GrayBandView {
        match &self.gray_band {
            Some(b) => b.view(self.cfg.gray_band),
            None => GrayBandView {
                lo: self.cfg.gray_band.0,
                hi: self.cfg.gray_band.1,
                source: "fixed",
                budget: self.cfg.gray_budget.map(|b| b.share),
                window_scores: 0.0,
            },
        }
    }
}

impl Engine {
    /// The gray band serving now: the fixed `gray.band`, or the one `gray.budget` set from
    /// the recent fast scores (also in [`health`](Engine::health) and the metrics).
    pub fn gray_band(&self) -> GrayBandView {
        self.inner.gray_band_view()
    }

    /// Recomputes the budget band now from the scores seen since the last refresh (the
    /// engine's `risk-gray-band` thread does this every `gray.budget_refresh_ms`; a host
    /// or a test on a manual clock may call it at its own points). Nothing without a
    /// budget.
    pub fn gray_band_tick(&self) {
        self.inner.refresh_gray_band();
    }
}

/// The lowest score `lo` such that the scores in `[lo, hi)` weigh `target` (the mass of
/// a bin taken as spread evenly over it); 0 when everything below `hi` weighs less.
pub(crate) fn band_below(counts: &[f64], target: f64, hi: f32) -> f32 {
    let top = bin(hi);
    let width = |b: usize| f64::from(lower_edge(b + 1) - lower_edge(b));
    // The part of `hi`'s own bin below `hi`.
    let mut acc = if top + 1 < BINS && width(top) > 0.0 {
        counts[top] * f64::from(hi - lower_edge(top)) / width(top)
    } else {
        0.0
    };
    if acc >= target && counts[top] > 0.0 {
        let share = target / counts[top];
        return (f64::from(hi) - share * width(top)) as f32;
    }
    for b in (0..top).rev() {
        let c = counts[b];
        if acc + c >= target && c > 0.0 {
            let share = (target - acc) / c;
            return (f64::from(lower_edge(b + 1)) - share * width(b)) as f32;
        }
        acc += c;
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_the_unit_interval_in_order() {
        assert_eq!(bin(0.0), 0);
        assert_eq!(bin(f32::NAN), 0);
        assert_eq!(bin(-0.0), 0);
        assert_eq!(bin(-1.0), 0);
        assert_eq!(bin(1.0), BINS - 1);
        assert_eq!(bin(7.0), BINS - 1);
        let mut last = 0;
        for k in 0..100_000 {
            let p = k as f32 / 100_000.0;
            let b = bin(p);
            assert!(b >= last);
            assert!(
                lower_edge(b) <= p && (b + 1 == BINS || p < lower_edge(b + 1)),
                "{p}"
            );
            last = b;
        }
        // Relative resolution: 1/128 of an octave.
        let b = bin(0.01);
        let w = lower_edge(b + 1) - lower_edge(b);
        assert!(w / lower_edge(b) <= 1.0 / 128.0 + 1e-6);
    }

    #[test]
    fn the_band_holds_the_budget_below_the_threshold() {
        // Uniform scores: 2% of them lie in [0.68, 0.7).
        let mut counts = vec![0.0; BINS];
        let n = 1_000_000;
        for k in 0..n {
            counts[bin((k as f32 + 0.5) / n as f32)] += 1.0;
        }
        let lo = band_below(&counts, 0.02 * n as f64, 0.7);
        assert!((lo - 0.68).abs() < 1e-3, "{lo}");
        // More than everything below: the whole range.
        assert_eq!(band_below(&counts, 2.0 * n as f64, 0.7), 0.0);
    }

    #[test]
    fn refresh_decays_and_sets_the_band() {
        let b = BudgetBand::new(GrayBudget {
            share: 0.05,
            half_life: 10_000,
            refresh: std::time::Duration::from_secs(1),
        });
        for k in 0..500 {
            b.record(k as f32 / 500.0);
        }
        b.refresh(0.7);
        assert_eq!(b.band(), None, "not warm at 500 scores");
        assert_eq!(b.view((0.3, 0.7)).source, "fixed");
        for k in 0..20_000 {
            b.record(k as f32 / 20_000.0);
        }
        b.refresh(0.7);
        let (lo, hi) = b.band().unwrap();
        assert_eq!(hi, 0.7);
        assert!((lo - 0.65).abs() < 0.01, "{lo}");
        // A shift of the distribution moves the band within a few half-lives.
        for _ in 0..5 {
            for k in 0..20_000 {
                b.record(0.5 * k as f32 / 20_000.0);
            }
            b.refresh(0.7);
        }
        let (lo, _) = b.band().unwrap();
        assert!(lo < 0.5, "{lo}");
    }
}
