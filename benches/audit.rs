//! The audit trail's cost: `decide` with the local segment log on vs off (one thread,
//! median), throughput on two threads with it on vs off, and the writer's throughput per
//! durability mode.

use criterion::{black_box, Criterion, Throughput};
use risk_benches::Trivial;
use risk_core::audit::{Durability, LogOptions, OnFull, SegmentLog};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Engine, Latency, Scorer, Transaction};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rows() -> Vec<Transaction> {
    generate(&SynthConfig::new(42, 1024))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

fn engine(log: Option<Arc<SegmentLog>>) -> Engine {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let rules: Arc<dyn Scorer> = Arc::new(Trivial::new(slot, Latency::Bounded));
    let fast: Arc<dyn Scorer> = Arc::new(Trivial::new(slot, Latency::Bounded));
    let mut b = Engine::builder(s).rules(rules).fast(fast);
    if let Some(l) = log {
        b = b.audit_log(l);
    }
    b.build().unwrap()
}

/// A log in a fresh directory under `target/` (a real disk, not tmpfs), bounded in size.
fn log(name: &str, durability: Durability, on_full: OnFull) -> Arc<SegmentLog> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bench-audit")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = LogOptions::new(&dir);
    o.durability = durability;
    o.on_full = on_full;
    o.segment_bytes = 64 << 20;
    o.retention_bytes = Some(256 << 20);
    Arc::new(SegmentLog::open(o).unwrap())
}

/// One thread: what recording adds to a decision (the caller only copies and enqueues).
pub fn decide(c: &mut Criterion) {
    let txns = rows();
    let off = engine(None);
    let l = log("decide", Durability::Batch, OnFull::Drop);
    let on = engine(Some(Arc::clone(&l)));
    let mut g = c.benchmark_group("audit");
    let mut i = 0;
    g.bench_function("decide_audit_off", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            black_box(off.decide(black_box(&txns[i])).unwrap())
        })
    });
    g.bench_function("decide_audit_on", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            black_box(on.decide(black_box(&txns[i])).unwrap())
        })
    });
    // The same, with the writer kept up (every record accepted, none shed): each call is
    // timed alone and the log is flushed, untimed, every 256 calls.
    let kept = log("decide_kept_up", Durability::Batch, OnFull::Drop);
    let on_kept = engine(Some(Arc::clone(&kept)));
    g.bench_function("decide_audit_on_all_accepted", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for k in 0..iters {
                i = (i + 1) % txns.len();
                let t0 = Instant::now();
                black_box(on_kept.decide(black_box(&txns[i])).unwrap());
                total += t0.elapsed();
                if k % 256 == 255 {
                    kept.flush(Duration::from_secs(60)).unwrap();
                }
            }
            total
        })
    });
    g.finish();
    let ks = kept.stats();
    eprintln!(
        "audit/decide_audit_on_all_accepted: accepted {} shed {}",
        ks.accepted, ks.shed_full
    );
    let st = l.stats();
    eprintln!(
        "audit/decide_audit_on: accepted {} shed {} durable {}",
        st.accepted, st.shed_full, st.durable_seq
    );
}

/// Two threads deciding as fast as they can, with and without the log (its writer
/// competes for the same two cores); the log sheds what it cannot keep up with.
pub fn throughput(c: &mut Criterion) {
    let txns = rows();
    let off = engine(None);
    let l = log("throughput", Durability::Batch, OnFull::Drop);
    let on = engine(Some(Arc::clone(&l)));
    let per_thread = 20_000u64;
    let mut g = c.benchmark_group("audit_throughput_2_threads");
    g.throughput(Throughput::Elements(2 * per_thread));
    for (name, e) in [("audit_off", &off), ("audit_on", &on)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| risk_benches::two_threads(e, &txns, per_thread))
                    .sum()
            })
        });
    }
    g.finish();
    let st = l.stats();
    eprintln!(
        "audit_throughput_2_threads/audit_on: accepted {} shed {} ({:.1}% recorded)",
        st.accepted,
        st.shed_full,
        100.0 * st.accepted as f64 / (st.accepted + st.shed_full).max(1) as f64
    );
}

