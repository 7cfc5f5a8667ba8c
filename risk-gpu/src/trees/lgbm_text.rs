//! LightGBM text models (`Booster.save_model("m.txt")`, model format `v2`–`v4`: LightGBM
//! 2.x – 4.x), read into the same [`Ensemble`] as XGBoost's so that the padded layout,
//! the SIMD kernels and TreeSHAP serve both.
//!
//! What the conversion keeps exact (LightGBM's `Tree::NumericalDecision` on the double of
//! each float32 feature value):
//! - A split sends `x` left when `x <= threshold` (a double). For a float32 `x` that is
//!   `x < t` where `t` is the smallest float32 above the threshold ([`above`]), the
//!   ensemble's own test.
//! - Missing type `NaN`: NaN takes the node's default branch, as the ensemble does.
//! - Missing type `None`: NaN is read as 0 and compared, so the node's default branch is
//!   where 0 goes.
//! - Missing type `Zero` (`zero_as_missing`): NaN and every value in LightGBM's zero range
//!   `[-1e-35, 1e-35]` take the default branch. LightGBM gives every split on a feature
//!   its feature's missing type, so such features are listed in
//!   [`Ensemble::zero_as_missing`] and their zero range is read as NaN before the trees
//!   ([`Ensemble::prepare`]). A file whose splits on one feature disagree is refused.
//! - A threshold at or beyond float32's largest (LightGBM writes `inf` for a split of
//!   NaN from every number) becomes `f32::MAX`: the one float32 sent the other way is
//!   `f32::MAX` itself (and `+inf`, which a transaction cannot hold).
//! - Leaves' values are rounded to float32 and summed in float64 (LightGBM sums doubles:
//!   the margins differ by the rounding, ~1e-7). Covers are the nodes' training counts
//!   (`internal_count`, `leaf_count`), which LightGBM's own TreeSHAP weighs by.
//!
//! - Categorical splits (`decision_type` bit 0): the value truncated toward zero goes left
//!   when it is in the node's bitset (`cat_threshold`), NaN and negative values go right
//!   ([`CatSplit`]).
//!
//! Objectives read ([`Link`](super::ensemble::Link)): `binary` (with `sigmoid:1`) and `cross_entropy` (the
//! probability is the logistic of the margin), the regressions (identity, or `exp` for
//! Poisson, gamma, Tweedie). Refused with [`TreeError::Unsupported`] naming what was
//! found: other objectives (multiclass, ranking, `sigmoid` other than 1, `reg_sqrt`),
//! linear trees, random forests' averaged output.
//!
//! Every count is checked before anything is built from it: `max_feature_idx` and
//! `feature_names`, `num_leaves` against each per-node array, trees numbered in order and
//! as many as `tree_sizes` says, children in range and forming a tree ([`Tree::new`]).

use super::ensemble::{CatCast, CatSplit, Ensemble, Tree, MAX_CAT_WORDS};
use super::lgbm_tree::{assemble, build, objective, outputs, Missing, RawTree};
use super::xgb_json::{MAX_FEATURES, MAX_NODES, MAX_TREES};
use super::TreeError;
use std::collections::HashMap;

pub use super::ensemble::ZERO_THRESHOLD;
pub use super::lgbm_tree::above;

/// Whether `bytes` start like a LightGBM text model (its first line is `tree`).
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(b"tree\n") || bytes.starts_with(b"tree\r\n")
}

fn format(line: usize, m: impl std::fmt::Display) -> TreeError {
    TreeError::Format(format!("LightGBM text model, line {line}: {m}"))
}

/// The lines of a text model, numbered from 1, without their `\r`.
struct Lines<'a> {
    it: std::iter::Peekable<std::iter::Enumerate<std::str::Lines<'a>>>,
}

impl<'a> Lines<'a> {
    fn peek(&mut self) -> Option<(usize, &'a str)> {
        self.it
            .peek()
            .map(|&(i, l)| (i + 1, l.trim_end_matches('\r')))
    }
    fn next(&mut self) -> Option<(usize, &'a str)> {
        self.it
            .next()
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
    }
}

