//! Security of the Kafka link (the `[audit.kafka]` security keys, [`KafkaSecurity`]) and the
//! guard on free librdkafka properties (`[audit.kafka.properties]`, [`check_property`]).
//!
//! Not behind the `kafka` feature: `risk.toml` is checked the same with or without the client
//! compiled in. Secrets (`sasl_password`, `ssl_key_password`) are [`Secret`]s: no `Debug`,
//! error or log line here prints them.
//!
//! The one combination refused outright is `SASL_PLAINTEXT` with `PLAIN`: it sends the
//! password in clear on every connection. It is accepted only with
//! `allow_plaintext_password = true` (and then warned at start).

use crate::secret::{Secret, SecretError};
use std::fmt;
use std::path::PathBuf;

/// `security_protocol`: how the forwarder reaches the brokers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// `PLAINTEXT` (default): no TLS, no authentication.
    #[default]
    Plaintext,
    /// `SSL`: TLS; with `ssl_cert_file` and `ssl_key_file`, mutual TLS.
    Ssl,
    /// `SASL_PLAINTEXT`: SASL authentication without TLS (PLAIN is refused, see the module docs).
    SaslPlaintext,
    /// `SASL_SSL`: SASL authentication inside TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Parses the librdkafka spelling (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Self::Plaintext,
            "SSL" => Self::Ssl,
            "SASL_PLAINTEXT" => Self::SaslPlaintext,
            "SASL_SSL" => Self::SaslSsl,
            _ => return None,
        })
    }

    /// The librdkafka spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether the link is TLS.
    pub fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether the link authenticates with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// `sasl_mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// `PLAIN`: the password itself is sent (inside TLS with `SASL_SSL`).
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    /// Parses the librdkafka spelling (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PLAIN" => Self::Plain,
            "SCRAM-SHA-256" => Self::ScramSha256,
            "SCRAM-SHA-512" => Self::ScramSha512,
            _ => return None,
        })
    }

    /// The librdkafka spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// How the forwarder authenticates and encrypts (`[audit.kafka]` security keys).
