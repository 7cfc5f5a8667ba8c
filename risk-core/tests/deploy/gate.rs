//! The validation gate and every way a candidate is refused: none serves a decision.

use super::*;
use risk_core::deploy::{Candidate, DeployError, GateCheck, Target};

fn refused(e: &Engine, cand: Candidate, plan: RolloutPlan) -> DeployError {
    let before = e.versions();
    let err = e.deploy(Target::Fast, cand, plan).unwrap_err();
    let mut next = 1_000_000;
    for d in run(e, &mut next, 300, 5000) {
        assert_eq!(
            d.versions.fast, before.fast,
            "a refused candidate decided ({err})"
        );
    }
    let st = e.deploy_status(Target::Fast);
    assert!(st.active.is_none());
    assert_eq!(st.history.last().unwrap().kind, EventKind::Refused);
    err
}

fn warmed() -> (Engine, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let e = engine(Model::new("1", 0.8, 0.0), &clock);
    let mut next = 0;
    run(&e, &mut next, 600, 5000);
    (e, clock)
}

#[test]
fn nan_error_slow_disagreeing_wrong_schema_and_failed_warmup_are_refused() {
    let (e, _clock) = warmed();
    let m = |mode| {
        let m = Model::new("bad", 0.8, 0.0);
        m.set(mode);
        Candidate::scorer(m)
    };
    let gate = |e: DeployError| match e {
        DeployError::Gate { check, detail, .. } => (check, detail),
        other => panic!("expected a gate refusal, got {other}"),
    };
    assert_eq!(
        gate(refused(&e, m(Mode::Nan), immediate())).0,
        GateCheck::InvalidScores
    );
    assert_eq!(
        gate(refused(&e, m(Mode::Error), immediate())).0,
        GateCheck::InvalidScores
    );
    let mut slow = immediate();
    slow.gate.max_p99 = Some(Duration::from_micros(500));
    slow.gate.sample = 40;
    let (check, detail) = gate(refused(&e, m(Mode::Sleep(Duration::from_millis(2))), slow));
    assert_eq!(check, GateCheck::Latency, "{detail}");
    let (check, detail) = gate(refused(
        &e,
        Candidate::scorer(Model::new("inverted", -0.8, 0.8)),
        immediate(),
    ));
    assert_eq!(check, GateCheck::Disagreement, "{detail}");
    let other_schema = Model::with(|m| m.schema_fp = Some(42));
    assert!(matches!(
        refused(&e, Candidate::scorer(other_schema), immediate()),
        DeployError::Schema { got: 42, .. }
    ));
    let cold = Model::with(|m| m.warmup_fails = true);
    assert!(matches!(
        refused(&e, Candidate::scorer(cold), immediate()),
        DeployError::Warmup(_)
    ));
    let unknown = Candidate::from_toml(
        "[scorer]\nkind = \"no-such-kind\"\n",
        std::path::Path::new("."),
    )
    .unwrap();
    let err = e.deploy(Target::Fast, unknown, immediate()).unwrap_err();
    assert!(
        matches!(&err, DeployError::Load(m) if m.contains("no-such-kind")),
        "{err}"
    );
    // A policy is not a model, and a bad policy is refused at load.
    assert!(matches!(
        e.deploy(
            Target::Fast,
            Candidate::Policy(Policy::default()),
            immediate()
        ),
        Err(DeployError::Unsupported { .. })
    ));
    let bad = Candidate::from_toml(
        "[policy]\napprove_below = 0.9\ndecline_at = 0.1\n",
        std::path::Path::new("."),
    );
    assert!(matches!(bad, Err(DeployError::Load(_))));
}

#[test]
fn the_gate_needs_a_sample_and_checks_auprc_on_labelled_rows() {
    let clock = ManualClock::new();
    let e = engine(Model::new("1", 0.8, 0.0), &clock);
    // No traffic yet: nothing to validate on.
    let err = e
        .deploy(
            Target::Fast,
            Candidate::scorer(Model::new("2", 0.8, 0.0)),
            immediate(),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            DeployError::Gate {
                check: GateCheck::Sample,
                ..
            }
        ),
        "{err}"
    );
    // Supplied labelled rows: fraud is the large amounts.
    let s = schema();
    let rows: Vec<Transaction> = (0..400).map(|i| txn(&s, 10_000 + i, 100)).collect();
    let labels: Vec<bool> = rows.iter().map(|t| t.amount > 800.0).collect();
    let mut plan = immediate();
    plan.gate.transactions = rows.clone();
    plan.gate.labels = labels.clone();
    plan.gate.min_auprc = Some(0.9);
    e.deploy(
        Target::Fast,
        Candidate::scorer(Model::new("2", 0.8, 0.0)),
        plan.clone(),
    )
    .unwrap();
    let st = e.deploy_status(Target::Fast);
    let ev = st.history.last().unwrap();
    assert_eq!(ev.kind, EventKind::Promoted);
    // A model that ranks by nothing useful fails the AUPRC floor, with it in the report.
    plan.gate.max_mean_abs_diff = 1.0;
    plan.gate.min_action_agreement = 0.0;
    let err = e
        .deploy(
            Target::Fast,
            Candidate::scorer(Model::new("flat", 0.0, 0.5)),
            plan,
        )
        .unwrap_err();
    match err {
        DeployError::Gate {
            check: GateCheck::Auprc,
            report,
            ..
        } => assert!(report.auprc.unwrap() < 0.5, "{report:?}"),
        other => panic!("{other}"),
    }
}

#[test]
fn two_concurrent_deploys_to_one_target_one_is_refused() {
    struct SlowWarm {
        started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
    }
    impl Scorer for SlowWarm {
        fn info(&self) -> ScorerInfo {
            ScorerInfo::new("slow-warm", "1", Latency::Bounded)
        }
        fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
            Ok(Score::new((t.amount as f32 / 1000.0 * 0.8).min(1.0)))
        }
        fn warmup(&self) -> Result<(), ScoreError> {
            if let Some(s) = self.started.lock().take() {
                let _ = s.send(());
            }
            let _ = self.release.lock().recv();
            Ok(())
        }
    }
    let (e, _c) = warmed();
    let (stx, srx) = std::sync::mpsc::channel();
    let (rtx, rrx) = std::sync::mpsc::channel();
    let slow = Arc::new(SlowWarm {
        started: Mutex::new(Some(stx)),
        release: Mutex::new(rrx),
    });
    let e2 = e.clone();
    let first =
        std::thread::spawn(move || e2.deploy(Target::Fast, Candidate::scorer(slow), immediate()));
    srx.recv_timeout(Duration::from_secs(30)).unwrap();
    let err = e
        .deploy(
            Target::Fast,
            Candidate::scorer(Model::new("3", 0.8, 0.0)),
            immediate(),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            DeployError::InProgress {
                target: Target::Fast,
                ..
            }
        ),
        "{err}"
    );
    rtx.send(()).unwrap();
    first.join().unwrap().unwrap();
    assert_eq!(e.versions().fast.unwrap().name(), "slow-warm");
}
