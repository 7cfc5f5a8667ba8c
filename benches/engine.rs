//! Engine overhead, the pool's thread hop, and the fallback path after a deadline.

use criterion::{black_box, BatchSize, Criterion};
use risk_benches::{Stalls, Trivial};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Engine, Latency, PoolConfig, Scorer};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

fn rows() -> Vec<risk_core::Transaction> {
    generate(&SynthConfig::new(42, 1024))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

/// `decide` with trivial inline rule and fast tiers vs calling the two scorers directly.
pub fn overhead(c: &mut Criterion) {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let rules: Arc<dyn Scorer> = Arc::new(Trivial::new(slot, Latency::Bounded));
    let fast: Arc<dyn Scorer> = Arc::new(Trivial::new(slot, Latency::Bounded));
    let engine = Engine::builder(s.clone())
        .rules(rules.clone())
        .fast(fast.clone())
        .build()
        .unwrap();
    let txns = rows();
    let mut g = c.benchmark_group("engine_overhead");
    let mut i = 0;
    g.bench_function("scorers_direct", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            let t = &txns[i];
            let r = rules.score(black_box(t)).unwrap();
            let f = fast.score(black_box(t)).unwrap();
            black_box((r, f))
        })
    });
    g.bench_function("decide", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            black_box(engine.decide(black_box(&txns[i])).unwrap())
        })
    });
    // The same rows without an entity: no entity state is read or written (what the
    // S3-FIFO entity store, the event-time bound and the per-entity day add to `decide`).
    let unkeyed: Vec<_> = txns
        .iter()
        .cloned()
        .map(|mut t| {
            t.entity = risk_core::EntityKey::NONE;
            t
        })
        .collect();
    g.bench_function("decide_no_entity_state", |b| {
        b.iter(|| {
            i = (i + 1) % unkeyed.len();
            black_box(engine.decide(black_box(&unkeyed[i])).unwrap())
        })
    });
    g.finish();
}

/// The same trivial fast tier inline vs on the tier pool (with and without spinning).
pub fn thread_hop(c: &mut Criterion) {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let txns = rows();
    let mut g = c.benchmark_group("fast_tier_placement");
    for (name, latency, spin) in [
        ("inline", Latency::Bounded, Duration::ZERO),
        (
            "pool_spin_20us",
            Latency::Unbounded,
            Duration::from_micros(20),
        ),
        ("pool_park", Latency::Unbounded, Duration::ZERO),
    ] {
        let engine = Engine::builder(s.clone())
            .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
            .fast(Arc::new(Trivial::new(slot, latency)))
            .pool_config(PoolConfig {
                fast_workers: 2,
                spin,
                async_workers: 1,
                ..Default::default()
            })
            .build()
            .unwrap();
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % txns.len();
                let d = engine.decide(black_box(&txns[i])).unwrap();
                assert!(d.fallback.is_none());
                black_box(d)
            })
        });
    }
    g.finish();
}

/// Time from the deadline to the returned decision when the fast tier stalls.
/// Criterion reports the whole call (deadline included); the p50/p99 of the overshoot
/// past the deadline are printed from the engine's own histogram.
pub fn fallback(c: &mut Criterion) {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let deadline = Duration::from_millis(1);
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::new(Stalls {
            stall: Duration::from_millis(3),
        }))
        .fast_deadline(deadline)
        .circuit(risk_core::CircuitConfig {
            min_calls: u32::MAX,
            ..Default::default()
        })
        .pool_config(PoolConfig {
            fast_workers: 8,
            spin: Duration::from_micros(20),
            async_workers: 1,
            ..Default::default()
        })
        .build()
        .unwrap();
    let txns = rows();
    let mut overshoot = Vec::new();
    let mut i = 0;
    let mut g = c.benchmark_group("fallback");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.bench_function("stalled_fast_tier_1ms_deadline", |b| {
        b.iter_batched(
            || {
                i = (i + 1) % txns.len();
                &txns[i]
            },
            |t| {
                let start = Instant::now();
                let d = engine.decide(t).unwrap();
                let took = start.elapsed();
                if d.fallback == Some(risk_core::FallbackCause::Timeout) {
                    overshoot.push(took.saturating_sub(deadline));
                }
                d
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
    overshoot.sort();
    if !overshoot.is_empty() {
        let q = |p: f64| overshoot[((overshoot.len() - 1) as f64 * p) as usize];
        println!(
            "fallback/overshoot past the deadline: n={} p50={:?} p99={:?} max={:?} (saturated calls excluded: {})",
            overshoot.len(),
            q(0.5),
            q(0.99),
            overshoot[overshoot.len() - 1],
            engine.metrics().fallback(risk_core::FallbackCause::Saturated)
        );
    }
}
