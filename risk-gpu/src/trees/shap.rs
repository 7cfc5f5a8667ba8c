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

fn extend(p: &mut [Elem], d: usize, zero: f64, one: f64, feature: i64) {
    p[d] = Elem {
        feature,
        zero,
        one,
        w: if d == 0 { 1.0 } else { 0.0 },
    };
    for i in (0..d).rev() {
        p[i + 1].w += one * p[i].w * (i + 1) as f64 / (d + 1) as f64;
        p[i].w = zero * p[i].w * (d - i) as f64 / (d + 1) as f64;
    }
}

fn unwind(p: &mut [Elem], d: usize, k: usize) {
    let (one, zero) = (p[k].one, p[k].zero);
    let mut next = p[d].w;
    for i in (0..d).rev() {
        if one != 0.0 {
            let t = p[i].w;
            p[i].w = next * (d + 1) as f64 / ((i + 1) as f64 * one);
            next = t - p[i].w * zero * (d - i) as f64 / (d + 1) as f64;
        } else {
            p[i].w = p[i].w * (d + 1) as f64 / (zero * (d - i) as f64);
        }
    }
    for i in k..d {
        p[i].feature = p[i + 1].feature;
        p[i].zero = p[i + 1].zero;
        p[i].one = p[i + 1].one;
    }
}

fn unwound_sum(p: &[Elem], d: usize, k: usize) -> f64 {
    let (one, zero) = (p[k].one, p[k].zero);
    let mut next = p[d].w;
    let mut total = 0.0;
    for i in (0..d).rev() {
        if one != 0.0 {
            let t = next * (d + 1) as f64 / ((i + 1) as f64 * one);
            total += t;
            next = p[i].w - t * zero * (d - i) as f64 / (d + 1) as f64;
        } else if zero != 0.0 {
            total += p[i].w / zero / ((d - i) as f64 / (d + 1) as f64);
        }
    }
    total
}

struct Walk<'a> {
    tree: &'a Tree,
    x: &'a [f32],
    phi: &'a mut [f64],
}

impl Walk<'_> {
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
        extend(buf, d, zero, one, feature);
        let n = self.tree.nodes[node];
        if n.is_leaf() {
            for i in 1..=d {
                let w = unwound_sum(buf, d, i);
                let e = buf[i];
                self.phi[e.feature as usize] += w * (e.one - e.zero) * n.value as f64;
            }
            return;
        }
        let v = self.x[n.feature as usize];
        let goes_left = if v.is_nan() {
            n.default_left
        } else {
            v < n.threshold
        };
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
            unwind(buf, d, k);
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
    let d = e.max_depth() + 2;
    let mut buf = vec![Elem::default(); (d + 1) * (d + 2) / 2 + d];
    for t in &e.trees {
        let mut w = Walk {
            tree: t,
            x,
            phi: &mut out[..],
        };
        w.recurse(0, &mut buf, 0, 1.0, 1.0, -1);
    }
    out[e.num_features] += bias;
}
