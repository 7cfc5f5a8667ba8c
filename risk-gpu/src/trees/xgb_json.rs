//! XGBoost JSON model loading (`Booster.save_model("m.json")`, XGBoost 1.6 – 3.x).
//!
//! Reads `learner.learner_model_param` (`base_score`, `num_feature`, `num_class`,
//! `num_target`), `learner.objective.name` (must be `binary:logistic` or `reg:logistic`),
//! and each tree's `left_children`, `right_children`, `split_indices`, `split_conditions`
//! (leaf values on leaves), `default_left`, `split_type`, `sum_hessian`. Categorical
//! splits (`split_type` 1) are rejected with an error naming the tree and node.

use super::ensemble::{Ensemble, Node, Tree, LEAF};
use super::TreeError;
use serde::Deserialize;

/// Largest model file read.
pub const MAX_FILE: u64 = 1 << 30;
/// Most trees.
pub const MAX_TREES: usize = 100_000;
/// Most nodes in one tree.
pub const MAX_NODES: usize = 1 << 22;
/// Most features.
pub const MAX_FEATURES: usize = 1 << 20;

#[derive(Deserialize)]
struct File {
    learner: Learner,
}

#[derive(Deserialize)]
struct Learner {
    #[serde(default)]
    feature_names: Vec<String>,
    gradient_booster: Booster,
    learner_model_param: ModelParam,
    objective: Objective,
}

#[derive(Deserialize)]
struct ModelParam {
    base_score: String,
    #[serde(default)]
    num_class: Option<String>,
    num_feature: String,
    #[serde(default)]
    num_target: Option<String>,
}

#[derive(Deserialize)]
struct Objective {
    name: String,
}

#[derive(Deserialize)]
struct Booster {
    name: String,
    #[serde(default)]
    model: Option<GbTree>,
}

#[derive(Deserialize)]
struct GbTree {
    trees: Vec<RawTree>,
    #[serde(default)]
    tree_info: Vec<i64>,
}

