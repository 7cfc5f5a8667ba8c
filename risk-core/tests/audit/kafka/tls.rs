//! The forwarder over TLS against the shared broker's secure listeners (`tools/servers.sh
//! start`): SSL with a client certificate (`RISK_KAFKA_SSL_BOOTSTRAP`, default
//! 127.0.0.1:9093) and SASL_SSL SCRAM-SHA-512 (`RISK_KAFKA_SASL_SSL_BOOTSTRAP`, default
//! 127.0.0.1:9094, password in `RISK_KAFKA_SCRAM_PASSWORD_FILE`), certificates from
//! `RISK_TLS_DIR`. Records are read back through the PLAINTEXT listener by Kafka's console
//! consumer. Refusals (wrong CA, expired certificate, wrong password) are observed through
//! `wait_failure` (an event, no sleep) and must never show a secret.

use super::{consumed, decide_n, engine, run, shared_broker, unique_topic, LONG};
use risk_core::audit::{
    AuditError, KafkaConfigError, KafkaFailureKind, KafkaForwarder, KafkaOptions, KafkaSecurity,
    LogOptions, SaslMechanism, SecurityProtocol, SegmentLog,
};
use risk_core::secret::Secret;
use risk_core::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn servers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/servers")
}

fn tls(file: &str) -> PathBuf {
    let dir = std::env::var_os("RISK_TLS_DIR").map_or_else(|| servers().join("tls"), PathBuf::from);
    let p = dir.join(file);
    assert!(
        p.is_file(),
        "{} missing: start the servers with `tools/servers.sh start`",
        p.display()
    );
    p
}

fn scram_password_file() -> PathBuf {
    let p = std::env::var_os("RISK_KAFKA_SCRAM_PASSWORD_FILE")
        .map_or_else(|| servers().join("kafka/scram.password"), PathBuf::from);
    assert!(
        p.is_file(),
        "{} missing: start the servers with `tools/servers.sh start`",
        p.display()
    );
    p
}

/// A listener's address from `var` (or `default`); fails loudly when nothing listens.
fn listener(var: &str, default: &str) -> String {
    let addr = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    assert!(
        std::net::TcpStream::connect(&addr).is_ok(),
        "no Kafka listener at {addr} ({var}): start one with `tools/servers.sh start`"
    );
    addr
}

fn ssl_addr() -> String {
    listener("RISK_KAFKA_SSL_BOOTSTRAP", "127.0.0.1:9093")
}

fn sasl_ssl_addr() -> String {
    listener("RISK_KAFKA_SASL_SSL_BOOTSTRAP", "127.0.0.1:9094")
}

fn mtls(ca: &str, cert: &str) -> KafkaSecurity {
    KafkaSecurity {
        protocol: SecurityProtocol::Ssl,
        ssl_ca_file: Some(tls(ca)),
        ssl_cert_file: Some(tls(&format!("{cert}.pem"))),
        ssl_key_file: Some(tls(&format!("{cert}.key"))),
        ..Default::default()
    }
}

fn scram(password: Secret) -> KafkaSecurity {
    KafkaSecurity {
        protocol: SecurityProtocol::SaslSsl,
        sasl_mechanism: Some(SaslMechanism::ScramSha512),
        sasl_username: Some("risk".into()),
        sasl_password: Some(password),
        ssl_ca_file: Some(tls("ca.pem")),
        ..Default::default()
    }
}

/// Forwards `n` decisions through `security` to a fresh topic and reads them back.
fn delivers(addr: &str, security: KafkaSecurity, n: u64) {
    let (_, port) = shared_broker();
    let topic = unique_topic("risk-audit-tls");
    run(&["topic", &port, &topic, "1"]);
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let mut o = KafkaOptions::new(addr, &topic);
    o.security = security;
    let fwd = KafkaForwarder::start(&log, o).unwrap();
    let e = engine(Arc::clone(&log));
    decide_n(&e, 1, n);
    let written = log.flush(LONG).unwrap();
    fwd.wait_delivered(written, LONG)
        .unwrap_or_else(|err| panic!("{err}: {:?}", fwd.stats()));
    assert_eq!(fwd.stats().failed, 0, "{:?}", fwd.stats());
    let seen = consumed(&port, &topic, written);
    assert!((1..=written).all(|s| seen.contains_key(&s)), "{seen:?}");
    // The cursor file is private.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fwd.stop(LONG);
        let cursor = dir.path().join(format!("kafka-{topic}.cursor"));
        let mode = std::fs::metadata(&cursor).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", cursor.display());
    }
}

/// Starts a forwarder that the broker refuses and returns its first failure, after
/// checking that nothing was delivered and that `secret` shows nowhere.
fn refused(addr: &str, security: KafkaSecurity, secret: &str) -> risk_core::audit::KafkaFailure {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let mut o = KafkaOptions::new(addr, unique_topic("risk-audit-refused"));
    o.security = security;
    let opts_dbg = format!("{o:?}");
    let fwd = KafkaForwarder::start(&log, o).unwrap();
    let e = engine(Arc::clone(&log));
    decide_n(&e, 1, 5);
    log.flush(LONG).unwrap();
    let f = fwd
        .wait_failure(LONG)
        .expect("the broker's refusal is reported");
    let st = fwd.stats();
    assert_eq!(st.delivered_seq, 0, "{st:?}");
    let texts = [
        f.to_string(),
        format!("{f:?}"),
        format!("{st:?}"),
        format!("{fwd:?}"),
        opts_dbg,
        st.last_error.clone().unwrap_or_default(),
    ];
    for t in &texts {
        assert!(!t.contains(secret), "secret in {t}");
    }
    fwd.stop(LONG);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }
    f
}

