//! XGBoost model loading (`Booster.save_model("m.json")`, XGBoost 1.6 – 3.x; UBJSON,
//! `save_model("m.ubj")`, read by [`super::ubjson`] into the same layout).
//!
//! Reads `learner.learner_model_param` (`base_score`, `num_feature`, `num_class`,
//! `num_target`), `learner.objective.name` (the binary objectives, and regressions with an
//! identity or log link: [`Link`]), the booster (`gbtree`, or `dart`:
//! its `gbtree` with each tree's leaves times its `weight_drop`),
//! and each tree's `left_children`, `right_children`, `split_indices`, `split_conditions`
//! (leaf values on leaves), `default_left`, `split_type`, `sum_hessian`; categorical
//! splits (`split_type` 1) from `categories`, `categories_nodes`, `categories_segments`
//! and `categories_sizes` (see [`CatSplit`]).
//!
//! Every count the file states is checked against the others before anything is built
//! from it, so that a model that loads can score any row of `num_feature` values:
//! `feature_names` / `feature_types` have `num_feature` entries (names unique);
//! `gbtree_model_param.num_trees`, `tree_info` and `iteration_indptr` agree with the
//! number of trees, tree ids are `0..trees`, and `tree_info` names only output
//! groups that `num_class` allows; per tree, every per-node array
//! (`left_children`, `right_children`, `split_indices`, `split_conditions`,
//! `default_left`, `sum_hessian`, and `split_type`, `base_weights`, `loss_changes`,
//! `parents` where present) has `tree_param.num_nodes` entries, `tree_param.num_feature`
//! is the model's, split indices are below `num_feature`, children are in range and form
//! a tree ([`Tree::new`]), and TreeSHAP's covers are usable (see [`Tree::new`]).

use super::ensemble::{CatSplit, Ensemble, Link, Node, Tree, LEAF, NO_CAT};
use super::TreeError;
use serde::de::IgnoredAny;
use serde::Deserialize;

/// Largest model file read.
pub const MAX_FILE: u64 = 1 << 30;
/// Largest UBJSON model read: its values are expanded into a JSON tree (~8× the
/// bytes of its float arrays) before the checks below.
pub const MAX_UBJSON_FILE: usize = 256 << 20;
/// Most trees.
pub const MAX_TREES: usize = 100_000;
/// Most nodes in one tree.
pub const MAX_NODES: usize = 1 << 22;
/// Most features.
pub const MAX_FEATURES: usize = 1 << 20;

// ===== file layout (the parts read or checked) =====

#[derive(Deserialize)]
struct File {
    learner: Learner,
}

#[derive(Deserialize)]
struct Learner {
    #[serde(default)]
    feature_names: Vec<String>,
    #[serde(default)]
    feature_types: Vec<IgnoredAny>,
    gradient_booster: Booster,
    learner_model_param: ModelParam,
    objective: Objective,
}

#[derive(Deserialize)]
struct ModelParam {
    base_score: String,
    num_class: Option<String>,
    num_feature: String,
    num_target: Option<String>,
}

#[derive(Deserialize)]
struct Objective {
    name: String,
}

#[derive(Deserialize)]
struct Booster {
    name: String,
    model: Option<GbTree>,
    /// `dart`: the `gbtree` it wraps and each tree's weight.
    gbtree: Option<Box<Booster>>,
    weight_drop: Option<Vec<f64>>,
}

#[derive(Deserialize)]
struct GbTree {
    gbtree_model_param: Option<GbTreeParam>,
    trees: Vec<RawTree>,
    tree_info: Option<Vec<i64>>,
    iteration_indptr: Option<Vec<i64>>,
}

#[derive(Deserialize)]
struct GbTreeParam {
    num_trees: Option<String>,
    num_parallel_tree: Option<String>,
}

