//! Entity state's cost: the state stage alone (read + update of 10 velocity features over
//! card and merchant keys, in-process) per raw transaction; `decide` with the engine
//! computing them against the same engine without state (the baseline measured again
//! last); and two-thread throughput on vs off.
//!
//! Rows are raw synthetic transactions (`synth::generate_raw`, 4,000 cards, 20,000
//! terminals); time moves forward on every pass over them, so windows fill and expire as
//! in live traffic rather than replaying one instant.

use criterion::{black_box, Criterion, Throughput};
use risk_benches::Trivial;
use risk_core::state::{Agg, FeatureDef, KeySource, StateConfig, StateEngine};
use risk_core::synth::{generate_raw, schema, state_config, SynthConfig};
use risk_core::{Engine, Latency, ManualClock, Transaction};
use std::sync::Arc;
use std::time::Duration;

/// The synthetic set's 8 features plus a card mean and a card max over 24 h: 10.
pub fn ten_features() -> StateConfig {
    let mut c = state_config();
    let day = Duration::from_secs(86_400);
    c.features
        .push(FeatureDef::new("hour", KeySource::Entity, Agg::Avg).window(day, 24));
    c.features
        .push(FeatureDef::new("card_age_days", KeySource::Entity, Agg::Max).window(day, 24));
    c
}

fn rows() -> Vec<Transaction> {
    generate_raw(&SynthConfig::new(5, 80_000))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

/// Cycles over `rows`, moving their times a data set's span forward on each pass.
struct Cycle {
    rows: Vec<Transaction>,
    i: usize,
    span: i64,
}

impl Cycle {
    fn new(rows: Vec<Transaction>) -> Self {
        let span = rows.last().unwrap().timestamp_ms - rows[0].timestamp_ms + 86_400_000;
        Self { rows, i: 0, span }
    }
    #[inline]
    fn next(&mut self) -> &mut Transaction {
        self.i += 1;
        if self.i == self.rows.len() {
            self.i = 0;
            for r in &mut self.rows {
                r.timestamp_ms += self.span;
            }
        }
        &mut self.rows[self.i]
    }
}

fn engine(state: bool) -> Engine {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let b = Engine::builder(s.clone())
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::new(Trivial::new(slot, Latency::Bounded)));
    let b = if state { b.state(ten_features()) } else { b };
    b.build().unwrap()
}

/// The state stage alone, and `decide` with vs without it.
pub fn decide(c: &mut Criterion) {
    let mut g = c.benchmark_group("state");
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    let st = StateEngine::new(ten_features(), schema(), clock).unwrap();
    let mut cy = Cycle::new(rows());
    g.bench_function("read_update_10_features", |b| {
        b.iter(|| black_box(st.apply(black_box(cy.next()))))
    });
    let off = engine(false);
    let on = engine(true);
    for (name, e) in [
        ("decide_state_off", &off),
        ("decide_state_on", &on),
        ("decide_state_off_again", &off),
    ] {
        let mut cy = Cycle::new(rows());
        g.bench_function(name, |b| {
            b.iter(|| black_box(e.decide(black_box(cy.next())).unwrap()))
        });
    }
    g.finish();
    for m in st.memory() {
        println!(
            "state memory: {} keys of {} at {} bytes each",
            m.keys, m.source, m.bytes_per_key
        );
    }
}

/// Two threads deciding as fast as they can, state on vs off.
pub fn throughput(c: &mut Criterion) {
    let txns = rows();
    let mut g = c.benchmark_group("state_throughput");
    g.throughput(Throughput::Elements(20_000));
    g.sample_size(10);
    for (name, on) in [
        ("two_threads_state_off", false),
        ("two_threads_state_on", true),
    ] {
        let e = engine(on);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| risk_benches::two_threads(&e, &txns, 10_000))
                    .sum()
            })
        });
    }
    g.finish();
}
