//! The Kafka forwarder's throughput over TLS vs PLAINTEXT, same run, same broker
//! (`tools/servers.sh start kafka`): records/s from a filled local log to the broker's
//! acknowledgement (`acks=all`, idempotent, lz4, `linger.ms` 5), through the PLAINTEXT
//! listener (`RISK_KAFKA_BOOTSTRAP`, 127.0.0.1:9092), the SSL listener with a client
//! certificate (`RISK_KAFKA_SSL_BOOTSTRAP`, 127.0.0.1:9093) and SASL_SSL SCRAM-SHA-512
//! (`RISK_KAFKA_SASL_SSL_BOOTSTRAP`, 127.0.0.1:9094). Each iteration forwards a fresh log of
//! `RECORDS` records with a new forwarder: connection set-up (TLS handshake, SCRAM) is in the
//! time, amortised over the batch.
//!
//! `cargo bench -p risk-benches --bench bench_main -- audit_kafka`
//!
//! Measured 2026-12-04 (2 shared cores, broker on the same host, 20,000 records a batch,
//! median): PLAINTEXT 34.97 k records/s, SSL with a client certificate 34.08 k (-2.5 %),
//! SASL_SSL SCRAM-SHA-512 33.46 k (-4.3 %).

use criterion::{Criterion, Throughput};
use risk_benches::Trivial;
use risk_core::audit::{
    KafkaForwarder, KafkaOptions, KafkaSecurity, LogOptions, OnFull, SaslMechanism,
    SecurityProtocol, SegmentLog,
};
use risk_core::secret::Secret;
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Engine, Latency, Scorer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RECORDS: usize = 20_000;
const LONG: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

fn tls(file: &str) -> PathBuf {
    std::env::var_os("RISK_TLS_DIR")
        .map_or_else(|| repo().join("target/servers/tls"), PathBuf::from)
        .join(file)
}

/// A log under `target/` holding `RECORDS` decision records.
fn filled_log(name: &str) -> (Arc<SegmentLog>, u64) {
    let dir = repo().join("target/bench-kafka").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = LogOptions::new(&dir);
    o.on_full = OnFull::Backpressure {
        max_wait: Duration::from_secs(60),
    };
    let log = Arc::new(SegmentLog::open(o).unwrap());
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let scorer = || -> Arc<dyn Scorer> { Arc::new(Trivial::new(slot, Latency::Bounded)) };
    let e = Engine::builder(s)
        .rules(scorer())
        .fast(scorer())
        .audit_log(Arc::clone(&log))
        .build()
        .unwrap();
    for r in generate(&SynthConfig::new(7, RECORDS)) {
        e.decide(&r.txn).unwrap();
    }
    let last = log.flush(LONG).unwrap();
    (log, last)
}

fn topic(port: &str) -> String {
    let t = "risk-audit-bench".to_owned();
    let ok = std::process::Command::new("bash")
        .arg(repo().join("tools/kafka/broker.sh"))
        .args(["topic", port, &t, "3"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "cannot create topic {t} on 127.0.0.1:{port}: tools/servers.sh start kafka"
    );
    t
}

/// Forwards `RECORDS` records `iters` times; the time from start to the last acknowledgement.
fn forward(iters: u64, name: &str, opts: &KafkaOptions) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (log, last) = filled_log(name);
        let t0 = Instant::now();
        let fwd = KafkaForwarder::start(&log, opts.clone()).unwrap();
        fwd.wait_delivered(last, LONG)
            .unwrap_or_else(|e| panic!("{name}: {e}: {:?}", fwd.stats()));
        total += t0.elapsed();
        fwd.stop(LONG);
    }
    total
}

/// PLAINTEXT vs SSL (mTLS) vs SASL_SSL SCRAM-SHA-512.
pub fn throughput(c: &mut Criterion) {
    let plain = env_or("RISK_KAFKA_BOOTSTRAP", "127.0.0.1:9092");
    let port = plain.rsplit(':').next().unwrap().to_owned();
    let topic = topic(&port);
    let mut cases = vec![("plaintext", KafkaOptions::new(&plain, &topic))];
    let mut ssl = KafkaOptions::new(env_or("RISK_KAFKA_SSL_BOOTSTRAP", "127.0.0.1:9093"), &topic);
    ssl.security = KafkaSecurity {
        protocol: SecurityProtocol::Ssl,
        ssl_ca_file: Some(tls("ca.pem")),
        ssl_cert_file: Some(tls("client.pem")),
        ssl_key_file: Some(tls("client.key")),
        ..Default::default()
    };
    cases.push(("ssl_mtls", ssl));
    let pw_file = std::env::var_os("RISK_KAFKA_SCRAM_PASSWORD_FILE").map_or_else(
        || repo().join("target/servers/kafka/scram.password"),
        PathBuf::from,
    );
    let pw = Secret::resolve("sasl_password", &format!("file:{}", pw_file.display()))
        .unwrap_or_else(|e| panic!("{e}: tools/servers.sh start kafka"));
    let mut sasl = KafkaOptions::new(
        env_or("RISK_KAFKA_SASL_SSL_BOOTSTRAP", "127.0.0.1:9094"),
        &topic,
    );
    sasl.security = KafkaSecurity {
        protocol: SecurityProtocol::SaslSsl,
        sasl_mechanism: Some(SaslMechanism::ScramSha512),
        sasl_username: Some("risk".into()),
        sasl_password: Some(pw),
        ssl_ca_file: Some(tls("ca.pem")),
        ..Default::default()
    };
    cases.push(("sasl_ssl_scram512", sasl));

    let mut g = c.benchmark_group("audit_kafka");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(RECORDS as u64));
    for (name, opts) in &cases {
        g.bench_function(*name, |b| b.iter_custom(|iters| forward(iters, name, opts)));
    }
    g.finish();
}
