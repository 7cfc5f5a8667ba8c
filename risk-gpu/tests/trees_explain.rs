//! Reasons only for the decisions that need them (`explain = "decision"`) and on request
//! (`Engine::explain`), against the same model explaining every score.

use crate::common::*;
use risk_core::ensemble::{EnsembleScorer, Member};
use risk_core::synth::schema;
use risk_core::{Action, ConfigError, Engine, Reason, ScorerRegistry, Transaction};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::path::Path;
use std::sync::Arc;

/// An engine of constant rules (0.0) and the committed XGBoost model, its scorer's
/// table given `extra` keys.
fn engine(extra: &str) -> Result<Engine, ConfigError> {
    let mut reg = ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    let text = format!(
        "{}[rules.scorer]\nkind = \"constant\"\nprobability = 0.0\n[fast.scorer]\nkind = \"xgboost\"\npath = \"xgb_fraud.json\"\ntop_k = 3\n{extra}[thresholds]\napprove_below = 0.3\ndecline_at = 0.7\n",
        schema().to_toml()
    );
    Engine::from_toml_str(&text, &models(), Path::new("risk.toml"), &reg)
}

/// The model's reasons among a decision's.
fn model_reasons(reasons: &[Reason]) -> Vec<(String, u32)> {
    reasons
        .iter()
        .filter(|r| r.code.name().starts_with("xgb:"))
        .map(|r| (r.code.name().to_owned(), r.weight.to_bits()))
        .collect()
}

#[test]
fn decision_mode_explains_reviews_and_declines_only_and_explain_answers_on_request() {
    let by_decision = engine("explain = \"decision\"\n").unwrap();
    let every = engine("explain_above = 0.0\n").unwrap();
    let r = reference();
    let (mut approved, mut explained) = (0, 0);
    for i in 0..r.rows.min(2_000) {
        let mut t = ref_txn(&r, i);
        t.amount = t.features.values()[0] as f64;
        let d = by_decision.decide(&t).unwrap();
        let e = every.decide(&t).unwrap();
        assert_eq!(
            (d.action, d.model_score),
            (e.action, e.model_score),
            "row {i}"
        );
        let all = model_reasons(e.reasons.as_slice());
        assert!(
            !all.is_empty(),
            "row {i}: explain_above = 0 explains every row"
        );
        if d.action == Action::Approve {
            approved += 1;
            assert!(model_reasons(d.reasons.as_slice()).is_empty(), "row {i}");
        } else {
            explained += 1;
            // The same contributions, the same order, bit for bit.
            assert_eq!(model_reasons(d.reasons.as_slice()), all, "row {i}");
        }
        // On request, for any decision.
        let asked = by_decision.explain(&t).unwrap().expect("a model serves");
        assert_eq!(model_reasons(asked.as_slice()), all, "row {i}");
    }
    assert!(approved > 100 && explained > 10, "{approved} / {explained}");
    // Bad input is refused as `decide` refuses it.
    let mut bad = Transaction::builder(by_decision.schema())
        .amount(1.0, "USD")
        .build()
        .unwrap();
    bad.features.values_mut()[0] = f32::INFINITY;
    assert!(by_decision.explain(&bad).is_err());
}

#[test]
fn explain_settings_are_checked() {
    for (extra, says) in [
        (
            "explain = \"decision\"\nexplain_above = 0.5\n",
            "drop explain_above",
        ),
        ("explain = \"sometimes\"\n", "\"sometimes\""),
    ] {
        let Err(err) = engine(extra) else {
            panic!("{extra}: accepted")
        };
        let err = err.to_string();
        assert!(
            err.contains("explain") && err.contains(says),
            "{extra}: {err}"
        );
    }
    // "score" is the default's name.
    engine("explain = \"score\"\nexplain_above = 0.5\n").unwrap();
}

#[test]
fn an_ensemble_refuses_a_member_that_defers_its_reasons() {
    let model = Arc::new(XgbModel::from_file(models().join("xgb_fraud.json")).unwrap());
    let s = schema();
    let deferring = XgbScorer::new(model.clone(), &s, 0.3, 3)
        .unwrap()
        .explain_on_decision();
    let Err(err) = EnsembleScorer::new(vec![Member::new(Arc::new(deferring), 1.0)]) else {
        panic!("an ensemble took a member that defers its reasons")
    };
    assert!(err.contains("defers its reasons"), "{err}");
    let plain = XgbScorer::new(model, &s, 0.3, 3).unwrap();
    assert!(EnsembleScorer::new(vec![Member::new(Arc::new(plain), 1.0)]).is_ok());
}