/// `key=value` lines up to a blank line or a line starting with `stop`; a bare `key`
/// (LightGBM's `average_output`) has an empty value. Repeated keys are refused.
fn section<'a>(
    lines: &mut Lines<'a>,
    stop: &str,
) -> Result<HashMap<&'a str, (usize, &'a str)>, TreeError> {
    let mut kv = HashMap::new();
    while let Some((n, l)) = lines.peek() {
        if l.starts_with(stop) || l == "end of trees" {
            break;
        }
        lines.next();
        if l.is_empty() {
            if kv.is_empty() {
                continue;
            }
            break;
        }
        let (k, v) = l.split_once('=').unwrap_or((l, ""));
        if kv.insert(k, (n, v)).is_some() {
            return Err(format(n, format!("{k:?} appears twice")));
        }
    }
    Ok(kv)
}

fn get<'a>(
    kv: &HashMap<&str, (usize, &'a str)>,
    key: &str,
    at: usize,
) -> Result<(usize, &'a str), TreeError> {
    kv.get(key)
        .copied()
        .ok_or_else(|| format(at, format!("{key} is missing")))
}

fn int(key: &str, (n, v): (usize, &str), max: usize) -> Result<usize, TreeError> {
    let x: u64 = v
        .trim()
        .parse()
        .map_err(|_| format(n, format!("{key} {v:?} is not a non-negative integer")))?;
    if x > max as u64 {
        return Err(TreeError::TooLarge(format!(
            "LightGBM text model, line {n}: {key} {x} (max {max})"
        )));
    }
    Ok(x as usize)
}

/// A space-separated array of exactly `len` values.
fn array<T: std::str::FromStr>(
    key: &str,
    (n, v): (usize, &str),
    len: usize,
) -> Result<Vec<T>, TreeError> {
    let mut out = Vec::with_capacity(len);
    for tok in v.split(' ').filter(|t| !t.is_empty()) {
        if out.len() == len {
            return Err(format(n, format!("{key} has more than {len} values")));
        }
        out.push(
            tok.parse()
                .map_err(|_| format(n, format!("{key}: {tok:?} is not a number")))?,
        );
    }
    if out.len() != len {
        return Err(format(
            n,
            format!("{key} has {} values, {len} expected", out.len()),
        ));
    }
    Ok(out)
}

/// Parses and validates a LightGBM text model of one output.
pub fn parse(bytes: &[u8]) -> Result<Ensemble, TreeError> {
    super::xgb_json::one(parse_classes(bytes)?)
}

