//! What LightGBM's two model files share once read: the objective's link, the outputs,
//! and the trees as ensemble nodes ([`super::lgbm_text`] reads `save_model`'s text,
//! [`super::lgbm_json`] `dump_model`'s JSON).

use super::ensemble::{CatSplit, Ensemble, Link, Node, Tree, LEAF, NO_CAT};
use super::TreeError;

/// The smallest float32 strictly above `t`: for every float32 `x`,
/// `(x as f64) <= t` exactly when `x < above(t)`.
pub fn above(t: f64) -> f32 {
    let f = t as f32;
    if (f as f64) <= t {
        f.next_up()
    } else {
        f
    }
}

/// The objective's link: the logistic for `binary` (with `sigmoid:1`) and
/// `cross_entropy`; the identity for the regressions (`regression` without `sqrt`,
/// `regression_l1`, `huber`, `fair`, `quantile`, `mape`); `exp` for the log-link ones
/// (`poisson`, `gamma`, `tweedie`).
pub(super) fn objective((n, v): (usize, &str)) -> Result<Link, TreeError> {
    let mut parts = v.split(' ').filter(|t| !t.is_empty());
    let name = parts.next().unwrap_or("");
    let unsupported = |what: String| {
        TreeError::Unsupported(format!(
            "LightGBM line {n}: {what} (read: binary with sigmoid:1, cross_entropy, \
             regression, regression_l1, huber, fair, quantile, mape, poisson, gamma, \
             tweedie, multiclass)"
        ))
    };
    match name {
        "binary" => {
            for p in parts {
                if let Some(s) = p.strip_prefix("sigmoid:") {
                    if s.parse::<f64>().ok() != Some(1.0) {
                        return Err(unsupported(format!("objective binary with sigmoid:{s}")));
                    }
                }
            }
            Ok(Link::Logistic)
        }
        "cross_entropy" | "xentropy" => Ok(Link::Logistic),
        "regression" | "regression_l1" | "huber" | "fair" | "quantile" | "mape" => {
            if v.split(' ').any(|p| p == "sqrt") {
                return Err(unsupported(format!(
                    "objective {v:?} (reg_sqrt: the output is the square of the margin)"
                )));
            }
            Ok(Link::Identity)
        }
        "poisson" | "gamma" | "tweedie" => Ok(Link::Exp),
        "multiclass" | "softmax" => Ok(Link::Softmax),
        _ => Err(unsupported(format!("objective {v:?}"))),
    }
}

/// A tree in LightGBM's own numbering (its text model's arrays; the dump's nested nodes
/// are read into the same): internal nodes `0..leaves - 1`, children `>= 0` internal,
/// `< 0` the leaf `!c`; per internal node its feature, threshold (for a categorical split
/// the index of its set in `cats`), `decision_type` and training count.
pub(super) struct RawTree {
    pub leaves: usize,
    pub feature: Vec<u32>,
    pub threshold: Vec<f64>,
    pub decision: Vec<i32>,
    pub left: Vec<i64>,
    pub right: Vec<i64>,
    pub internal_count: Vec<f64>,
    pub leaf_value: Vec<f64>,
    pub leaf_count: Vec<f64>,
    pub cats: Vec<CatSplit>,
}

/// Per feature: its missing type (4: categorical) and where it was first seen.
pub(super) type Missing = Vec<Option<(u8, usize, usize)>>;

