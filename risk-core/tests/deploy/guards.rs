//! The guards judged over many simulated deploys (issue [20] part 5): healthy candidates
//! (another version of the same model, the same model recalibrated) are promoted, harmful
//! ones (a model that degrades once live, one that fails 10% of calls, one that declines
//! ~5x more) are rolled back; wrong decisions are counted, and the fixed-threshold guards
//! of before (every tick, no sample size) are replayed on the same counters for contrast.

use super::*;
use crate::common::mix;
use risk_core::calibrate::Calibration;
use risk_core::deploy::{psi, CanaryStage, Candidate, Guards, StatsSnap, Target};

/// Score `u^20 (+ add)` of a uniform `u` read from the amount: ~1.8% declines, ~4% reviews
/// at the default thresholds (0.3 / 0.7), most scores near 0, as in payments.
struct Power {
    version: String,
    exp: f32,
    /// Added to every score once `after` calls have been answered.
    add: f32,
    /// Every `fail_every`-th call (by transaction id) fails once `after` calls passed.
    fail_every: u64,
    after: u64,
    calls: AtomicU64,
}

impl Power {
    fn new(version: String, exp: f32) -> Arc<Self> {
        Self::bad(version, exp, 0.0, 0, 0)
    }
    fn bad(version: String, exp: f32, add: f32, fail_every: u64, after: u64) -> Arc<Self> {
        Arc::new(Self {
            version,
            exp,
            add,
            fail_every,
            after,
            calls: AtomicU64::new(0),
        })
    }
}

impl Scorer for Power {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("power", &self.version, Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let live = self.calls.fetch_add(1, Ordering::Relaxed) >= self.after;
        if live && self.fail_every > 0 && mix(t.id.0).is_multiple_of(self.fail_every) {
            return Err(ScoreError::Failed("injected".into()));
        }
        let u = (t.amount as f32 / 1000.0).clamp(0.0, 1.0);
        let add = if live { self.add } else { 0.0 };
        Ok(Score::new((u.powf(self.exp) + add).min(1.0)))
    }
}

/// Transaction `id`: a uniform amount in [0, 1000) and one of 20,000 entities, both
/// drawn from the id's hash (every deploy sees fresh draws).
fn draw(s: &Arc<FeatureSchema>, id: u64) -> Transaction {
    let h = mix(id);
    let amount = (h >> 11) as f64 / (1u64 << 53) as f64 * 1000.0;
    Transaction::builder(s)
        .id(id)
        .entity(1 + mix(h) % 20_000)
        .amount(amount, "USD")
        .numeric("amount", amount as f32)
        .build()
        .unwrap()
}

/// The guards of before this change, judged at every tick on the observed values (on the
/// counters of the new code, whose scores are already on one scale: this replays only
/// the missing sample-size judgement, not the scale mismatch).
fn fixed_threshold_guard(g: &Guards, c: &StatsSnap, s: &StatsSnap) -> bool {
    if c.n < g.min_decisions {
        return false;
    }
    if c.error_rate() > g.max_error_rate {
        return true;
    }
    if s.n < g.min_decisions {
        return false;
    }
    // The old PSI smoothed proportions by a floor of 1e-4.
    let (na, nb) = (c.scores.iter().sum::<u64>(), s.scores.iter().sum::<u64>());
    let old_psi: f64 = c
        .scores
        .iter()
        .zip(&s.scores)
        .map(|(&x, &y)| {
            let p = (x as f64 / na.max(1) as f64).max(1e-4);
            let q = (y as f64 / nb.max(1) as f64).max(1e-4);
            (p - q) * (p / q).ln()
        })
        .sum();
    if old_psi > g.max_score_psi {
        return true;
    }
    [Action::Decline, Action::Review].iter().any(|&a| {
        let (x, y) = (c.rate(a), s.rate(a));
        let ratio = (x + 1e-3) / (y + 1e-3);
        (ratio > g.max_action_ratio || ratio < 1.0 / g.max_action_ratio)
            && (x - y).abs() > g.min_action_delta
    })
}

#[derive(Debug, Default)]
struct Tally {
    promoted: u32,
    rolled_back: u32,
    /// Candidate decisions before each rollback.
    to_rollback: Vec<u64>,
    /// Deploys the fixed-threshold guards would have rolled back.
    fixed_would: u32,
    details: Vec<String>,
}

/// Deploys `make(i)` for `i in 0..n` one after another on one engine, each through a
/// 10% → 50% → 100% canary of 1,000 candidate decisions a stage, ticking every 100
/// decisions. After a promotion the raw model is restored (every candidate meets the same
/// serving version).
fn simulate(n: u32, make: impl Fn(u32) -> Candidate) -> Tally {
    let clock = ManualClock::new();
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(Arc::new(AmountRules(0.8)))
        .fast(Power::new("serving".into(), 20.0))
        .clock(Arc::clone(&clock) as Arc<dyn Clock>)
        .circuit(CircuitConfig {
            min_calls: 1_000_000,
            ..Default::default()
        })
        .deploy_config(quiet())
        .build()
        .unwrap();
    let events = e.deploy_events();
    let mut next = 1u64 << 40;
    let mut decide = |k: u64| {
        for _ in 0..k {
            next += 1;
            e.decide(&draw(&s, next)).unwrap();
        }
    };
    decide(2_000);
    let mut t = Tally::default();
    let guards = Guards::default();
    for i in 0..n {
        let plan = RolloutPlan {
            canary: [0.1, 0.5, 1.0]
                .iter()
                .map(|&share| CanaryStage {
                    share,
                    min_decisions: 1_000,
                    min_duration: Duration::ZERO,
                })
                .collect(),
            guards: guards.clone(),
            ..immediate()
        };
        let id = e.deploy(Target::Fast, make(i), plan).unwrap();
        let mut fixed = false;
        let ev = loop {
            decide(100);
            e.deploy_tick();
            if let Some(a) = e.deploy_status(Target::Fast).active {
                fixed |= fixed_threshold_guard(&guards, &a.candidate_stats, &a.serving_stats);
            }
            match events.try_recv() {
                Ok(ev)
                    if ev.deploy == id
                        && matches!(ev.kind, EventKind::Promoted | EventKind::RolledBack) =>
                {
                    break ev
                }
                _ => {}
            }
        };
        t.fixed_would += u32::from(fixed);
        if ev.kind == EventKind::Promoted {
            t.promoted += 1;
            // Back to the raw model, so that every candidate meets the same serving one.
            e.rollback(Target::Fast, "next trial").unwrap();
        } else {
            t.rolled_back += 1;
            t.to_rollback.push(ev.candidate_decisions);
            t.details.push(ev.detail);
        }
    }
    t
}

