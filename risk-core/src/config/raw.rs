//! The TOML form of `risk.toml`: serde structs (unknown keys are errors) and their
//! mapping onto [`EngineConfig`](super::EngineConfig).

use super::{DeepConfig, EngineConfig, FeedbackConfig, PoolConfig};
use crate::audit::{KafkaSpec, LogOptions, RawAudit};
use crate::calibrate::Calibration;
use crate::circuit::CircuitConfig;
use crate::decision::Action;
use crate::deploy::DeployConfig;
use crate::error::ConfigError;
use crate::monitor::MonitorConfig;
use crate::policy::Policy;
use crate::schema::FeatureSchema;
use crate::setting::{count, ms, us};
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub schema: RawSchema,
    pub rules: RawTier,
    #[serde(default)]
    pub fast: Option<RawFast>,
    #[serde(default)]
    pub thresholds: RawThresholds,
    #[serde(default)]
    pub gray: RawGray,
    #[serde(default)]
    pub deep: Option<RawDeep>,
    #[serde(default)]
    pub pool: RawPool,
    #[serde(default)]
    pub circuit: RawCircuit,
    #[serde(default)]
    pub feedback: RawFeedback,
    #[serde(default)]
    pub audit: Option<RawAudit>,
    #[serde(default)]
    pub deploy: Option<crate::deploy::config::RawDeploy>,
    #[serde(default)]
    pub monitor: Option<crate::monitor::config::RawMonitor>,
    #[serde(default)]
    pub state: Option<crate::state::RawState>,
    #[serde(default)]
    pub privacy: super::privacy::RawPrivacy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchema {
    pub fields: Vec<RawField>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawField {
    pub name: String,
    pub kind: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub vocab: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTier {
    pub scorer: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFast {
    pub deadline_ms: Option<f64>,
    pub scorer: toml::Table,
    /// `{ method = "platt", a = .., b = .. }` and the like (see `calibrate::Calibration`).
    pub calibration: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawThresholds {
    pub approve_below: Option<f32>,
    pub decline_at: Option<f32>,
    pub hard_rule_override: Option<bool>,
    pub static_action: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGray {
    pub band: Option<Vec<f32>>,
    pub queue_capacity: Option<i64>,
    pub budget: Option<f64>,
    pub budget_half_life: Option<i64>,
    pub budget_refresh_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeep {
    pub budget_ms: Option<f64>,
    pub max_batch: Option<i64>,
    pub max_wait_ms: Option<f64>,
    pub workers: Option<i64>,
    pub global_prior: Option<f32>,
    pub subscriber_capacity: Option<i64>,
    pub scorer: toml::Table,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPool {
    pub fast_workers: Option<i64>,
    pub spin_us: Option<f64>,
    pub deadline_spin_us: Option<f64>,
    pub async_workers: Option<i64>,
    pub async_queue_capacity: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCircuit {
    pub window_ms: Option<f64>,
    pub min_calls: Option<i64>,
    pub failure_rate: Option<f32>,
    pub open_ms: Option<f64>,
    pub half_open_probes: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFeedback {
    pub gain: Option<f32>,
    pub centre: Option<f32>,
    pub max_shift: Option<f32>,
    pub ttl_ms: Option<f64>,
    pub max_entities: Option<i64>,
    /// 0 disables the bound.
    pub max_future_ms: Option<f64>,
}

impl RawFile {
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    pub(crate) fn schema(&self) -> Result<Arc<FeatureSchema>, ConfigError> {
        let mut b = FeatureSchema::builder();
        for (i, f) in self.schema.fields.iter().enumerate() {
            b = match (f.kind.as_str(), f.required) {
                ("numeric", false) => b.numeric(&f.name),
                ("numeric", true) => b.numeric_required(&f.name),
                ("categorical", _) => b.categorical(&f.name, &f.vocab),
                (other, _) => {
                    return Err(ConfigError::invalid(
                        format!("schema.fields[{i}].kind"),
                        format!("{other:?} is not \"numeric\" or \"categorical\""),
                    ))
                }
            };
        }
        // State features and list memberships are numeric fields of their own: added
        // unless the schema declares them (then the state plan checks they are numeric).
        if let Some(st) = &self.state {
            for n in st.field_names() {
                if !self.schema.fields.iter().any(|f| f.name == n) {
                    b = b.numeric(&n);
                }
            }
        }
        Ok(b.build()?)
    }

    pub(crate) fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let d = EngineConfig::default();
        let t = &self.thresholds;
        let static_action = match &t.static_action {
            None => d.policy.static_action,
            Some(s) => Action::parse(s).ok_or_else(|| {
                ConfigError::invalid(
                    "thresholds.static_action",
                    format!("{s:?} is not approve, review or decline"),
                )
            })?,
        };
        let gray_band = match &self.gray.band {
            None => d.gray_band,
            Some(v) if v.len() == 2 => (v[0], v[1]),
            Some(v) => {
                return Err(ConfigError::invalid(
                    "gray.band",
                    format!("needs exactly two numbers, got {}", v.len()),
                ))
            }
        };
        let deadline = match self.fast.as_ref().and_then(|f| f.deadline_ms) {
            Some(x) if x.is_nan() || x <= 0.0 => {
                return Err(ConfigError::invalid(
                    "fast.deadline_ms",
                    format!("{x} is not a positive number of milliseconds"),
                ))
            }
            v => ms("fast.deadline_ms", v, d.fast_deadline)?,
        };
        let deep = match &self.deep {
            None => d.deep,
            Some(r) => DeepConfig {
                budget: ms("deep.budget_ms", r.budget_ms, d.deep.budget)?,
                max_batch: count("deep.max_batch", r.max_batch, d.deep.max_batch)?,
                max_wait: ms("deep.max_wait_ms", r.max_wait_ms, d.deep.max_wait)?,
                workers: count("deep.workers", r.workers, d.deep.workers)?,
                global_prior: r.global_prior.unwrap_or(d.deep.global_prior),
                subscriber_capacity: count(
                    "deep.subscriber_capacity",
                    r.subscriber_capacity,
                    d.deep.subscriber_capacity,
                )?,
            },
        };
        let c = &self.circuit;
        let f = &self.feedback;
        Ok(EngineConfig {
            fast_deadline: deadline,
            policy: Policy {
                approve_below: t.approve_below.unwrap_or(d.policy.approve_below),
                decline_at: t.decline_at.unwrap_or(d.policy.decline_at),
                hard_rule_override: t.hard_rule_override.unwrap_or(d.policy.hard_rule_override),
                static_action,
            },
            gray_band,
            gray_budget: self.gray.budget()?,
            gray_queue_capacity: count(
                "gray.queue_capacity",
                self.gray.queue_capacity,
                d.gray_queue_capacity,
            )?,
            deep,
            pool: PoolConfig {
                fast_workers: count(
                    "pool.fast_workers",
                    self.pool.fast_workers,
                    d.pool.fast_workers,
                )?,
                spin: us("pool.spin_us", self.pool.spin_us, d.pool.spin)?,
                deadline_spin: us(
                    "pool.deadline_spin_us",
                    self.pool.deadline_spin_us,
                    d.pool.deadline_spin,
                )?,
                async_workers: count(
                    "pool.async_workers",
                    self.pool.async_workers,
                    d.pool.async_workers,
                )?,
                async_queue_capacity: count(
                    "pool.async_queue_capacity",
                    self.pool.async_queue_capacity,
                    d.pool.async_queue_capacity,
                )?,
            },
            circuit: CircuitConfig {
                window: ms("circuit.window_ms", c.window_ms, d.circuit.window)?,
                min_calls: count(
                    "circuit.min_calls",
                    c.min_calls,
                    d.circuit.min_calls as usize,
                )?
                .try_into()
                .map_err(|_| ConfigError::invalid("circuit.min_calls", "too large"))?,
                failure_rate: c.failure_rate.unwrap_or(d.circuit.failure_rate),
                open_for: ms("circuit.open_ms", c.open_ms, d.circuit.open_for)?,
                half_open_probes: count(
                    "circuit.half_open_probes",
                    c.half_open_probes,
                    d.circuit.half_open_probes as usize,
                )?
                .try_into()
                .map_err(|_| ConfigError::invalid("circuit.half_open_probes", "too large"))?,
            },
            feedback: FeedbackConfig {
                gain: f.gain.unwrap_or(d.feedback.gain),
                centre: f.centre.unwrap_or(d.feedback.centre),
                max_shift: f.max_shift.unwrap_or(d.feedback.max_shift),
                ttl: ms("feedback.ttl_ms", f.ttl_ms, d.feedback.ttl)?,
                max_entities: count(
                    "feedback.max_entities",
                    f.max_entities,
                    d.feedback.max_entities,
                )?,
                max_future: match f.max_future_ms {
                    Some(0.0) => None,
                    Some(v) => Some(ms("feedback.max_future_ms", Some(v), Duration::ZERO)?),
                    None => d.feedback.max_future,
                },
            },
        })
    }
}

/// Each subsystem's table through its own `Raw*::to_config`.
impl RawFile {
    /// `[deploy]` (defaults without one).
    pub(crate) fn deploy_config(&self, base_dir: &Path) -> Result<DeployConfig, ConfigError> {
        self.deploy
            .as_ref()
            .map_or_else(|| Ok(DeployConfig::default()), |d| d.to_config(base_dir))
    }

    /// `[monitor]`, when present.
    pub(crate) fn monitor_config(&self) -> Result<Option<MonitorConfig>, ConfigError> {
        self.monitor.as_ref().map(|m| m.to_config()).transpose()
    }

    /// `[audit]` as log options, when present.
    pub(crate) fn audit_options(&self, base_dir: &Path) -> Result<Option<LogOptions>, ConfigError> {
        let Some(a) = &self.audit else {
            return Ok(None);
        };
        let mut o = a.to_options(base_dir)?;
        o.pseudonymiser = self.privacy.pseudonymiser()?;
        o.file_mode = self.privacy.file_mode();
        Ok(Some(o))
    }

    /// `[audit.kafka]`, when present.
    pub(crate) fn kafka_spec(&self) -> Result<Option<KafkaSpec>, ConfigError> {
        Ok(self
            .audit
            .as_ref()
            .map(RawAudit::kafka_spec)
            .transpose()?
            .flatten())
    }

    /// `fast.calibration`, validated.
    pub(crate) fn fast_calibration(&self) -> Result<Option<Calibration>, ConfigError> {
        let Some(v) = self.fast.as_ref().and_then(|f| f.calibration.clone()) else {
            return Ok(None);
        };
        let c: Calibration = v.try_into().map_err(|e: toml::de::Error| {
            ConfigError::invalid("fast.calibration", e.message().to_owned())
        })?;
        c.validate()
            .map_err(|e| ConfigError::invalid("fast.calibration", e.to_string()))?;
        Ok(Some(c))
    }
}

impl RawGray {
    /// `gray.budget` and its window settings; `None` without `budget` (the other two keys
    /// alone are refused: they would do nothing).
    fn budget(&self) -> Result<Option<super::GrayBudget>, ConfigError> {
        let Some(share) = self.budget else {
            if self.budget_half_life.is_some() || self.budget_refresh_ms.is_some() {
                return Err(ConfigError::invalid(
                    "gray.budget",
                    "budget_half_life and budget_refresh_ms need gray.budget",
                ));
            }
            return Ok(None);
        };
        let d = super::GrayBudget::new(share);
        Ok(Some(super::GrayBudget {
            share,
            half_life: count(
                "gray.budget_half_life",
                self.budget_half_life,
                d.half_life as usize,
            )? as u64,
            refresh: ms("gray.budget_refresh_ms", self.budget_refresh_ms, d.refresh)?,
        }))
    }
}
