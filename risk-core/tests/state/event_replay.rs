//! `EventReplay`: labels reach entity state when they became known (not before), and a
//! replay that keeps the deep tier applies each verdict before the entity's next row.

use super::{schema, HOUR, T0};
use risk_core::state::{Agg, FeatureDef, KeySource, StateConfig};
use risk_core::*;
use std::sync::Arc;
use std::time::Duration;

/// Answers `field / 10`.
struct Echo(Slot);
impl Scorer for Echo {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("echo", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        Ok(Score::new((t.features.get(self.0) / 10.0).clamp(0.0, 1.0)))
    }
}

fn state() -> StateConfig {
    let mut c = StateConfig::default();
    c.features.push(
        FeatureDef::new("card_fraud_30d", KeySource::Entity, Agg::FraudCount)
            .window(Duration::from_secs(30 * 86_400), 30),
    );
    c
}

fn txn(s: &Arc<FeatureSchema>, id: u64, card: u64, ts: i64) -> Transaction {
    Transaction::builder(s)
        .id(id)
        .entity(card)
        .timestamp_ms(ts)
        .amount(20.0, "USD")
        .build()
        .unwrap()
}

#[test]
fn labels_count_from_the_time_they_became_known() {
    let cfg = state();
    let s = schema(&cfg);
    let clock = EventReplay::clock(T0);
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(Echo(s.slot("card_fraud_30d").unwrap())))
        .state(cfg)
        .for_replay(clock.clone())
        .build()
        .unwrap();
    let labels = [
        // Known two hours after txn 1; given out of order.
        ReplayLabel {
            known_ms: T0 + 10 * HOUR,
            txn: TxnId(3),
            fraud: true,
        },
        ReplayLabel {
            known_ms: T0 + 2 * HOUR,
            txn: TxnId(1),
            fraud: true,
        },
        // Never reached: after the last row.
        ReplayLabel {
            known_ms: T0 + 100 * HOUR,
            txn: TxnId(2),
            fraud: true,
        },
    ];
    let mut rep = EventReplay::new(&engine, clock, T0, labels, false);
    let at = |h: i64| T0 + h * HOUR;
    let rows = [(1, at(0)), (2, at(1)), (3, at(3)), (4, at(9)), (5, at(11))];
    let scores: Vec<f32> = rows
        .iter()
        .map(|&(id, ts)| rep.decide_in_time(&txn(&s, id, 7, ts)).unwrap().rule_score)
        .collect();
    // Txn 1's label counts from hour 2 (txn 3 on); txn 3's from hour 10 (txn 5).
    assert_eq!(scores, [0.0, 0.0, 0.1, 0.1, 0.2]);
    let st = rep.finish();
    assert_eq!(
        (st.labels_fed, st.labels_after_end, st.labels_refused),
        (2, 1, 0)
    );
    assert!(st.deep.is_none());
}

#[test]
fn a_kept_deep_tier_shifts_the_entitys_next_row() {
    let cfg = state();
    let s = schema(&cfg);
    let clock = EventReplay::clock(T0);
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(ConstantScorer::new(0.0)))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(Arc::new(ConstantScorer::new(0.9)))
        .gray_band(0.3, 0.7)
        // A batch that would wait an hour for a second item: a replay's clock stands
        // still, so the replay engine must not wait at all.
        .deep_config(DeepConfig {
            max_batch: 8,
            max_wait: Duration::from_secs(3_600),
            ..DeepConfig::default()
        })
        .feedback_config(FeedbackConfig {
            max_future: None,
            ..FeedbackConfig::default()
        })
        .state(cfg)
        .replay_keeping_deep(clock.clone())
        .build()
        .unwrap();
    let mut rep = EventReplay::new(&engine, clock, T0, [], true);
    let a = rep.decide_in_time(&txn(&s, 1, 7, T0)).unwrap();
    let b = rep.decide_in_time(&txn(&s, 2, 7, T0 + 1_000)).unwrap();
    let other = rep.decide_in_time(&txn(&s, 3, 8, T0 + 2_000)).unwrap();
    assert!(matches!(a.escalation, Escalation::Enqueued(_)));
    assert_eq!(a.threshold_shift, 0.0);
    // gain 0.5 × (0.9 − centre 0.5) = 0.2, at the bound.
    assert!(
        (b.threshold_shift - 0.2).abs() < 1e-6,
        "{}",
        b.threshold_shift
    );
    assert_eq!(
        other.threshold_shift, 0.0,
        "another card keeps its thresholds"
    );
    let st = rep.finish();
    let d = st.deep.unwrap();
    assert_eq!((d.verdicts, d.lost), (3, 0));
    assert!(d.p50_us <= d.p99_us);
    engine.shutdown(Shutdown::Abandon);
}