/// Lifts scores from 0.001 up to 0.3 into [0.2, 0.3], identity from 0.3: a very
/// different score distribution (a third of the scores leave the first bin) with the same
/// actions at the default thresholds.
fn stretch_low() -> Calibration {
    Calibration::Isotonic {
        x: vec![0.0, 0.001, 0.3, 1.0],
        y: vec![0.0, 0.2, 0.3, 1.0],
    }
}

#[test]
fn two_hundred_healthy_candidates_are_promoted() {
    let t = simulate(200, |i| {
        // The serving model itself (same name and version, so the same content hash)
        // recalibrated, or another version of it.
        let same = || Power::new("serving".into(), 20.0);
        match i % 3 {
            0 => Candidate::scorer(Power::new(format!("healthy-{i}"), 20.0)),
            // Platt close to the identity at 0.7 (declines ~1x, reviews ~1.25x).
            1 => {
                Candidate::scorer(same()).with_calibration(Calibration::Platt { a: 0.85, b: 0.13 })
            }
            _ => Candidate::scorer(same()).with_calibration(stretch_low()),
        }
    });
    println!(
        "healthy: {} of 200 promoted, {} rolled back {:?}; the fixed-threshold guards would have rolled back {}",
        t.promoted, t.rolled_back, t.details, t.fixed_would
    );
    // The stated bound: at most 1% of healthy deploys rolled back.
    assert!(t.rolled_back <= 2, "{t:?}");
}

#[test]
fn every_harmful_candidate_is_rolled_back_fast() {
    // The gate scores its 256-transaction sample twice; misbehaviour starts after it.
    let after = 2 * 256;
    let t = simulate(60, |i| {
        let v = format!("harmful-{i}");
        Candidate::scorer(match i % 3 {
            // The quickstart's degrading model: +0.45 once live.
            0 => Power::bad(v, 20.0, 0.45, 0, after),
            // 10% of calls fail once live.
            1 => Power::bad(v, 20.0, 0.0, 10, after),
            // Declines ~5x more from the start (u^4: 8.5% against 1.8%).
            _ => Power::bad(v, 4.0, 0.0, 0, 0),
        })
    });
    println!(
        "harmful: {} of 60 rolled back, candidate decisions before each: {:?}; first reasons: {:?}",
        t.rolled_back,
        t.to_rollback,
        &t.details[..3.min(t.details.len())]
    );
    assert_eq!((t.rolled_back, t.promoted), (60, 0), "{t:?}");
    // As fast as the fixed thresholds were: at the first look after the guards' 200
    // decisions (ticks every 100 decisions, ~10 candidate decisions each at 10%).
    let worst = *t.to_rollback.iter().max().unwrap();
    assert!(worst <= 260, "{:?}", t.to_rollback);
}

#[test]
fn a_recalibrated_model_is_compared_on_one_scale() {
    // The serving scores mapped through the candidate's calibration equal the
    // candidate's: same trees, new scale, the score guard sees no shift.
    let t = simulate(3, |_| {
        Candidate::scorer(Power::new("serving".into(), 20.0)).with_calibration(stretch_low())
    });
    assert_eq!(t.promoted, 3, "{t:?}");
    // Another model bringing the same calibration is compared as it scores: here the
    // shift is real (its scores are lifted), and the guard sees it.
    let t = simulate(3, |i| {
        Candidate::scorer(Power::new(format!("other-{i}"), 20.0)).with_calibration(stretch_low())
    });
    assert_eq!(t.rolled_back, 3, "{t:?}");
    assert!(t.details.iter().all(|d| d.contains("PSI")), "{t:?}");
    // Unmapped, the two histograms differ by twice the limit and more: compared across
    // scales, the score guard would roll back every one of them.
    let mut raw = [0u64; 10];
    let mut cal = [0u64; 10];
    let c = stretch_low();
    for k in 0..100_000u64 {
        let u = (mix(k) >> 11) as f64 / (1u64 << 53) as f64;
        let p = (u as f32).powf(20.0);
        raw[risk_bin(p)] += 1;
        cal[risk_bin(c.apply(p))] += 1;
    }
    let limit = Guards::default().max_score_psi;
    assert!(psi(&raw, &cal) > 2.0 * limit, "{}", psi(&raw, &cal));
}

fn risk_bin(p: f32) -> usize {
    ((p.clamp(0.0, 1.0) * 10.0) as usize).min(9)
}
