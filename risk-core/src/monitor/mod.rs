//! Monitors: model-vs-rules agreement, per-feature and score drift against a baseline, and
//! deep-tier health, computed off the hot path; alerts to subscribers, `tracing` and metrics.
//!
//! The decide path pays for a sample only (every `sample_every`-th decision by a hash of
//! the transaction id): two relaxed adds for agreement and one per numeric feature and the
//! score into fixed-memory sketches ([`sketch`]). Everything else (KS, PSI, thresholds,
//! alerts) runs on [`Engine::monitor_tick`](crate::Engine::monitor_tick), called by the
//! engine's monitor thread every `interval` or by the host. Alerts are edge-triggered: one
//! when a monitor goes bad (`firing: true`), one when it recovers.

pub(crate) mod config;
pub mod sketch;

use crate::decision::Action;
use crate::schema::{FeatureSchema, FieldKind, Slot};
use crate::txn::Transaction;
use serde::Serialize;
use sketch::{Edges, Sketch};
use std::sync::Arc;
use std::time::Duration;

/// How agreement between the model and the rules is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    /// Both tiers' threshold actions are the same.
    SameAction,
    /// Both scores are on the same side of the decline threshold.
    SameSide,
}

/// Monitor settings (the `[monitor]` table of `risk.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorConfig {
    /// Observe every this-many-th decision (by a hash of the transaction id).
    pub sample_every: u64,
    /// Sampled decisions a window needs before it is judged.
    pub min_samples: u64,
    /// How often the monitor thread evaluates; zero: only on `monitor_tick` calls.
    pub interval: Duration,
    /// What agreement means.
    pub agreement: Agreement,
    /// Alert when agreement falls below this.
    pub min_agreement: f64,
    /// Alert when a feature's or the score's KS statistic exceeds this.
    pub max_ks: f64,
    /// Alert when a feature's or the score's PSI exceeds this.
    pub max_psi: f64,
    /// Bins of each drift sketch.
    pub bins: usize,
    /// Alert when more than this share of deep verdicts in a window are fallbacks
    /// (timeouts, failures, saturation, open circuit).
    pub max_deep_fallback_share: f64,
    /// The drift reference; `None`: captured from the engine's recent traffic at the
    /// first window with enough of it.
    pub baseline: Option<Arc<Baseline>>,
    /// Labels (`report_label`) a window needs before fraud capture is judged.
    pub min_labels: u64,
    /// Alert when the share of labelled frauds the engine declined or reviewed falls
    /// below this (0: never).
    pub min_label_recall: f64,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            sample_every: 8,
            min_samples: 1000,
            interval: Duration::from_secs(10),
            agreement: Agreement::SameAction,
            min_agreement: 0.95,
            max_ks: 0.1,
            max_psi: 0.25,
            bins: 20,
            max_deep_fallback_share: 0.2,
            baseline: None,
            min_labels: 50,
            min_label_recall: 0.0,
        }
    }
}

impl MonitorReport {
    /// The JSON form (the C ABI's `risk_engine_monitor_json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl MonitorConfig {
    /// Checks rates, sizes and thresholds.
    pub fn validate(&self) -> Result<(), crate::error::ConfigError> {
        use crate::error::ConfigError;
        let unit = |v: f64| (0.0..=1.0).contains(&v);
        if self.sample_every == 0 {
            return Err(ConfigError::invalid(
                "monitor.sample_every",
                "must be at least 1",
            ));
        }
        if self.min_samples == 0 {
            return Err(ConfigError::invalid(
                "monitor.min_samples",
                "must be at least 1",
            ));
        }
        if !unit(self.min_agreement) {
            return Err(ConfigError::invalid(
                "monitor.min_agreement",
                "must be in [0, 1]",
            ));
        }
        if !unit(self.max_ks) {
            return Err(ConfigError::invalid("monitor.max_ks", "must be in [0, 1]"));
        }
        if !(self.max_psi >= 0.0 && self.max_psi.is_finite()) {
            return Err(ConfigError::invalid(
                "monitor.max_psi",
                "must be a non-negative number",
            ));
        }
        if !unit(self.max_deep_fallback_share) {
            return Err(ConfigError::invalid(
                "monitor.max_deep_fallback_share",
                "must be in [0, 1]",
            ));
        }
        if !(2..=sketch::MAX_BINS).contains(&self.bins) {
            return Err(ConfigError::invalid(
                "monitor.bins",
                format!("must be in 2..={}", sketch::MAX_BINS),
            ));
        }
        Ok(())
    }
}

/// A drift reference: bin edges per numeric feature and for the model score.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    pub(crate) features: Vec<(Slot, String, Edges)>,
    pub(crate) score: Option<Edges>,
}