/// `iters` times: `n` decisions offered to `l` (waiting for room), then flushed; the time.
fn until_durable(e: &Engine, l: &SegmentLog, txns: &[Transaction], n: u64, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t0 = Instant::now();
        for j in 0..n as usize {
            black_box(e.decide(&txns[j % txns.len()]).unwrap());
        }
        l.flush(Duration::from_secs(60)).unwrap();
        total += t0.elapsed();
    }
    total
}

/// The writer: records offered (waiting for room, none shed) until durable, per mode.
pub fn writer(c: &mut Criterion) {
    let txns = rows();
    let n = 20_000u64;
    let mut g = c.benchmark_group("audit_writer");
    g.throughput(Throughput::Elements(n));
    g.sample_size(10);
    for (name, d) in [
        ("fsync_per_batch", Durability::Batch),
        (
            "fsync_every_100ms",
            Durability::Interval(Duration::from_millis(100)),
        ),
        ("no_fsync", Durability::None),
    ] {
        let l = log(
            name,
            d,
            OnFull::Backpressure {
                max_wait: Duration::from_secs(60),
            },
        );
        let e = engine(Some(Arc::clone(&l)));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| until_durable(&e, &l, &txns, n, iters))
        });
        assert_eq!(l.stats().shed_full, 0);
    }
    g.finish();
}

/// `[privacy] key` on vs off: `decide` with the log on and every record accepted (entity
/// pseudonyms and the keyed chain are computed by the writer thread, off the caller's
/// path), the writer's throughput with both, and the pseudonym itself (three identifiers
/// per transaction: entity, IP and e-mail keys).
pub fn privacy(c: &mut Criterion) {
    use risk_core::pseudo::{Domain, Pseudonymiser};
    let txns = rows();
    let key = Pseudonymiser::new("privacy.key", b"bench-pseudonym-key-0123456789").unwrap();
    let mut g = c.benchmark_group("privacy");
    let mut i = 0;
    for (name, p) in [
        ("decide_plain", None),
        ("decide_pseudonymised", Some(key.clone())),
    ] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/bench-audit")
            .join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut o = LogOptions::new(&dir);
        o.retention_bytes = Some(256 << 20);
        o.pseudonymiser = p;
        let l = Arc::new(SegmentLog::open(o).unwrap());
        let e = engine(Some(Arc::clone(&l)));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for k in 0..iters {
                    i = (i + 1) % txns.len();
                    let t0 = Instant::now();
                    black_box(e.decide(black_box(&txns[i])).unwrap());
                    total += t0.elapsed();
                    if k % 256 == 255 {
                        l.flush(Duration::from_secs(60)).unwrap();
                    }
                }
                total
            })
        });
        assert_eq!(l.stats().shed_full, 0, "{name}: records shed");
    }
    g.bench_function("pseudonyms_3_keys", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            let t = &txns[i];
            let id = t.entity.0;
            black_box((
                key.u64(Domain::Entity, black_box(id)),
                key.u64(Domain::Group, black_box(id ^ 0x9e37)),
                key.u64(Domain::Group, black_box(id.rotate_left(17))),
            ))
        })
    });
    g.finish();

    let n = 20_000u64;
    let mut g = c.benchmark_group("privacy_writer");
    g.throughput(Throughput::Elements(n));
    g.sample_size(10);
    for (name, p) in [
        ("plain", None),
        ("pseudonymised_keyed_chain", Some(key.clone())),
    ] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/bench-audit")
            .join(format!("writer_{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let mut o = LogOptions::new(&dir);
        o.durability = Durability::None;
        o.on_full = OnFull::Backpressure {
            max_wait: Duration::from_secs(60),
        };
        o.retention_bytes = Some(256 << 20);
        o.pseudonymiser = p;
        let l = Arc::new(SegmentLog::open(o).unwrap());
        let e = engine(Some(Arc::clone(&l)));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| until_durable(&e, &l, &txns, n, iters))
        });
    }
    g.finish();
}
