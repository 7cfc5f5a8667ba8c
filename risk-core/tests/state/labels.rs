//! Delayed labels: a merchant's fraud rate over the week that ended a week ago.

use super::*;
use risk_core::state::{Agg, FeatureDef, KeySource, StateEngine, StateError};
use std::time::Duration;

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}

fn engine(max_pending: usize) -> (StateEngine, Arc<FeatureSchema>) {
    let cfg = StateConfig {
        features: vec![
            FeatureDef::new("m_fraud_7d", KeySource::Merchant, Agg::FraudCount)
                .window(days(7), 7)
                .delay(days(7)),
            FeatureDef::new("m_risk_7d", KeySource::Merchant, Agg::FraudRate)
                .window(days(7), 7)
                .delay(days(7)),
        ],
        max_pending_labels: max_pending,
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    (
        StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap(),
        s,
    )
}

fn at(s: &Arc<FeatureSchema>, id: u64, merchant: &str, ts: i64) -> Transaction {
    Transaction::builder(s)
        .id(id)
        .entity(id)
        .timestamp_ms(ts)
        .amount(20.0, "USD")
        .merchant(merchant)
        .build()
        .unwrap()
}

fn read(st: &StateEngine, s: &Arc<FeatureSchema>, id: u64, ts: i64) -> (Option<f32>, Option<f32>) {
    let mut t = at(s, id, "shop", ts);
    st.apply(&mut t);
    (
        t.features.by_name("m_fraud_7d"),
        t.features.by_name("m_risk_7d"),
    )
}

#[test]
fn labels_count_only_once_the_delay_has_passed() {
    let (st, s) = engine(1_000);
    // Day 0: ten transactions at the merchant; three later reported as fraud.
    for id in 1..=10 {
        st.apply(&mut at(&s, id, "shop", T0 + id as i64 * MIN));
    }
    for id in [2, 5, 9] {
        assert_eq!(
            st.report_label(TxnId(id), true, T0 + 2 * DAY).unwrap(),
            1,
            "the two features share one window"
        );
    }
    // Repeats count once; a label before its transaction is refused; unknown ids too.
    st.report_label(TxnId(2), true, T0 + 3 * DAY).unwrap();
    assert!(matches!(
        st.report_label(TxnId(3), true, T0 - DAY),
        Err(StateError::LabelBeforeTxn { .. })
    ));
    assert!(matches!(
        st.report_label(TxnId(999), true, T0 + DAY),
        Err(StateError::UnknownTxn(999))
    ));
    // Day 3: within the delay, nothing is trusted yet.
    assert_eq!(read(&st, &s, 100, T0 + 3 * DAY), (Some(0.0), None));
    // Day 8: the window [day -6, day 1] holds day 0: 3 of 10 (the day-3 read is outside).
    assert_eq!(read(&st, &s, 101, T0 + 8 * DAY), (Some(3.0), Some(0.3)));
    // A retraction (chargeback reversed) takes one back.
    st.report_label(TxnId(5), false, T0 + 9 * DAY).unwrap();
    assert_eq!(read(&st, &s, 102, T0 + 9 * DAY), (Some(2.0), Some(0.2)));
    // Day 16: day 0 has left the window; day 3's transaction (no label) is in it.
    assert_eq!(read(&st, &s, 103, T0 + 16 * DAY), (Some(0.0), Some(0.0)));
    // Other merchants are untouched.
    let mut t = at(&s, 104, "other", T0 + 8 * DAY);
    st.apply(&mut t);
    assert_eq!(t.features.by_name("m_fraud_7d"), Some(0.0));
    let stats = st.stats();
    assert_eq!((stats.labels, stats.labels_unknown), (4, 1));
}

#[test]
fn the_pending_index_is_bounded() {
    let (st, s) = engine(64);
    for id in 1..=10_000 {
        st.apply(&mut at(&s, id, "shop", T0 + id as i64 * 1_000));
    }
    assert!(st.pending_labels() <= 64 + 32, "{}", st.pending_labels());
    let forgotten = (1..=1_000)
        .filter(|&id| {
            matches!(
                st.report_label(TxnId(id), true, T0 + DAY),
                Err(StateError::UnknownTxn(_))
            )
        })
        .count();
    assert!(
        forgotten >= 950,
        "only {forgotten} of the oldest 1000 were evicted"
    );
    // The newest are remembered.
    st.report_label(TxnId(10_000), true, T0 + DAY).unwrap();
}

#[test]
fn labels_without_label_features_are_a_typed_error() {
    let cfg = StateConfig {
        features: vec![FeatureDef::new("c", KeySource::Entity, Agg::Count)],
        ..StateConfig::default()
    };
    let st = StateEngine::new(cfg.clone(), schema(&cfg), clock(T0)).unwrap();
    assert!(matches!(
        st.report_label(TxnId(1), true, T0),
        Err(StateError::NoLabels)
    ));
}

/// Labels feed the monitors: decisions checked against their labels (fraud stopped or
/// missed, legitimate declined or passed), a retraction moving one, and an alert when
/// too few labelled frauds were stopped.
#[test]
fn labels_feed_the_label_monitor() {
    use risk_core::monitor::{AlertKind, MonitorConfig};
    let cfg = StateConfig {
        features: vec![
            FeatureDef::new("m_fraud_7d", KeySource::Merchant, Agg::FraudCount)
                .window(days(7), 7)
                .delay(days(7)),
        ],
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let amount = s.slot("amount").unwrap();
    // Declines at amount > 100 (a scorer of the amount), else approves.
    struct ByAmount(Slot);
    impl Scorer for ByAmount {
        fn info(&self) -> ScorerInfo {
            ScorerInfo::new("amt", "1", Latency::Bounded)
        }
        fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
            Ok(Score::new(if t.features.get(self.0) > 100.0 {
                0.95
            } else {
                0.05
            }))
        }
    }
    let e = Engine::builder(Arc::clone(&s))
        .clock(clock(T0 + 400 * DAY))
        .rules(Arc::new(ByAmount(amount)))
        .state(cfg)
        .monitor(MonitorConfig {
            min_labels: 4,
            min_label_recall: 0.6,
            interval: std::time::Duration::ZERO,
            ..MonitorConfig::default()
        })
        .build()
        .unwrap();
    let t = |id: u64, amt: f64| {
        Transaction::builder(&s)
            .id(id)
            .entity(id)
            .timestamp_ms(T0 + id as i64 * MIN)
            .amount(amt, "USD")
            .merchant("shop")
            .build()
            .unwrap()
    };
    for (id, amt) in [(1, 500.0), (2, 10.0), (3, 10.0), (4, 500.0)] {
        e.decide(&t(id, amt)).unwrap();
    }
    // Frauds: 1 (declined: stopped), 2 and 3 (approved: missed); 4 legitimate but declined.
    for id in [1, 2, 3] {
        e.report_label(TxnId(id), true, T0 + DAY).unwrap();
    }
    e.report_label(TxnId(4), false, T0 + DAY).unwrap();
    // A retraction: 3 was not fraud after all (missed -> legit passed).
    e.report_label(TxnId(3), false, T0 + 2 * DAY).unwrap();
    let alerts = e.monitor_tick();
    let q = e.monitor_report().unwrap().labels.unwrap();
    assert_eq!(
        (
            q.fraud_stopped,
            q.fraud_missed,
            q.legit_declined,
            q.legit_passed
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(q.recall(), Some(0.5));
    assert!(
        alerts
            .iter()
            .any(|a| a.kind == AlertKind::LabelRecall && a.firing),
        "{alerts:?}"
    );
    assert!(e
        .metrics_text()
        .contains("risk_monitor_labelled_decisions{cell=\"fraud_missed\"} 1"));
}
