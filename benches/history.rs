//! What the history features (`synth::history_config()`: 12 aggregates beyond the 8
//! velocity features, four of them fed by labels) add to `decide`, against the same
//! engine computing the velocity features only (measured again last).
//!
//! Rows are the realistic preset's raw transactions on the history schema: 120,000 warm
//! the state (3,000 cards, 120 days) with every fraud label reported when it arrived, then
//! the timed loop cycles over the last 4,096, moved forward by the data's span on each
//! pass so windows fill and expire as in live traffic. Engines with trivial rules and
//! model, on a manual clock far ahead of the data.

use criterion::{black_box, Criterion};
use risk_benches::Trivial;
use risk_core::state::StateConfig;
use risk_core::synth::{
    generate_raw, history_config, history_schema, state_config, Labeled, SynthConfig,
};
use risk_core::{Engine, Latency, ManualClock, Transaction, TxnId};
use std::sync::Arc;

/// The realistic rows with their features on the history schema.
fn labeled() -> Vec<Labeled> {
    let hs = history_schema();
    let mut rows = generate_raw(&SynthConfig::realistic(5, 120_000));
    for r in &mut rows {
        let mut f = hs.features();
        let n = r.txn.features.values().len();
        f.values_mut()[..n].copy_from_slice(r.txn.features.values());
        r.txn.features = f;
    }
    rows
}

fn engine(state: StateConfig, rows: &[Labeled]) -> Engine {
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    let s = history_schema();
    let slot = s.slot("amount").unwrap();
    let e = Engine::builder(s)
        .clock(clock)
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .state(state)
        .build()
        .unwrap();
    let mut labels: Vec<(i64, u64)> = rows
        .iter()
        .filter_map(|r| r.label_time_ms.map(|l| (l, r.txn.id.0)))
        .collect();
    labels.sort_unstable();
    let mut next = 0;
    for r in rows {
        while next < labels.len() && labels[next].0 < r.txn.timestamp_ms {
            // A label for a transaction state keeps no label feature for is refused.
            let _ = e.report_label(TxnId(labels[next].1), true, labels[next].0);
            next += 1;
        }
        e.decide(&r.txn).unwrap();
    }
    e
}

/// `decide` computing the velocity features only, with the history features, and the
/// velocity-only engine again.
pub fn decide(c: &mut Criterion) {
    let rows = labeled();
    let velocity = engine(state_config(), &rows);
    let history = engine(history_config(), &rows);
    let span = rows.last().unwrap().txn.timestamp_ms - rows[0].txn.timestamp_ms + 86_400_000;
    let mut g = c.benchmark_group("history");
    for (name, e) in [
        ("decide_velocity_8", &velocity),
        ("decide_history_20", &history),
        ("decide_velocity_8_again", &velocity),
    ] {
        let mut timed: Vec<Transaction> = rows[rows.len() - 4_096..]
            .iter()
            .map(|r| r.txn.clone())
            .collect();
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                if i == timed.len() {
                    i = 0;
                    for t in &mut timed {
                        t.timestamp_ms += span;
                    }
                }
                black_box(e.decide(black_box(&timed[i])).unwrap())
            })
        });
    }
    g.finish();
}