#[derive(Deserialize)]
struct RawTree {
    id: Option<i64>,
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    split_indices: Vec<i64>,
    split_conditions: Vec<f64>,
    default_left: Vec<DefaultLeft>,
    #[serde(default)]
    split_type: Vec<i64>,
    #[serde(default)]
    sum_hessian: Vec<f64>,
    base_weights: Option<Vec<IgnoredAny>>,
    loss_changes: Option<Vec<IgnoredAny>>,
    parents: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    categories: Vec<i64>,
    #[serde(default)]
    categories_nodes: Vec<i64>,
    #[serde(default)]
    categories_segments: Vec<i64>,
    #[serde(default)]
    categories_sizes: Vec<i64>,
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
    num_feature: Option<String>,
    num_deleted: Option<String>,
    size_leaf_vector: Option<String>,
}

// ===== scalar fields =====

/// A number per output: XGBoost >= 2 writes vectors as `"[2.005E-2]"` (one value per
/// class for multi-class models since 3.0), older versions a plain number. `outputs`
/// values, or one (then the same for every output).
fn numbers(key: &str, s: &str, outputs: usize) -> Result<Vec<f64>, TreeError> {
    let t = s.trim();
    let t = t
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(t);
    let parts: Vec<&str> = t.split(',').map(str::trim).collect();
    if parts.len() != 1 && parts.len() != outputs {
        return Err(TreeError::Format(format!(
            "{key} {s:?} has {} values for {outputs} output(s)",
            parts.len()
        )));
    }
    let v = parts
        .iter()
        .map(|p| p.parse::<f64>())
        .collect::<Result<Vec<f64>, _>>()
        .map_err(|_| TreeError::Format(format!("{key} {s:?} is not a number")))?;
    Ok(if v.len() == 1 { vec![v[0]; outputs] } else { v })
}

/// A count written as a decimal string (`"18"`): a non-negative integer, at most `max`
/// (beyond: [`TreeError::TooLarge`]).
fn count(key: &str, s: &str, max: usize) -> Result<usize, TreeError> {
    let n = s
        .trim()
        .parse::<u64>()
        .map_err(|_| TreeError::Format(format!("{key} {s:?} is not a non-negative integer")))?;
    if n > max as u64 {
        return Err(TreeError::TooLarge(format!("{key} {n} (max {max})")));
    }
    Ok(n as usize)
}

// ===== learner =====

/// Parses and validates an XGBoost JSON model of one output.
pub fn parse(json: &[u8]) -> Result<Ensemble, TreeError> {
    one(parse_classes(json)?)
}

/// Parses and validates an XGBoost JSON model: one ensemble per output (per class for
/// `multi:softprob` / `multi:softmax`, whose ensembles give margins).
pub fn parse_classes(json: &[u8]) -> Result<Vec<Ensemble>, TreeError> {
    let f: File = serde_json::from_slice(json).map_err(|e| TreeError::Format(e.to_string()))?;
    validate(f)
}

/// The single output of a model, or an error saying how to load a multi-class one.
pub(super) fn one(mut v: Vec<Ensemble>) -> Result<Ensemble, TreeError> {
    if v.len() != 1 {
        return Err(TreeError::Unsupported(format!(
            "a multi-class model ({} classes): load it as a MultiClassModel (risk.toml: name \
             its fraud classes with classes = [...])",
            v.len()
        )));
    }
    Ok(v.remove(0))
}

/// Parses and validates an XGBoost UBJSON model of one output (the same checks as
/// [`parse`]).
pub fn parse_ubjson(bytes: &[u8]) -> Result<Ensemble, TreeError> {
    one(parse_ubjson_classes(bytes)?)
}

/// [`parse_classes`] for UBJSON.
pub fn parse_ubjson_classes(bytes: &[u8]) -> Result<Vec<Ensemble>, TreeError> {
    if bytes.len() > MAX_UBJSON_FILE {
        return Err(TreeError::TooLarge(format!(
            "UBJSON model of {} bytes (at most {MAX_UBJSON_FILE})",
            bytes.len()
        )));
    }
    let v = super::ubjson::to_value(bytes)?;
    let f: File = serde_json::from_value(v).map_err(|e| TreeError::Format(e.to_string()))?;
    validate(f)
}

