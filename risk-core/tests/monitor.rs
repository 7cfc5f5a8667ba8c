//! Monitors stay quiet on clean traffic and fire on injected skew: model-vs-rules
//! agreement, feature and score drift (against a training baseline or one captured from
//! recent traffic), and deep-tier health; alerts are edge-triggered and recover.

use crate::common::*;
use parking_lot::Mutex;
use risk_core::monitor::{AlertKind, Baseline, MonitorConfig};
use risk_core::*;
use std::sync::Arc;

/// `p = amount / 1000`, or `1 - p` when skewed.
struct AmountModel(Mutex<bool>);
impl Scorer for AmountModel {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("amount", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let p = (t.amount as f32 / 1000.0).clamp(0.0, 1.0);
        Ok(Score::new(if *self.0.lock() { 1.0 - p } else { p }))
    }
}

/// Rules that score exactly like the unskewed model.
struct AmountRules;
impl Scorer for AmountRules {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("amount-rules", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        Ok(Score::new((t.amount as f32 / 1000.0).clamp(0.0, 1.0)))
    }
}

fn t(s: &Arc<FeatureSchema>, id: u64, amount: f64) -> Transaction {
    Transaction::builder(s)
        .id(id)
        .entity(1 + id % 500)
        .amount(amount, "USD")
        .numeric("amount", amount as f32)
        .country("US")
        .build()
        .unwrap()
}

fn clean(id: u64) -> f64 {
    (id.wrapping_mul(7919) % 1000) as f64
}

fn cfg() -> MonitorConfig {
    MonitorConfig {
        sample_every: 4,
        min_samples: 500,
        interval: std::time::Duration::ZERO,
        ..MonitorConfig::default()
    }
}

