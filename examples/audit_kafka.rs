//! The Kafka forwarder against a real broker: throughput and end-to-end delivery latency.
//!
//! ```text
//! tools/servers.sh start      # Kafka 4.4 on 127.0.0.1:9092, topic risk-audit
//! cargo run --release --features kafka --example audit_kafka -- [RECORDS] [LATENCY_SAMPLES]
//! ```
//!
//! Throughput: RECORDS decisions (default 50,000) recorded to a local log (fsync per
//! batch) and forwarded; the time from the first decision until the broker acknowledged
//! the last record. Latency: LATENCY_SAMPLES single decisions (default 300), each timed
//! from `decide` until its record's delivery report (group commit + fsync + produce +
//! `acks=all`; `linger.ms` 5).

use risk_core::audit::{KafkaForwarder, KafkaOptions, LogOptions, SegmentLog};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{ConstantScorer, Engine};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(50_000);
    let samples: usize = std::env::args()
        .nth(2)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(300);
    let brokers = std::env::var("RISK_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/audit-kafka-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = LogOptions::new(&dir);
    // Throughput of the whole path: wait for room rather than shed.
    o.on_full = risk_core::audit::OnFull::Backpressure {
        max_wait: Duration::from_secs(60),
    };
    let log = Arc::new(SegmentLog::open(o)?);
    let fwd = KafkaForwarder::start(&log, KafkaOptions::new(&brokers, "risk-audit"))?;
    let s = schema();
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(ConstantScorer::new(0.1)))
        .fast(Arc::new(ConstantScorer::new(0.05)))
        .audit_log(log.clone())
        .build()?;
    let rows = generate(&SynthConfig::new(3, n.max(samples)));
    let long = Duration::from_secs(300);

    let t0 = Instant::now();
    for r in &rows[..n] {
        engine.decide(&r.txn)?;
    }
    let decided = t0.elapsed();
    let last = log.flush(long)?;
    fwd.wait_delivered(last, long)?;
    let total = t0.elapsed();
    let st = log.stats();
    println!(
        "throughput: {n} decisions in {decided:.2?}; {} records ({} shed) acknowledged by the broker after {total:.2?}: {:.0} records/s end to end",
        last, st.shed_full, last as f64 / total.as_secs_f64()
    );

    let mut lat = Vec::with_capacity(samples);
    for r in &rows[..samples] {
        let t = Instant::now();
        engine.decide(&r.txn)?;
        let seq = log.flush(long)?;
        fwd.wait_delivered(seq, long)?;
        lat.push(t.elapsed());
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "end-to-end latency, decide -> broker ack, {samples} single records: p50 {:.2?} p99 {:.2?} max {:.2?}",
        p(0.5),
        p(0.99),
        lat[lat.len() - 1]
    );
    println!("forwarder: {:?}", fwd.stats());
    Ok(())
}
