//! The `[deploy]` table of `risk.toml`.

use super::DeployConfig;
use crate::error::ConfigError;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// `[deploy]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeploy {
    /// The model directory (relative to the config file).
    pub dir: Option<String>,
    pub check_interval_ms: Option<f64>,
    pub check_every: Option<u64>,
    pub sample_every: Option<u64>,
    pub sample_capacity: Option<usize>,
}

impl RawDeploy {
    /// The deploy settings (`[deploy]`); `dir` resolves against `base_dir`.
    pub(crate) fn to_config(&self, base_dir: &Path) -> Result<DeployConfig, ConfigError> {
        let d = self;
        let mut c = DeployConfig {
            dir: d.dir.as_ref().map(|p| base_dir.join(p)),
            ..DeployConfig::default()
        };
        if let Some(ms) = d.check_interval_ms {
            if !(ms.is_finite() && (1.0..=3_600_000.0).contains(&ms)) {
                return Err(ConfigError::invalid(
                    "deploy.check_interval_ms",
                    "must be between 1 and 3600000",
                ));
            }
            c.check_interval = Duration::from_secs_f64(ms / 1e3);
        }
        if let Some(n) = d.check_every {
            c.check_every = n;
        }
        if let Some(n) = d.sample_every {
            if n == 0 {
                return Err(ConfigError::invalid(
                    "deploy.sample_every",
                    "must be at least 1",
                ));
            }
            c.sample_every = n;
        }
        if let Some(n) = d.sample_capacity {
            if n > super::MAX_SAMPLE {
                return Err(ConfigError::invalid(
                    "deploy.sample_capacity",
                    format!("at most {}", super::MAX_SAMPLE),
                ));
            }
            c.sample_capacity = n;
        }
        Ok(c)
    }
}
