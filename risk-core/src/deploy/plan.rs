//! [`RolloutPlan`]: the gate, shadow and canary stages and the guards of one deploy.
//! Every field has a default; the TOML form (the C ABI's `plan_toml`) names durations in
//! milliseconds (`min_duration_ms`, `budget_ms`, `max_p99_ms`) and refuses unknown keys.

use super::DeployError;
use crate::txn::Transaction;
use serde::Deserialize;
use std::time::Duration;

/// How a candidate goes from loaded to serving everything.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutPlan {
    /// The validation gate (always runs).
    pub gate: Gate,
    /// A shadow stage before the canary; `None` skips it.
    pub shadow: Option<ShadowStage>,
    /// Canary stages by a sticky hash of the entity, in order; empty: the candidate is
    /// promoted as soon as the gate (and shadow) pass.
    pub canary: Vec<CanaryStage>,
    /// What rolls a shadow or canary back automatically.
    pub guards: Guards,
    /// Who or what deployed (recorded in the model directory): a person, a pipeline run.
    pub by: String,
}

impl RolloutPlan {
    /// Gate, then promote at once.
    pub fn immediate() -> Self {
        Self::default()
    }

    /// Gate → shadow (500 scored) → canary 1% → 10% → 50% → 100%, each stage at least
    /// 200 decisions and 1 minute; default guards.
    pub fn standard() -> Self {
        let stage = |share| CanaryStage {
            share,
            min_decisions: 200,
            min_duration: Duration::from_secs(60),
        };
        Self {
            shadow: Some(ShadowStage {
                min_duration: Duration::from_secs(60),
                ..ShadowStage::default()
            }),
            canary: vec![stage(0.01), stage(0.10), stage(0.50), stage(1.0)],
            ..Self::default()
        }
    }

    /// Parses the TOML form (`[gate]`, `[shadow]`, `[[canary]]`, `[guards]`, `by`).
    pub fn from_toml(text: &str) -> Result<Self, DeployError> {
        let p: RolloutPlan =
            toml::from_str(text).map_err(|e| DeployError::Plan(e.message().to_owned()))?;
        p.validate()?;
        Ok(p)
    }

    /// Checks shares, rates and sizes.
    pub fn validate(&self) -> Result<(), DeployError> {
        let bad = |m: String| Err(DeployError::Plan(m));
        let unit = |v: f64| (0.0..=1.0).contains(&v);
        let g = &self.gate;
        if !unit(g.max_mean_abs_diff) || !unit(g.min_action_agreement) {
            return bad(
                "gate.max_mean_abs_diff and gate.min_action_agreement must be in [0, 1]".into(),
            );
        }
        if g.sample == 0 || g.sample > MAX_SAMPLE {
            return bad(format!("gate.sample must be in 1..={MAX_SAMPLE}"));
        }
        if g.min_auprc.is_some_and(|a| !unit(a)) {
            return bad("gate.min_auprc must be in [0, 1]".into());
        }
        if !g.labels.is_empty() && g.labels.len() != g.transactions.len() {
            return bad(format!(
                "{} labels for {} supplied transactions",
                g.labels.len(),
                g.transactions.len()
            ));
        }
        if let Some(s) = &self.shadow {
            if !(s.sample > 0.0 && s.sample <= 1.0) {
                return bad("shadow.sample must be in (0, 1]".into());
            }
            if s.queue == 0 || s.queue > 65_536 {
                return bad("shadow.queue must be in 1..=65536".into());
            }
            if s.budget.is_zero() {
                return bad("shadow.budget_ms must be positive".into());
            }
        }
        let mut last = 0.0;
        for (i, c) in self.canary.iter().enumerate() {
            if !(c.share > last && c.share <= 1.0) {
                return bad(format!(
                    "canary[{i}].share {} must be in (0, 1] and above the previous stage's",
                    c.share
                ));
            }
            last = c.share;
        }
        let k = &self.guards;
        if !unit(k.max_error_rate) || !unit(k.max_agreement_drop) || !unit(k.min_action_delta) {
            return bad("guards rates must be in [0, 1]".into());
        }
        if !(k.max_score_psi >= 0.0 && k.max_score_psi.is_finite()) {
            return bad("guards.max_score_psi must be a non-negative number".into());
        }
        if !(k.max_action_ratio >= 1.0 && k.max_action_ratio.is_finite()) {
            return bad("guards.max_action_ratio must be at least 1".into());
        }
        if !(k.false_rollback > 0.0 && k.false_rollback <= 0.5) {
            return bad("guards.false_rollback must be in (0, 0.5]".into());
        }
        if k.min_decisions == 0 {
            return bad("guards.min_decisions must be at least 1".into());
        }
        Ok(())
    }
}