/// One tree as ensemble nodes: internal node `i` is node `i`, leaf `j` is node
/// `leaves - 1 + j` (see [`super::lgbm_text`] for what is kept exact).
pub(super) fn build(
    raw: RawTree,
    t: usize,
    nf: usize,
    missing: &mut Missing,
) -> Result<Tree, TreeError> {
    let leaves = raw.leaves;
    let inner = leaves - 1;
    let mut nodes = Vec::with_capacity(inner + leaves);
    if inner > 0 {
        let RawTree {
            feature,
            threshold,
            decision,
            left,
            right,
            internal_count: cover,
            ..
        } = &raw;
        let child = |c: i64, i: usize| -> Result<u32, TreeError> {
            let k = if c >= 0 {
                (c as u64 as usize) < inner
            } else {
                ((!c) as u64 as usize) < leaves
            };
            if !k {
                return Err(TreeError::BadTree {
                    tree: t,
                    node: i,
                    reason: format!("child {c} out of range ({leaves} leaves)"),
                });
            }
            Ok(if c >= 0 {
                c as u32
            } else {
                (inner + (!c) as usize) as u32
            })
        };
        for i in 0..inner {
            let bad = |reason: String| TreeError::BadTree {
                tree: t,
                node: i,
                reason,
            };
            let d = decision[i];
            if !(0..16).contains(&d) {
                return Err(bad(format!("decision_type {d} is not one LightGBM writes")));
            }
            let f = feature[i] as usize;
            if f >= nf {
                return Err(bad(format!("feature {f} out of range (model has {nf})")));
            }
            let thr = threshold[i];
            if thr.is_nan() {
                return Err(bad("threshold NaN".into()));
            }
            // A categorical split counts as a missing type of its own (4): LightGBM
            // splits a feature one way only.
            let categorical = d & 1 != 0;
            let kind = if categorical { 4 } else { ((d >> 2) & 3) as u8 };
            match missing[f] {
                None => missing[f] = Some((kind, t, i)),
                Some((k, t0, i0)) if k != kind => {
                    return Err(bad(format!(
                        "feature {f} has missing type {kind} here and {k} at tree {t0} \
                         node {i0} (LightGBM gives a feature one missing type; 4: \
                         categorical)"
                    )))
                }
                _ => {}
            }
            if categorical {
                // The threshold names the node's category set.
                let k = thr as usize;
                if thr < 0.0 || thr.fract() != 0.0 || k >= raw.cats.len() {
                    return Err(bad(format!(
                        "categorical split {thr} is not one of the tree's {} sets",
                        raw.cats.len()
                    )));
                }
                nodes.push(Node {
                    feature: f as u32,
                    threshold: 0.0,
                    left: child(left[i], i)?,
                    right: child(right[i], i)?,
                    default_left: false,
                    value: 0.0,
                    cover: cover[i] as f32,
                    cat: k as u32,
                });
                continue;
            }
            // LightGBM writes `inf` for a split of NaN from every number: f32::MAX sends
            // every finite number but f32::MAX itself left (the engine refuses infinite
            // values in a transaction).
            let threshold = if thr >= f32::MAX as f64 {
                f32::MAX
            } else {
                above(thr)
            };
            let default_left = match kind {
                0 => 0.0 < threshold,
                1 | 2 => d & 2 != 0,
                _ => return Err(bad(format!("missing type 3 in decision_type {d}"))),
            };
            nodes.push(Node {
                feature: f as u32,
                threshold,
                left: child(left[i], i)?,
                right: child(right[i], i)?,
                default_left,
                value: 0.0,
                cover: cover[i] as f32,
                cat: NO_CAT,
            });
        }
    }
    for (j, (&v, &c)) in raw.leaf_value.iter().zip(&raw.leaf_count).enumerate() {
        if !v.is_finite() || v.abs() > f32::MAX as f64 {
            return Err(TreeError::BadTree {
                tree: t,
                node: inner + j,
                reason: format!("leaf value {v} is not a finite float32"),
            });
        }
        nodes.push(Node {
            feature: 0,
            threshold: 0.0,
            left: LEAF,
            right: LEAF,
            default_left: false,
            value: v as f32,
            cover: c as f32,
            cat: NO_CAT,
        });
    }
    Tree::with_categories(nodes, raw.cats, t, nf)
}

/// The link of each output's ensemble: multi-class (softmax) models need one tree per
/// class and iteration, the others one output.
pub(super) fn outputs(
    link: Link,
    classes: usize,
    per_iter: usize,
    objective: &str,
) -> Result<Link, TreeError> {
    let multi = link == Link::Softmax;
    if per_iter != classes || (classes == 1) == multi || classes == 0 {
        return Err(TreeError::Unsupported(format!(
            "LightGBM num_class={classes}, num_tree_per_iteration={per_iter} with objective \
             {objective:?} (one output, or one tree per class and iteration for multiclass)"
        )));
    }
    Ok(if multi { Link::Identity } else { link })
}

/// The ensembles, one per class (tree `t` in class `t % classes`); features of missing
/// type Zero read their zero range as missing; names `Column_<i>` are positional.
pub(super) fn assemble(
    trees: Vec<Tree>,
    missing: &Missing,
    link: Link,
    classes: usize,
    nf: usize,
    names: Vec<String>,
    positional: bool,
) -> Vec<Ensemble> {
    let zero_as_missing: Vec<u32> = missing
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Some((1, _, _))))
        .map(|(f, _)| f as u32)
        .collect();
    let names = (!positional).then_some(names);
    let mut per_class: Vec<Vec<Tree>> = vec![Vec::new(); classes];
    for (t, tree) in trees.into_iter().enumerate() {
        per_class[t % classes].push(tree);
    }
    per_class
        .into_iter()
        .map(|trees| Ensemble {
            trees,
            base_margin: 0.0,
            link,
            num_features: nf,
            feature_names: names.clone(),
            zero_as_missing: zero_as_missing.clone(),
        })
        .collect()
}
