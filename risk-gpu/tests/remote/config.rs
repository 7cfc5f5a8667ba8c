//! `kind = "kserve"` in risk.toml, for the fast and for the deep tier, against MLServer.

use super::*;
use risk_core::{DeepSource, Engine, ScorerRegistry, Tier};
use std::path::Path;

fn registry() -> ScorerRegistry {
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    reg
}

fn kserve(table: &str) -> String {
    format!(
        "[{table}]\nkind = \"kserve\"\nendpoints = [{:?}]\nmodel = \"{MODEL}\"\noutput = \"predict_proba\"\nload_timeout_ms = 60000\nwarmup_requests = 2\n[{table}.hedge]\npercentile = 0.95\nmax_extra = 0.05\n[{table}.retry]\nmax = 1\n[{table}.breaker]\nfailures = 5\nopen_ms = 1000\n",
        mlserver_url()
    )
}

fn build(text: &str) -> Engine {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    Engine::from_toml_str(text, &dir, Path::new("<test>"), &registry())
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn risk_toml_names_a_remote_fast_tier() {
    let e = build(&crate::config_file::with_fast(&kserve("fast.scorer")));
    let native = native();
    let r = reference();
    let mut fast = 0;
    for t in txns(&r, 200) {
        let d = e.decide(&t).unwrap();
        // The rules file's hard rules decide some rows; the model answered every one.
        assert_eq!(d.fallback, None);
        fast += (d.tier == Tier::Fast) as usize;
        let p = d.model_score.unwrap();
        assert!((p - want(&native, &t)).abs() <= 1e-6);
    }
    assert!(fast > 150, "{fast} of 200 by the model");
    assert_eq!(e.versions().fast.unwrap().name(), "kserve:xgb-fraud");
}

#[test]
fn risk_toml_names_a_remote_deep_tier() {
    // Every decision escalates; the deep tier is the same model, served remotely.
    let text = crate::config_file::with_fast(
        "[fast.scorer]\nkind = \"xgboost\"\npath = \"../testdata/models/xgb_fraud.json\"\n",
    )
    .replace("band = [0.3, 0.7]", "band = [0.0, 1.0]");
    let text = format!(
        "{text}\n[deep]\nbudget_ms = 60000\nmax_batch = 8\nmax_wait_ms = 2\n{}",
        kserve("deep.scorer")
    );
    let e = build(&text);
    let verdicts = e.subscribe();
    let native = native();
    let all = txns(&reference(), 64);
    let mut sent = std::collections::HashMap::new();
    for t in &all {
        let d = e.decide(t).unwrap();
        // Hard rules decide some rows outright; the rest escalate.
        if matches!(d.escalation, risk_core::Escalation::Enqueued(_)) {
            sent.insert(d.txn, want(&native, t));
        }
    }
    assert!(sent.len() > 32, "{} of 64 escalated", sent.len());
    for _ in 0..sent.len() {
        let v = verdicts.recv().unwrap();
        assert_eq!((v.source, v.failure), (DeepSource::Model, None));
        let w = sent[&v.txn];
        assert!((v.score - w).abs() <= 1e-6, "{} vs {w}", v.score);
    }
}
