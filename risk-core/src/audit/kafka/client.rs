//! The librdkafka producer behind the forwarder: its configuration (delivery settings, the
//! security keys, the checked free properties), its context (delivery reports, client
//! errors, log lines) and the failures it reports ([`KafkaFailure`]).
//!
//! librdkafka's own text can hold a configured value (its config errors repeat the rejected
//! value, `ssl.key.password` included), so nothing it says is forwarded raw: config errors
//! become [`KafkaConfigError::Client`] naming the property only, and every other error or
//! log line has the configured secrets scrubbed before it is stored or traced.

use super::{KafkaOptions, Shared};
use crate::audit::kafka_security::{check_property, scrub, KafkaConfigError};
use crate::audit::AuditError;
use crate::secret::Secret;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What kind of failure the forwarder last saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KafkaFailureKind {
    /// TLS handshake or certificate check failed (wrong CA, expired or refused client
    /// certificate, host name mismatch).
    Tls,
    /// SASL authentication refused (wrong user or password, mechanism not enabled).
    Authentication,
    /// No broker reachable, or a connection dropped.
    Transport,
    /// A record's delivery report was an error (it will be resent after a rewind).
    Delivery,
    /// Anything else librdkafka reported.
    Other,
}

impl fmt::Display for KafkaFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tls => "TLS failure",
            Self::Authentication => "authentication failure",
            Self::Transport => "transport failure",
            Self::Delivery => "delivery failure",
            Self::Other => "client error",
        })
    }
}

/// The last failure the forwarder saw: its kind, the broker it concerns and librdkafka's
/// description with every configured secret scrubbed. Records wait in the log meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaFailure {
    /// What failed.
    pub kind: KafkaFailureKind,
    /// The broker (`host:port`, from librdkafka's broker name; the configured bootstrap
    /// list when it names none).
    pub broker: String,
    /// librdkafka's error code name (e.g. `SSL`, `Authentication`).
    pub code: String,
    /// librdkafka's description, secrets scrubbed.
    pub message: String,
}

impl fmt::Display for KafkaFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kafka {} at {} ({}): {}",
            self.kind, self.broker, self.code, self.message
        )
    }
}

/// The broker a librdkafka reason names (`ssl://127.0.0.1:9093/1: ...` -> `127.0.0.1:9093`).
fn broker_in(reason: &str) -> Option<String> {
    let (_, rest) = reason.split_once("://")?;
    let end = rest.find(['/', ':', ' ']).unwrap_or(rest.len());
    let host = &rest[..end];
    let rest = &rest[end..];
    let port = rest
        .strip_prefix(':')
        .map(|r| &r[..r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len())]);
    Some(match port {
        Some(p) if !p.is_empty() => format!("{host}:{p}"),
        _ => host.to_owned(),
    })
}

fn kind_of(code: Option<RDKafkaErrorCode>, reason: &str) -> KafkaFailureKind {
    use RDKafkaErrorCode as C;
    match code {
        Some(C::SSL) => KafkaFailureKind::Tls,
        Some(C::Authentication | C::SaslAuthenticationFailed) => KafkaFailureKind::Authentication,
        _ if reason.contains("SSL") || reason.contains("certificate") => KafkaFailureKind::Tls,
        _ if reason.contains("SASL") => KafkaFailureKind::Authentication,
        Some(C::AllBrokersDown | C::BrokerTransportFailure | C::Resolve) => {
            KafkaFailureKind::Transport
        }
        _ => KafkaFailureKind::Other,
    }
}

/// The producer's context: delivery reports, client errors and log lines, scrubbed.
pub(super) struct Ctx {
    pub(super) shared: Arc<Shared>,
    secrets: Vec<Secret>,
    brokers: String,
}

impl Ctx {
    fn record(&self, kind: KafkaFailureKind, code: Option<RDKafkaErrorCode>, reason: &str) {
        let message = scrub(reason, &self.secrets);
        let failure = KafkaFailure {
            kind,
            broker: broker_in(&message).unwrap_or_else(|| self.brokers.clone()),
            code: code.map_or_else(|| "unknown".into(), |c| format!("{c:?}")),
            message,
        };
        let s = &*self.shared;
        // Under the flight lock: a waiter checks and sleeps under it, so no wake-up is lost.
        let _flight = s.in_flight.lock();
        *s.last_error.lock() = Some(failure.to_string());
        *s.failure.lock() = Some(failure);
        s.failures.fetch_add(1, Relaxed);
        s.changed.notify_all();
    }
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let m = scrub(log_message, &self.secrets);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{m}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{m}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, "{m}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{m}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        let kind = kind_of(code, reason);
        self.record(kind, code, reason);
        tracing::warn!(
            target: "risk::audit::kafka",
            "{}",
            self.shared.last_error.lock().as_deref().unwrap_or("")
        );
    }
}

