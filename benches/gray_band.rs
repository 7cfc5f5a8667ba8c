//! The budget band's cost on `decide` (issue [20] part 2): an engine with a deep tier and
//! the fixed band against the same engine whose band `gray.budget` sets, sized to the
//! share the fixed band escalates on these rows (so both hand the deep tier the same
//! amount of work); one thread, median, the baseline measured again last.

use criterion::{black_box, Criterion};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{
    Engine, Escalation, GrayBudget, Latency, Score, ScoreError, Scorer, ScorerInfo, Slot,
    Transaction,
};
use std::sync::Arc;
use std::time::Duration;

/// A score spread over [0, 1] by the amount (the synthetic amounts are log-normal).
struct Spread(Slot);

impl Scorer for Spread {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("spread", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let a = t.features.get(self.0);
        Ok(Score::new((a / (a + 150.0)).clamp(0.0, 1.0)))
    }
}

fn rows() -> Vec<Transaction> {
    generate(&SynthConfig::new(13, 8192))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

fn engine(budget: Option<f64>) -> Engine {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let mut b = Engine::builder(s)
        .rules(Arc::new(Spread(slot)))
        .fast(Arc::new(Spread(slot)))
        .deep(Arc::new(Spread(slot)));
    if let Some(share) = budget {
        b = b.gray_budget(GrayBudget {
            share,
            half_life: 100_000,
            refresh: Duration::from_millis(100),
        });
    }
    b.build().unwrap()
}

/// `decide` with the fixed band against the budget band.
pub fn decide(c: &mut Criterion) {
    let txns = rows();
    let fixed = engine(None);
    let share = txns
        .iter()
        .filter(|t| !matches!(fixed.decide(t).unwrap().escalation, Escalation::None))
        .count() as f64
        / txns.len() as f64;
    let budget = engine(Some(share.clamp(0.001, 0.5)));
    for t in &txns {
        budget.decide(t).unwrap();
    }
    budget.gray_band_tick();
    eprintln!(
        "gray_band: fixed band escalates {share:.4} of these rows; budget band {:?}",
        budget.gray_band()
    );
    let mut g = c.benchmark_group("gray_band");
    let mut i = 0;
    for (name, e) in [
        ("decide_fixed_band", &fixed),
        ("decide_budget_band", &budget),
        ("decide_fixed_band_again", &fixed),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % txns.len();
                black_box(e.decide(black_box(&txns[i])).unwrap())
            })
        });
    }
    g.finish();
}
