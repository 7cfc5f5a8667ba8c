//! XGBoost beyond `gbtree` + `binary:logistic` (`testdata/models/xgb_variants/`, written
//! by `tools/xgb_variants.py` with xgboost 3.2): categorical splits (partition and one-hot,
//! JSON and UBJSON), `binary:logitraw`, `dart`. Margins and SHAP equal xgboost's
//! `predict(output_margin=True)` and `predict(pred_contribs=True)` on rows with NaN and
//! negative, fractional, unseen and out-of-range categories; bad category tables are
//! refused.

use crate::common::*;
use risk_gpu::trees::{TreeError, XgbModel};

fn dir() -> std::path::PathBuf {
    models().join("xgb_variants")
}

fn reference() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir().join("reference.json")).unwrap()).unwrap()
}

#[test]
fn variants_score_and_explain_as_xgboost() {
    let r = reference();
    let rows = json_rows(&r["rows"]);
    assert!(rows.len() >= 300);
    for name in [
        "categorical",
        "numeric",
        "logitraw",
        "dart",
        "squarederror",
        "poisson",
    ] {
        let m = XgbModel::from_file(dir().join(format!("{name}.json"))).unwrap();
        // All but the numeric twin are trained on the categorical features.
        assert_eq!(m.ensemble().has_categorical(), name != "numeric", "{name}");
        let want = &r["models"][name];
        let margins = json_f64s(&want["margin"]);
        let outputs = json_f64s(&want["output"]);
        let (mut worst_m, mut worst_c) = (0f64, 0f64);
        let mut phi = Vec::new();
        for (i, x) in rows.iter().enumerate() {
            let got = m.margin(x);
            // xgboost sums in float32: relative to the margin's size (regressions of an
            // amount reach the thousands).
            let scale = margins[i].abs().max(1.0);
            worst_m = worst_m.max((got - margins[i]).abs() / scale);
            m.contributions(x, &mut phi);
            for (p, w) in phi.iter().zip(json_f64s(&want["contrib"][i])) {
                worst_c = worst_c.max((p - w).abs() / scale);
            }
            let sum = phi.iter().sum::<f64>();
            assert!(
                (sum - got).abs() < 1e-5 * scale,
                "{name} row {i}: {sum} vs {got}"
            );
            // The output: the margin's logistic (logitraw included: xgboost's output is
            // its margin), or the regression's value.
            let y = m.predict(x) as f64;
            if name == "logitraw" {
                assert!((y - 1.0 / (1.0 + (-got).exp())).abs() < 1e-6);
            } else {
                let o = outputs[i];
                assert!(
                    (y - o).abs() <= 1e-5 * o.abs().max(1.0),
                    "{name} row {i}: {y} vs {o}"
                );
            }
        }
        eprintln!(
            "{name}: kernel {}, max |margin - xgboost| / max(1, |margin|) {worst_m:.2e}, \
             |shap| (same scale) {worst_c:.2e}",
            m.kernel()
        );
        assert!(
            worst_m <= 1e-5,
            "{name}: max |margin - xgboost| = {worst_m:e}"
        );
        assert!(
            worst_c <= 1e-5,
            "{name}: max |shap - xgboost| = {worst_c:e}"
        );
    }
}

