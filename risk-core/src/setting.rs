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

/// A probability-like value in `[0, 1]`, naming `key` when refused.
pub(crate) fn unit(key: &str, v: f32) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&v) {
        return Err(ConfigError::invalid(key, format!("{v} is not in [0, 1]")));
    }
    Ok(())
}

/// A count of at least 1, naming `key` when refused.
pub(crate) fn at_least_one(key: &str, v: usize) -> Result<(), ConfigError> {
    if v == 0 {
        return Err(ConfigError::invalid(key, "must be at least 1"));
    }
    Ok(())
}