/// The most transactions a validation sample holds.
pub const MAX_SAMPLE: usize = 100_000;

/// The validation gate: what a candidate must show on a sample before it sees traffic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Gate {
    /// Recent live transactions to validate on (at most this many; the engine keeps a
    /// sample of recent traffic), in addition to [`transactions`](Self::transactions).
    pub sample: usize,
    /// Fewest transactions (recent plus supplied) the gate needs; fewer: refused.
    pub min_sample: usize,
    /// Largest mean `|candidate - serving|` score difference allowed.
    pub max_mean_abs_diff: f64,
    /// Least share of the sample on which candidate and serving would take the same action.
    pub min_action_agreement: f64,
    /// Latency p99 ceiling on the sample; `None`: the tier's budget (the fast deadline for
    /// rules and fast models, the deep budget for deep ones).
    #[serde(default, rename = "max_p99_ms", with = "opt_ms")]
    pub max_p99: Option<Duration>,
    /// Least area under the precision-recall curve on the labelled supplied rows.
    pub min_auprc: Option<f64>,
    /// Supplied validation transactions (API only).
    #[serde(skip)]
    pub transactions: Vec<Transaction>,
    /// Labels of the supplied transactions (`true`: fraud), for `min_auprc` (API only).
    #[serde(skip)]
    pub labels: Vec<bool>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            sample: 512,
            min_sample: 32,
            max_mean_abs_diff: 0.2,
            min_action_agreement: 0.7,
            max_p99: None,
            min_auprc: None,
            transactions: Vec::new(),
            labels: Vec::new(),
        }
    }
}

/// The shadow stage: the candidate scores a copy of live traffic off the decision path.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShadowStage {
    /// Share of decisions copied to the shadow (by a hash of the transaction id).
    pub sample: f64,
    /// Shadow scores needed before the stage can end.
    pub min_scored: u64,
    /// Least time in the stage (engine clock).
    #[serde(rename = "min_duration_ms", with = "ms")]
    pub min_duration: Duration,
    /// The shadow's own budget per score; a slower score counts as a timeout.
    #[serde(rename = "budget_ms", with = "ms")]
    pub budget: Duration,
    /// Copies waiting for the shadow; a full queue sheds (counted), never the caller.
    pub queue: usize,
}

impl Default for ShadowStage {
    fn default() -> Self {
        Self {
            sample: 1.0,
            min_scored: 500,
            min_duration: Duration::ZERO,
            budget: Duration::from_millis(50),
            queue: 1024,
        }
    }
}

/// One canary stage.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryStage {
    /// Share of entities (by a sticky hash) the candidate decides for.
    pub share: f64,
    /// Candidate decisions in this stage before it can end.
    #[serde(default = "default_stage_decisions")]
    pub min_decisions: u64,
    /// Least time in this stage (engine clock).
    #[serde(default, rename = "min_duration_ms", with = "ms")]
    pub min_duration: Duration,
}

fn default_stage_decisions() -> u64 {
    200
}

