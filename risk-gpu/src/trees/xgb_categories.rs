//! XGBoost's categorical splits: a tree's `categories`, `categories_nodes`,
//! `categories_segments` and `categories_sizes` as [`CatSplit`]s (see
//! [`super::xgb_json`]).

use super::ensemble::{CatCast, CatSplit, MAX_CAT_WORDS};
use super::TreeError;

/// Largest category XGBoost reads (`OutOfRangeCat`: 2^24; from there on a value is no
/// category).
const MAX_CATEGORY: i64 = 1 << 24;

/// The tree's categorical splits (`split_type` 1), by node: `categories_nodes` names
/// exactly those nodes, each with a segment (`categories_segments`, `categories_sizes`)
/// of the sorted `categories` it sends right (XGBoost's `common::Decision`: categories in
/// the set go right; NaN takes the default branch; a value below 0 or at least 2^24 goes
/// left).
/// A tree's category arrays, as its JSON holds them.
pub(super) struct Arrays<'a> {
    pub split_type: &'a [i64],
    pub categories: &'a [i64],
    pub categories_nodes: &'a [i64],
    pub categories_segments: &'a [i64],
    pub categories_sizes: &'a [i64],
}

pub(super) fn categories(
    t: &Arrays,
    n: usize,
    bad: &dyn Fn(usize, String) -> TreeError,
) -> Result<std::collections::HashMap<usize, (u32, CatSplit)>, TreeError> {
    let k = t.categories_nodes.len();
    if t.categories_segments.len() != k || t.categories_sizes.len() != k {
        return Err(bad(
            0,
            format!(
                "categories_nodes / _segments / _sizes have {k} / {} / {} entries",
                t.categories_segments.len(),
                t.categories_sizes.len()
            ),
        ));
    }
    let is_cat = |i: usize| t.split_type.get(i) == Some(&1);
    let mut out = std::collections::HashMap::with_capacity(k);
    let mut words_total = 0usize;
    for j in 0..k {
        let node = t.categories_nodes[j];
        let i = usize::try_from(node)
            .ok()
            .filter(|&i| i < n && is_cat(i))
            .ok_or_else(|| {
                bad(
                    0,
                    format!("categories_nodes[{j}] = {node} is not a categorical split"),
                )
            })?;
        let (beg, size) = (t.categories_segments[j], t.categories_sizes[j]);
        let seg = usize::try_from(beg)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(b, s)| t.categories.get(b..b.checked_add(s)?))
            .ok_or_else(|| {
                bad(
                    i,
                    format!(
                        "categories segment {beg}+{size} is outside the {} categories",
                        t.categories.len()
                    ),
                )
            })?;
        if let Some(&c) = seg.iter().find(|&&c| !(0..MAX_CATEGORY).contains(&c)) {
            return Err(bad(i, format!("category {c} is outside 0..2^24")));
        }
        let words = seg.iter().max().map_or(0, |&m| m as usize / 32 + 1);
        words_total += words;
        if words_total > MAX_CAT_WORDS {
            return Err(TreeError::TooLarge(format!(
                "category sets of more than {MAX_CAT_WORDS} words in one tree"
            )));
        }
        let mut bits = vec![0u32; words];
        for &c in seg {
            bits[c as usize / 32] |= 1 << (c % 32);
        }
        let set = CatSplit {
            words: bits,
            nan_left: false, // the node's default_left, set by the caller
            invalid_left: true,
            in_left: false,
            cast: CatCast::XGBoost,
        };
        if out.insert(i, (j as u32, set)).is_some() {
            return Err(bad(i, "named twice in categories_nodes".into()));
        }
    }
    if let Some(i) = (0..n).find(|&i| is_cat(i) && !out.contains_key(&i)) {
        return Err(bad(i, "categorical split without categories".into()));
    }
    Ok(out)
}