impl ProducerContext for Ctx {
    type DeliveryOpaque = usize;

    fn delivery(&self, r: &DeliveryResult<'_>, seq: usize) {
        let s = &*self.shared;
        if let Err((e, _)) = r {
            self.record(
                KafkaFailureKind::Delivery,
                e.rdkafka_error_code(),
                &format!("record {seq}: {e}"),
            );
        }
        let mut f = s.in_flight.lock();
        f.pending.remove(&(seq as u64));
        match r {
            Ok(_) => {
                s.delivered.fetch_add(1, Relaxed);
                if !f.failed {
                    f.advance();
                }
            }
            Err(_) => {
                s.failed.fetch_add(1, Relaxed);
                f.failed = true;
            }
        }
        s.changed.notify_all();
    }
}

/// Maps a client-creation error without repeating any value librdkafka quotes.
fn client_error(e: KafkaError, secrets: &[Secret]) -> KafkaConfigError {
    let what = match e {
        // (code, librdkafka's text, key, value): the text and the value can hold a secret.
        KafkaError::ClientConfig(_, _, key, _) => format!("property {key}"),
        KafkaError::ClientCreation(m) => format!("the client: {}", scrub(&m, secrets)),
        other => format!("the client: {}", scrub(&other.to_string(), secrets)),
    };
    KafkaConfigError::Client { what }
}

/// Checks `opts` and creates the producer: idempotent, `acks=all`, the security keys, then
/// the free properties (each checked by name).
pub(super) fn producer(
    opts: &KafkaOptions,
    shared: &Arc<Shared>,
) -> Result<BaseProducer<Ctx>, AuditError> {
    for (k, v) in &opts.properties {
        check_property(k, v)?;
    }
    opts.security.validate()?;
    let sec = &opts.security;
    if sec.protocol == crate::audit::SecurityProtocol::SaslPlaintext
        && sec.sasl_mechanism == Some(crate::audit::SaslMechanism::Plain)
    {
        tracing::warn!(
            target: "risk::audit::kafka",
            "audit.kafka: SASL_PLAINTEXT with PLAIN sends sasl_password in clear \
             (allowed by allow_plaintext_password)"
        );
    }
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &opts.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "lz4")
        .set("linger.ms", "5")
        .set(
            "message.timeout.ms",
            opts.message_timeout.as_millis().max(1).to_string(),
        );
    sec.apply(&mut |k, v| {
        cfg.set(k, v);
    });
    for (k, v) in &opts.properties {
        cfg.set(k, v);
    }
    let secrets = sec.secrets();
    let ctx = Ctx {
        shared: Arc::clone(shared),
        secrets: secrets.clone(),
        brokers: opts.brokers.clone(),
    };
    cfg.create_with_context(ctx)
        .map_err(|e| AuditError::Kafka(client_error(e, &secrets)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_names_are_read_from_librdkafka_reasons() {
        assert_eq!(
            broker_in("ssl://127.0.0.1:9093/bootstrap: SSL handshake failed").as_deref(),
            Some("127.0.0.1:9093")
        );
        assert_eq!(
            broker_in("sasl_ssl://localhost:9094/1: SASL authentication error").as_deref(),
            Some("localhost:9094")
        );
        assert_eq!(broker_in("1/1 brokers are down"), None);
    }

    #[test]
    fn config_errors_name_the_property_never_the_value() {
        let secret = Secret::from_value("Sup3r-Secret-Value");
        let e = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"Sup3r-Secret-Value\" for ssl.key.password".into(),
            "ssl.key.password".into(),
            "Sup3r-Secret-Value".into(),
        );
        let m = client_error(e, std::slice::from_ref(&secret));
        assert_eq!(
            m.to_string(),
            "audit.kafka: librdkafka refused property ssl.key.password"
        );
        let m = client_error(
            KafkaError::ClientCreation("bad Sup3r-Secret-Value here".into()),
            &[secret],
        );
        assert!(!m.to_string().contains("Sup3r"), "{m}");
        assert!(!format!("{m:?}").contains("Sup3r"), "{m:?}");
    }
}
