//! `[audit]` in `risk.toml` (see [`crate::config`] for every key) onto [`LogOptions`].

use super::kafka_security::{
    check_property, KafkaConfigError, KafkaSecurity, PropertyNames, SaslMechanism, SecurityProtocol,
};
use super::options::{Durability, FeatureSelection, LogOptions, OnFull};
use crate::error::ConfigError;
use crate::secret::SecretSpec;
use crate::setting::{count, ms};
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// `features = "all" | "none" | ["name", ...]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawFeatures {
    Word(String),
    Names(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAudit {
    pub dir: String,
    pub durability: Option<String>,
    pub fsync_interval_ms: Option<f64>,
    pub queue_capacity: Option<i64>,
    pub on_full: Option<String>,
    pub backpressure_max_wait_us: Option<f64>,
    pub max_batch: Option<i64>,
    pub segment_bytes: Option<i64>,
    pub segment_age_ms: Option<f64>,
    pub retention_days: Option<f64>,
    pub retention_bytes: Option<i64>,
    pub features: Option<RawFeatures>,
    pub truncate_corrupt_tail: Option<bool>,
    pub kafka: Option<RawKafka>,
}

/// `[audit.kafka]`: `brokers`, `topic`, `max_in_flight`, `message_timeout_ms`, and the
/// link's security: `security_protocol` (`PLAINTEXT` default, `SSL`, `SASL_PLAINTEXT`,
/// `SASL_SSL`), `sasl_mechanism` (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`),
/// `sasl_username`, `sasl_password` (`env:NAME` / `file:PATH`), `ssl_ca_file`,
/// `ssl_cert_file` + `ssl_key_file` (mutual TLS), `ssl_key_password` (`env:` / `file:`),
/// `allow_plaintext_password` (`SASL_PLAINTEXT` + `PLAIN` is refused without it);
/// `[audit.kafka.properties]`: further librdkafka properties, each checked by name
/// (`check_kafka_property`).
///
/// ```toml
/// [audit.kafka]
/// brokers = "kafka-1:9094"
/// topic = "risk-audit"
/// security_protocol = "SASL_SSL"
/// sasl_mechanism = "SCRAM-SHA-512"
/// sasl_username = "risk"
/// sasl_password = "env:RISK_KAFKA_PASSWORD"
/// ssl_ca_file = "/etc/risk/kafka-ca.pem"
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKafka {
    pub brokers: String,
    pub topic: String,
    pub max_in_flight: Option<i64>,
    pub message_timeout_ms: Option<f64>,
    pub security_protocol: Option<String>,
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    pub sasl_password: Option<SecretSpec>,
    pub ssl_ca_file: Option<String>,
    pub ssl_cert_file: Option<String>,
    pub ssl_key_file: Option<String>,
    pub ssl_key_password: Option<SecretSpec>,
    pub allow_plaintext_password: Option<bool>,
    pub properties: Option<toml::Table>,
}

/// What `[audit.kafka]` asks for, checked, secrets resolved; started by the engine
/// builder. `Debug` shows property names only and redacts secrets.
#[derive(Clone)]
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) struct KafkaSpec {
    pub brokers: String,
    pub topic: String,
    pub max_in_flight: usize,
    pub message_timeout: Duration,
    pub security: KafkaSecurity,
    pub properties: Vec<(String, String)>,
}

impl std::fmt::Debug for KafkaSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSpec")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("max_in_flight", &self.max_in_flight)
            .field("message_timeout", &self.message_timeout)
            .field("security", &self.security)
            .field("properties", &PropertyNames(&self.properties))
            .finish()
    }
}

fn kafka_err(e: KafkaConfigError) -> ConfigError {
    ConfigError::invalid(e.key(), e.to_string())
}

