//! Exact TreeSHAP, path-dependent algorithm (Lundberg, Erion & Lee, "Consistent
//! Individualized Feature Attribution for Tree Ensembles", 2018, Algorithm 2).
//!
//! For each tree, a recursive walk keeps the set of unique features on the path with the
//! fraction of training cover that flows through each split (`zero`) and whether `x`
//! follows it (`one`), and the weights of all subset sizes; at each leaf every path
//! feature is credited `w · (one − zero) · leaf`. Missing values follow the split's
//! default direction, as in prediction. The last output is the bias: the base margin plus
//! each tree's cover-weighted mean leaf value, so contributions sum to the margin.

use super::ensemble::{Ensemble, Tree};

#[derive(Debug, Clone, Copy, Default)]
struct Elem {
    feature: i64,
    zero: f64,
    one: f64,
    w: f64,
}

// The recursions divide by small integers and by the path fractions. Divisions dominate
// the cost, so reciprocals of integers come from a table (`inv[k] = 1/k`) and each
// function divides by its fractions once.

fn extend(p: &mut [Elem], d: usize, zero: f64, one: f64, feature: i64, inv: &[f64]) {
    p[d] = Elem {
        feature,
        zero,
        one,
        w: if d == 0 { 1.0 } else { 0.0 },
    };
    let r = inv[d + 1];
    for i in (0..d).rev() {
        p[i + 1].w += one * p[i].w * (i + 1) as f64 * r;
        p[i].w = zero * p[i].w * (d - i) as f64 * r;
    }
}

fn unwind(p: &mut [Elem], d: usize, k: usize, inv: &[f64]) {
    let (one, zero) = (p[k].one, p[k].zero);
    let r = inv[d + 1];
    let mut next = p[d].w;
    if one != 0.0 {
        let inv_one = 1.0 / one;
        for i in (0..d).rev() {
            let t = p[i].w;
            p[i].w = next * (d + 1) as f64 * inv[i + 1] * inv_one;
            next = t - p[i].w * zero * (d - i) as f64 * r;
        }
    } else {
        let inv_zero = 1.0 / zero;
        for i in (0..d).rev() {
            p[i].w = p[i].w * (d + 1) as f64 * inv_zero * inv[d - i];
        }
    }
    for i in k..d {
        p[i].feature = p[i + 1].feature;
        p[i].zero = p[i + 1].zero;
        p[i].one = p[i + 1].one;
    }
}

#[inline]
fn unwound_sum(p: &[Elem], d: usize, k: usize, inv: &[f64]) -> f64 {
    let (one, zero) = (p[k].one, p[k].zero);
    let r = inv[d + 1];
    let mut total = 0.0;
    if one != 0.0 {
        let inv_one = 1.0 / one;
        let mut next = p[d].w;
        for i in (0..d).rev() {
            let t = next * (d + 1) as f64 * inv[i + 1] * inv_one;
            total += t;
            next = p[i].w - t * zero * (d - i) as f64 * r;
        }
    } else if zero != 0.0 {
        let inv_zero = 1.0 / zero;
        for i in (0..d).rev() {
            total += p[i].w * inv_zero * (d + 1) as f64 * inv[d - i];
        }
    }
    total
}

struct Walk<'a> {
    tree: &'a Tree,
    x: &'a [f32],
    phi: &'a mut [f64],
    inv: &'a [f64],
}

