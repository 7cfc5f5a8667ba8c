//! LightGBM's `dump_model()` JSON (`testdata/models/lgbm/*.dump.json`, written by
//! `tools/lightgbm_models.py`): read into the same trees as the text model of the same
//! booster, so margins and SHAP equal the text model's bit for bit (and so lightgbm's:
//! `trees_lightgbm.rs`); bad dumps are refused with what is wrong.

use crate::common::*;
use risk_gpu::trees::multiclass::MultiClassModel;
use risk_gpu::trees::{ModelFamily, TreeError, XgbModel};
use serde_json::Value;

fn lgbm(name: &str) -> std::path::PathBuf {
    models().join("lgbm").join(name)
}

fn rows() -> Vec<Vec<f32>> {
    let v: Value = serde_json::from_slice(&std::fs::read(lgbm("reference.json")).unwrap()).unwrap();
    json_rows(&v["rows"])
}

#[test]
fn a_dump_scores_and_explains_as_its_text_model() {
    let text = XgbModel::from_file(lgbm("categorical.txt")).unwrap();
    let dump = XgbModel::from_file(lgbm("categorical.dump.json")).unwrap();
    assert_eq!(dump.family(), ModelFamily::LightGBM);
    for (t, (a, b)) in dump
        .ensemble()
        .trees
        .iter()
        .zip(&text.ensemble().trees)
        .enumerate()
    {
        for (i, (x, y)) in a.nodes.iter().zip(&b.nodes).enumerate() {
            assert_eq!(x, y, "tree {t} node {i}");
        }
        assert_eq!(a.cats, b.cats, "tree {t}");
    }
    assert_eq!(dump.ensemble().trees.len(), text.ensemble().trees.len());
    assert_eq!(dump.ensemble().feature_names, text.ensemble().feature_names);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for x in rows() {
        assert_eq!(dump.margin(&x).to_bits(), text.margin(&x).to_bits());
        dump.contributions(&x, &mut a);
        text.contributions(&x, &mut b);
        assert_eq!(a, b);
    }
    // Multi-class dumps too, class by class.
    let mt = MultiClassModel::from_file(lgbm("multiclass.txt")).unwrap();
    let md = MultiClassModel::from_file(lgbm("multiclass.dump.json")).unwrap();
    for k in 0..3 {
        assert_eq!(md.class(k).ensemble(), mt.class(k).ensemble());
    }
}

#[test]
fn bad_dumps_are_refused_with_what_is_wrong() {
    let good: Value =
        serde_json::from_slice(&std::fs::read(lgbm("categorical.dump.json")).unwrap()).unwrap();
    let load = |v: &Value| XgbModel::from_lightgbm(serde_json::to_string(v).unwrap().as_bytes());
    let expect = |v: Value, what: &str| match load(&v) {
        Err(e) => assert!(e.to_string().contains(what), "{what}: {e}"),
        Ok(_) => panic!("{what}: loaded"),
    };
    // An edit of tree 0's root node.
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v["tree_info"][0]["tree_structure"]);
        v
    };
    expect(edit(&|r| r["decision_type"] = "<".into()), "decision_type");
    expect(
        edit(&|r| r["missing_type"] = "Maybe".into()),
        "missing_type",
    );
    expect(
        edit(&|r| r["left_child"] = Value::Object(Default::default())),
        "neither",
    );
    expect(edit(&|r| r["split_index"] = 1.into()), "appears twice");
    expect(
        edit(&|r| r["split_feature"] = 99.into()),
        "feature 99 out of range",
    );
    let mut v = good.clone();
    v["tree_info"][0]["num_leaves"] = 32.into();
    expect(v, "fewer nodes");
    let mut v = good.clone();
    v["tree_info"][0]["num_leaves"] = 99_999_999.into();
    expect(v, "max");
    let mut v = good.clone();
    v["objective"] = "lambdarank".into();
    expect(v, "lambdarank");
    let mut v = good.clone();
    v["average_output"] = true.into();
    expect(v, "average_output");
    let mut v = good.clone();
    v["feature_names"].as_array_mut().unwrap().pop();
    expect(v, "feature_names");
    // Truncated: a JSON error, typed.
    let bytes = std::fs::read(lgbm("categorical.dump.json")).unwrap();
    match XgbModel::from_lightgbm(&bytes[..bytes.len() / 2]) {
        Err(TreeError::Format(m)) => assert!(m.contains("LightGBM dump"), "{m}"),
        other => panic!("{other:?}"),
    }
}
