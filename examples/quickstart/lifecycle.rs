//! The model lifecycle, live: while one caller thread keeps deciding, a calibrated
//! version of the fast model goes through gate → shadow → sticky canary → promote; a model
//! that is plainly wrong is refused at the gate; and a model that degrades once it sees
//! live traffic is rolled back automatically by its guards. No decision stops.

use risk_core::calibrate::{Calibration, CalibrationReport, Method};
use risk_core::deploy::{
    CanaryStage, Candidate, DeployConfig, DeployEvent, EventKind, RolloutPlan, ShadowStage, Target,
};
use risk_core::synth::Labeled as Record;
use risk_core::{Engine, Score, ScoreError, Scorer, ScorerInfo, Transaction};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The fast model, plus `extra` on every score once it has answered `after` calls: a
/// model that validates fine and then drifts (say, a feature pipeline broke upstream).
struct Degrading {
    inner: Arc<dyn Scorer>,
    extra: f32,
    after: u64,
    calls: AtomicU64,
}

impl Scorer for Degrading {
    fn info(&self) -> ScorerInfo {
        let i = self.inner.info();
        ScorerInfo::new(format!("{}-degrading", i.name), i.version, i.latency)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let mut s = self.inner.score(t)?;
        if self.calls.fetch_add(1, Ordering::Relaxed) >= self.after {
            s.probability = (s.probability + self.extra).min(1.0);
        }
        Ok(s)
    }
}

fn stage(share: f64) -> CanaryStage {
    CanaryStage {
        share,
        min_decisions: 1_000,
        min_duration: Duration::from_millis(200),
    }
}

/// Runs the demo on `rows` (decided in a loop on a second thread).
pub fn run(
    schema: &Arc<risk_core::FeatureSchema>,
    rules: Arc<dyn Scorer>,
    fast: Arc<dyn Scorer>,
    train: &[Record],
    rows: &[Record],
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\nmodel lifecycle (decisions continue throughout)");
    let engine = Engine::builder(schema.clone())
        .rules(rules)
        .fast(fast.clone())
        .deploy_config(DeployConfig {
            check_interval: Duration::from_millis(20),
            ..DeployConfig::default()
        })
        .build()?;
    let events = engine.deploy_events();
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let caller = {
        let (e, stop, decided) = (engine.clone(), stop.clone(), decided.clone());
        let txns: Vec<Transaction> = rows.iter().map(|r| r.txn.clone()).collect();
        std::thread::spawn(move || {
            let mut errors = 0u64;
            for t in txns.iter().cycle() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                errors += u64::from(e.decide(t).is_err());
                decided.fetch_add(1, Ordering::Relaxed);
            }
            errors
        })
    };
    while decided.load(Ordering::Relaxed) < 20_000 {
        std::thread::yield_now();
    }

    // 1. Calibration fitted on the training rows, evaluated on held-out replay rows.
    let score = |rs: &[Record]| -> (Vec<f32>, Vec<bool>) {
        rs.iter()
            .map(|r| {
                (
                    fast.score(&r.txn).map_or(0.0, |s| s.probability),
                    r.is_fraud,
                )
            })
            .unzip()
    };
    let (ts, tl) = score(train);
    let cal = Calibration::fit(Method::Platt, &ts, &tl)?;
    let (hs, hl) = score(&rows[..rows.len().min(20_000)]);
    let rep = CalibrationReport::evaluate(&cal, &hs, &hl);
    println!(
        "  calibration (Platt, fitted on {} training rows): ECE {:.4} -> {:.4}, Brier {:.4} -> {:.4} on {} held-out rows",
        ts.len(),
        rep.before.ece,
        rep.after.ece,
        rep.before.brier,
        rep.after.brier,
        rep.rows
    );

    // 2. The calibrated model through every stage.
    let plan = RolloutPlan {
        shadow: Some(ShadowStage {
            min_scored: 2_000,
            min_duration: Duration::from_millis(200),
            ..ShadowStage::default()
        }),
        canary: vec![stage(0.05), stage(0.25), stage(1.0)],
        by: "quickstart".into(),
        ..RolloutPlan::default()
    };
    let id = engine.deploy(
        Target::Fast,
        Candidate::scorer(fast.clone()).with_calibration(cal),
        plan.clone(),
    )?;
    let gate = engine.deploy_status(Target::Fast).active.map(|a| a.gate);
    if let Some(g) = gate {
        println!(
            "  deploy {id}: gate passed on {} recent transactions (mean |diff| {:.4}, same action {:.1}%, p99 {:.1} us, first call {:.1} us)",
            g.sample,
            g.mean_abs_diff,
            100.0 * g.action_agreement,
            g.p99_us,
            g.first_call_us
        );
    }
    follow(&events, id);

    // 3. A plainly wrong model: refused at the gate, never serves.
    let wrong = Degrading {
        inner: fast.clone(),
        extra: 0.5,
        after: 0,
        calls: AtomicU64::new(0),
    };
    match engine.deploy(
        Target::Fast,
        Candidate::scorer(Arc::new(wrong)),
        plan.clone(),
    ) {
        Ok(_) => println!("  a wrong model passed the gate (unexpected)"),
        Err(e) => println!("  a model scoring +0.5: refused: {e}"),
    }

    // 4. A model that degrades once live: the guards roll it back.
    let degrading = Degrading {
        inner: fast,
        extra: 0.45,
        // The gate's two passes over its sample, then the shadow's first scores.
        after: 2 * 512 + 500,
        calls: AtomicU64::new(0),
    };
    let mut p = plan;
    p.shadow = None;
    let id = engine.deploy(Target::Fast, Candidate::scorer(Arc::new(degrading)), p)?;
    follow(&events, id);
    stop.store(true, Ordering::Relaxed);
    let errors = caller.join().unwrap_or(u64::MAX);
    let m = engine.metrics();
    println!(
        "  {} decisions during the deploys, {errors} errors; serving now: {}",
        m.decisions,
        engine
            .deploy_status(Target::Fast)
            .serving
            .map_or("-".into(), |v| v.id)
    );
    Ok(())
}

/// Prints deploy `id`'s events until it is promoted or rolled back.
fn follow(events: &std::sync::mpsc::Receiver<DeployEvent>, id: u64) {
    while let Ok(e) = events.recv_timeout(Duration::from_secs(120)) {
        if e.deploy != id {
            continue;
        }
        let what = match e.kind {
            EventKind::Started => format!("started ({})", e.detail),
            EventKind::Stage => format!("canary {:.0}% of entities", 100.0 * e.share),
            EventKind::Promoted => {
                format!("promoted after {} canary decisions", e.candidate_decisions)
            }
            EventKind::RolledBack => format!(
                "ROLLED BACK automatically={} after {} candidate decisions: {}",
                e.automatic, e.candidate_decisions, e.detail
            ),
            EventKind::Refused => format!("refused: {}", e.detail),
        };
        println!("    {} {}: {what}", e.version.id, e.target);
        if matches!(e.kind, EventKind::Promoted | EventKind::RolledBack) {
            return;
        }
    }
    println!("    (no end of deploy {id} within 120 s)");
}
