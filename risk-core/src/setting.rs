//! The value helpers every `risk.toml` table uses: a duration in milliseconds or a count,
//! range-checked, with the key named in the error. Each subsystem's `Raw*::to_config`
//! reads its own table with them, so they live below all of them.

use crate::error::ConfigError;
use std::time::Duration;

/// A duration given in milliseconds (`None`: `default`); refuses negative, non-finite and
/// absurd values, naming `key`.
pub(crate) fn ms(key: &str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(x) if (0.0..=1e12).contains(&x) => Ok(Duration::from_secs_f64(x / 1e3)),
        Some(x) => Err(ConfigError::invalid(
            key,
            format!("{x} is not a non-negative number of milliseconds"),
        )),
    }
}

/// A duration given in microseconds (`None`: `default`).
pub(crate) fn us(key: &str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    ms(key, v.map(|x| x / 1e3), default)
}

/// A non-negative count (`None`: `default`), naming `key` when refused.
pub(crate) fn count(key: &str, v: Option<i64>, default: usize) -> Result<usize, ConfigError> {
    match v {
        None => Ok(default),
        Some(x) if x >= 0 => {
            usize::try_from(x).map_err(|_| ConfigError::invalid(key, format!("{x} is too large")))
        }
        Some(x) => Err(ConfigError::invalid(key, format!("{x} is negative"))),
    }
}
