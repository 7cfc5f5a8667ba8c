//! Truncated, malformed and adversarial model files: typed errors, never a panic.

use crate::common::models;
use risk_gpu::trees::{TreeError, XgbModel, XgbScorer};
use serde_json::Value;

fn good() -> Value {
    serde_json::from_slice(&std::fs::read(models().join("xgb_fraud.json")).unwrap()).unwrap()
}

fn load(v: &Value) -> Result<XgbModel, TreeError> {
    XgbModel::from_json(&serde_json::to_vec(v).unwrap())
}

fn tree0(v: &mut Value) -> &mut Value {
    &mut v["learner"]["gradient_booster"]["model"]["trees"][0]
}

#[test]
fn truncated_and_garbage_files() {
    let bytes = std::fs::read(models().join("xgb_fraud.json")).unwrap();
    for cut in [0, 1, 100, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            matches!(
                XgbModel::from_json(&bytes[..cut]),
                Err(TreeError::Format(_))
            ),
            "cut {cut}"
        );
    }
    assert!(matches!(
        XgbModel::from_json(b"\xff\xfe{}"),
        Err(TreeError::Format(_))
    ));
    assert!(matches!(
        XgbModel::from_json(b"{\"learner\": 3}"),
        Err(TreeError::Format(_))
    ));
    assert!(matches!(
        XgbModel::from_file(models().join("no-such-model.json")),
        Err(TreeError::Io { .. })
    ));
}

#[test]
fn wrong_node_indices_cycles_and_shared_children() {
    let mut v = good();
    tree0(&mut v)["left_children"][0] = 10_000.into();
    assert!(matches!(
        load(&v),
        Err(TreeError::BadTree {
            tree: 0,
            node: 0,
            ..
        })
    ));

    let mut v = good();
    tree0(&mut v)["left_children"][1] = 0.into(); // back edge to the root
    let e = load(&v).unwrap_err();
    assert!(matches!(e, TreeError::BadTree { tree: 0, .. }), "{e}");
    assert!(e.to_string().contains("reached twice"), "{e}");

    let mut v = good();
    let l = tree0(&mut v)["left_children"][0].clone();
    tree0(&mut v)["right_children"][0] = l; // both children the same node
    assert!(matches!(load(&v), Err(TreeError::BadTree { .. })));

    let mut v = good();
    tree0(&mut v)["left_children"][0] = (-5).into();
    assert!(matches!(load(&v), Err(TreeError::BadTree { .. })));

    let mut v = good();
    tree0(&mut v)["right_children"][0] = (-1).into(); // one child only
    assert!(load(&v)
        .unwrap_err()
        .to_string()
        .contains("exactly one child"));
}

#[test]
fn bad_values() {
    let mut v = good();
    tree0(&mut v)["split_conditions"][0] = Value::from(f64::NAN); // serde_json writes null
    assert!(load(&v).is_err());

    let mut v = good();
    tree0(&mut v)["split_indices"][0] = 99.into();
    assert!(load(&v)
        .unwrap_err()
        .to_string()
        .contains("feature index 99"));

    let mut v = good();
    v["learner"]["learner_model_param"]["base_score"] = "[1.5E0]".into();
    assert!(matches!(load(&v), Err(TreeError::Format(_))));

    let mut v = good();
    tree0(&mut v)["split_indices"].as_array_mut().unwrap().pop();
    assert!(load(&v).unwrap_err().to_string().contains("split_indices"));
}

#[test]
fn absurd_sizes_and_unsupported_models() {
    let mut v = good();
    tree0(&mut v)["tree_param"]["num_nodes"] = "99999999999".into();
    assert!(matches!(load(&v), Err(TreeError::TooLarge(_))));

    let mut v = good();
    v["learner"]["learner_model_param"]["num_feature"] = "1e12".into();
    assert!(matches!(load(&v), Err(TreeError::Format(_))));

    let mut v = good();
    v["learner"]["objective"]["name"] = "multi:softprob".into();
    assert!(matches!(load(&v), Err(TreeError::Unsupported(_))));

    let mut v = good();
    v["learner"]["learner_model_param"]["num_class"] = "3".into();
    assert!(matches!(load(&v), Err(TreeError::Unsupported(_))));

    let mut v = good();
    tree0(&mut v)["split_type"][0] = 1.into();
    let e = load(&v).unwrap_err();
    assert!(
        matches!(e, TreeError::Unsupported(_))
            && e.to_string()
                .contains("categorical split in tree 0, node 0"),
        "{e}"
    );
}

#[test]
fn feature_count_must_match_the_schema() {
    let m = std::sync::Arc::new(XgbModel::from_file(models().join("xgb_fraud.json")).unwrap());
    let small = risk_core::FeatureSchema::builder()
        .numeric("a")
        .build()
        .unwrap();
    let e = XgbScorer::new(m.clone(), &small, 0.3, 3).unwrap_err();
    assert!(matches!(e, TreeError::Schema(_)), "{e}");
    // Named features must exist in the schema.
    let mut v = good();
    let names: Vec<Value> = (0..18).map(|i| Value::from(format!("f{i}"))).collect();
    v["learner"]["feature_names"] = Value::Array(names);
    let named = std::sync::Arc::new(load(&v).unwrap());
    let e = XgbScorer::new(named, &risk_core::synth::schema(), 0.3, 3).unwrap_err();
    assert!(e.to_string().contains("\"f0\" is not in the schema"), "{e}");
}

#[test]
fn fuzz_seeds_and_regressions_replay() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["seeds/xgb_json", "regressions/xgb_json"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "md") {
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            if let Ok(m) = XgbModel::from_json(&bytes) {
                let x = vec![f32::NAN; m.num_features()];
                assert!(
                    (m.margin(&x) - m.ensemble().margin_walk(&x)).abs() < 1e-3,
                    "{}",
                    p.display()
                );
                let mut phi = Vec::new();
                m.contributions(&x, &mut phi);
            }
            n += 1;
        }
    }
    assert!(n >= 2);
}
