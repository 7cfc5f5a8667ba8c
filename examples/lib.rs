//! Pieces shared by the examples: transparent stand-in tiers and evaluation metrics.
//!
//! **Stand-ins, clearly labelled.** Until the real model tiers land (XGBoost/ONNX and the
//! LLM deep tier in `risk-gpu`), the quickstart uses [`Logistic`]: logistic regression
//! fitted here, by gradient descent, on a training set generated with another seed (fast
//! tier), and the same with pairwise interaction terms (deep-tier stand-in). The rule
//! tier is the real one: `risk-rules` with its default rule set.
//!
//! Every piece is a real [`Scorer`]; nothing is hard-coded to the evaluation data.
#![deny(missing_docs)]

#[path = "hand_written.rs"]
pub mod hand_written;
#[path = "metrics_http.rs"]
pub mod metrics_http;
#[path = "tiers.rs"]
pub mod tiers;

use risk_core::synth::Labeled;
use risk_core::{Latency, ReasonCode, Score, ScoreError, Scorer, ScorerInfo, Slot, Transaction};
use std::sync::Arc;

// ===== features for the linear models =====

/// Turns a synthetic transaction into a dense vector for the linear models:
/// log-scaled amounts and counts, missing-value indicators, channel one-hots.
#[derive(Debug, Clone)]
pub struct Featurizer {
    slots: Vec<(Slot, Transform)>,
    channel: Slot,
    names: Vec<String>,
    interactions: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, Copy)]
enum Transform {
    Log1p,
    Raw,
    /// Value (0 if missing) plus a missing indicator.
    WithMissing,
    LogWithMissing,
}

impl Featurizer {
    /// Features over the synthetic schema; `interactions` adds pairwise products of
    /// the listed base features (by name).
    pub fn new(schema: &risk_core::FeatureSchema, interactions: &[(&str, &str)]) -> Self {
        use Transform::*;
        let spec: [(&str, Transform); 14] = [
            ("amount", Log1p),
            ("hour", Raw),
            ("is_foreign", Raw),
            ("device_new", WithMissing),
            ("txn_count_1h", Log1p),
            ("txn_count_24h", Log1p),
            ("amount_sum_24h", Log1p),
            ("small_count_1h", Log1p),
            ("distinct_countries_24h", Raw),
            ("secs_since_last", LogWithMissing),
            ("amount_ratio", LogWithMissing),
            ("card_age_days", Log1p),
            ("merchant_txn_count_1h", Log1p),
            ("high_risk_country", Raw),
        ];
        let mut names = Vec::new();
        let mut slots = Vec::new();
        for (n, t) in spec {
            slots.push((schema.slot(n).expect("synthetic schema field"), t));
            names.push(n.to_owned());
            if matches!(t, WithMissing | LogWithMissing) {
                names.push(format!("{n}_missing"));
            }
        }
        for c in ["ecom", "atm", "moto", "app"] {
            names.push(format!("channel_{c}"));
        }
        let base = names.len();
        let idx = |n: &str| names.iter().position(|x| x == n).expect("base feature");
        let interactions: Vec<(usize, usize)> =
            interactions.iter().map(|(a, b)| (idx(a), idx(b))).collect();
        let mut all = names.clone();
        for (a, b) in &interactions {
            all.push(format!("{}*{}", names[*a], names[*b]));
        }
        debug_assert!(all.len() >= base);
        Self {
            slots,
            channel: schema.slot("channel").expect("channel"),
            names: all,
            interactions,
        }
    }

    /// Output width.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the output is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Output feature names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Writes the features of `t` into `out` (cleared first).
    pub fn write(&self, t: &Transaction, out: &mut Vec<f32>) {
        out.clear();
        let f = &t.features;
        for &(slot, tr) in &self.slots {
            let v = f.get(slot);
            match tr {
                Transform::Log1p => out.push(if v.is_nan() { 0.0 } else { v.max(0.0).ln_1p() }),
                Transform::Raw => out.push(if v.is_nan() { 0.0 } else { v }),
                Transform::WithMissing => {
                    out.push(if v.is_nan() { 0.0 } else { v });
                    out.push(v.is_nan() as u8 as f32);
                }
                Transform::LogWithMissing => {
                    out.push(if v.is_nan() { 0.0 } else { v.max(0.0).ln_1p() });
                    out.push(v.is_nan() as u8 as f32);
                }
            }
        }
        // Channel ids: 1 pos, 2 ecom, 3 atm, 4 moto, 5 app.
        let ch = f.get(self.channel) as i32;
        for id in 2..=5 {
            out.push((ch == id) as u8 as f32);
        }
        for &(a, b) in &self.interactions {
            out.push(out[a] * out[b]);
        }
    }
}

