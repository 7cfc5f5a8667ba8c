//! LightGBM `Booster.dump_model()` JSON (saved with `json.dump`), read into the same
//! trees as the text model ([`super::lgbm_text`], whose notes on exactness hold here):
//! the nested `tree_structure` of each `tree_info` entry is walked without recursion into
//! LightGBM's own numbering (`split_index`, `leaf_index`), categorical thresholds
//! (`"3||7||12"`) become bitsets, and `decision_type` / `default_left` / `missing_type`
//! the text model's bits. Every index must appear exactly once.

use super::ensemble::{CatCast, CatSplit, Ensemble, MAX_CAT_WORDS};
use super::lgbm_tree::{assemble, build, objective, outputs, Missing, RawTree};
use super::xgb_json::{MAX_FEATURES, MAX_NODES, MAX_TREES};
use super::TreeError;
use serde_json::Value;

/// Largest dump read (its values are expanded into a JSON tree before the checks).
pub const MAX_DUMP_FILE: usize = 256 << 20;

/// Whether `bytes` look like a LightGBM dump: a JSON object whose first key is not
/// XGBoost's `"learner"` and that has a `"tree_info"` key (however it was indented or
/// its keys sorted).
pub fn looks_like(bytes: &[u8]) -> bool {
    let head: Vec<u8> = bytes
        .iter()
        .take(64)
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    head.starts_with(b"{")
        && !head.starts_with(b"{\"learner\"")
        && bytes.windows(11).any(|w| w == b"\"tree_info\"")
}

fn format(m: impl std::fmt::Display) -> TreeError {
    TreeError::Format(format!("LightGBM dump: {m}"))
}

fn field<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a Value, TreeError> {
    v.get(key)
        .ok_or_else(|| format(format!("{at}: {key} is missing")))
}

fn uint(v: &Value, key: &str, at: &str, max: usize) -> Result<usize, TreeError> {
    let x = field(v, key, at)?
        .as_u64()
        .ok_or_else(|| format(format!("{at}: {key} is not a non-negative integer")))?;
    if x > max as u64 {
        return Err(TreeError::TooLarge(format!(
            "LightGBM dump, {at}: {key} {x} (max {max})"
        )));
    }
    Ok(x as usize)
}

fn num(v: &Value, key: &str, at: &str) -> Result<f64, TreeError> {
    field(v, key, at)?
        .as_f64()
        .ok_or_else(|| format(format!("{at}: {key} is not a number")))
}

/// Parses and validates a dump: one ensemble per output (as
/// [`super::lgbm_text::parse_classes`]).
pub fn parse_classes(bytes: &[u8]) -> Result<Vec<Ensemble>, TreeError> {
    if bytes.len() > MAX_DUMP_FILE {
        return Err(TreeError::TooLarge(format!(
            "LightGBM dump of {} bytes (at most {MAX_DUMP_FILE})",
            bytes.len()
        )));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(format)?;
    let version = field(&v, "version", "model")?.as_str().unwrap_or("");
    if !matches!(version, "v2" | "v3" | "v4") {
        return Err(TreeError::Unsupported(format!(
            "LightGBM model format {version:?} (read: v2, v3, v4)"
        )));
    }
    let obj = field(&v, "objective", "model")?
        .as_str()
        .ok_or_else(|| format("objective is not a string"))?;
    let link = objective((0, obj))?;
    if v.get("average_output").and_then(Value::as_bool) == Some(true) {
        return Err(TreeError::Unsupported(
            "LightGBM average_output (a random forest, boosting=\"rf\"): its trees are \
             averaged, not summed; train with boosting=\"gbdt\""
                .into(),
        ));
    }
    let classes = uint(&v, "num_class", "model", 1 << 16)?;
    let per_iter = match v.get("num_tree_per_iteration") {
        Some(_) => uint(&v, "num_tree_per_iteration", "model", 1 << 16)?,
        None => classes,
    };
    let link = outputs(link, classes, per_iter, obj)?;
    let nf = uint(&v, "max_feature_idx", "model", MAX_FEATURES - 1)? + 1;
    let names: Vec<String> = field(&v, "feature_names", "model")?
        .as_array()
        .filter(|a| a.len() == nf)
        .ok_or_else(|| format(format!("feature_names is not {nf} names")))?
        .iter()
        .map(|n| n.as_str().map(str::to_owned))
        .collect::<Option<_>>()
        .ok_or_else(|| format("feature_names holds a non-string"))?;
    let mut seen = std::collections::HashSet::new();
    if let Some(n) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(format(format!("feature name {n:?} appears twice")));
    }
    let positional = names
        .iter()
        .enumerate()
        .all(|(i, n)| *n == format!("Column_{i}"));
    let info = field(&v, "tree_info", "model")?
        .as_array()
        .ok_or_else(|| format("tree_info is not an array"))?;
    if info.len() > MAX_TREES {
        return Err(TreeError::TooLarge(format!(
            "LightGBM dump has {} trees (max {MAX_TREES})",
            info.len()
        )));
    }
    let mut missing: Missing = vec![None; nf];
    let mut trees = Vec::with_capacity(info.len());
    for (t, ti) in info.iter().enumerate() {
        let raw = tree(ti, t)?;
        trees.push(build(raw, t, nf, &mut missing)?);
    }
    Ok(assemble(
        trees, &missing, link, classes, nf, names, positional,
    ))
}