/// Parses and validates a LightGBM text model: one ensemble per output (per class for
/// `multiclass`, tree `t` in class `t % num_class`; their ensembles give margins).
pub fn parse_classes(bytes: &[u8]) -> Result<Vec<Ensemble>, TreeError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        TreeError::Format(format!(
            "LightGBM text model is not UTF-8 (byte {})",
            e.valid_up_to()
        ))
    })?;
    if !looks_like(bytes) {
        return Err(format(1, "the first line is not \"tree\""));
    }
    let mut lines = Lines {
        it: text.lines().enumerate().peekable(),
    };
    lines.next();
    let head = section(&mut lines, "Tree=")?;
    let version = get(&head, "version", 1)?;
    if !matches!(version.1, "v2" | "v3" | "v4") {
        return Err(TreeError::Unsupported(format!(
            "LightGBM model format {:?} (read: v2, v3, v4)",
            version.1
        )));
    }
    let link = objective(get(&head, "objective", 1)?)?;
    if let Some((n, _)) = head.get("average_output") {
        return Err(TreeError::Unsupported(format!(
            "LightGBM line {n}: average_output (a random forest, boosting=\"rf\"): its trees \
             are averaged, not summed; train with boosting=\"gbdt\""
        )));
    }
    let classes = int("num_class", get(&head, "num_class", 1)?, 1 << 16)?;
    let per_iter = match head.get("num_tree_per_iteration") {
        Some(&v) => int("num_tree_per_iteration", v, 1 << 16)?,
        None => classes,
    };
    let link = outputs(link, classes, per_iter, head["objective"].1)?;
    let max_idx = get(&head, "max_feature_idx", 1)?;
    let nf = int("max_feature_idx", max_idx, MAX_FEATURES - 1)? + 1;
    let names: Vec<String> = array("feature_names", get(&head, "feature_names", 1)?, nf)?;
    let mut seen = std::collections::HashSet::new();
    for n in &names {
        if !seen.insert(n.as_str()) {
            return Err(format(
                head["feature_names"].0,
                format!("feature name {n:?} appears twice"),
            ));
        }
    }
    // LightGBM names unnamed columns Column_0, Column_1, ...: positional features.
    let positional = names
        .iter()
        .enumerate()
        .all(|(i, n)| *n == format!("Column_{i}"));
    let sizes = head
        .get("tree_sizes")
        .map(|&(_, v)| v.split(' ').filter(|t| !t.is_empty()).count());
    if let Some(s) = sizes {
        if s > MAX_TREES {
            return Err(TreeError::TooLarge(format!(
                "LightGBM tree_sizes lists {s} trees (max {MAX_TREES})"
            )));
        }
    }

    // Missing type per feature (LightGBM gives a feature's splits its feature's).
    let mut missing: Missing = vec![None; nf];
    let mut trees = Vec::new();
    loop {
        let Some((n, l)) = lines.next() else {
            return Err(format(
                text.lines().count(),
                "the file ends before \"end of trees\" (truncated?)",
            ));
        };
        if l.is_empty() {
            continue;
        }
        if l == "end of trees" {
            break;
        }
        let Some(id) = l.strip_prefix("Tree=") else {
            return Err(format(
                n,
                format!("expected \"Tree={}\", found {l:?}", trees.len()),
            ));
        };
        if id != trees.len().to_string() {
            return Err(format(
                n,
                format!("tree {id:?} where tree {} was expected", trees.len()),
            ));
        }
        if trees.len() == MAX_TREES {
            return Err(TreeError::TooLarge(format!(
                "LightGBM model has more than {MAX_TREES} trees"
            )));
        }
        let kv = section(&mut lines, "Tree=")?;
        trees.push(tree(&kv, trees.len(), n, nf, &mut missing)?);
    }
    if let Some(s) = sizes {
        if s != trees.len() {
            return Err(TreeError::Format(format!(
                "LightGBM tree_sizes lists {s} trees, the file has {}",
                trees.len()
            )));
        }
    }
    Ok(assemble(
        trees, &missing, link, classes, nf, names, positional,
    ))
}

/// One `Tree=` block as ensemble nodes: internal node `i` is node `i`, leaf `j` is node
/// `num_leaves - 1 + j`.
fn tree(
    kv: &HashMap<&str, (usize, &str)>,
    t: usize,
    at: usize,
    nf: usize,
    missing: &mut Missing,
) -> Result<Tree, TreeError> {
    let leaves = int("num_leaves", get(kv, "num_leaves", at)?, MAX_NODES / 2)?;
    if leaves == 0 {
        return Err(format(at, format!("tree {t} has num_leaves=0")));
    }
    let unsupported =
        |what: &str| TreeError::Unsupported(format!("LightGBM tree {t} (line {at}): {what}"));
    let cats = categories(kv, t, at, leaves - 1)?;
    if let Some(&(_, v)) = kv.get("is_linear") {
        if v.trim() != "0" {
            return Err(unsupported(
                "linear trees (linear_tree=true) are not read; train with linear_tree=false",
            ));
        }
    }
    let values: Vec<f64> = array("leaf_value", get(kv, "leaf_value", at)?, leaves)?;
    let counts: Vec<f64> = match kv.get("leaf_count") {
        Some(&v) => array("leaf_count", v, leaves)?,
        None if leaves == 1 => vec![0.0],
        None => return Err(format(at, format!("tree {t}: leaf_count is missing"))),
    };
    let inner = leaves - 1;
    let arr = |key: &str, len: usize| -> Result<(usize, &str), TreeError> {
        if len == 0 {
            Ok((at, ""))
        } else {
            get(kv, key, at)
        }
    };
    let raw = RawTree {
        leaves,
        feature: array("split_feature", arr("split_feature", inner)?, inner)?,
        threshold: array("threshold", arr("threshold", inner)?, inner)?,
        decision: array("decision_type", arr("decision_type", inner)?, inner)?,
        left: array("left_child", arr("left_child", inner)?, inner)?,
        right: array("right_child", arr("right_child", inner)?, inner)?,
        internal_count: array("internal_count", arr("internal_count", inner)?, inner)?,
        leaf_value: values,
        leaf_count: counts,
        cats,
    };
    build(raw, t, nf, missing)
}

