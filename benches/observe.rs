//! Observability's cost: `decide` with the monitors on (agreement, drift sketches of every
//! numeric feature and the score, every 8th decision) against off, one thread, median, the
//! baseline measured again last; two-thread throughput on vs off; what judging costs per
//! 10k decisions (off the hot path); and one scrape (`metrics_text`).

use criterion::{black_box, Criterion, Throughput};
use risk_benches::Trivial;
use risk_core::monitor::{Baseline, MonitorConfig};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Engine, Latency, Scorer, Transaction};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rows() -> Vec<Transaction> {
    generate(&SynthConfig::new(11, 4096))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

fn engine(txns: &[Transaction], monitors: bool) -> Engine {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let fast: Arc<dyn Scorer> = Arc::new(Trivial::new(slot, Latency::Bounded));
    let mut b = Engine::builder(s.clone())
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::clone(&fast));
    if monitors {
        let scores: Vec<f32> = txns
            .iter()
            .map(|t| fast.score(t).unwrap().probability)
            .collect();
        b = b.monitor(MonitorConfig {
            baseline: Some(Arc::new(Baseline::fit(&s, txns, Some(&scores), 20))),
            interval: Duration::ZERO,
            ..MonitorConfig::default()
        });
    }
    b.build().unwrap()
}

/// One thread, the monitors on vs off.
pub fn decide(c: &mut Criterion) {
    let txns = rows();
    let off = engine(&txns, false);
    let on = engine(&txns, true);
    let mut g = c.benchmark_group("observe");
    let mut i = 0;
    for (name, e) in [
        ("decide_monitors_off", &off),
        ("decide_monitors_on", &on),
        ("decide_monitors_off_again", &off),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % txns.len();
                black_box(e.decide(black_box(&txns[i])).unwrap())
            })
        });
    }
    // Judging: one tick after 10k decisions (windows of 1000 samples at 1 in 8).
    g.bench_function("monitor_tick_per_10k_decisions", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for t in txns.iter().cycle().take(10_000) {
                    on.decide(t).unwrap();
                }
                let t0 = Instant::now();
                black_box(on.monitor_tick());
                total += t0.elapsed();
            }
            total
        })
    });
    g.bench_function("metrics_text_scrape", |b| {
        b.iter(|| black_box(on.metrics_text().len()))
    });
    g.finish();
    let r = on.monitor_report().unwrap();
    eprintln!(
        "observe: {} windows judged, firing {:?}",
        r.windows, r.firing
    );
}

/// Two threads deciding as fast as they can, monitors on vs off.
pub fn throughput(c: &mut Criterion) {
    let txns = rows();
    let off = engine(&txns, false);
    let on = engine(&txns, true);
    let per_thread = 20_000u64;
    let mut g = c.benchmark_group("observe_throughput_2_threads");
    g.throughput(Throughput::Elements(2 * per_thread));
    for (name, e) in [("monitors_off", &off), ("monitors_on", &on)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| risk_benches::two_threads(e, &txns, per_thread))
                    .sum()
            })
        });
    }
    g.finish();
}
