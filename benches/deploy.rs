//! Model lifecycle's cost on `decide` (one thread, median): no deploy (the versioned
//! slots alone: one `ArcSwap` load per call) against a canary at 50% (per-version
//! counters; and with a recalibrated candidate, whose calibration the serving side's
//! scores pass through), a running shadow (a copy handed to the shadow thread), and a
//! calibrated model; plus the slot mechanism itself, an `ArcSwap` load against a plain `Arc` read.

use arc_swap::ArcSwap;
use criterion::{black_box, Criterion};
use risk_benches::Trivial;
use risk_core::calibrate::Calibration;
use risk_core::deploy::{
    CanaryStage, Candidate, DeployConfig, Gate, RolloutPlan, ShadowStage, Target,
};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Engine, Latency, Scorer, Transaction};
use std::sync::Arc;
use std::time::Duration;

fn rows() -> Vec<Transaction> {
    generate(&SynthConfig::new(7, 1024))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

fn engine(txns: &[Transaction], calibrated: bool) -> (Engine, Arc<dyn Scorer>) {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let fast: Arc<dyn Scorer> = Arc::new(Trivial::new(slot, Latency::Bounded));
    let mut b = Engine::builder(s)
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::clone(&fast))
        .deploy_config(DeployConfig {
            // The supervisor must not end the stage while measuring.
            check_interval: Duration::from_secs(3600),
            ..DeployConfig::default()
        });
    if calibrated {
        b = b.fast_calibration(Calibration::Platt { a: 1.1, b: -0.2 });
    }
    let e = b.build().unwrap();
    for t in txns {
        e.decide(t).unwrap();
    }
    (e, fast)
}

fn plan() -> RolloutPlan {
    RolloutPlan {
        gate: Gate {
            min_sample: 1,
            ..Gate::default()
        },
        ..RolloutPlan::immediate()
    }
}

/// A canary at 50% that never ends (no stage end, no guard judgement while measuring).
fn canary_half() -> RolloutPlan {
    let mut p = plan();
    p.canary = vec![CanaryStage {
        share: 0.5,
        min_decisions: u64::MAX,
        min_duration: Duration::ZERO,
    }];
    p.guards.min_decisions = u64::MAX;
    p
}

/// `decide` with and without a deploy in progress.
pub fn decide(c: &mut Criterion) {
    let txns = rows();
    let mut g = c.benchmark_group("deploy");
    let mut i = 0;
    let mut bench = |g: &mut criterion::BenchmarkGroup<'_, _>, name: &str, e: &Engine| {
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % txns.len();
                black_box(e.decide(black_box(&txns[i])).unwrap())
            })
        });
    };
    let (idle, _) = engine(&txns, false);
    bench(&mut g, "decide_no_deploy", &idle);
    let (canary, fast) = engine(&txns, false);
    canary
        .deploy(
            Target::Fast,
            Candidate::scorer(Arc::clone(&fast)),
            canary_half(),
        )
        .unwrap();
    bench(&mut g, "decide_canary_50pct", &canary);
    // The candidate brings a calibration the serving model lacks: the serving side's
    // scores pass through it before they are binned (one scale for the score guard).
    let (recal, fast) = engine(&txns, false);
    let cand = Candidate::scorer(fast).with_calibration(Calibration::Platt { a: 1.1, b: -0.2 });
    recal.deploy(Target::Fast, cand, canary_half()).unwrap();
    bench(&mut g, "decide_canary_50pct_recalibrated", &recal);
    let (shadow, fast) = engine(&txns, false);
    let mut p = plan();
    p.shadow = Some(ShadowStage {
        min_scored: u64::MAX,
        ..ShadowStage::default()
    });
    p.guards.min_decisions = u64::MAX;
    shadow
        .deploy(Target::Fast, Candidate::scorer(fast), p)
        .unwrap();
    bench(&mut g, "decide_shadow_running", &shadow);
    let (sampled, fast) = engine(&txns, false);
    let mut p = plan();
    p.shadow = Some(ShadowStage {
        min_scored: u64::MAX,
        sample: 0.1,
        ..ShadowStage::default()
    });
    p.guards.min_decisions = u64::MAX;
    sampled
        .deploy(Target::Fast, Candidate::scorer(fast), p)
        .unwrap();
    bench(&mut g, "decide_shadow_sample_10pct", &sampled);
    let (cal, _) = engine(&txns, true);
    bench(&mut g, "decide_calibrated", &cal);
    // The baseline again, last: the spread between the two is this machine's noise.
    bench(&mut g, "decide_no_deploy_again", &idle);
    g.finish();
    let st = shadow.deploy_status(Target::Fast);
    let a = st.active.unwrap();
    println!(
        "shadow: {} scored, {} shed (queue full) during the run",
        a.candidate_stats.n, a.shadow_shed
    );
    // The slot mechanism alone.
    let mut g = c.benchmark_group("slot");
    let plain = Arc::new(42u64);
    let swap = ArcSwap::from_pointee(42u64);
    g.bench_function("arc_read", |b| {
        b.iter(|| black_box(*black_box(&plain).as_ref()))
    });
    g.bench_function("arcswap_load", |b| {
        b.iter(|| black_box(**black_box(&swap).load()))
    });
    g.finish();
}