/// One `tree_info` entry in LightGBM's numbering.
fn tree(ti: &Value, t: usize) -> Result<RawTree, TreeError> {
    let at = format!("tree {t}");
    let leaves = uint(ti, "num_leaves", &at, MAX_NODES / 2)?;
    if leaves == 0 {
        return Err(format(format!("{at}: num_leaves is 0")));
    }
    let inner = leaves - 1;
    let mut raw = RawTree {
        leaves,
        feature: vec![0; inner],
        threshold: vec![f64::NAN; inner],
        decision: vec![0; inner],
        left: vec![0; inner],
        right: vec![0; inner],
        internal_count: vec![0.0; inner],
        leaf_value: vec![f64::NAN; leaves],
        leaf_count: vec![0.0; leaves],
        cats: Vec::new(),
    };
    let (mut seen_inner, mut seen_leaf) = (vec![false; inner], vec![false; leaves]);
    let mut words = 0usize;
    let mut sets: Vec<(usize, Vec<u32>)> = Vec::new();
    let root = field(ti, "tree_structure", &at)?;
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.get("split_index").is_none() {
            // A leaf (a one-leaf tree's root may have no leaf_index).
            let j = match n.get("leaf_index") {
                Some(_) => uint(n, "leaf_index", &at, leaves - 1)?,
                None if leaves == 1 => 0,
                None => return Err(format(format!("{at}: a leaf without leaf_index"))),
            };
            if std::mem::replace(&mut seen_leaf[j], true) {
                return Err(format(format!("{at}: leaf {j} appears twice")));
            }
            raw.leaf_value[j] = num(n, "leaf_value", &at)?;
            raw.leaf_count[j] = match n.get("leaf_count") {
                Some(_) => num(n, "leaf_count", &at)?,
                None if leaves == 1 => 0.0,
                None => return Err(format(format!("{at}: leaf {j} has no leaf_count"))),
            };
            continue;
        }
        let i = uint(n, "split_index", &at, inner.saturating_sub(1))?;
        if inner == 0 || std::mem::replace(&mut seen_inner[i], true) {
            return Err(format(format!(
                "{at}: split {i} appears twice or beyond num_leaves"
            )));
        }
        raw.feature[i] = uint(n, "split_feature", &at, u32::MAX as usize)? as u32;
        raw.internal_count[i] = num(n, "internal_count", &at)?;
        let default_left = field(n, "default_left", &at)?
            .as_bool()
            .ok_or_else(|| format(format!("{at}: default_left is not a boolean")))?;
        let miss = match field(n, "missing_type", &at)?.as_str() {
            Some("None") => 0,
            Some("Zero") => 1,
            Some("NaN") => 2,
            other => return Err(format(format!("{at}: missing_type {other:?}"))),
        };
        let categorical = match field(n, "decision_type", &at)?.as_str() {
            Some("<=") => false,
            Some("==") => true,
            other => return Err(format(format!("{at}: decision_type {other:?}"))),
        };
        raw.decision[i] = categorical as i32 | (default_left as i32) << 1 | miss << 2;
        raw.threshold[i] = if categorical {
            let set = field(n, "threshold", &at)?
                .as_str()
                .ok_or_else(|| format(format!("{at}: a categorical threshold not a string")))?;
            let cats: Vec<u32> = set
                .split("||")
                .map(|c| c.trim().parse::<u32>().ok().filter(|&c| c < 1 << 31))
                .collect::<Option<_>>()
                .ok_or_else(|| format(format!("{at}: categories {set:?}")))?;
            let w = cats.iter().max().map_or(0, |&m| m as usize / 32 + 1);
            words += w;
            if words > MAX_CAT_WORDS {
                return Err(TreeError::TooLarge(format!(
                    "LightGBM dump, {at}: category sets of more than {MAX_CAT_WORDS} words"
                )));
            }
            let mut bits = vec![0u32; w];
            for c in cats {
                bits[c as usize / 32] |= 1 << (c % 32);
            }
            // Numbered below in split order, as LightGBM numbers its sets.
            sets.push((i, bits));
            0.0
        } else {
            num(n, "threshold", &at)?
        };
        for (side, key) in [
            (&mut raw.left, "left_child"),
            (&mut raw.right, "right_child"),
        ] {
            let c = field(n, key, &at)?;
            side[i] = match (c.get("split_index"), c.get("leaf_index")) {
                (Some(_), _) => uint(c, "split_index", &at, inner - 1)? as i64,
                (None, Some(_)) => !(uint(c, "leaf_index", &at, leaves - 1)? as i64),
                (None, None) => return Err(format(format!("{at}: a child is neither"))),
            };
            stack.push(c);
        }
        if stack.len() > 2 * leaves {
            return Err(format(format!("{at}: more nodes than num_leaves allows")));
        }
    }
    if seen_inner.iter().any(|s| !s) || seen_leaf.iter().any(|s| !s) {
        return Err(format(format!(
            "{at}: fewer nodes than num_leaves={leaves} says"
        )));
    }
    sets.sort_by_key(|(i, _)| *i);
    for (k, (i, words)) in sets.into_iter().enumerate() {
        raw.threshold[i] = k as f64;
        raw.cats.push(CatSplit {
            words,
            nan_left: false,
            invalid_left: false,
            in_left: true,
            cast: CatCast::Truncate,
        });
    }
    Ok(raw)
}