impl RawKafka {
    /// The security keys, checked (protocol and mechanism names, files, secrets).
    fn security(&self) -> Result<KafkaSecurity, ConfigError> {
        let protocol = match self.security_protocol.as_deref() {
            None => SecurityProtocol::Plaintext,
            Some(p) => SecurityProtocol::parse(p).ok_or_else(|| {
                ConfigError::invalid(
                    "audit.kafka.security_protocol",
                    format!("{p:?} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
                )
            })?,
        };
        let sasl_mechanism = match self.sasl_mechanism.as_deref() {
            None => None,
            Some(m) => Some(SaslMechanism::parse(m).ok_or_else(|| {
                ConfigError::invalid(
                    "audit.kafka.sasl_mechanism",
                    format!("{m:?} is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
                )
            })?),
        };
        let secret = |key: &str, s: &Option<SecretSpec>| {
            s.as_ref()
                .map(|s| s.resolve(key))
                .transpose()
                .map_err(|e| kafka_err(e.into()))
        };
        let file = |f: &Option<String>| f.as_ref().map(std::path::PathBuf::from);
        let sec = KafkaSecurity {
            protocol,
            sasl_mechanism,
            sasl_username: self.sasl_username.clone(),
            sasl_password: secret("audit.kafka.sasl_password", &self.sasl_password)?,
            ssl_ca_file: file(&self.ssl_ca_file),
            ssl_cert_file: file(&self.ssl_cert_file),
            ssl_key_file: file(&self.ssl_key_file),
            ssl_key_password: secret("audit.kafka.ssl_key_password", &self.ssl_key_password)?,
            allow_plaintext_password: self.allow_plaintext_password.unwrap_or(false),
        };
        sec.validate().map_err(kafka_err)?;
        Ok(sec)
    }
}

impl RawAudit {
    /// `[audit.kafka]`, checked (`None` without one).
    /// Certificate and key paths are used as written (relative ones against the working
    /// directory, as librdkafka reads them).
    pub(crate) fn kafka_spec(&self) -> Result<Option<KafkaSpec>, ConfigError> {
        let Some(k) = self.kafka.as_ref() else {
            return Ok(None);
        };
        if k.brokers.is_empty() {
            return Err(ConfigError::invalid(
                "audit.kafka.brokers",
                "must not be empty",
            ));
        }
        if k.topic.is_empty() {
            return Err(ConfigError::invalid(
                "audit.kafka.topic",
                "must not be empty",
            ));
        }
        let mut properties = Vec::new();
        for (key, v) in k.properties.iter().flatten() {
            let v = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(ConfigError::invalid(
                        "audit.kafka.properties",
                        format!(
                            "{key}: a {} is not a string, integer or boolean",
                            other.type_str()
                        ),
                    ))
                }
            };
            check_property(key, &v).map_err(kafka_err)?;
            properties.push((key.clone(), v));
        }
        let security = k.security()?;
        let max_in_flight = count("audit.kafka.max_in_flight", k.max_in_flight, 10_000)?;
        if max_in_flight == 0 {
            return Err(ConfigError::invalid(
                "audit.kafka.max_in_flight",
                "must be at least 1",
            ));
        }
        Ok(Some(KafkaSpec {
            brokers: k.brokers.clone(),
            topic: k.topic.clone(),
            max_in_flight,
            message_timeout: ms(
                "audit.kafka.message_timeout_ms",
                k.message_timeout_ms,
                Duration::from_secs(30),
            )?,
            security,
            properties,
        }))
    }

    /// The `[audit]` table as log options; `dir` resolves against `base_dir`.
    pub(crate) fn to_options(&self, base_dir: &Path) -> Result<LogOptions, ConfigError> {
        let a = self;
        if a.dir.is_empty() {
            return Err(ConfigError::invalid("audit.dir", "must not be empty"));
        }
        let mut o = LogOptions::new(base_dir.join(&a.dir));
        o.durability = match a.durability.as_deref().unwrap_or("batch") {
            "batch" => Durability::Batch,
            "none" => Durability::None,
            "interval" => Durability::Interval(ms(
                "audit.fsync_interval_ms",
                a.fsync_interval_ms,
                Duration::from_millis(100),
            )?),
            other => {
                return Err(ConfigError::invalid(
                    "audit.durability",
                    format!("{other:?} is not \"batch\", \"interval\" or \"none\""),
                ))
            }
        };
        if a.fsync_interval_ms.is_some() && !matches!(o.durability, Durability::Interval(_)) {
            return Err(ConfigError::invalid(
                "audit.fsync_interval_ms",
                "only applies to durability = \"interval\"",
            ));
        }
        o.queue_capacity = count("audit.queue_capacity", a.queue_capacity, o.queue_capacity)?;
        o.on_full = match a.on_full.as_deref().unwrap_or("drop") {
            "drop" => OnFull::Drop,
            "backpressure" => OnFull::Backpressure {
                max_wait: ms(
                    "audit.backpressure_max_wait_us",
                    a.backpressure_max_wait_us.map(|x| x / 1e3),
                    Duration::from_micros(100),
                )?,
            },
            other => {
                return Err(ConfigError::invalid(
                    "audit.on_full",
                    format!("{other:?} is not \"drop\" or \"backpressure\""),
                ))
            }
        };
        o.max_batch = count("audit.max_batch", a.max_batch, o.max_batch)?;
        o.segment_bytes = count(
            "audit.segment_bytes",
            a.segment_bytes,
            o.segment_bytes as usize,
        )? as u64;
        o.segment_age = ms("audit.segment_age_ms", a.segment_age_ms, o.segment_age)?;
        o.retention_age = match a.retention_days {
            None => o.retention_age,
            Some(0.0) => None,
            Some(d) if d.is_finite() && d > 0.0 && d < 1e6 => {
                Some(Duration::from_secs_f64(d * 86_400.0))
            }
            Some(d) => {
                return Err(ConfigError::invalid(
                    "audit.retention_days",
                    format!("{d} is not a number of days (0 keeps forever)"),
                ))
            }
        };
        o.retention_bytes = match count("audit.retention_bytes", a.retention_bytes, 0)? {
            0 => None,
            b => Some(b as u64),
        };
        o.features = match &a.features {
            None => FeatureSelection::All,
            Some(RawFeatures::Word(w)) if w == "all" => FeatureSelection::All,
            Some(RawFeatures::Word(w)) if w == "none" => FeatureSelection::None,
            Some(RawFeatures::Word(w)) => {
                return Err(ConfigError::invalid(
                    "audit.features",
                    format!("{w:?} is not \"all\", \"none\" or a list of field names"),
                ))
            }
            Some(RawFeatures::Names(v)) => FeatureSelection::Named(v.clone()),
        };
        o.truncate_corrupt_tail = a.truncate_corrupt_tail.unwrap_or(false);
        Ok(o)
    }
}
