//! `[privacy]`: the pseudonymisation key and the mode of the files the SDK writes.
//!
//! ```toml
//! [privacy]
//! key = "env:RISK_PSEUDONYM_KEY"   # or "file:/run/secrets/risk-pseudonym-key"; >= 16 bytes
//! file_mode = "private"            # files 0600, dirs 0700 (default); "group": 0640 / 0750
//! ```
//!
//! With `key`, identifiers that leave the process or reach a disk are keyed pseudonyms
//! ([`crate::pseudo`]) and the audit chain is keyed. Without it they are written as they
//! are: the engine's build logs a warning and `Engine::health()` says so.

use crate::error::ConfigError;
use crate::files::FileMode;
use crate::pseudo::Pseudonymiser;
use crate::secret::SecretSpec;
use serde::Deserialize;

/// The TOML form of `[privacy]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrivacy {
    /// The pseudonymisation key, as a secret reference.
    #[serde(default)]
    pub key: Option<SecretSpec>,
    /// Modes of written files.
    #[serde(default)]
    pub file_mode: Option<FileMode>,
}

impl RawPrivacy {
    /// The pseudonymiser `key` gives, if any (errors name `privacy.key`, never the value).
    pub(crate) fn pseudonymiser(&self) -> Result<Option<Pseudonymiser>, ConfigError> {
        let Some(spec) = &self.key else {
            return Ok(None);
        };
        let secret = spec
            .resolve("privacy.key")
            .map_err(|e| ConfigError::invalid("privacy.key", e.to_string()))?;
        Pseudonymiser::new("privacy.key", secret.expose().as_bytes())
            .map(Some)
            .map_err(|e| ConfigError::invalid("privacy.key", e.to_string()))
    }

    /// The file mode (private unless `file_mode = "group"`).
    pub(crate) fn file_mode(&self) -> FileMode {
        self.file_mode.unwrap_or_default()
    }
}