/// `Debug` prints `[redacted]` for both secrets.
#[derive(Debug, Clone, Default)]
pub struct KafkaSecurity {
    /// `security_protocol`.
    pub protocol: SecurityProtocol,
    /// `sasl_mechanism` (required with SASL protocols).
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl_username` (required with SASL protocols).
    pub sasl_username: Option<String>,
    /// `sasl_password` (`env:NAME` / `file:PATH`; required with SASL protocols).
    pub sasl_password: Option<Secret>,
    /// `ssl_ca_file`: PEM CA bundle the brokers' certificates are checked against
    /// (default: the system's trust store).
    pub ssl_ca_file: Option<PathBuf>,
    /// `ssl_cert_file`: PEM client certificate (mutual TLS), with `ssl_key_file`.
    pub ssl_cert_file: Option<PathBuf>,
    /// `ssl_key_file`: PEM private key of `ssl_cert_file`.
    pub ssl_key_file: Option<PathBuf>,
    /// `ssl_key_password`: passphrase of an encrypted `ssl_key_file`.
    pub ssl_key_password: Option<Secret>,
    /// `allow_plaintext_password`: accept `SASL_PLAINTEXT` with `PLAIN` (password in clear).
    pub allow_plaintext_password: bool,
}

/// A Kafka setting refused: names the key or property, never a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaConfigError {
    /// A free property that weakens delivery, loads code or disables a check.
    #[error("audit.kafka.properties.{property} is refused: {reason}")]
    Refused {
        /// The librdkafka property.
        property: String,
        /// Why.
        reason: &'static str,
    },
    /// A free property that has its own key (or carries a secret past redaction).
    #[error("audit.kafka.properties.{property} is refused: set audit.kafka.{key} instead")]
    UseKey {
        /// The librdkafka property.
        property: String,
        /// The dedicated `[audit.kafka]` key.
        key: &'static str,
    },
    /// A key that the chosen protocol needs is missing.
    #[error("audit.kafka.{key} is required: {reason}")]
    Missing {
        /// The missing key.
        key: &'static str,
        /// Why it is needed.
        reason: &'static str,
    },
    /// A key set that the chosen protocol does not use, or keys that disagree.
    #[error("audit.kafka.{key}: {reason}")]
    Conflict {
        /// The key.
        key: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// `SASL_PLAINTEXT` with `PLAIN` without `allow_plaintext_password = true`.
    #[error(
        "audit.kafka: security_protocol = \"SASL_PLAINTEXT\" with sasl_mechanism = \"PLAIN\" \
         sends sasl_password in clear; use \"SASL_SSL\" (or SCRAM), or set \
         allow_plaintext_password = true"
    )]
    PlaintextPassword,
    /// A certificate or key file that cannot be read.
    #[error("audit.kafka.{key}: cannot read {path}: {reason}")]
    File {
        /// The key.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (the I/O error kind).
        reason: String,
    },
    /// A secret that cannot be resolved.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// librdkafka refused a property or could not create the client. The value it was
    /// given is never repeated (librdkafka's own text can hold it).
    #[error("audit.kafka: librdkafka refused {what}")]
    Client {
        /// `property <name>` or a rendering of the creation error with secrets scrubbed.
        what: String,
    },
}

impl KafkaConfigError {
    /// The configuration key the error is about (`audit.kafka.<key>` or
    /// `audit.kafka.properties.<property>`).
    pub fn key(&self) -> String {
        match self {
            Self::Refused { property, .. } | Self::UseKey { property, .. } => {
                format!("audit.kafka.properties.{property}")
            }
            Self::Missing { key, .. } | Self::Conflict { key, .. } | Self::File { key, .. } => {
                format!("audit.kafka.{key}")
            }
            Self::Secret(
                SecretError::EnvMissing { key, .. }
                | SecretError::File { key, .. }
                | SecretError::Empty { key, .. },
            ) => key.clone(),
            Self::PlaintextPassword | Self::Client { .. } => "audit.kafka".into(),
        }
    }
}

impl KafkaSecurity {
    /// Checks that the keys fit the protocol and that the files can be read.
    pub fn validate(&self) -> Result<(), KafkaConfigError> {
        use KafkaConfigError::{Conflict, Missing};
        let p = self.protocol;
        if p.sasl() {
            let need = "the security_protocol uses SASL";
            if self.sasl_mechanism.is_none() {
                return Err(Missing {
                    key: "sasl_mechanism",
                    reason: need,
                });
            }
            if self.sasl_username.as_deref().unwrap_or("").is_empty() {
                return Err(Missing {
                    key: "sasl_username",
                    reason: need,
                });
            }
            if self.sasl_password.is_none() {
                return Err(Missing {
                    key: "sasl_password",
                    reason: need,
                });
            }
        } else {
            let no = "set, but the security_protocol does not use SASL";
            if self.sasl_mechanism.is_some() {
                return Err(Conflict {
                    key: "sasl_mechanism",
                    reason: no,
                });
            }
            if self.sasl_username.is_some() {
                return Err(Conflict {
                    key: "sasl_username",
                    reason: no,
                });
            }
            if self.sasl_password.is_some() {
                return Err(Conflict {
                    key: "sasl_password",
                    reason: no,
                });
            }
        }
        if p == SecurityProtocol::SaslPlaintext
            && self.sasl_mechanism == Some(SaslMechanism::Plain)
            && !self.allow_plaintext_password
        {
            return Err(KafkaConfigError::PlaintextPassword);
        }
        let files = [
            ("ssl_ca_file", &self.ssl_ca_file),
            ("ssl_cert_file", &self.ssl_cert_file),
            ("ssl_key_file", &self.ssl_key_file),
        ];
        for (key, f) in files {
            let Some(path) = f else { continue };
            if !p.tls() {
                return Err(Conflict {
                    key,
                    reason: "set, but the security_protocol is not SSL or SASL_SSL",
                });
            }
            if let Err(e) = std::fs::File::open(path) {
                return Err(KafkaConfigError::File {
                    key,
                    path: path.clone(),
                    reason: e.kind().to_string(),
                });
            }
        }
        match (&self.ssl_cert_file, &self.ssl_key_file) {
            (Some(_), None) => {
                return Err(Missing {
                    key: "ssl_key_file",
                    reason: "ssl_cert_file is set",
                })
            }
            (None, Some(_)) => {
                return Err(Missing {
                    key: "ssl_cert_file",
                    reason: "ssl_key_file is set",
                })
            }
            _ => {}
        }
        if self.ssl_key_password.is_some() && self.ssl_key_file.is_none() {
            return Err(Conflict {
                key: "ssl_key_password",
                reason: "set without ssl_key_file",
            });
        }
        Ok(())
    }

    /// The librdkafka properties these settings map to, secrets included (for the client
    /// only: never format them).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn apply(&self, set: &mut dyn FnMut(&'static str, &str)) {
        let p = self.protocol;
        set("security.protocol", p.as_str());
        if let Some(m) = self.sasl_mechanism {
            set("sasl.mechanisms", m.as_str());
        }
        if let Some(u) = &self.sasl_username {
            set("sasl.username", u);
        }
        if let Some(s) = &self.sasl_password {
            set("sasl.password", s.expose());
        }
        if p.tls() {
            // librdkafka's default since 2.0; set so that nothing can turn it off silently.
            set("ssl.endpoint.identification.algorithm", "https");
            set("enable.ssl.certificate.verification", "true");
        }
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        if let Some(f) = &self.ssl_ca_file {
            set("ssl.ca.location", &path(f));
        }
        if let Some(f) = &self.ssl_cert_file {
            set("ssl.certificate.location", &path(f));
        }
        if let Some(f) = &self.ssl_key_file {
            set("ssl.key.location", &path(f));
        }
        if let Some(s) = &self.ssl_key_password {
            set("ssl.key.password", s.expose());
        }
    }

    /// The secret values, to scrub from any text librdkafka hands back.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn secrets(&self) -> Vec<Secret> {
        [&self.sasl_password, &self.ssl_key_password]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

/// `text` with every secret value replaced by `[redacted]`.
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) fn scrub(text: &str, secrets: &[Secret]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if !s.expose().is_empty() && out.contains(s.expose()) {
            out = out.replace(s.expose(), "[redacted]");
        }
    }
    out
}

/// Properties with a dedicated `[audit.kafka]` key (or set by the forwarder itself).
const DEDICATED: &[(&str, &str)] = &[
    ("bootstrap.servers", "brokers"),
    ("metadata.broker.list", "brokers"),
    ("message.timeout.ms", "message_timeout_ms"),
    ("delivery.timeout.ms", "message_timeout_ms"),
    ("security.protocol", "security_protocol"),
    ("sasl.mechanism", "sasl_mechanism"),
    ("sasl.mechanisms", "sasl_mechanism"),
    ("sasl.username", "sasl_username"),
    ("sasl.password", "sasl_password"),
    ("ssl.ca.location", "ssl_ca_file"),
    ("ssl.ca.pem", "ssl_ca_file"),
    ("ssl.certificate.location", "ssl_cert_file"),
    ("ssl.certificate.pem", "ssl_cert_file"),
    ("ssl.key.location", "ssl_key_file"),
    ("ssl.key.pem", "ssl_key_file"),
    ("ssl.keystore.location", "ssl_cert_file"),
    ("ssl.key.password", "ssl_key_password"),
    ("ssl.keystore.password", "ssl_key_password"),
];

/// Checks one `[audit.kafka.properties]` entry: refuses, by name, what would weaken
/// delivery (`acks`, idempotence, more than 5 requests in flight), load code
/// (`plugin.library.paths`, OpenSSL engines and providers, a Kerberos kinit command),
/// disable broker verification, or carry a secret or a setting that has its own key.
/// The value is only looked at, never printed.
pub fn check_property(property: &str, value: &str) -> Result<(), KafkaConfigError> {
    let k = property.trim().to_ascii_lowercase();
    let refuse = |reason| {
        Err(KafkaConfigError::Refused {
            property: property.to_owned(),
            reason,
        })
    };
    if let Some((_, key)) = DEDICATED.iter().find(|(p, _)| *p == k) {
        return Err(KafkaConfigError::UseKey {
            property: property.to_owned(),
            key,
        });
    }
    match k.as_str() {
        "acks" | "request.required.acks" | "enable.idempotence" | "enable.gapless.guarantee" => {
            return refuse("the forwarder sets it (acks=all, idempotent producer)")
        }
        "plugin.library.paths"
        | "ssl.engine.location"
        | "ssl.engine.id"
        | "ssl.providers"
        | "sasl.kerberos.kinit.cmd" => return refuse("it loads or runs code"),
        "ssl.endpoint.identification.algorithm" if !value.trim().eq_ignore_ascii_case("https") => {
            return refuse("it disables the broker host name check")
        }
        "enable.ssl.certificate.verification" if !value.trim().eq_ignore_ascii_case("true") => {
            return refuse("it disables the broker certificate check")
        }
        "max.in.flight" | "max.in.flight.requests.per.connection"
            if !matches!(value.trim().parse::<u32>(), Ok(1..=5)) =>
        {
            return refuse("the idempotent producer needs 1 to 5")
        }
        "message.send.max.retries" | "retries" if matches!(value.trim().parse::<u64>(), Ok(0)) => {
            return refuse("the idempotent producer needs retries")
        }
        _ => {}
    }
    let secretish = [
        "password",
        "secret",
        "jaas",
        "token",
        "credential",
        ".pem",
        "oauthbearer.config",
    ];
    if secretish.iter().any(|w| k.contains(w)) {
        return refuse("it carries a secret past redaction; secrets have their own keys");
    }
    Ok(())
}

/// The property names of `properties`, for `Debug` output (values may be sensitive).
pub(crate) struct PropertyNames<'a>(pub &'a [(String, String)]);

impl fmt::Debug for PropertyNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(k: &str, v: &str) -> String {
        match check_property(k, v) {
            Err(e @ KafkaConfigError::Refused { .. }) => e.to_string(),
            other => panic!("{k}={v}: {other:?}"),
        }
    }

    #[test]
    fn properties_that_weaken_delivery_load_code_or_disable_checks_are_refused_by_name() {
        for (k, v) in [
            ("acks", "1"),
            ("request.required.acks", "0"),
            ("enable.idempotence", "false"),
            ("plugin.library.paths", "/tmp/evil.so"),
            ("ssl.engine.location", "/tmp/engine.so"),
            ("sasl.kerberos.kinit.cmd", "sh -c evil"),
            ("ssl.endpoint.identification.algorithm", "none"),
            ("enable.ssl.certificate.verification", "false"),
            ("max.in.flight", "10"),
            ("max.in.flight.requests.per.connection", "100"),
            ("retries", "0"),
            ("sasl.oauthbearer.client.secret", "Oauth-S3cret-Value"),
            ("sasl.oauthbearer.config", "principal=x secret=y"),
        ] {
            let m = refused(k, v);
            assert!(m.contains(&format!("audit.kafka.properties.{k}")), "{m}");
            assert!(!m.contains(v) || v.len() < 3, "{m} repeats the value");
        }
        // Case does not get round the list.
        refused("ACKS", "0");
    }

    #[test]
    fn properties_with_their_own_key_name_it() {
        for (k, key) in [
            ("sasl.password", "sasl_password"),
            ("ssl.key.password", "ssl_key_password"),
            ("security.protocol", "security_protocol"),
            ("ssl.ca.location", "ssl_ca_file"),
            ("ssl.key.pem", "ssl_key_file"),
            ("bootstrap.servers", "brokers"),
        ] {
            let e = check_property(k, "Some-Value-42").unwrap_err();
            let m = e.to_string();
            assert!(m.contains(&format!("set audit.kafka.{key} instead")), "{m}");
            assert!(!m.contains("Some-Value-42"), "{m}");
            assert_eq!(e.key(), format!("audit.kafka.properties.{k}"));
        }
    }

    #[test]
    fn harmless_properties_pass() {
        for (k, v) in [
            ("linger.ms", "20"),
            ("compression.type", "zstd"),
            ("max.in.flight", "5"),
            ("ssl.endpoint.identification.algorithm", "https"),
            ("client.id", "risk-audit"),
            ("batch.num.messages", "5000"),
        ] {
            check_property(k, v).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
    }

    #[test]
    fn security_keys_must_fit_the_protocol() {
        let pw = || Some(Secret::from_value("Pa55-Distinctive"));
        let mut s = KafkaSecurity {
            protocol: SecurityProtocol::SaslSsl,
            sasl_mechanism: Some(SaslMechanism::ScramSha512),
            sasl_username: Some("risk".into()),
            ..Default::default()
        };
        let e = s.validate().unwrap_err();
        assert_eq!(e.key(), "audit.kafka.sasl_password");
        s.sasl_password = pw();
        s.validate().unwrap();
        s.protocol = SecurityProtocol::SaslPlaintext;
        s.sasl_mechanism = Some(SaslMechanism::Plain);
        let e = s.validate().unwrap_err();
        assert!(matches!(e, KafkaConfigError::PlaintextPassword), "{e}");
        assert!(e.to_string().contains("allow_plaintext_password"), "{e}");
        s.allow_plaintext_password = true;
        s.validate().unwrap();
        let s = KafkaSecurity {
            protocol: SecurityProtocol::Plaintext,
            sasl_password: pw(),
            ..Default::default()
        };
        assert_eq!(s.validate().unwrap_err().key(), "audit.kafka.sasl_password");
        let s = KafkaSecurity {
            protocol: SecurityProtocol::Plaintext,
            ssl_ca_file: Some("/etc/hostname".into()),
            ..Default::default()
        };
        assert_eq!(s.validate().unwrap_err().key(), "audit.kafka.ssl_ca_file");
        let s = KafkaSecurity {
            protocol: SecurityProtocol::Ssl,
            ssl_ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let e = s.validate().unwrap_err();
        assert!(
            matches!(
                e,
                KafkaConfigError::File {
                    key: "ssl_ca_file",
                    ..
                }
            ),
            "{e}"
        );
        let s = KafkaSecurity {
            protocol: SecurityProtocol::Ssl,
            ssl_key_password: pw(),
            ..Default::default()
        };
        assert_eq!(
            s.validate().unwrap_err().key(),
            "audit.kafka.ssl_key_password"
        );
        assert!(!format!("{s:?}").contains("Pa55"));
    }

    #[test]
    fn risk_toml_maps_security_keys_and_refuses_properties_by_name() {
        let raw = |extra: &str| -> crate::audit::RawAudit {
            toml::from_str(&format!(
                "dir = \"a\"\n[kafka]\nbrokers = \"127.0.0.1:9094\"\ntopic = \"t\"\n{extra}"
            ))
            .unwrap()
        };
        std::env::set_var("RISK_KAFKA_TEST_PW", "Env-Secret-Distinctive-9");
        let spec = raw(
            "security_protocol = \"SASL_SSL\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"risk\"\nsasl_password = \"env:RISK_KAFKA_TEST_PW\"\n\
             [kafka.properties]\n\"linger.ms\" = 10",
        )
        .kafka_spec()
        .unwrap()
        .unwrap();
        assert_eq!(spec.security.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            spec.security.sasl_password.as_ref().unwrap().expose(),
            "Env-Secret-Distinctive-9"
        );
        let dbg = format!("{spec:?}");
        assert!(!dbg.contains("Env-Secret"), "{dbg}");
        let mut props = Vec::new();
        spec.security
            .apply(&mut |k, v| props.push((k, v.to_owned())));
        assert!(props.contains(&("sasl.mechanisms", "SCRAM-SHA-512".into())));
        assert!(props.contains(&("security.protocol", "SASL_SSL".into())));
        assert!(props.contains(&("ssl.endpoint.identification.algorithm", "https".into())));

        let e = raw("[kafka.properties]\nacks = \"1\"")
            .kafka_spec()
            .unwrap_err();
        assert!(e.to_string().contains("audit.kafka.properties.acks"), "{e}");
        let e = raw("[kafka.properties]\n\"sasl.password\" = \"Inline-Leak-Distinctive\"")
            .kafka_spec()
            .unwrap_err();
        assert!(e.to_string().contains("audit.kafka.sasl_password"), "{e}");
        assert!(!e.to_string().contains("Inline-Leak"), "{e}");
        let e = raw("security_protocol = \"TLS\"").kafka_spec().unwrap_err();
        assert!(
            e.to_string().contains("audit.kafka.security_protocol"),
            "{e}"
        );
        let e = raw(
            "security_protocol = \"SASL_SSL\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"risk\"\nsasl_password = \"env:RISK_KAFKA_TEST_PW_UNSET\"",
        )
        .kafka_spec()
        .unwrap_err();
        assert!(e.to_string().contains("audit.kafka.sasl_password"), "{e}");
    }

    #[test]
    fn scrub_removes_every_secret() {
        let s = [Secret::from_value("abc-123"), Secret::from_value("zz9")];
        assert_eq!(
            scrub("x abc-123 y zz9 abc-123", &s),
            "x [redacted] y [redacted] [redacted]"
        );
    }
}
