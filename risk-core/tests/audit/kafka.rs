//! The Kafka forwarder against a real Apache Kafka 4.4 broker (KRaft), read back by
//! Kafka's own console consumer (an independent client). The shared broker is the one
//! `tools/servers.sh start` runs (`RISK_KAFKA_BOOTSTRAP`, default 127.0.0.1:9092); the
//! outage test starts, kills (-9) and restarts a private broker with
//! `tools/kafka/broker.sh`. A missing broker fails these tests; it never skips them.

mod tls;

use crate::common::*;
use risk_core::audit::{KafkaForwarder, KafkaOptions, LogOptions, SegmentLog};
use risk_core::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

fn broker_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/kafka/broker.sh")
}

fn run(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(broker_sh())
        .args(args)
        .output()
        .expect("bash runs tools/kafka/broker.sh");
    assert!(
        out.status.success(),
        "broker.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The shared broker's address; fails loudly when nothing listens there.
fn shared_broker() -> (String, String) {
    let addr =
        std::env::var("RISK_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    assert!(
        std::net::TcpStream::connect(&addr).is_ok(),
        "no Kafka broker at {addr}: start one with `tools/servers.sh start`"
    );
    let port = addr.rsplit(':').next().unwrap().to_owned();
    (addr, port)
}

fn unique_topic(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Every `risk-seq` the console consumer reads from `topic`, with how often.
fn consumed(port: &str, topic: &str, n: u64) -> BTreeMap<u64, u32> {
    let out = run(&["consume", port, topic, &n.to_string(), "20000"]);
    let mut seen = BTreeMap::new();
    for line in out.lines() {
        let headers = line.split('\t').next().unwrap_or("");
        if let Some(seq) = headers.split(',').find_map(|h| h.strip_prefix("risk-seq:")) {
            *seen.entry(seq.parse::<u64>().unwrap()).or_insert(0) += 1;
        }
    }
    seen
}

fn engine(log: Arc<SegmentLog>) -> Engine {
    Engine::builder(schema())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.05)))
        .audit_log(log)
        .build()
        .unwrap()
}

fn decide_n(e: &Engine, from: u64, n: u64) {
    let s = e.schema().clone();
    for i in from..from + n {
        e.decide(&txn(&s, i, i % 50)).unwrap();
    }
}

#[test]
fn every_record_reaches_a_real_broker_and_an_independent_consumer() {
    let (addr, port) = shared_broker();
    let topic = unique_topic("risk-audit-it");
    run(&["topic", &port, &topic, "3"]);
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let fwd = KafkaForwarder::start(&log, KafkaOptions::new(&addr, &topic)).unwrap();
    let e = engine(Arc::clone(&log));
    decide_n(&e, 1, 2000);
    let written = log.flush(LONG).unwrap();
    fwd.wait_delivered(written, LONG).unwrap();
    let st = fwd.stats();
    assert_eq!(st.delivered_seq, written);
    assert_eq!(st.failed, 0, "{st:?}");
    let seen = consumed(&port, &topic, written);
    let missing: Vec<u64> = (1..=written).filter(|s| !seen.contains_key(s)).collect();
    assert!(
        missing.is_empty(),
        "missing {} records: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    // A restarted forwarder resumes from its cursor: nothing is sent again.
    fwd.stop(LONG);
    let again = KafkaForwarder::start(&log, KafkaOptions::new(&addr, &topic)).unwrap();
    decide_n(&e, 5000, 10);
    let written2 = log.flush(LONG).unwrap();
    again.wait_delivered(written2, LONG).unwrap();
    assert_eq!(again.stats().sent, written2 - written);
}

#[test]
fn a_missing_topic_is_reported_and_the_records_wait_in_the_log() {
    let (addr, port) = shared_broker();
    let topic = unique_topic("risk-audit-missing");
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let mut o = KafkaOptions::new(&addr, &topic);
    o.message_timeout = Duration::from_secs(2);
    let fwd = KafkaForwarder::start(&log, o).unwrap();
    let e = engine(Arc::clone(&log));
    decide_n(&e, 1, 50);
    let written = log.flush(LONG).unwrap();
    // Nothing can be delivered while the topic does not exist.
    assert!(fwd.wait_delivered(written, Duration::from_secs(6)).is_err());
    let st = fwd.stats();
    assert_eq!(st.delivered_seq, 0, "{st:?}");
    assert!(st.failed > 0 || st.last_error.is_some(), "{st:?}");
    // Once it exists, everything arrives (the forwarder rewound and resent).
    run(&["topic", &port, &topic, "1"]);
    fwd.wait_delivered(written, LONG).unwrap();
    let seen = consumed(&port, &topic, written);
    assert!((1..=written).all(|s| seen.contains_key(&s)), "{seen:?}");
}

#[test]
fn a_broker_killed_mid_run_loses_nothing_and_the_log_is_resent() {
    let data = tempfile::tempdir().unwrap();
    let bdir = data.path().join("broker");
    let port = "19392";
    let addr = format!("127.0.0.1:{port}");
    run(&["start", port, bdir.to_str().unwrap()]);
    struct Stop(PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new("bash")
                .arg(broker_sh())
                .args(["stop", self.0.to_str().unwrap()])
                .status();
        }
    }
    let _stop = Stop(bdir.clone());
    let topic = "risk-audit-outage";
    run(&["topic", port, topic, "1"]);
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let mut o = KafkaOptions::new(&addr, topic);
    o.message_timeout = Duration::from_secs(3);
    let fwd = KafkaForwarder::start(&log, o).unwrap();
    let e = engine(Arc::clone(&log));
    decide_n(&e, 1, 500);
    let first = log.flush(LONG).unwrap();
    fwd.wait_delivered(first, LONG).unwrap();

    run(&["kill9", bdir.to_str().unwrap()]);
    // The broker is gone: decide keeps answering and the log keeps everything.
    decide_n(&e, 1000, 500);
    let written = log.flush(LONG).unwrap();
    assert_eq!(written, first + 500);
    assert!(fwd.wait_delivered(written, Duration::from_secs(8)).is_err());
    assert!(fwd.stats().delivered_seq < written);

    run(&["start", port, bdir.to_str().unwrap()]);
    fwd.wait_delivered(written, LONG).unwrap();
    let seen = consumed(port, topic, written);
    let missing: Vec<u64> = (1..=written).filter(|s| !seen.contains_key(s)).collect();
    assert!(
        missing.is_empty(),
        "missing {:?}",
        &missing[..missing.len().min(10)]
    );
    let st = fwd.stats();
    assert!(st.failed > 0 && st.rewinds > 0, "{st:?}");
}
