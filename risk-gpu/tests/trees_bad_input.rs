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
    let e = load(&v).unwrap_err();
    assert!(e.to_string().contains("num_class 0 (at least 2)"), "{e}");

    let mut v = good();
    v["learner"]["objective"]["name"] = "rank:ndcg".into();
    assert!(matches!(load(&v), Err(TreeError::Unsupported(_))));

    let mut v = good();
    v["learner"]["learner_model_param"]["num_class"] = "3".into();
    assert!(matches!(load(&v), Err(TreeError::Unsupported(_))));

    // A categorical split needs its categories (trees_xgb_variants.rs reads real ones).
    let mut v = good();
    tree0(&mut v)["split_type"][0] = 1.into();
    let e = load(&v).unwrap_err();
    assert!(
        matches!(
            e,
            TreeError::BadTree {
                tree: 0,
                node: 0,
                ..
            }
        ) && e
            .to_string()
            .contains("categorical split without categories"),
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

fn model(v: &mut Value) -> &mut Value {
    &mut v["learner"]["gradient_booster"]["model"]
}

/// Asserts `v` is refused with an error matching `kind` whose message names `what`.
#[track_caller]
fn refused(v: &Value, kind: fn(&TreeError) -> bool, what: &str) -> TreeError {
    match load(v) {
        Ok(_) => panic!("loaded a model that should be refused ({what})"),
        Err(e) => {
            assert!(kind(&e), "wrong error kind: {e:?}");
            assert!(e.to_string().contains(what), "{e} (want {what:?})");
            e
        }
    }
}

fn format(e: &TreeError) -> bool {
    matches!(e, TreeError::Format(_))
}
fn unsupported(e: &TreeError) -> bool {
    matches!(e, TreeError::Unsupported(_))
}
fn bad_tree(e: &TreeError) -> bool {
    matches!(e, TreeError::BadTree { .. })
}

/// Feature names shorter or longer than `num_feature` used to load, and every score then
/// panicked (the scorer's row had one entry per name).
#[test]
fn feature_names_and_types_must_have_one_entry_per_feature() {
    for n in [17, 19, 1] {
        let mut v = good();
        let names: Vec<Value> = (0..n).map(|i| Value::from(format!("f{i}"))).collect();
        v["learner"]["feature_names"] = Value::Array(names);
        refused(
            &v,
            format,
            &format!("feature_names has {n} names, num_feature is 18"),
        );
    }
    let mut v = good();
    let mut names: Vec<Value> = (0..18).map(|i| Value::from(format!("f{i}"))).collect();
    names[17] = "f3".into();
    v["learner"]["feature_names"] = Value::Array(names);
    refused(&v, format, "\"f3\" appears more than once");
    let mut v = good();
    v["learner"]["feature_types"] = Value::Array(vec!["float".into(); 5]);
    refused(&v, format, "feature_types has 5 entries, num_feature is 18");
    // One per feature: fine.
    let mut v = good();
    v["learner"]["feature_types"] = Value::Array(vec!["float".into(); 18]);
    load(&v).unwrap();
}

#[test]
fn booster_counts_must_agree_with_the_trees() {
    let mut v = good();
    model(&mut v)["gbtree_model_param"]["num_trees"] = "99".into();
    refused(&v, format, "num_trees is 99, the model has 100 trees");
    let mut v = good();
    model(&mut v)["gbtree_model_param"]["num_parallel_tree"] = "0".into();
    refused(&v, format, "num_parallel_tree 0");
    let mut v = good();
    model(&mut v)["gbtree_model_param"]["num_parallel_tree"] = "3".into();
    refused(&v, format, "num_parallel_tree 3");
    let mut v = good();
    model(&mut v)["tree_info"].as_array_mut().unwrap().pop();
    refused(&v, format, "tree_info has 99 entries for 100 trees");
    let mut v = good();
    model(&mut v)["tree_info"][7] = (-1).into();
    refused(&v, format, "tree_info[7] = -1");
    let mut v = good();
    model(&mut v)["tree_info"][7] = 1.into();
    refused(&v, unsupported, "output group beyond the model's 1");
    let mut v = good();
    model(&mut v)["iteration_indptr"][100] = 101.into();
    refused(&v, format, "iteration_indptr");
    let mut v = good();
    model(&mut v)["trees"][1]["id"] = 0.into();
    let e = refused(&v, bad_tree, "tree id 0 is repeated");
    assert!(matches!(e, TreeError::BadTree { tree: 1, .. }), "{e}");
    let mut v = good();
    model(&mut v)["trees"][4]["id"] = 100.into();
    refused(&v, bad_tree, "tree id 100");
}

#[test]
fn output_counts_must_mean_one_binary_output() {
    let param = |v: &mut Value, k: &str, s: &str| {
        v["learner"]["learner_model_param"][k] = s.into();
    };
    let mut v = good();
    param(&mut v, "num_target", "0");
    refused(&v, format, "num_target 0");
    let mut v = good();
    param(&mut v, "num_target", "2");
    refused(&v, unsupported, "num_target = 2");
    let mut v = good();
    param(&mut v, "num_class", "NaN");
    refused(
        &v,
        format,
        "num_class \"NaN\" is not a non-negative integer",
    );
    let mut v = good();
    param(&mut v, "num_feature", "18.5");
    refused(&v, format, "num_feature");
    let mut v = good();
    param(&mut v, "base_score", "[5E-1,5E-1]");
    refused(
        &v,
        format,
        "base_score \"[5E-1,5E-1]\" has 2 values for 1 output",
    );
    // Classes without a multi-class objective.
    let mut v = good();
    param(&mut v, "num_class", "3");
    refused(&v, unsupported, "num_class = 3 with objective");
}

#[test]
fn every_per_node_array_must_have_num_nodes_entries() {
    for key in [
        "left_children",
        "right_children",
        "split_conditions",
        "default_left",
        "sum_hessian",
        "split_type",
        "base_weights",
        "loss_changes",
        "parents",
    ] {
        let mut v = good();
        model(&mut v)["trees"][3][key]
            .as_array_mut()
            .unwrap()
            .push(0.into());
        let n = model(&mut v)["trees"][3]["left_children"]
            .as_array()
            .unwrap()
            .len();
        let e = refused(&v, bad_tree, key);
        assert!(
            matches!(e, TreeError::BadTree { tree: 3, .. }),
            "{key}: {e}"
        );
        let want = if key == "left_children" { n } else { n + 1 };
        assert!(e.to_string().contains(&format!("{want} entries")), "{e}");
    }
    let mut v = good();
    tree0(&mut v)["tree_param"]["num_nodes"] = "26".into();
    refused(&v, bad_tree, "for 26 nodes");
}

#[test]
fn tree_params_and_node_fields_are_checked() {
    let mut v = good();
    tree0(&mut v)["tree_param"]["num_feature"] = "17".into();
    refused(&v, bad_tree, "tree_param.num_feature is 17");
    let mut v = good();
    tree0(&mut v)["tree_param"]["size_leaf_vector"] = "3".into();
    refused(&v, unsupported, "vector leaves");
    let mut v = good();
    tree0(&mut v)["tree_param"]["num_deleted"] = "1".into();
    refused(&v, unsupported, "tree 0 has 1 deleted node");
    let mut v = good();
    tree0(&mut v)["tree_param"]["num_deleted"] = "1000".into();
    assert!(matches!(load(&v), Err(TreeError::TooLarge(_))));
    // Split indices are checked on leaves too (node 4 is a leaf).
    let mut v = good();
    assert_eq!(tree0(&mut v)["left_children"][4], -1);
    tree0(&mut v)["split_indices"][4] = 18.into();
    let e = refused(&v, bad_tree, "feature index 18 out of range");
    assert!(
        matches!(
            e,
            TreeError::BadTree {
                tree: 0,
                node: 4,
                ..
            }
        ),
        "{e}"
    );
    let mut v = good();
    tree0(&mut v)["default_left"][2] = 2.into();
    let e = refused(&v, bad_tree, "default_left 2");
    assert!(
        matches!(
            e,
            TreeError::BadTree {
                tree: 0,
                node: 2,
                ..
            }
        ),
        "{e}"
    );
    let mut v = good();
    tree0(&mut v)["split_type"][5] = 7.into();
    let e = refused(&v, bad_tree, "split_type 7");
    assert!(
        matches!(
            e,
            TreeError::BadTree {
                tree: 0,
                node: 5,
                ..
            }
        ),
        "{e}"
    );
    let mut v = good();
    tree0(&mut v)["categories_nodes"] = Value::Array(vec![0.into()]);
    refused(&v, bad_tree, "categories_nodes");
}

/// Nodes of tree `t` in the subtree under `root` (JSON child arrays).
fn subtree(v: &mut Value, t: usize, root: usize) -> Vec<usize> {
    let tr = &model(v)["trees"][t];
    let (l, r) = (&tr["left_children"], &tr["right_children"]);
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(i) = stack.pop() {
        out.push(i);
        if l[i].as_i64().unwrap() >= 0 {
            stack.push(l[i].as_u64().unwrap() as usize);
            stack.push(r[i].as_u64().unwrap() as usize);
        }
    }
    out
}

/// TreeSHAP divides by each internal node's cover: a zero there used to load and give
/// NaN credits (silently dropped from the reasons). It is refused, naming tree and node.
#[test]
fn zero_or_inconsistent_covers_are_refused_where_tree_shap_divides() {
    // A whole subtree without cover (consistent: children still sum to the parent).
    let mut v = good();
    let internal = {
        let tr = &model(&mut v)["trees"][6];
        (1..)
            .find(|&i| tr["left_children"][i].as_i64().unwrap() >= 0)
            .unwrap()
    };
    for i in subtree(&mut v, 6, internal) {
        model(&mut v)["trees"][6]["sum_hessian"][i] = 0.0.into();
    }
    let e = refused(&v, bad_tree, "internal node has cover 0");
    assert!(
        matches!(e, TreeError::BadTree { tree: 6, node, .. } if node == internal),
        "{e}"
    );
    // The root.
    let mut v = good();
    model(&mut v)["trees"][2]["sum_hessian"][0] = 0.0.into();
    let e = refused(&v, bad_tree, "cover 0");
    assert!(
        matches!(
            e,
            TreeError::BadTree {
                tree: 2,
                node: 0,
                ..
            }
        ),
        "{e}"
    );
    // Positive in f64, zero in f32.
    let mut v = good();
    model(&mut v)["trees"][2]["sum_hessian"][0] = 1e-50.into();
    refused(&v, bad_tree, "cover 0");
    // Negative and non-finite (too large for f32) covers.
    let mut v = good();
    tree0(&mut v)["sum_hessian"][3] = (-1.0).into();
    refused(&v, bad_tree, "not a finite non-negative number");
    let mut v = good();
    tree0(&mut v)["sum_hessian"][3] = 1e300.into();
    refused(&v, bad_tree, "not a finite non-negative number");
    // A child with more cover than its parent (fractions above 1 overflow the weights).
    let mut v = good();
    let c = tree0(&mut v)["left_children"][0].as_u64().unwrap();
    tree0(&mut v)["sum_hessian"][c as usize] = 1e30.into();
    let e = refused(&v, bad_tree, "more than its parent's");
    assert!(
        matches!(
            e,
            TreeError::BadTree {
                tree: 0,
                node: 0,
                ..
            }
        ),
        "{e}"
    );
    // A leaf without cover is exact (its branch weight is 0): loads, finite credits.
    let mut v = good();
    let leaf = 4;
    assert_eq!(tree0(&mut v)["left_children"][leaf], -1);
    let parent = 1;
    assert_eq!(tree0(&mut v)["right_children"][parent], leaf);
    tree0(&mut v)["sum_hessian"][leaf] = 0.0.into();
    let m = load(&v).unwrap();
    let mut phi = Vec::new();
    for x in [vec![f32::NAN; 18], vec![0.0; 18], vec![1e6; 18]] {
        m.contributions(&x, &mut phi);
        assert!(phi.iter().all(|p| p.is_finite()), "{phi:?}");
        m.contributions_recursive(&x, &mut phi);
        assert!(phi.iter().all(|p| p.is_finite()), "{phi:?}");
    }
}

/// Many deep, sparse trees: the padded layout would cost `trees · 2^depth` slots, far
/// beyond the file's size; past `flat::MAX_PADDED_NODES` the walk scores them instead.
#[test]
fn a_padded_layout_beyond_its_budget_falls_back_to_the_walk() {
    let n_trees = (risk_gpu::trees::flat::MAX_PADDED_NODES >> 10) + 1;
    // A chain of ten splits on feature 0: node 2k splits, 2k+1 is a leaf.
    let (mut l, mut r, mut c, mut h) = (vec![], vec![], vec![], vec![]);
    for k in 0..10i64 {
        l.push(2 * k + 1);
        r.push(2 * k + 2);
        c.push(k as f64);
        h.push(21.0 - 2.0 * k as f64);
        l.push(-1);
        r.push(-1);
        c.push(0.01);
        h.push(1.0);
    }
    l.push(-1);
    r.push(-1);
    c.push(-0.01);
    h.push(1.0);
    let n = l.len();
    let tree = serde_json::json!({
        "left_children": l, "right_children": r, "split_indices": vec![0; n],
        "split_conditions": c, "default_left": vec![1; n], "sum_hessian": h,
        "tree_param": {"num_nodes": n.to_string()}
    });
    let mut v = good();
    let g = model(&mut v);
    g["gbtree_model_param"]["num_trees"] = n_trees.to_string().into();
    g["tree_info"] = vec![0; n_trees].into();
    g["iteration_indptr"] = (0..=n_trees).collect::<Vec<_>>().into();
    g["trees"] = vec![tree; n_trees].into();
    let m = load(&v).unwrap();
    assert_eq!(m.ensemble().max_depth(), 10);
    assert!(!m.is_padded());
    assert_eq!(m.kernel(), "walk");
    let mut x = vec![0.0f32; 18];
    x[0] = 4.5; // right at splits 0..=4, left at split 5: leaf 11, 0.01 in every tree
    let want = m.ensemble().base_margin + 0.01f32 as f64 * n_trees as f64;
    assert!((m.margin(&x) - want).abs() < 1e-6, "{}", m.margin(&x));
}