/// The tree's category sets (`num_cat`, `cat_boundaries`, `cat_threshold`): LightGBM
/// sends a category in the set left, and NaN and negative values right
/// (`Tree::CategoricalDecision`).
fn categories(
    kv: &HashMap<&str, (usize, &str)>,
    t: usize,
    at: usize,
    inner: usize,
) -> Result<Vec<CatSplit>, TreeError> {
    let k = match kv.get("num_cat") {
        Some(&v) => int("num_cat", v, inner)?,
        None => 0,
    };
    if k == 0 {
        return Ok(Vec::new());
    }
    let bounds: Vec<usize> = array("cat_boundaries", get(kv, "cat_boundaries", at)?, k + 1)?;
    let words = *bounds.last().unwrap_or(&0);
    if words > MAX_CAT_WORDS {
        return Err(TreeError::TooLarge(format!(
            "LightGBM tree {t}: {words} category words (max {MAX_CAT_WORDS})"
        )));
    }
    if bounds[0] != 0 || bounds.windows(2).any(|w| w[0] > w[1]) {
        return Err(format(
            get(kv, "cat_boundaries", at)?.0,
            format!("tree {t}: cat_boundaries do not rise from 0"),
        ));
    }
    let bits: Vec<u32> = array("cat_threshold", get(kv, "cat_threshold", at)?, words)?;
    Ok(bounds
        .windows(2)
        .map(|w| CatSplit {
            words: bits[w[0]..w[1]].to_vec(),
            nan_left: false,
            invalid_left: false,
            in_left: true,
            cast: CatCast::Truncate,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trees::ensemble::Link;

    #[test]
    fn above_is_the_float32_form_of_less_or_equal() {
        let mut r = 0x9e3779b97f4a7c15u64;
        for _ in 0..100_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let t = f64::from_bits(r) % 1e6;
            if t.is_nan() {
                continue;
            }
            let a = above(t);
            let below = a.next_down();
            // below <= t < a: the two floats either side of the threshold.
            assert!((below as f64) <= t && t < a as f64, "{t}");
            // and an exactly representable threshold goes left.
            let e = t as f32;
            assert_eq!((e as f64) <= t, e < above(t));
        }
        assert_eq!(above(1.0), 1f32.next_up());
        assert_eq!(above(f64::NEG_INFINITY), f32::MIN);
    }

    #[test]
    fn objectives_give_their_link_and_others_are_named() {
        assert_eq!(objective((7, "binary sigmoid:1")).unwrap(), Link::Logistic);
        assert_eq!(objective((7, "cross_entropy")).unwrap(), Link::Logistic);
        assert_eq!(objective((7, "regression")).unwrap(), Link::Identity);
        assert_eq!(
            objective((7, "poisson max_delta_step:0.7")).unwrap(),
            Link::Exp
        );
        for o in [
            "binary sigmoid:2",
            "regression sqrt",
            "multiclassova num_class:3",
            "",
        ] {
            match objective((7, o)) {
                Err(TreeError::Unsupported(m)) => assert!(m.contains("line 7"), "{m}"),
                other => panic!("{o}: {other:?}"),
            }
        }
    }
}
