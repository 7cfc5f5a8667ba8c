//! Multi-class tree models: XGBoost `multi:softprob` (`testdata/models/xgb_variants/`,
//! `tools/xgb_variants.py`) and LightGBM `multiclass` (`testdata/models/lgbm/`,
//! `tools/lightgbm_models.py`), over fraud types (0 legitimate, 1 card testing, 2 account
//! takeover). Per-class margins, probabilities and SHAP equal the libraries'; `risk.toml`
//! names the fraud classes and gets their summed probability, with reasons for the most
//! probable of them.

use crate::common::*;
use risk_core::{Engine, FeatureSchema, Transaction};
use risk_gpu::trees::multiclass::MultiClassModel;
use risk_gpu::trees::{TreeError, XgbModel};
use std::sync::Arc;

fn reference(dir: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(models().join(dir).join("reference.json")).unwrap())
        .unwrap()
}

fn check(dir: &str, file: &str) {
    let r = reference(dir);
    let rows = json_rows(&r["rows"]);
    let want = &r["multiclass"];
    let m = MultiClassModel::from_file(models().join(dir).join(file)).unwrap();
    assert_eq!(m.num_classes(), 3);
    let (mut worst_m, mut worst_p, mut worst_c) = (0f64, 0f64, 0f64);
    let (mut p, mut phi) = (Vec::new(), Vec::new());
    for (i, x) in rows.iter().enumerate() {
        m.probabilities(x, &mut p);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        for k in 0..3 {
            let margin = m.class(k).margin(x);
            worst_m = worst_m.max((margin - want["margin"][i][k].as_f64().unwrap()).abs());
            worst_p = worst_p.max((p[k] - want["prob"][i][k].as_f64().unwrap()).abs());
            m.class(k).contributions(x, &mut phi);
            for (a, b) in phi.iter().zip(json_f64s(&want["contrib"][i][k])) {
                worst_c = worst_c.max((a - b).abs());
            }
        }
    }
    eprintln!(
        "{dir}/{file}: max |margin| {worst_m:.2e}, |prob| {worst_p:.2e}, |shap| {worst_c:.2e}"
    );
    assert!(worst_m <= 1e-5 && worst_p <= 1e-6 && worst_c <= 1e-5);
    // Loaded as a one-output model, it says how to load it.
    match XgbModel::from_file(models().join(dir).join(file)) {
        Err(TreeError::Unsupported(msg)) => assert!(msg.contains("classes = ["), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn xgboost_softprob_equals_xgboost_per_class() {
    check("xgb_variants", "multiclass.json");
}

#[test]
fn lightgbm_multiclass_equals_lightgbm_per_class() {
    check("lgbm", "multiclass.txt");
}

#[test]
fn risk_toml_scores_the_named_fraud_classes() {
    let r = reference("lgbm");
    let names: Vec<String> = r["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    let mut b = FeatureSchema::builder();
    for n in &names {
        b = b.numeric(n);
    }
    let s: Arc<FeatureSchema> = b.build().unwrap();
    let mut reg = risk_core::ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    let toml = |extra: &str| {
        format!(
            "{}[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n[fast.scorer]\n\
             kind = \"lightgbm\"\npath = \"lgbm/multiclass.txt\"\nexplain_above = 0.0\n{extra}",
            s.to_toml()
        )
    };
    let p = std::path::Path::new("risk.toml");
    let e = Engine::from_toml_str(&toml("classes = [1, 2]\n"), &models(), p, &reg).unwrap();
    let m = MultiClassModel::from_file(models().join("lgbm/multiclass.txt")).unwrap();
    let rows = json_rows(&r["rows"]);
    let mut probs = Vec::new();
    for x in rows.iter().take(20) {
        let mut t = Transaction::builder(e.schema()).amount(x[0].max(0.01) as f64, "USD");
        for (n, v) in names.iter().zip(x).skip(1) {
            t = if v.is_finite() {
                t.numeric(n, *v)
            } else {
                t.missing(n)
            };
        }
        let t = t.build().unwrap();
        let mut row = t.features.values().to_vec();
        row.truncate(names.len());
        m.probabilities(&row, &mut probs);
        let d = e.decide(&t).unwrap();
        let want = (probs[1] + probs[2]) as f32;
        assert!((d.model_score.unwrap() - want).abs() < 1e-6);
        let top = if probs[1] >= probs[2] {
            "class1"
        } else {
            "class2"
        };
        assert!(d
            .reasons
            .iter()
            .filter(|r| r.code.name().starts_with("lgbm:"))
            .all(|r| r.code.name().starts_with(&format!("lgbm:{top}:"))));
    }
    // No fraud class, every class, a class that is not there, or none named: refused.
    for bad in [
        "classes = []\n",
        "classes = [0, 1, 2]\n",
        "classes = [3]\n",
        "classes = [1, 1]\n",
        "classes = \"1\"\n",
        "",
    ] {
        let err = Engine::from_toml_str(&toml(bad), &models(), p, &reg).unwrap_err();
        assert!(err.to_string().contains("class"), "{bad}: {err}");
    }
    // classes on a binary model: refused too.
    let bin = toml("classes = [1]\n").replace("multiclass.txt", "binary_nan.txt");
    assert!(Engine::from_toml_str(&bin, &models(), p, &reg).is_err());
}
