//! The example engine's `decide` (`examples/risk.toml`: the default rules, native XGBoost
//! with TreeSHAP reasons above 0.3, gray band queued) against a hand-written engine doing
//! the same tiers' work in the same run: the rule set's scorer, the XGBoost scorer and the
//! combine policy called one after the other (no slots, versions, deadline, pool, gray
//! queue, metrics or decision record). The difference is the engine's own overhead
//! (issue [18] part 5: ≤ 250 ns). Rows: 4,096 varied synthetic transactions.

use criterion::{black_box, Criterion};
use risk_core::synth::{generate, SynthConfig};
use risk_core::{Engine, Transaction};
use risk_examples::hand_written::{example_engine, HandWritten};
use std::sync::Arc;
use std::time::Instant;

/// Synthetic rows in the engine's schema (the example's schema is the synthetic one).
fn rows(e: &Engine, n: usize) -> Vec<Transaction> {
    let rows: Vec<Transaction> = generate(&SynthConfig::new(42, n))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    assert_eq!(
        rows[0].features.schema().fingerprint(),
        e.schema().fingerprint(),
        "examples/risk.toml's schema is no longer the synthetic one"
    );
    rows
}

pub fn decide(c: &mut Criterion) {
    let e = example_engine();
    let hand = HandWritten::new(&e);
    let txns = rows(&e, 4_096);
    // The two give the same actions on every row (what makes the difference overhead).
    for t in &txns {
        let d = e.decide(t).unwrap();
        assert_eq!(d.action, hand.decide(t).0, "row {}", t.id.0);
    }
    let mut g = c.benchmark_group("lean");
    let mut i = 0;
    g.bench_function("hand_written_tiers", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            black_box(hand.decide(black_box(&txns[i])))
        })
    });
    g.bench_function("example_engine_decide", |b| {
        b.iter(|| {
            i = (i + 1) % txns.len();
            black_box(e.decide(black_box(&txns[i])).unwrap())
        })
    });
    // Two caller threads, decisions per second (time per decision per thread reported).
    let e = Arc::new(e);
    let txns = Arc::new(txns);
    g.bench_function("example_engine_two_threads", |b| {
        b.iter_custom(|iters| {
            let per = iters / 2 + 1;
            let t0 = Instant::now();
            std::thread::scope(|s| {
                for k in 0..2 {
                    let (e, txns) = (&e, &txns);
                    s.spawn(move || {
                        for j in 0..per as usize {
                            let t = &txns[(j * 2 + k) % txns.len()];
                            black_box(e.decide(t).unwrap());
                        }
                    });
                }
            });
            // Wall time for `iters` decisions over both threads.
            t0.elapsed().mul_f64(iters as f64 / (2 * per) as f64)
        })
    });
    g.finish();
}

/// The example engine with its model's reasons computed three ways, over the same rows:
/// never (`explain_above` above every score: the capability switched off), by score (the
/// example's `explain_above = 0.3`), and for review and decline decisions only
/// (`explain = "decision"`, [`risk_core::Scorer::defers_reasons`]).
pub fn explain(c: &mut Criterion) {
    let root = risk_examples::hand_written::root();
    let text = std::fs::read_to_string(root.join("examples/risk.toml")).expect("risk.toml");
    assert!(
        text.contains("explain_above = 0.3\n"),
        "examples/risk.toml changed"
    );
    let mut reg = risk_core::ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let build = |setting: &str| {
        let t = text.replace("explain_above = 0.3\n", setting);
        Engine::from_toml_str(
            &t,
            &root.join("examples"),
            std::path::Path::new("risk.toml"),
            &reg,
        )
        .expect("the example with another explain setting builds")
    };
    let engines = [
        ("reasons_off", build("explain_above = 2.0\n")),
        ("reasons_by_score", build("explain_above = 0.3\n")),
        ("reasons_by_decision", build("explain = \"decision\"\n")),
    ];
    let txns = rows(&engines[0].1, 4_096);
    for (name, e) in &engines {
        let explained = txns
            .iter()
            .filter(|t| {
                let d = e.decide(t).unwrap();
                let any = d.reasons.iter().any(|r| r.code.name().starts_with("xgb:"));
                any
            })
            .count();
        eprintln!(
            "explain/{name}: {explained} of {} rows explained",
            txns.len()
        );
    }
    let mut g = c.benchmark_group("explain");
    for (name, e) in &engines {
        let mut i = 0;
        g.bench_function(*name, |b| {
            b.iter(|| {
                i = (i + 1) % txns.len();
                black_box(e.decide(black_box(&txns[i])).unwrap())
            })
        });
    }
    g.finish();
}
