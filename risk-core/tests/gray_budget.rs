//! The gray band set by a traffic budget (`gray.budget`, issue [20] part 2): the share of
//! scored traffic that escalates follows the budget whatever the score distribution, where
//! a fixed band's share follows the distribution.

use crate::common::*;
use risk_core::*;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Score `u^exp` of a uniform `u` carried in the amount; the exponent can change live
/// (a feature pipeline that shifts every score, say).
struct Power(AtomicU32);

impl Power {
    fn new(exp: f32) -> Arc<Self> {
        Arc::new(Self(AtomicU32::new(exp.to_bits())))
    }
    fn set(&self, exp: f32) {
        self.0.store(exp.to_bits(), Ordering::Relaxed);
    }
}

impl Scorer for Power {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("power", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let exp = f32::from_bits(self.0.load(Ordering::Relaxed));
        Ok(Score::new(
            (t.amount as f32 / 1000.0).clamp(0.0, 1.0).powf(exp),
        ))
    }
}

/// Transaction `id` with a uniform amount in [0, 1000) drawn from its hash.
fn draw(s: &Arc<FeatureSchema>, id: u64) -> Transaction {
    let amount = (mix(id) >> 11) as f64 / (1u64 << 53) as f64 * 1000.0;
    Transaction::builder(s)
        .id(id)
        .entity(1 + id % 5000)
        .amount(amount, "USD")
        .numeric("amount", amount as f32)
        .build()
        .unwrap()
}

fn engine(fast: Arc<dyn Scorer>, budget: Option<GrayBudget>) -> Engine {
    let mut b = Engine::builder(schema())
        .clock(ManualClock::new())
        .rules(rules(0.2))
        .fast(fast)
        .deep(Scripted::new(Act::Value(0.5), Latency::Bounded))
        .gray_queue_capacity(1_000_000)
        .deep_config(deep_cfg(500))
        .circuit(lenient_circuit());
    if let Some(g) = budget {
        b = b.gray_budget(g);
    }
    b.build().unwrap()
}

/// The share of `n` decisions from `*next` on that escalated (queued or shed).
fn escalated(e: &Engine, next: &mut u64, n: u64) -> f64 {
    let s = e.schema().clone();
    let mut k = 0;
    for _ in 0..n {
        *next += 1;
        let d = e.decide(&draw(&s, *next)).unwrap();
        k += u64::from(!matches!(d.escalation, Escalation::None));
    }
    k as f64 / n as f64
}

fn budget(share: f64) -> GrayBudget {
    GrayBudget {
        share,
        half_life: 20_000,
        // The test refreshes at its own points (gray_band_tick); the thread's refresh
        // every 60 s at most may add one more, on the same counts.
        refresh: Duration::from_secs(60),
    }
}

#[test]
fn the_budget_sets_the_share_that_escalates_whatever_the_scores() {
    let e = engine(Power::new(8.0), Some(budget(0.02)));
    let mut next = 0;
    // Until the window is warm the fixed band [0.3, 0.7] serves: u^8 in it is ~9.6%.
    let cold = escalated(&e, &mut next, 5_000);
    assert!((cold - 0.096).abs() < 0.015, "{cold}");
    assert_eq!(e.gray_band().source, "fixed");
    e.gray_band_tick();
    let band = e.gray_band();
    assert_eq!(
        (band.source, band.hi, band.budget),
        ("budget", 0.7, Some(0.02))
    );
    // The top 2% of scores below 0.7: u in [0.956 - 0.02, 0.956), u^8 from ~0.58.
    assert!((band.lo - 0.937f32.powf(8.0)).abs() < 0.02, "{band:?}");
    let warm = escalated(&e, &mut next, 50_000);
    assert!((warm - 0.02).abs() < 0.004, "{warm}");
    assert_eq!(e.health().gray_band, e.gray_band());
    let text = e.metrics_text();
    assert!(
        text.contains("risk_gray_band{edge=\"lo\",source=\"budget\"}"),
        "{text}"
    );
}

#[test]
fn a_shifted_score_distribution_moves_the_band_not_the_share() {
    // A model scoring far higher (u^2): a fixed [0.3, 0.7] band would take 29% of
    // traffic; the budget band keeps 3% once the window has turned over.
    let fixed = engine(Power::new(2.0), None);
    let mut next = 0;
    let share_fixed = escalated(&fixed, &mut next, 20_000);
    assert!((share_fixed - 0.289).abs() < 0.02, "{share_fixed}");
    assert_eq!(fixed.gray_band().source, "fixed");

    let model = Power::new(8.0);
    let e = engine(model.clone(), Some(budget(0.03)));
    escalated(&e, &mut next, 20_000);
    e.gray_band_tick();
    let before = e.gray_band();
    // u in [0.926, 0.956): u^8 from ~0.54.
    assert!((before.lo - 0.926f32.powi(8)).abs() < 0.02, "{before:?}");
    // The same engine's model shifts; after one refresh the window still remembers u^8,
    // after five half-lives of the new scores the band is the new model's.
    model.set(2.0);
    escalated(&e, &mut next, 5_000);
    e.gray_band_tick();
    let during = e.gray_band();
    assert!(
        during.lo > before.lo && during.lo < 0.807f32.powi(2) - 0.02,
        "{during:?}"
    );
    for _ in 0..5 {
        escalated(&e, &mut next, 20_000);
        e.gray_band_tick();
    }
    // u in [0.807, 0.837): u^2 from ~0.65.
    let after = e.gray_band();
    assert!(
        (after.lo - 0.807f32.powi(2)).abs() < 0.02,
        "{before:?} -> {after:?}"
    );
    let share = escalated(&e, &mut next, 30_000);
    assert!((share - 0.03).abs() < 0.004, "{share}");
}

#[test]
fn gray_budget_in_risk_toml_and_its_refusals() {
    let base = r#"
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "constant"
probability = 0.1
[fast.scorer]
kind = "constant"
probability = 0.6
[deep.scorer]
kind = "constant"
probability = 0.9
"#;
    let load = |gray: &str| {
        Engine::from_toml_str(
            &format!("{base}\n[gray]\n{gray}"),
            Path::new("."),
            Path::new("risk.toml"),
            &ScorerRegistry::default(),
        )
    };
    let e = load("budget = 0.02\nbudget_half_life = 50000\nbudget_refresh_ms = 250").unwrap();
    assert_eq!(
        e.config().gray_budget,
        Some(GrayBudget {
            share: 0.02,
            half_life: 50_000,
            refresh: Duration::from_millis(250)
        })
    );
    assert_eq!(e.gray_band().source, "fixed");
    e.shutdown(Shutdown::Abandon);
    for (bad, key) in [
        ("budget = 0.9", "gray.budget"),
        ("budget = 0", "gray.budget"),
        (
            "budget = 0.02\nbudget_half_life = 10",
            "gray.budget_half_life",
        ),
        (
            "budget = 0.02\nbudget_refresh_ms = 1",
            "gray.budget_refresh_ms",
        ),
        ("budget_half_life = 50000", "gray.budget"),
    ] {
        match load(bad) {
            Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}