#[test]
fn agreement_is_quiet_on_clean_traffic_fires_on_skew_and_recovers() {
    let s = schema();
    let model = Arc::new(AmountModel(Mutex::new(false)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let e = Engine::builder(s.clone())
        .rules(Arc::new(AmountRules))
        .fast(model.clone())
        .monitor(cfg())
        .on_alert(move |a| sink.lock().push(a.firing))
        .build()
        .unwrap();
    let alerts = e.alerts();
    let mut id = 0;
    let mut run = |n: u64, amount: &dyn Fn(u64) -> f64| {
        for _ in 0..n {
            id += 1;
            e.decide(&t(&s, id, amount(id))).unwrap();
        }
        e.monitor_tick()
    };
    assert!(run(4000, &clean).is_empty(), "quiet on clean traffic");
    let (v, n) = e.monitor_report().unwrap().agreement.unwrap();
    assert!(v > 0.99 && n >= 500, "{v} over {n}");
    *model.0.lock() = true;
    let fired = run(4000, &clean);
    let a = fired
        .iter()
        .find(|a| a.kind == AlertKind::Agreement)
        .expect("agreement alert");
    assert!(a.firing && a.value < 0.95, "{a:?}");
    assert_eq!(alerts.try_recv().unwrap().kind, AlertKind::Agreement);
    assert!(
        run(4000, &clean)
            .iter()
            .all(|a| a.kind != AlertKind::Agreement),
        "edge-triggered: no repeat"
    );
    assert_eq!(
        e.monitor_report().unwrap().firing,
        vec!["agreement:agreement".to_owned()]
    );
    *model.0.lock() = false;
    let back = run(4000, &clean);
    assert!(
        back.iter()
            .any(|a| a.kind == AlertKind::Agreement && !a.firing),
        "{back:?}"
    );
}

#[test]
fn drift_against_a_training_baseline_is_quiet_on_clean_and_fires_on_shifted_amounts() {
    let s = schema();
    let train: Vec<Transaction> = (0..5000)
        .map(|i| t(&s, 1_000_000 + i, clean(i * 13)))
        .collect();
    let scores: Vec<f32> = train
        .iter()
        .map(|x| (x.amount as f32 / 1000.0).min(1.0))
        .collect();
    let b = Arc::new(Baseline::fit(&s, &train, Some(&scores), 20));
    assert!(b.features().any(|f| f == "amount"));
    let e = Engine::builder(s.clone())
        .rules(Arc::new(AmountRules))
        .fast(Arc::new(AmountModel(Mutex::new(false))))
        .monitor(MonitorConfig {
            baseline: Some(b),
            ..cfg()
        })
        .build()
        .unwrap();
    for id in 0..4000 {
        e.decide(&t(&s, id, clean(id))).unwrap();
    }
    let quiet = e.monitor_tick();
    assert!(quiet.is_empty(), "{quiet:?}");
    let r = e.monitor_report().unwrap();
    let amount = r.drift.iter().find(|d| d.subject == "amount").unwrap();
    assert!(amount.ks < 0.05, "{amount:?}");
    for id in 4000..8000 {
        e.decide(&t(&s, id, 300.0 + clean(id) * 0.7)).unwrap();
    }
    let fired = e.monitor_tick();
    let kinds: Vec<_> = fired.iter().map(|a| (a.kind, a.subject.as_str())).collect();
    assert!(
        kinds.contains(&(AlertKind::FeatureDrift, "amount")),
        "{fired:?}"
    );
    assert!(
        kinds.contains(&(AlertKind::ScoreDrift, "score")),
        "{fired:?}"
    );
    assert!(fired.iter().all(|a| a.firing && a.value > 0.1));
}

#[test]
fn without_a_baseline_one_is_captured_from_recent_traffic() {
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(Arc::new(AmountRules))
        .fast(Arc::new(AmountModel(Mutex::new(false))))
        .deploy_config(risk_core::deploy::DeployConfig {
            sample_every: 1,
            ..Default::default()
        })
        .monitor(cfg())
        .build()
        .unwrap();
    assert!(!e.monitor_report().unwrap().baseline);
    for id in 0..2000 {
        e.decide(&t(&s, id, clean(id))).unwrap();
    }
    e.monitor_tick();
    assert!(e.monitor_report().unwrap().baseline);
    for id in 2000..6000 {
        e.decide(&t(&s, id, clean(id))).unwrap();
    }
    assert!(e
        .monitor_tick()
        .iter()
        .all(|a| a.kind != AlertKind::FeatureDrift));
}

#[test]
fn deep_health_fires_when_verdicts_are_fallbacks() {
    let s = schema();
    let deep = Scripted::new(Act::Error, Latency::Bounded);
    let e = Engine::builder(s.clone())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(deep)
        .deep_config(deep_cfg(60_000))
        .circuit(lenient_circuit())
        .monitor(cfg())
        .build()
        .unwrap();
    let verdicts = e.subscribe();
    for id in 0..60 {
        e.decide(&txn(&s, id, id)).unwrap();
    }
    for _ in 0..60 {
        verdicts
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap();
    }
    let fired = e.monitor_tick();
    let a = fired
        .iter()
        .find(|a| a.kind == AlertKind::DeepHealth)
        .expect("deep alert");
    assert!(a.firing && a.value > 0.99, "{a:?}");
}

#[test]
fn risk_toml_monitor_table_and_the_monitor_gauges() {
    let cfg = r#"
        [schema]
        fields = [{ name = "amount", kind = "numeric", required = true }]
        [rules.scorer]
        kind = "constant"
        probability = 0.1
        [fast.scorer]
        kind = "constant"
        probability = 0.9
        [monitor]
        sample_every = 1
        min_samples = 100
        interval_ms = 0
        agreement = "same_side"
        min_agreement = 0.9
    "#;
    let dir = std::path::Path::new(".");
    let origin = std::path::Path::new("risk.toml");
    let e = Engine::from_toml_str(cfg, dir, origin, &ScorerRegistry::default()).unwrap();
    let s = e.schema().clone();
    for id in 0..200 {
        let x = Transaction::builder(&s)
            .id(id)
            .amount(5.0, "USD")
            .numeric("amount", 5.0)
            .build()
            .unwrap();
        e.decide(&x).unwrap();
    }
    let fired = e.monitor_tick();
    assert!(
        fired
            .iter()
            .any(|a| a.kind == AlertKind::Agreement && a.firing),
        "{fired:?}"
    );
    let text = e.metrics_text();
    assert!(
        text.contains(r#"risk_monitor_agreement{monitor="agreement"} 0.0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"risk_alerts_firing{alert="agreement:agreement"} 1"#),
        "{text}"
    );
    for bad in [
        cfg.replace("sample_every = 1", "sample_every = 0"),
        cfg.replace("same_side", "sideways"),
        cfg.replace("min_agreement = 0.9", "min_agreement = 1.5"),
        cfg.replace("[monitor]", "[monitor]\nbogus = 1"),
    ] {
        assert!(
            Engine::from_toml_str(&bad, dir, origin, &ScorerRegistry::default()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn alerts_are_recorded_in_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(
        risk_core::audit::SegmentLog::open(risk_core::audit::LogOptions::new(dir.path())).unwrap(),
    );
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.9)))
        .audit_log(Arc::clone(&log))
        .monitor(MonitorConfig {
            sample_every: 1,
            min_samples: 50,
            ..cfg()
        })
        .build()
        .unwrap();
    for id in 0..100 {
        e.decide(&txn(&s, id, id)).unwrap();
    }
    assert!(e
        .monitor_tick()
        .iter()
        .any(|a| a.kind == AlertKind::Agreement));
    log.flush(std::time::Duration::from_secs(30)).unwrap();
    let q = risk_core::audit::Query {
        alerts: true,
        decisions: false,
        verdicts: false,
        ..Default::default()
    };
    let got: Vec<_> = risk_core::audit::AuditReader::new(dir.path())
        .query(q)
        .unwrap()
        .map(|r| r.unwrap().to_json())
        .collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["kind"], "alert");
    assert_eq!(got[0]["alert"], "agreement");
    assert_eq!(got[0]["firing"], true);
    // A plain lookup leaves alerts out.
    let plain = risk_core::audit::AuditReader::new(dir.path())
        .query(Default::default())
        .unwrap()
        .count();
    assert_eq!(plain, 100);
}