#[derive(Deserialize)]
struct RawTree {
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    split_indices: Vec<i64>,
    split_conditions: Vec<f64>,
    default_left: Vec<DefaultLeft>,
    #[serde(default)]
    split_type: Vec<i64>,
    #[serde(default)]
    sum_hessian: Vec<f64>,
    tree_param: TreeParam,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DefaultLeft {
    Int(i64),
    Bool(bool),
}

#[derive(Deserialize)]
struct TreeParam {
    num_nodes: String,
}

fn number(key: &str, s: &str) -> Result<f64, TreeError> {
    // XGBoost >= 2 writes vectors as "[2.005E-2]"; older versions a plain number.
    let t = s.trim().trim_start_matches('[').trim_end_matches(']');
    let first = t.split(',').next().unwrap_or("").trim();
    first
        .parse::<f64>()
        .map_err(|_| TreeError::Format(format!("{key} {s:?} is not a number")))
}

/// Parses and validates an XGBoost JSON model.
pub fn parse(json: &[u8]) -> Result<Ensemble, TreeError> {
    let f: File = serde_json::from_slice(json).map_err(|e| TreeError::Format(e.to_string()))?;
    let l = f.learner;
    let obj = l.objective.name.as_str();
    if obj != "binary:logistic" && obj != "reg:logistic" {
        return Err(TreeError::Unsupported(format!(
            "objective {obj:?} (supported: binary:logistic, reg:logistic)"
        )));
    }
    if l.gradient_booster.name != "gbtree" {
        return Err(TreeError::Unsupported(format!(
            "booster {:?} (supported: gbtree)",
            l.gradient_booster.name
        )));
    }
    let p = &l.learner_model_param;
    for (k, v) in [("num_class", &p.num_class), ("num_target", &p.num_target)] {
        if let Some(v) = v {
            let n = number(k, v)?;
            if n > 1.0 {
                return Err(TreeError::Unsupported(format!(
                    "{k} = {n} (one binary output only)"
                )));
            }
        }
    }
    let nf = number("num_feature", &p.num_feature)?;
    if !(1.0..=MAX_FEATURES as f64).contains(&nf) {
        return Err(TreeError::Format(format!("num_feature {nf} out of range")));
    }
    let num_features = nf as usize;
    let base = number("base_score", &p.base_score)?;
    if !(base > 0.0 && base < 1.0) {
        return Err(TreeError::Format(format!(
            "base_score {base} is not a probability in (0, 1)"
        )));
    }
    let model = l
        .gradient_booster
        .model
        .ok_or_else(|| TreeError::Format("gradient_booster has no model".into()))?;
    if model.trees.len() > MAX_TREES {
        return Err(TreeError::TooLarge(format!(
            "{} trees (max {MAX_TREES})",
            model.trees.len()
        )));
    }
    if model.tree_info.iter().any(|&g| g != 0) {
        return Err(TreeError::Unsupported("more than one output group".into()));
    }
    let mut trees = Vec::with_capacity(model.trees.len());
    for (ti, t) in model.trees.into_iter().enumerate() {
        let n = number("num_nodes", &t.tree_param.num_nodes)?;
        if !(1.0..=MAX_NODES as f64).contains(&n) {
            return Err(TreeError::TooLarge(format!(
                "tree {ti}: {n} nodes (max {MAX_NODES})"
            )));
        }
        let n = n as usize;
        let lens = [
            ("left_children", t.left_children.len()),
            ("right_children", t.right_children.len()),
            ("split_indices", t.split_indices.len()),
            ("split_conditions", t.split_conditions.len()),
            ("default_left", t.default_left.len()),
        ];
        for (name, len) in lens {
            if len != n {
                return Err(TreeError::BadTree {
                    tree: ti,
                    node: 0,
                    reason: format!("{name} has {len} entries for {n} nodes"),
                });
            }
        }
        if !t.split_type.is_empty() && t.split_type.len() != n {
            return Err(TreeError::BadTree {
                tree: ti,
                node: 0,
                reason: format!(
                    "split_type has {} entries for {n} nodes",
                    t.split_type.len()
                ),
            });
        }
        if let Some(i) = t.split_type.iter().position(|&s| s != 0) {
            return Err(TreeError::Unsupported(format!(
                "categorical split in tree {ti}, node {i}: retrain with categorical features \
                 encoded as numbers (enable_categorical=False)"
            )));
        }
        let child = |c: i64, i: usize| -> Result<u32, TreeError> {
            match c {
                -1 => Ok(LEAF),
                c if c >= 0 && (c as usize) < n => Ok(c as u32),
                c => Err(TreeError::BadTree {
                    tree: ti,
                    node: i,
                    reason: format!("child index {c} out of range"),
                }),
            }
        };
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let (left, right) = (
                child(t.left_children[i], i)?,
                child(t.right_children[i], i)?,
            );
            let feat = t.split_indices[i];
            let is_leaf = left == LEAF && right == LEAF;
            let feature = if is_leaf {
                0
            } else if feat >= 0 && (feat as u64) < num_features as u64 {
                feat as u32
            } else {
                return Err(TreeError::BadTree {
                    tree: ti,
                    node: i,
                    reason: format!("feature index {feat} out of range (model has {num_features})"),
                });
            };
            let cond = t.split_conditions[i] as f32;
            nodes.push(Node {
                feature,
                threshold: if is_leaf { 0.0 } else { cond },
                left,
                right,
                default_left: match t.default_left[i] {
                    DefaultLeft::Int(v) => v != 0,
                    DefaultLeft::Bool(b) => b,
                },
                value: if is_leaf { cond } else { 0.0 },
                cover: t.sum_hessian.get(i).copied().unwrap_or(0.0) as f32,
            });
        }
        if t.sum_hessian.len() != n {
            return Err(TreeError::BadTree {
                tree: ti,
                node: 0,
                reason: format!(
                    "sum_hessian has {} entries for {n} nodes",
                    t.sum_hessian.len()
                ),
            });
        }
        trees.push(Tree::new(nodes, ti, num_features)?);
    }
    Ok(Ensemble {
        trees,
        base_margin: (base / (1.0 - base)).ln(),
        num_features,
        feature_names: (!l.feature_names.is_empty()).then_some(l.feature_names),
    })
}
