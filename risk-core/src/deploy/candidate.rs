//! [`Candidate`]: what a deploy puts into a slot.

use super::DeployError;
use crate::calibrate::Calibration;
use crate::decision::Action;
use crate::policy::Policy;
use crate::scorer::Scorer;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A candidate version for a slot.
#[derive(Clone)]
#[non_exhaustive]
pub enum Candidate {
    /// A scorer the caller built. Recorded in the model directory (metadata only: it
    /// cannot be rebuilt from there after a restart).
    Scorer {
        /// The scorer.
        scorer: Arc<dyn Scorer>,
        /// Calibration applied to its scores before the thresholds (fast tier).
        calibration: Option<Calibration>,
    },
    /// A scorer table as in `risk.toml` (`kind`, `path`, ...), built through the engine's
    /// scorer registry. With a model directory its artifact (the file named by `path`)
    /// is copied there, so a restart rebuilds it.
    Spec {
        /// The table.
        table: toml::Table,
        /// Relative paths in it resolve against this directory.
        base_dir: PathBuf,
        /// Calibration (fast tier).
        calibration: Option<Calibration>,
    },
    /// New thresholds ([`Target::Policy`](super::Target::Policy)).
    Policy(Policy),
    /// A version already in the model directory, by its key (16 hex digits).
    Stored(String),
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Candidate::Scorer {
                scorer,
                calibration,
            } => f
                .debug_struct("Scorer")
                .field("info", &scorer.info())
                .field("calibration", calibration)
                .finish(),
            Candidate::Spec { table, .. } => f.debug_tuple("Spec").field(table).finish(),
            Candidate::Policy(p) => f.debug_tuple("Policy").field(p).finish(),
            Candidate::Stored(k) => f.debug_tuple("Stored").field(k).finish(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCandidate {
    scorer: Option<toml::Table>,
    calibration: Option<toml::Value>,
    policy: Option<RawPolicy>,
    stored: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    approve_below: f32,
    decline_at: f32,
    hard_rule_override: Option<bool>,
    static_action: Option<String>,
}

impl Candidate {
    /// A caller-built scorer.
    pub fn scorer(scorer: Arc<dyn Scorer>) -> Self {
        Candidate::Scorer {
            scorer,
            calibration: None,
        }
    }

    /// Adds a calibration (scorer candidates only; others are returned unchanged).
    pub fn with_calibration(self, c: Calibration) -> Self {
        match self {
            Candidate::Scorer { scorer, .. } => Candidate::Scorer {
                scorer,
                calibration: Some(c),
            },
            Candidate::Spec {
                table, base_dir, ..
            } => Candidate::Spec {
                table,
                base_dir,
                calibration: Some(c),
            },
            other => other,
        }
    }

    /// Parses the TOML form: a `[scorer]` table (as in `risk.toml`) with an optional
    /// `[calibration]` (`method = "platt" | "temperature" | "isotonic"` and its
    /// parameters), or a `[policy]` table (`approve_below`, `decline_at`,
    /// `hard_rule_override`, `static_action`), or `stored = "<key>"`. Exactly one.
    pub fn from_toml(text: &str, base_dir: &Path) -> Result<Self, DeployError> {
        let r: RawCandidate = toml::from_str(text)
            .map_err(|e| DeployError::Load(format!("candidate: {}", e.message())))?;
        let calibration = match r.calibration {
            None => None,
            Some(v) => {
                let c: Calibration = v.try_into().map_err(|e: toml::de::Error| {
                    DeployError::Load(format!("calibration: {}", e.message()))
                })?;
                c.validate().map_err(|e| DeployError::Load(e.to_string()))?;
                Some(c)
            }
        };
        match (r.scorer, r.policy, r.stored) {
            (Some(table), None, None) => Ok(Candidate::Spec {
                table,
                base_dir: base_dir.to_path_buf(),
                calibration,
            }),
            (None, Some(p), None) if calibration.is_none() => {
                let static_action = match p.static_action.as_deref() {
                    None => Action::Review,
                    Some(s) => Action::parse(s).ok_or_else(|| {
                        DeployError::Load(format!(
                            "policy.static_action: {s:?} is not approve, review or decline"
                        ))
                    })?,
                };
                let policy = Policy {
                    approve_below: p.approve_below,
                    decline_at: p.decline_at,
                    hard_rule_override: p.hard_rule_override.unwrap_or(true),
                    static_action,
                };
                check_policy(&policy)?;
                Ok(Candidate::Policy(policy))
            }
            (None, None, Some(key)) if calibration.is_none() => Ok(Candidate::Stored(key)),
            _ => Err(DeployError::Load(
                "candidate: give exactly one of [scorer] (with an optional [calibration]), [policy] or stored".into(),
            )),
        }
    }
}

/// Thresholds a policy candidate must satisfy: `0 <= approve_below <= decline_at <= 1`.
pub(crate) fn check_policy(p: &Policy) -> Result<(), DeployError> {
    let ok = p.approve_below.is_finite()
        && p.decline_at.is_finite()
        && 0.0 <= p.approve_below
        && p.approve_below <= p.decline_at
        && p.decline_at <= 1.0;
    if ok {
        Ok(())
    } else {
        Err(DeployError::Load(format!(
            "policy: need 0 <= approve_below ({}) <= decline_at ({}) <= 1",
            p.approve_below, p.decline_at
        )))
    }
}