impl Walk<'_> {
    /// Credits every path feature at a leaf. The unwound sum of an element depends only
    /// on its (zero, one) pair: elements that `x` does not follow (one = 0) share one sum
    /// divided by their `zero`, computed once per leaf; the others unwind in O(depth).
    fn leaf(&mut self, buf: &[Elem], d: usize, value: f64) {
        let mut shared: Option<f64> = None;
        for i in 1..=d {
            let e = buf[i];
            let w = if e.one == 0.0 {
                if e.zero == 0.0 {
                    continue;
                }
                let s = *shared.get_or_insert_with(|| {
                    (0..d)
                        .map(|j| buf[j].w * (d + 1) as f64 * self.inv[d - j])
                        .sum::<f64>()
                });
                s / e.zero
            } else {
                unwound_sum(buf, d, i, self.inv)
            };
            self.phi[e.feature as usize] += w * (e.one - e.zero) * value;
        }
    }

    /// `buf[..d]` holds the parent's path; this call's path is built in `buf` itself and
    /// children receive copies in the space after it.
    fn recurse(
        &mut self,
        node: usize,
        buf: &mut [Elem],
        d: usize,
        zero: f64,
        one: f64,
        feature: i64,
    ) {
        extend(buf, d, zero, one, feature, self.inv);
        let n = self.tree.nodes[node];
        if n.is_leaf() {
            self.leaf(buf, d, n.value as f64);
            return;
        }
        let goes_left = self.tree.goes_left(&n, self.x[n.feature as usize]);
        let (hot, cold) = if goes_left {
            (n.left, n.right)
        } else {
            (n.right, n.left)
        };
        let cover = n.cover as f64;
        let hot_zero = self.tree.nodes[hot as usize].cover as f64 / cover;
        let cold_zero = self.tree.nodes[cold as usize].cover as f64 / cover;
        let (mut in_zero, mut in_one) = (1.0, 1.0);
        let mut d = d;
        if let Some(k) = (1..=d).find(|&i| buf[i].feature == n.feature as i64) {
            in_zero = buf[k].zero;
            in_one = buf[k].one;
            unwind(buf, d, k, self.inv);
            d -= 1;
        }
        let (mine, rest) = buf.split_at_mut(d + 1);
        rest[..=d].copy_from_slice(mine);
        self.recurse(
            hot as usize,
            rest,
            d + 1,
            hot_zero * in_zero,
            in_one,
            n.feature as i64,
        );
        rest[..=d].copy_from_slice(mine);
        self.recurse(
            cold as usize,
            rest,
            d + 1,
            cold_zero * in_zero,
            0.0,
            n.feature as i64,
        );
    }
}

/// Cover-weighted mean leaf value of a subtree.
fn mean_value(t: &Tree, node: usize) -> f64 {
    let n = &t.nodes[node];
    if n.is_leaf() {
        return n.value as f64;
    }
    let (l, r) = (&t.nodes[n.left as usize], &t.nodes[n.right as usize]);
    let total = (l.cover + r.cover) as f64;
    if total <= 0.0 {
        return 0.5 * (mean_value(t, n.left as usize) + mean_value(t, n.right as usize));
    }
    (l.cover as f64 * mean_value(t, n.left as usize)
        + r.cover as f64 * mean_value(t, n.right as usize))
        / total
}

/// Per-tree expected values (the bias part of each tree).
pub fn expected_values(e: &Ensemble) -> Vec<f64> {
    e.trees.iter().map(|t| mean_value(t, 0)).collect()
}

/// SHAP values of `x`: `num_features` contributions then the bias, summing to the margin.
/// `bias` is `base_margin + sum(expected_values)`, precomputed by the caller.
pub fn contributions(e: &Ensemble, bias: f64, x: &[f32], out: &mut Vec<f64>) {
    out.clear();
    out.resize(e.num_features + 1, 0.0);
    add_trees(e, 0..e.trees.len(), x, out);
    out[e.num_features] += bias;
}

/// Adds the contributions of the trees `trees` of `e` to `phi[..num_features]`.
pub fn add_trees(e: &Ensemble, trees: impl IntoIterator<Item = usize>, x: &[f32], phi: &mut [f64]) {
    let d = e.max_depth() + 2;
    let mut buf = vec![Elem::default(); (d + 1) * (d + 2) / 2 + d];
    let inv: Vec<f64> = (0..=d + 2)
        .map(|k| if k == 0 { 0.0 } else { 1.0 / k as f64 })
        .collect();
    for t in trees {
        let mut w = Walk {
            tree: &e.trees[t],
            x,
            phi: &mut *phi,
            inv: &inv,
        };
        w.recurse(0, &mut buf, 0, 1.0, 1.0, -1);
    }
}