// ===== logistic regression =====

/// Logistic regression over a [`Featurizer`], standardised inputs.
#[derive(Debug, Clone)]
pub struct Logistic {
    name: String,
    feat: Featurizer,
    mean: Vec<f32>,
    scale: Vec<f32>,
    w: Vec<f32>,
    b: f32,
    codes: Vec<ReasonCode>,
    latency: Latency,
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

impl Logistic {
    /// Fits by full-batch gradient descent with L2 penalty `l2` for `epochs` epochs.
    pub fn fit(name: &str, feat: Featurizer, rows: &[Labeled], epochs: usize, l2: f32) -> Self {
        let k = feat.len();
        let mut x = Vec::with_capacity(rows.len() * k);
        let mut buf = Vec::with_capacity(k);
        for r in rows {
            feat.write(&r.txn, &mut buf);
            x.extend_from_slice(&buf);
        }
        let n = rows.len();
        let y: Vec<f32> = rows.iter().map(|r| r.is_fraud as u8 as f32).collect();
        let mut mean = vec![0f32; k];
        let mut scale = vec![0f32; k];
        for row in x.chunks(k) {
            for j in 0..k {
                mean[j] += row[j] / n as f32;
            }
        }
        for row in x.chunks(k) {
            for j in 0..k {
                scale[j] += (row[j] - mean[j]).powi(2) / n as f32;
            }
        }
        for s in &mut scale {
            *s = s.sqrt().max(1e-6);
        }
        for row in x.chunks_mut(k) {
            for j in 0..k {
                row[j] = (row[j] - mean[j]) / scale[j];
            }
        }
        let base = y.iter().sum::<f32>() / n as f32;
        let mut w = vec![0f32; k];
        let mut b = (base / (1.0 - base)).ln();
        let lr = 0.5;
        let mut grad = vec![0f32; k];
        for _ in 0..epochs {
            grad.iter_mut().for_each(|g| *g = 0.0);
            let mut gb = 0.0;
            for (row, &yi) in x.chunks(k).zip(&y) {
                let z: f32 = row.iter().zip(&w).map(|(a, b)| a * b).sum::<f32>() + b;
                let e = sigmoid(z) - yi;
                for j in 0..k {
                    grad[j] += e * row[j];
                }
                gb += e;
            }
            for j in 0..k {
                w[j] -= lr * (grad[j] / n as f32 + l2 * w[j]);
            }
            b -= lr * gb / n as f32;
        }
        let codes = feat
            .names()
            .iter()
            .map(|n| ReasonCode::intern(&format!("{name}:{n}")))
            .collect();
        Self {
            name: name.to_owned(),
            feat,
            mean,
            scale,
            w,
            b,
            codes,
            latency: Latency::Bounded,
        }
    }

    /// Declares the latency class (a deep-tier stand-in runs on the deep pool anyway).
    pub fn with_latency(mut self, l: Latency) -> Self {
        self.latency = l;
        self
    }