fn validate(f: File) -> Result<Vec<Ensemble>, TreeError> {
    let l = f.learner;
    // The link, and how base_score becomes a margin (XGBoost's `ProbToMargin`): the logit
    // for the logistic objectives; `binary:logitraw` and the identity-link regressions
    // take it as a margin; the log-link ones its log. (`binary:logitraw` outputs the
    // margin; its probability is still the margin's logistic.)
    let (link, base_to_margin): (Link, fn(f64) -> Option<f64>) = match l.objective.name.as_str() {
        "binary:logistic" | "reg:logistic" => (Link::Logistic, |b| {
            (b > 0.0 && b < 1.0).then(|| (b / (1.0 - b)).ln())
        }),
        "binary:logitraw" => (Link::Logistic, |b| Some(b)),
        // One margin per class (softmax over them); base_score is a margin per class.
        "multi:softprob" | "multi:softmax" => (Link::Identity, |b| Some(b)),
        "reg:squarederror"
        | "reg:squaredlogerror"
        | "reg:pseudohubererror"
        | "reg:absoluteerror"
        | "reg:quantileerror" => (Link::Identity, |b| Some(b)),
        "count:poisson" | "reg:gamma" | "reg:tweedie" => (Link::Exp, |b| (b > 0.0).then(|| b.ln())),
        obj => {
            return Err(TreeError::Unsupported(format!(
                "objective {obj:?} (read: binary:logistic, reg:logistic, \
                     binary:logitraw, reg:squarederror, reg:squaredlogerror, \
                     reg:pseudohubererror, reg:absoluteerror, reg:quantileerror, \
                     count:poisson, reg:gamma, reg:tweedie, multi:softprob, multi:softmax)"
            )))
        }
    };
    let (booster, weights) = match l.gradient_booster.name.as_str() {
        "gbtree" => (l.gradient_booster, None),
        "dart" => {
            let w = l.gradient_booster.weight_drop.unwrap_or_default();
            let inner = l
                .gradient_booster
                .gbtree
                .ok_or_else(|| TreeError::Format("dart booster has no gbtree".into()))?;
            if inner.name != "gbtree" {
                return Err(TreeError::Format(format!(
                    "dart booster wraps {:?}, not gbtree",
                    inner.name
                )));
            }
            (*inner, Some(w))
        }
        name => {
            return Err(TreeError::Unsupported(format!(
                "booster {name:?} (supported: gbtree, dart)"
            )))
        }
    };
    let p = &l.learner_model_param;
    // Output groups: `num_class` (0 for binary objectives, the classes for multi-class
    // ones) and `num_target` (at least 1).
    let multi = l.objective.name.starts_with("multi:");
    let classes = match &p.num_class {
        Some(v) => count("num_class", v, 1 << 16)?,
        None => 0,
    };
    if multi && classes < 2 {
        return Err(TreeError::Format(format!(
            "objective {:?} with num_class {classes} (at least 2)",
            l.objective.name
        )));
    }
    if !multi && classes > 1 {
        return Err(TreeError::Unsupported(format!(
            "num_class = {classes} with objective {:?} (one output)",
            l.objective.name
        )));
    }
    let outputs = if multi { classes } else { 1 };
    if let Some(v) = &p.num_target {
        match count("num_target", v, u32::MAX as usize)? {
            0 => return Err(TreeError::Format("num_target 0 (at least 1)".into())),
            1 => {}
            n => {
                return Err(TreeError::Unsupported(format!(
                    "num_target = {n} (one binary output only)"
                )))
            }
        }
    }
    let num_features = count("num_feature", &p.num_feature, MAX_FEATURES)?;
    if num_features == 0 {
        return Err(TreeError::Format("num_feature 0 out of range".into()));
    }
    let base_margins = numbers("base_score", &p.base_score, outputs)?
        .into_iter()
        .map(|base| {
            base_to_margin(base)
                .filter(|m| m.is_finite())
                .ok_or_else(|| {
                    TreeError::Format(format!(
                        "base_score {base} is outside what objective {:?} allows",
                        l.objective.name
                    ))
                })
        })
        .collect::<Result<Vec<f64>, _>>()?;
    check_features(&l.feature_names, l.feature_types.len(), num_features)?;
    let model = booster
        .model
        .ok_or_else(|| TreeError::Format("gradient_booster has no model".into()))?;
    check_tree_counts(&model, outputs)?;
    let n = model.trees.len();
    let groups: Vec<usize> = match &model.tree_info {
        Some(info) => info.iter().map(|&g| g as usize).collect(),
        None if outputs == 1 => vec![0; n],
        None => {
            return Err(TreeError::Format(
                "a multi-class model without tree_info".into(),
            ))
        }
    };
    let mut trees = Vec::with_capacity(n);
    for (ti, t) in model.trees.into_iter().enumerate() {
        trees.push(tree(ti, t, num_features)?);
    }
    if let Some(w) = weights {
        // XGBoost multiplies each tree's leaf by its weight in float (`weight_drop`;
        // a model saved before any tree was dropped may list none: all 1).
        if !w.is_empty() && w.len() != n {
            return Err(TreeError::Format(format!(
                "weight_drop has {} weights for {n} trees",
                w.len()
            )));
        }
        if let Some(x) = w.iter().find(|x| !(x.is_finite() && **x >= 0.0)) {
            return Err(TreeError::Format(format!(
                "weight_drop {x} is not a finite non-negative weight"
            )));
        }
        for (t, &wt) in trees.iter_mut().zip(&w) {
            for nd in t.nodes.iter_mut().filter(|nd| nd.is_leaf()) {
                nd.value *= wt as f32;
                if !nd.value.is_finite() {
                    return Err(TreeError::Format(format!(
                        "weight_drop {wt} makes a leaf infinite"
                    )));
                }
            }
        }
    }
    let names = (!l.feature_names.is_empty()).then_some(l.feature_names);
    let mut per_class: Vec<Vec<Tree>> = vec![Vec::new(); outputs];
    for (t, g) in trees.into_iter().zip(groups) {
        per_class[g].push(t);
    }
    Ok(per_class
        .into_iter()
        .zip(base_margins)
        .map(|(trees, base_margin)| Ensemble {
            trees,
            base_margin,
            link,
            num_features,
            feature_names: names.clone(),
            zero_as_missing: Vec::new(),
        })
        .collect())
}

