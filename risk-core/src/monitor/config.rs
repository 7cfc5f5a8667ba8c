//! The `[monitor]` table of `risk.toml`.

use super::{Agreement, MonitorConfig};
use crate::error::ConfigError;
use serde::Deserialize;
use std::time::Duration;

/// `[monitor]`: every key optional (defaults of [`MonitorConfig`]); the table's presence
/// turns the monitors on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMonitor {
    pub sample_every: Option<u64>,
    pub min_samples: Option<u64>,
    pub interval_ms: Option<f64>,
    pub agreement: Option<String>,
    pub min_agreement: Option<f64>,
    pub max_ks: Option<f64>,
    pub max_psi: Option<f64>,
    pub bins: Option<usize>,
    pub max_deep_fallback_share: Option<f64>,
    pub min_labels: Option<u64>,
    pub min_label_recall: Option<f64>,
}

impl RawMonitor {
    /// The monitor settings (the table's presence turns the monitors on).
    pub(crate) fn to_config(&self) -> Result<MonitorConfig, ConfigError> {
        let m = self;
        let mut c = MonitorConfig::default();
        if let Some(v) = m.sample_every {
            c.sample_every = v;
        }
        if let Some(v) = m.min_samples {
            c.min_samples = v;
        }
        if let Some(ms) = m.interval_ms {
            if !(ms.is_finite() && (0.0..=86_400_000.0).contains(&ms)) {
                return Err(ConfigError::invalid(
                    "monitor.interval_ms",
                    "must be between 0 and 86400000",
                ));
            }
            c.interval = Duration::from_secs_f64(ms / 1e3);
        }
        if let Some(a) = &m.agreement {
            c.agreement = match a.as_str() {
                "same_action" => Agreement::SameAction,
                "same_side" => Agreement::SameSide,
                other => {
                    return Err(ConfigError::invalid(
                        "monitor.agreement",
                        format!("{other:?} is not same_action or same_side"),
                    ))
                }
            };
        }
        if let Some(v) = m.min_agreement {
            c.min_agreement = v;
        }
        if let Some(v) = m.max_ks {
            c.max_ks = v;
        }
        if let Some(v) = m.max_psi {
            c.max_psi = v;
        }
        if let Some(v) = m.bins {
            c.bins = v;
        }
        if let Some(v) = m.max_deep_fallback_share {
            c.max_deep_fallback_share = v;
        }
        if let Some(v) = m.min_labels {
            c.min_labels = v;
        }
        if let Some(v) = m.min_label_recall {
            if !(0.0..=1.0).contains(&v) {
                return Err(ConfigError::invalid(
                    "monitor.min_label_recall",
                    "must be between 0 and 1",
                ));
            }
            c.min_label_recall = v;
        }
        c.validate()?;
        Ok(c)
    }
}