    /// Probability and the top positive contributions.
    pub fn predict(&self, t: &Transaction, buf: &mut Vec<f32>) -> Score {
        self.feat.write(t, buf);
        let mut z = self.b;
        let mut s = Score::new(0.0);
        let mut top: [(f32, usize); 3] = [(0.0, usize::MAX); 3];
        for (j, v) in buf.iter().enumerate() {
            let c = self.w[j] * (v - self.mean[j]) / self.scale[j];
            z += c;
            if c > top[2].0 {
                top[2] = (c, j);
                top.sort_by(|a, b| b.0.total_cmp(&a.0));
            }
        }
        s.probability = sigmoid(z);
        for (c, j) in top {
            if j != usize::MAX {
                s.reasons.push(self.codes[j], c);
            }
        }
        s
    }
}

thread_local! {
    static BUF: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Scorer for Logistic {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(&self.name, "example-fit", self.latency)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        Ok(BUF.with(|b| self.predict(t, &mut b.borrow_mut())))
    }
}

// ===== a scorer wrapper for fault drills =====

/// Wraps a scorer and stalls one call in `every` for `stall` (a real sleep: this is a
/// drill of a misbehaving model, not a test).
pub struct Stalling {
    inner: Arc<dyn Scorer>,
    every: u64,
    stall: std::time::Duration,
    n: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Stalling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stalling")
            .field("every", &self.every)
            .finish()
    }
}

impl Stalling {
    /// Stalls every `every`-th call for `stall`.
    pub fn new(inner: Arc<dyn Scorer>, every: u64, stall: std::time::Duration) -> Self {
        Self {
            inner,
            every,
            stall,
            n: Default::default(),
        }
    }
}

impl Scorer for Stalling {
    fn info(&self) -> ScorerInfo {
        let i = self.inner.info();
        ScorerInfo::new(
            format!("stalling({})", i.name),
            i.version,
            Latency::Unbounded,
        )
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let k = self.n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if k % self.every == self.every - 1 {
            std::thread::sleep(self.stall);
        }
        self.inner.score(t)
    }
}

// ===== metrics =====

/// Area under the precision-recall curve (average precision).
pub fn auprc(scores: &[f32], labels: &[bool]) -> f64 {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let pos = labels.iter().filter(|&&l| l).count();
    if pos == 0 {
        return 0.0;
    }
    let (mut tp, mut ap) = (0usize, 0f64);
    let mut i = 0;
    while i < idx.len() {
        // Ties share one threshold.
        let mut j = i;
        let mut tp_here = 0;
        while j < idx.len() && scores[idx[j]] == scores[idx[i]] {
            tp_here += labels[idx[j]] as usize;
            j += 1;
        }
        tp += tp_here;
        ap += (tp_here as f64 / pos as f64) * (tp as f64 / j as f64);
        i = j;
    }
    ap
}

/// (recall, precision) of `flagged` against `labels`.
pub fn recall_precision(flagged: &[bool], labels: &[bool]) -> (f64, f64) {
    let tp = flagged
        .iter()
        .zip(labels)
        .filter(|(f, l)| **f && **l)
        .count() as f64;
    let pos = labels.iter().filter(|l| **l).count().max(1) as f64;
    let flagged_n = flagged.iter().filter(|f| **f).count().max(1) as f64;
    (tp / pos, tp / flagged_n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auprc_of_perfect_and_inverted_rankings() {
        let labels = [true, true, false, false];
        assert!((auprc(&[0.9, 0.8, 0.2, 0.1], &labels) - 1.0).abs() < 1e-12);
        let inv = auprc(&[0.1, 0.2, 0.8, 0.9], &labels);
        assert!((inv - (0.5 * (1.0 / 3.0) + 0.5 * 0.5)).abs() < 1e-12);
        // All tied: precision is the base rate.
        assert!((auprc(&[0.5; 4], &labels) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn fitted_models_beat_chance() {
        use risk_core::synth::{generate, schema, SynthConfig};
        let train = generate(&SynthConfig::new(1, 8_000));
        let test = generate(&SynthConfig::new(2, 8_000));
        let s = schema();
        let m = Logistic::fit("lr", Featurizer::new(&s, &[]), &train, 150, 1e-4);
        let labels: Vec<bool> = test.iter().map(|r| r.is_fraud).collect();
        let scores: Vec<f32> = test
            .iter()
            .map(|r| m.score(&r.txn).unwrap().probability)
            .collect();
        let base = labels.iter().filter(|l| **l).count() as f64 / labels.len() as f64;
        assert!(
            auprc(&scores, &labels) > 5.0 * base,
            "{}",
            auprc(&scores, &labels)
        );
    }
}