/// `feature_names` and `feature_types`: absent (empty) or one per feature; names unique
/// (they are looked up in the schema).
fn check_features(names: &[String], types: usize, nf: usize) -> Result<(), TreeError> {
    if !names.is_empty() && names.len() != nf {
        return Err(TreeError::Format(format!(
            "feature_names has {} names, num_feature is {nf}",
            names.len()
        )));
    }
    if types != 0 && types != nf {
        return Err(TreeError::Format(format!(
            "feature_types has {types} entries, num_feature is {nf}"
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(TreeError::Format(format!(
            "feature name {dup:?} appears more than once in feature_names"
        )));
    }
    Ok(())
}

/// The booster's counts against its trees: `num_trees`, `num_parallel_tree`,
/// `tree_info` (groups below `outputs`), `iteration_indptr`, tree ids.
fn check_tree_counts(m: &GbTree, outputs: usize) -> Result<(), TreeError> {
    let n = m.trees.len();
    if n > MAX_TREES {
        return Err(TreeError::TooLarge(format!("{n} trees (max {MAX_TREES})")));
    }
    if let Some(gp) = &m.gbtree_model_param {
        if let Some(s) = &gp.num_trees {
            let stated = count("num_trees", s, usize::MAX)?;
            if stated != n {
                return Err(TreeError::Format(format!(
                    "gbtree_model_param.num_trees is {stated}, the model has {n} trees"
                )));
            }
        }
        if let Some(s) = &gp.num_parallel_tree {
            let k = count("num_parallel_tree", s, usize::MAX)?;
            if k == 0 || !n.is_multiple_of(k) {
                return Err(TreeError::Format(format!(
                    "num_parallel_tree {k} does not divide the {n} trees into rounds"
                )));
            }
        }
    }
    if let Some(info) = &m.tree_info {
        if info.len() != n {
            return Err(TreeError::Format(format!(
                "tree_info has {} entries for {n} trees",
                info.len()
            )));
        }
        if let Some((t, &g)) = info.iter().enumerate().find(|(_, &g)| g < 0) {
            return Err(TreeError::Format(format!(
                "tree_info[{t}] = {g} is not an output group"
            )));
        }
        if let Some((t, &g)) = info
            .iter()
            .enumerate()
            .find(|(_, &g)| g as u64 >= outputs as u64)
        {
            return Err(TreeError::Unsupported(format!(
                "tree_info[{t}] = {g}: output group beyond the model's {outputs}"
            )));
        }
    }
    if let Some(ip) = &m.iteration_indptr {
        let ok = ip.first() == Some(&0)
            && ip.last() == Some(&(n as i64))
            && ip.windows(2).all(|w| w[0] <= w[1]);
        if !ok {
            return Err(TreeError::Format(format!(
                "iteration_indptr ({} entries) does not run from 0 to the {n} trees in order",
                ip.len()
            )));
        }
    }
    // XGBoost places each tree by its id: the ids are a permutation of 0..n.
    let mut seen = vec![false; n];
    for (t, tr) in m.trees.iter().enumerate() {
        if let Some(id) = tr.id {
            match usize::try_from(id).ok().filter(|&i| i < n) {
                Some(i) if !seen[i] => seen[i] = true,
                _ => {
                    return Err(TreeError::BadTree {
                        tree: t,
                        node: 0,
                        reason: format!("tree id {id} is repeated or not below {n}"),
                    })
                }
            }
        }
    }
    Ok(())
}

// ===== one tree =====

/// Checks one tree's counts and converts it ([`Tree::new`] checks its structure).
fn tree(ti: usize, t: RawTree, num_features: usize) -> Result<Tree, TreeError> {
    let bad = |node: usize, reason: String| TreeError::BadTree {
        tree: ti,
        node,
        reason,
    };
    let tp = &t.tree_param;
    let n = count("num_nodes", &tp.num_nodes, MAX_NODES).map_err(|e| match e {
        TreeError::TooLarge(m) => TreeError::TooLarge(format!("tree {ti}: {m}")),
        e => e,
    })?;
    if n == 0 {
        return Err(bad(0, "tree_param.num_nodes is 0".into()));
    }
    if let Some(s) = &tp.num_feature {
        let f = count("tree_param.num_feature", s, usize::MAX)?;
        if f != num_features {
            return Err(bad(
                0,
                format!("tree_param.num_feature is {f}, the model's num_feature {num_features}"),
            ));
        }
    }
    if let Some(s) = &tp.size_leaf_vector {
        // 0 (XGBoost < 2) and 1 both mean scalar leaves.
        let k = count("tree_param.size_leaf_vector", s, usize::MAX)?;
        if k > 1 {
            return Err(TreeError::Unsupported(format!(
                "tree {ti} has vector leaves (size_leaf_vector {k}; one output only)"
            )));
        }
    }
    if let Some(s) = &tp.num_deleted {
        let d = count("tree_param.num_deleted", s, n)?;
        if d > 0 {
            return Err(TreeError::Unsupported(format!(
                "tree {ti} has {d} deleted node(s) (pruned in place); save the model again \
                 from XGBoost after training"
            )));
        }
    }
    let opt = |a: &Option<Vec<IgnoredAny>>| a.as_ref().map(Vec::len);
    let lens = [
        ("left_children", Some(t.left_children.len())),
        ("right_children", Some(t.right_children.len())),
        ("split_indices", Some(t.split_indices.len())),
        ("split_conditions", Some(t.split_conditions.len())),
        ("default_left", Some(t.default_left.len())),
        ("sum_hessian", Some(t.sum_hessian.len())),
        (
            "split_type",
            (!t.split_type.is_empty()).then_some(t.split_type.len()),
        ),
        ("base_weights", opt(&t.base_weights)),
        ("loss_changes", opt(&t.loss_changes)),
        ("parents", opt(&t.parents)),
    ];
    for (name, len) in lens {
        if let Some(len) = len.filter(|&len| len != n) {
            return Err(bad(0, format!("{name} has {len} entries for {n} nodes")));
        }
    }
    if let Some(i) = t.split_type.iter().position(|&s| s != 0 && s != 1) {
        return Err(bad(
            i,
            format!(
                "split_type {} (0 numerical, 1 categorical)",
                t.split_type[i]
            ),
        ));
    }
    let arrays = super::xgb_categories::Arrays {
        split_type: &t.split_type,
        categories: &t.categories,
        categories_nodes: &t.categories_nodes,
        categories_segments: &t.categories_segments,
        categories_sizes: &t.categories_sizes,
    };
    let cat_of = super::xgb_categories::categories(&arrays, n, &bad)?;
    let child = |c: i64, i: usize| -> Result<u32, TreeError> {
        match c {
            -1 => Ok(LEAF),
            c if c >= 0 && (c as usize) < n => Ok(c as u32),
            c => Err(bad(i, format!("child index {c} out of range ({n} nodes)"))),
        }
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let (left, right) = (
            child(t.left_children[i], i)?,
            child(t.right_children[i], i)?,
        );
        // XGBoost writes 0 (or, for a node pruned to a leaf, its old split) on leaves:
        // in range either way.
        let feat = t.split_indices[i];
        if !(feat >= 0 && (feat as u64) < num_features as u64) {
            return Err(bad(
                i,
                format!("feature index {feat} out of range (model has {num_features})"),
            ));
        }
        let default_left = match t.default_left[i] {
            DefaultLeft::Int(v @ (0 | 1)) => v == 1,
            DefaultLeft::Int(v) => return Err(bad(i, format!("default_left {v} is not 0 or 1"))),
            DefaultLeft::Bool(b) => b,
        };
        let is_leaf = left == LEAF && right == LEAF;
        let cond = t.split_conditions[i] as f32;
        let cat = cat_of.get(&i).map_or(NO_CAT, |&(k, _)| k);
        if is_leaf && cat != NO_CAT {
            return Err(bad(i, "a leaf has categories".into()));
        }
        nodes.push(Node {
            feature: if is_leaf { 0 } else { feat as u32 },
            // A categorical node's split_conditions is no threshold.
            threshold: if is_leaf || cat != NO_CAT { 0.0 } else { cond },
            left,
            right,
            default_left,
            value: if is_leaf { cond } else { 0.0 },
            cover: t.sum_hessian[i] as f32,
            cat,
        });
    }
    let mut sets: Vec<(u32, CatSplit)> = cat_of
        .into_values()
        .map(|(k, mut set)| {
            set.nan_left = nodes
                .iter()
                .find(|n| n.cat == k)
                .is_some_and(|n| n.default_left);
            (k, set)
        })
        .collect();
    sets.sort_by_key(|(k, _)| *k);
    Tree::with_categories(
        nodes,
        sets.into_iter().map(|(_, s)| s).collect(),
        ti,
        num_features,
    )
}