#[test]
fn categorical_ubjson_equals_its_json() {
    let j = XgbModel::from_file(dir().join("categorical.json")).unwrap();
    let u = XgbModel::from_file(dir().join("categorical.ubj")).unwrap();
    assert!(j.ensemble().has_categorical());
    assert_eq!(j.kernel(), "walk");
    // Categorical splits in the subset tables (their threshold pass): equal to the
    // recursive algorithm.
    assert!(j.has_shap_tables());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for x in json_rows(&reference()["rows"]) {
        j.contributions(&x, &mut a);
        j.contributions_recursive(&x, &mut b);
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 2e-6, "{p} vs {q}");
        }
    }
    for x in json_rows(&reference()["rows"]) {
        assert_eq!(j.margin(&x).to_bits(), u.margin(&x).to_bits());
    }
    // XGBoost's rules on a categorical node: categories in the set go right; below 0
    // or from 2^24 on, left; NaN the default branch; fractions truncated.
    let e = j.ensemble();
    let (tree, node) = e
        .trees
        .iter()
        .flat_map(|t| t.nodes.iter().map(move |n| (t, n)))
        .find(|(_, n)| !n.is_leaf() && n.cat != risk_gpu::trees::ensemble::NO_CAT)
        .unwrap();
    let set = &tree.cats[node.cat as usize];
    let member = (0..32 * set.words.len() as u32)
        .find(|c| set.words[*c as usize / 32] >> (c % 32) & 1 == 1)
        .unwrap() as f32;
    assert!(!tree.goes_left(node, member));
    assert!(!tree.goes_left(node, member + 0.5));
    assert!(tree.goes_left(node, -0.5));
    assert!(tree.goes_left(node, 16_777_216.0));
    assert_eq!(tree.goes_left(node, f32::NAN), node.default_left);
}

#[test]
fn bad_category_tables_are_refused() {
    let text = std::fs::read_to_string(dir().join("categorical.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tree0 = &v["learner"]["gradient_booster"]["model"]["trees"][0];
    let cat_node = tree0["categories_nodes"][0].as_i64().unwrap() as usize;
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = v.clone();
        f(&mut v["learner"]["gradient_booster"]["model"]["trees"][0]);
        XgbModel::from_json(serde_json::to_string(&v).unwrap().as_bytes())
    };
    let expect = |r: Result<XgbModel, TreeError>, what: &str| match r {
        Err(e) => assert!(e.to_string().contains(what), "{what}: {e}"),
        Ok(_) => panic!("{what}: loaded"),
    };
    expect(
        edit(&|t| t["categories"][0] = serde_json::json!(-3)),
        "outside 0..2^24",
    );
    expect(
        edit(&|t| t["categories"][0] = serde_json::json!(1i64 << 24)),
        "outside 0..2^24",
    );
    expect(
        edit(&|t| t["categories_sizes"][0] = serde_json::json!(1_000_000)),
        "outside the",
    );
    expect(
        edit(&|t| t["categories_segments"] = serde_json::json!([])),
        "entries",
    );
    expect(
        edit(&|t| t["split_type"][cat_node] = serde_json::json!(0)),
        "is not a categorical split",
    );
    let numeric = tree0["split_type"]
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s == 0)
        .unwrap();
    expect(
        edit(&|t| t["split_type"][numeric] = serde_json::json!(1)),
        "without categories",
    );
    expect(
        edit(&|t| t["split_type"][cat_node] = serde_json::json!(2)),
        "split_type 2",
    );
}

#[test]
fn dart_weights_and_logitraw_base_are_read_and_checked() {
    let text = std::fs::read_to_string(dir().join("dart.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut short = v.clone();
    short["learner"]["gradient_booster"]["weight_drop"]
        .as_array_mut()
        .unwrap()
        .pop();
    match XgbModel::from_json(serde_json::to_string(&short).unwrap().as_bytes()) {
        Err(TreeError::Format(m)) => assert!(m.contains("weight_drop has 39"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Without weights the trees count fully: a different margin.
    let mut unweighted = v.clone();
    unweighted["learner"]["gradient_booster"]["weight_drop"] = serde_json::json!([]);
    let a = XgbModel::from_json(serde_json::to_string(&unweighted).unwrap().as_bytes()).unwrap();
    let b = XgbModel::from_json(text.as_bytes()).unwrap();
    let x = [50.0, 3.0, 1.0, 1.0, 100.0, 0.5];
    assert_ne!(a.margin(&x), b.margin(&x));
    // logitraw's base_score is a margin: base_score 0.3 adds 0.3, not logit(0.3).
    let l = XgbModel::from_file(dir().join("logitraw.json")).unwrap();
    assert!((l.ensemble().base_margin - 0.3).abs() < 1e-12);
}