#[test]
fn records_reach_the_broker_over_ssl_with_a_client_certificate() {
    delivers(&ssl_addr(), mtls("ca.pem", "client"), 300);
}

#[test]
fn records_reach_the_broker_over_sasl_ssl_with_scram_sha_512() {
    let spec = format!("file:{}", scram_password_file().display());
    let pw = Secret::resolve("audit.kafka.sasl_password", &spec).unwrap();
    delivers(&sasl_ssl_addr(), scram(pw), 300);
}

#[test]
fn risk_toml_with_sasl_ssl_and_a_password_file_delivers() {
    let (_, port) = shared_broker();
    let topic = unique_topic("risk-audit-toml");
    run(&["topic", &port, &topic, "1"]);
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[schema]
fields = [ {{ name = "amount", kind = "numeric", required = true }} ]
[rules.scorer]
kind = "constant"
probability = 0.1
[audit]
dir = "log"
[audit.kafka]
brokers = "{}"
topic = "{topic}"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "risk"
sasl_password = "file:{}"
ssl_ca_file = "{}"
[audit.kafka.properties]
"linger.ms" = 2
"#,
        sasl_ssl_addr(),
        scram_password_file().display(),
        tls("ca.pem").display()
    );
    let e = Engine::from_toml_str(
        &toml,
        dir.path(),
        Path::new("risk.toml"),
        &ScorerRegistry::default(),
    )
    .unwrap();
    for i in 1..=20 {
        let t = Transaction::builder(e.schema())
            .id(i)
            .amount(10.0, "USD")
            .build()
            .unwrap();
        e.decide(&t).unwrap();
    }
    let written = e.audit_log().unwrap().flush(LONG).unwrap();
    let fwd = e.kafka_forwarder().expect("a forwarder from [audit.kafka]");
    fwd.wait_delivered(written, LONG)
        .unwrap_or_else(|err| panic!("{err}: {:?}", fwd.stats()));
    let seen = consumed(&port, &topic, written);
    assert!((1..=written).all(|s| seen.contains_key(&s)), "{seen:?}");
}

#[test]
fn a_broker_certificate_from_another_ca_is_refused_naming_the_broker() {
    let addr = ssl_addr();
    let f = refused(&addr, mtls("other-ca.pem", "client"), "-----BEGIN");
    assert_eq!(f.kind, KafkaFailureKind::Tls, "{f}");
    assert_eq!(f.broker, addr, "{f}");
}

#[test]
fn an_expired_client_certificate_is_refused() {
    let addr = ssl_addr();
    let f = refused(&addr, mtls("ca.pem", "expired"), "-----BEGIN");
    // The broker refuses the certificate during (TLS 1.2) or right after (TLS 1.3) the
    // handshake: librdkafka reports an SSL failure or a dropped connection, at that broker.
    assert!(
        matches!(f.kind, KafkaFailureKind::Tls | KafkaFailureKind::Transport),
        "{f}"
    );
    assert!(f.broker.contains(addr.rsplit(':').next().unwrap()), "{f}");
}

#[test]
fn a_wrong_scram_password_is_refused_and_never_printed() {
    let secret = "Wrong-Scram-Pa55-Distinctive-7f3e";
    let addr = sasl_ssl_addr();
    let f = refused(&addr, scram(Secret::from_value(secret)), secret);
    assert_eq!(f.kind, KafkaFailureKind::Authentication, "{f}");
    assert_eq!(f.broker, addr, "{f}");
}

#[test]
fn a_key_password_never_appears_when_librdkafka_refuses_the_key() {
    let secret = "Key-Pa55-Distinctive-c0ffee";
    let mut s = mtls("ca.pem", "client");
    // Not a private key: librdkafka refuses it when the client is created.
    s.ssl_key_file = Some(tls("ca.pem"));
    s.ssl_key_password = Some(Secret::from_value(secret));
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let mut o = KafkaOptions::new(ssl_addr(), "risk-audit-test");
    o.security = s;
    let e = KafkaForwarder::start(&log, o).unwrap_err();
    assert!(
        matches!(e, AuditError::Kafka(KafkaConfigError::Client { .. })),
        "{e:?}"
    );
    assert!(!e.to_string().contains(secret), "{e}");
    assert!(!format!("{e:?}").contains(secret), "{e:?}");
}

#[test]
fn refused_properties_stop_the_forwarder_at_start_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    for (k, v) in [
        ("acks", "Acks-Value-Distinctive"),
        ("plugin.library.paths", "/tmp/Plugin-Distinctive.so"),
        ("ssl.endpoint.identification.algorithm", "none"),
        ("sasl.password", "Prop-Secret-Distinctive"),
    ] {
        let mut o = KafkaOptions::new("127.0.0.1:1", "t");
        o.properties = vec![(k.into(), v.into())];
        assert!(!format!("{o:?}").contains(v), "{o:?}");
        let e = KafkaForwarder::start(&log, o).unwrap_err();
        let m = e.to_string();
        assert!(m.contains(&format!("audit.kafka.properties.{k}")), "{m}");
        assert!(!m.contains("Prop-Secret"), "{m}");
    }
}
