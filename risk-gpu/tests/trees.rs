//! Native XGBoost scoring and TreeSHAP against xgboost's own outputs.

use crate::common::*;
use risk_core::synth::schema;
use risk_core::{Engine, Scorer, Transaction};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::sync::Arc;

fn model() -> XgbModel {
    XgbModel::from_file(models().join("xgb_fraud.json")).unwrap()
}

#[test]
fn probabilities_equal_xgboost_on_every_test_row() {
    let r = reference();
    let m = model();
    assert!(m.is_padded());
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        m.kernel(),
        if std::arch::is_x86_feature_detected!("avx2") {
            "avx2-bytes"
        } else if std::arch::is_x86_feature_detected!("avx512f") {
            "avx512-top"
        } else {
            "scalar"
        },
        "18 features, 100 trees, depth 6: the byte kernel runs wherever the CPU has AVX2"
    );
    assert_eq!(m.num_features(), r.features);
    let missing = r.x.iter().filter(|v| v.is_nan()).count();
    assert!(
        missing > 1000,
        "the reference rows must include missing values ({missing})"
    );
    let (mut worst_p, mut worst_m) = (0f64, 0f64);
    for i in 0..r.rows {
        let x = &r.x[i * r.features..(i + 1) * r.features];
        let p = m.predict(x) as f64;
        worst_p = worst_p.max((p - r.probs[i] as f64).abs());
        worst_m = worst_m.max((m.margin(x) - r.margins[i] as f64).abs());
        // The SIMD kernel and the scalar traversal agree bit for bit.
        assert_eq!(m.margin(x), m.margin_scalar(x), "row {i}");
        // The padded layout and the plain walk agree.
        let walk = m.ensemble().margin_walk(x);
        assert!(
            (walk - m.margin(x)).abs() < 1e-5,
            "row {i}: walk {walk} vs flat {}",
            m.margin(x)
        );
    }
    assert!(r.rows >= 10_000);
    assert!(worst_p <= 1e-6, "max |p - xgboost| = {worst_p:e}");
    assert!(worst_m <= 1e-4, "max |margin - xgboost| = {worst_m:e}");
}

#[test]
fn batch_equals_single_rows() {
    let r = reference();
    let m = model();
    let rows: Vec<&[f32]> = (0..500)
        .map(|i| &r.x[i * r.features..(i + 1) * r.features])
        .collect();
    let mut out = vec![0f32; rows.len()];
    m.predict_batch(&rows, &mut out);
    for (x, p) in rows.iter().zip(&out) {
        assert!((m.predict(x) - p).abs() <= 1e-6);
    }
}

#[test]
fn tree_shap_equals_xgboost_pred_contribs_and_sums_to_the_margin() {
    let r = reference();
    let m = model();
    let nf = r.features;
    assert!(m.has_shap_tables());
    let mut phi = Vec::new();
    let mut rec = Vec::new();
    let mut worst = 0f64;
    for i in 0..r.contrib_rows {
        let x = &r.x[i * nf..(i + 1) * nf];
        m.contributions(x, &mut phi);
        // Tables and the recursive algorithm agree.
        m.contributions_recursive(x, &mut rec);
        for (a, b) in phi.iter().zip(&rec) {
            assert!((a - b).abs() < 2e-6, "row {i}: table {a} vs recursive {b}");
        }
        assert_eq!(phi.len(), nf + 1);
        let want = &r.contribs[i * (nf + 1)..(i + 1) * (nf + 1)];
        for (p, w) in phi.iter().zip(want) {
            worst = worst.max((p - *w as f64).abs());
        }
        let sum: f64 = phi.iter().sum();
        assert!(
            (sum - m.margin(x)).abs() < 1e-4,
            "row {i}: sum {sum} vs margin {}",
            m.margin(x)
        );
    }
    assert!(worst <= 1e-5, "max |phi - pred_contribs| = {worst:e}");
}

#[test]
fn scorer_in_the_engine_explains_high_scores() {
    let s = schema();
    let model = Arc::new(model());
    let scorer = Arc::new(XgbScorer::new(model.clone(), &s, 0.3, 3).unwrap());
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(risk_core::ConstantScorer::new(0.0)))
        .fast(scorer.clone())
        .build()
        .unwrap();
    let r = reference();
    let mut explained = 0;
    for i in 0..2_000 {
        let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
        t.features
            .values_mut()
            .copy_from_slice(&r.x[i * r.features..(i + 1) * r.features]);
        t.amount = t.features.values()[0] as f64;
        let d = engine.decide(&t).unwrap();
        assert_eq!(d.tier, risk_core::Tier::Fast);
        assert!((d.model_score.unwrap() - r.probs[i]).abs() <= 1e-6);
        if d.model_score.unwrap() >= 0.3 {
            explained += 1;
            let reasons: Vec<_> = d
                .reasons
                .iter()
                .filter(|x| x.code.name().starts_with("xgb:"))
                .collect();
            assert!(!reasons.is_empty() && reasons.len() <= 3, "{:?}", d.reasons);
            assert!(reasons.windows(2).all(|w| w[0].weight >= w[1].weight));
        } else {
            assert!(d.reasons.iter().all(|x| !x.code.name().starts_with("xgb:")));
        }
    }
    assert!(explained > 10);
    // Batch through the Scorer equals single.
    let txns: Vec<Transaction> = (0..64)
        .map(|i| {
            let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
            t.features
                .values_mut()
                .copy_from_slice(&r.x[i * r.features..(i + 1) * r.features]);
            t
        })
        .collect();
    let refs: Vec<&Transaction> = txns.iter().collect();
    let mut out = Vec::new();
    scorer.score_batch(&refs, &mut out).unwrap();
    for (t, b) in txns.iter().zip(&out) {
        assert!((scorer.score(t).unwrap().probability - b.probability).abs() <= 1e-6);
    }
}

#[test]
fn risk_toml_builds_the_xgboost_tier() {
    let s = schema();
    let text = format!(
        "{}[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n[fast.scorer]\nkind = \"xgboost\"\npath = \"xgb_fraud.json\"\n",
        s.to_toml()
    );
    let mut reg = risk_core::ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    let e =
        Engine::from_toml_str(&text, &models(), std::path::Path::new("risk.toml"), &reg).unwrap();
    let t = Transaction::builder(e.schema())
        .amount(10.0, "USD")
        .build()
        .unwrap();
    assert_eq!(e.decide(&t).unwrap().tier, risk_core::Tier::Fast);
    let bad = text.replace("xgb_fraud.json", "nope.json");
    let err = Engine::from_toml_str(&bad, &models(), std::path::Path::new("risk.toml"), &reg)
        .unwrap_err();
    assert_eq!(err.key(), Some("fast.scorer"));
}