impl Baseline {
    /// From training (or reference) transactions and, optionally, the model's scores on
    /// them. Features with no finite value in the sample are left out.
    pub fn fit(
        schema: &FeatureSchema,
        txns: &[Transaction],
        scores: Option<&[f32]>,
        bins: usize,
    ) -> Self {
        let features = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kind == FieldKind::Numeric)
            .filter_map(|(i, f)| {
                let slot = schema.slot(&f.name)?;
                let v: Vec<f32> = txns.iter().map(|t| t.features.values()[i]).collect();
                Edges::fit(&v, bins).map(|e| (slot, f.name.clone(), e))
            })
            .collect();
        Self {
            features,
            score: scores.and_then(|s| Edges::fit(s, bins)),
        }
    }

    /// Names of the features it covers.
    pub fn features(&self) -> impl Iterator<Item = &str> {
        self.features.iter().map(|(_, n, _)| n.as_str())
    }
}

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// Model-vs-rules agreement below its floor.
    Agreement,
    /// A feature drifted from the baseline.
    FeatureDrift,
    /// The model's score distribution drifted.
    ScoreDrift,
    /// Too many deep verdicts are fallbacks.
    DeepHealth,
    /// Too few labelled frauds were stopped (declined or reviewed).
    LabelRecall,
}

impl AlertKind {
    /// `agreement`, `feature_drift`, `score_drift`, `deep_health`, `label_recall`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Agreement => "agreement",
            AlertKind::FeatureDrift => "feature_drift",
            AlertKind::ScoreDrift => "score_drift",
            AlertKind::DeepHealth => "deep_health",
            AlertKind::LabelRecall => "label_recall",
        }
    }
}

/// One alert: a monitor went bad (`firing`) or recovered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// The monitor.
    pub kind: AlertKind,
    /// The feature name, `score`, `agreement` or `deep`.
    pub subject: String,
    /// The measured value (agreement share, KS, fallback share).
    pub value: f64,
    /// The threshold it crossed.
    pub threshold: f64,
    /// `true` when it starts, `false` when it recovers.
    pub firing: bool,
    /// When (Unix ms, engine clock).
    pub at_ms: i64,
    /// Details (PSI, sample size).
    pub detail: String,
}

/// Drift of one feature in the last judged window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    /// Feature name or `score`.
    pub subject: String,
    /// KS statistic.
    pub ks: f64,
    /// Population stability index.
    pub psi: f64,
    /// Values in the window.
    pub n: u64,
}

/// The latest value of every monitor.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MonitorReport {
    /// Windows judged so far.
    pub windows: u64,
    /// Agreement in the last judged window, and its sample size.
    pub agreement: Option<(f64, u64)>,
    /// Drift per feature and of the score in the last judged window.
    pub drift: Vec<Drift>,
    /// Share of deep verdicts that were fallbacks in the last window.
    pub deep_fallback_share: Option<f64>,
    /// Alerts firing now, as `kind:subject` (e.g. `agreement:agreement`,
    /// `feature_drift:amount`).
    pub firing: Vec<String>,
    /// Whether a drift baseline is in force.
    pub baseline: bool,
    /// Decisions checked against their labels in the last judged window.
    pub labels: Option<LabelQuality>,
    /// The latest alerts (firing and resolved), oldest first, at most 32.
    pub recent: Vec<Alert>,
}

/// How the decisions that later got a label fared (`report_label`; a retraction moves a
/// decision from one cell to the other).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LabelQuality {
    /// Frauds the engine declined or reviewed.
    pub fraud_stopped: u64,
    /// Frauds it approved.
    pub fraud_missed: u64,
    /// Legitimate transactions it declined.
    pub legit_declined: u64,
    /// Legitimate transactions it approved or reviewed.
    pub legit_passed: u64,
}

impl LabelQuality {
    /// Share of labelled frauds stopped (`None` without any).
    pub fn recall(&self) -> Option<f64> {
        let n = self.fraud_stopped + self.fraud_missed;
        (n > 0).then(|| self.fraud_stopped as f64 / n as f64)
    }
    /// Share of declines that were labelled legitimate (`None` without declines).
    pub fn false_decline_share(&self) -> Option<f64> {
        let n = self.legit_declined + self.fraud_stopped;
        (n > 0).then(|| self.legit_declined as f64 / n as f64)
    }
}

/// The live sketches of one baseline.
#[derive(Debug)]
pub(crate) struct Sketches {
    pub features: Vec<(Slot, String, Sketch)>,
    pub score: Option<Sketch>,
}

impl Sketches {
    pub(crate) fn new(b: &Baseline) -> Self {
        Self {
            features: b
                .features
                .iter()
                .map(|(s, n, e)| (*s, n.clone(), Sketch::new(e.clone())))
                .collect(),
            score: b.score.clone().map(Sketch::new),
        }
    }
}

/// Whether the model and the rules agree on one decision.
#[inline]
pub(crate) fn agrees(
    how: Agreement,
    rules: (f32, Action),
    model: (f32, Action),
    decline_at: f32,
) -> bool {
    match how {
        Agreement::SameAction => rules.1 == model.1,
        Agreement::SameSide => (rules.0 >= decline_at) == (model.0 >= decline_at),
    }
}