/// Automatic rollback: any broken guard ends a shadow or canary and restores the serving
/// version. Judged on the candidate's decisions since its phase began against the serving
/// version's over the same time, with statistics ([`judge`](super::judge)): the error-rate,
/// action-ratio, score-shift and agreement guards break when their limit is exceeded beyond
/// what sampling explains, at levels spent over the deploy's looks, so that a candidate
/// within those limits is rolled back by them with probability at most
/// [`false_rollback`](Self::false_rollback) (the PSI test through a normal approximation of
/// its distribution). Latency is compared with its ceiling at every tick, outside that
/// bound. A stage does not end before the guards have judged [`min_decisions`](Self::min_decisions)
/// candidate decisions. When the candidate is the serving model recalibrated (same scorer
/// name and content hash) and only one of the two brings a calibration, the other's scores
/// pass through it before the score guard compares them (one scale; a calibration that is
/// itself wrong then shows only in the action and agreement guards).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Guards {
    /// Candidate decisions (or shadow scores) before the guards judge.
    pub min_decisions: u64,
    /// Largest share of errors, timeouts, panics and invalid scores (broken when the
    /// failures are more than `Binomial(n, max_error_rate)` explains).
    pub max_error_rate: f64,
    /// Latency p99 ceiling; `None`: the tier's budget (judged on the observed p99).
    #[serde(default, rename = "max_p99_ms", with = "opt_ms")]
    pub max_p99: Option<Duration>,
    /// Largest population stability index between candidate and serving scores (10 bins),
    /// beyond its sampling noise.
    pub max_score_psi: f64,
    /// Largest ratio (either way) between candidate and serving decline and review rates,
    /// tested on the counts...
    pub max_action_ratio: f64,
    /// ...when the observed rates also differ by more than this (a practical floor).
    pub min_action_delta: f64,
    /// Largest drop in agreement with the rules tier (the share of decisions where the
    /// model's threshold action equals the rules'), tested one-sided.
    pub max_agreement_drop: f64,
    /// The most probability, over the whole deploy, of rolling back a candidate that
    /// keeps within every limit above; in `(0, 0.5]`.
    pub false_rollback: f64,
}

impl Default for Guards {
    fn default() -> Self {
        Self {
            min_decisions: 200,
            max_error_rate: 0.02,
            max_p99: None,
            max_score_psi: 0.25,
            max_action_ratio: 2.0,
            min_action_delta: 0.02,
            max_agreement_drop: 0.15,
            false_rollback: 0.01,
        }
    }
}

/// Serde of a `Duration` as milliseconds (a TOML float or integer).
pub(crate) mod ms {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v.is_finite() && (0.0..=1e12).contains(&v)) {
            return Err(serde::de::Error::custom(format!(
                "{v} is not a duration in milliseconds"
            )));
        }
        Ok(Duration::from_secs_f64(v / 1e3))
    }
}

/// [`ms`] for an optional duration.
pub(crate) mod opt_ms {
    use serde::Deserializer;
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::ms::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_plan_round_trip_and_refusals() {
        let p = RolloutPlan::from_toml(
            r#"
            by = "pipeline#42"
            [gate]
            sample = 100
            max_p99_ms = 5
            [shadow]
            min_scored = 10
            budget_ms = 20
            [[canary]]
            share = 0.1
            min_decisions = 50
            [[canary]]
            share = 1.0
            [guards]
            max_action_ratio = 3
            "#,
        )
        .unwrap();
        assert_eq!(p.by, "pipeline#42");
        assert_eq!(p.gate.max_p99, Some(Duration::from_millis(5)));
        assert_eq!(p.shadow.as_ref().unwrap().budget, Duration::from_millis(20));
        assert_eq!(p.canary.len(), 2);
        assert_eq!(p.canary[1].min_decisions, 200);
        assert_eq!(p.guards.max_action_ratio, 3.0);
        for bad in [
            "[[canary]]\nshare = 0.5\n[[canary]]\nshare = 0.2",
            "[[canary]]\nshare = 1.5",
            "[gate]\nsample = 0",
            "[gate]\nbogus = 1",
            "[shadow]\nsample = 0",
            "[guards]\nmax_action_ratio = 0.5",
            "[shadow]\nbudget_ms = -1",
            "[guards]\nfalse_rollback = 0",
            "[guards]\nfalse_rollback = 0.9",
        ] {
            assert!(
                matches!(RolloutPlan::from_toml(bad), Err(DeployError::Plan(_))),
                "{bad}"
            );
        }
        RolloutPlan::standard().validate().unwrap();
    }
}
