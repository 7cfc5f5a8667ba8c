//! TreeSHAP by per-leaf subset tables (the idea of "Fast TreeSHAP v2", Yang 2021).
//!
//! In path-dependent TreeSHAP a leaf credits each unique feature on its path with a
//! weight that depends only on that path's (zero, one) pairs: `zero` (the cover fraction
//! of the path through the feature's splits) is fixed by the tree, and `one` is whether
//! the row follows every split on that feature. So for a leaf with `k` unique features
//! there are only `2^k` possible credit vectors. They are computed once, at load, with the
//! same extend / unwind arithmetic as [`super::shap`]; explaining a row then costs, per
//! tree, one direction test per internal node and, per leaf, a few bit operations and `k`
//! additions, instead of the `O(depth²)` unwinding per leaf.
//!
//! Tables take `sum over leaves of 2^k · k` values; [`ShapTables::new`] declines (returns
//! `None`) above a memory budget, and the caller falls back to the recursive algorithm.

use super::ensemble::{Ensemble, Tree, LEAF};

/// Largest table set built (values).
pub const MAX_TABLE_VALUES: usize = 8 << 20;
/// Most unique features on one path for which a table is built.
pub const MAX_UNIQUE: usize = 12;

#[derive(Debug, Clone, Copy, Default)]
struct Elem {
    zero: f64,
    one: f64,
    w: f64,
}

fn extend(p: &mut [Elem], d: usize, zero: f64, one: f64) {
    p[d] = Elem {
        zero,
        one,
        w: if d == 0 { 1.0 } else { 0.0 },
    };
    for i in (0..d).rev() {
        p[i + 1].w += one * p[i].w * (i + 1) as f64 / (d + 1) as f64;
        p[i].w = zero * p[i].w * (d - i) as f64 / (d + 1) as f64;
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

/// One leaf: its unique features, the path tests that decide each `one` bit, and its
/// `2^k × k` credit table.
#[derive(Debug, Clone)]
struct Leaf {
    /// Range in `features`.
    feat: (u32, u32),
    /// Range in `tests`.
    tests: (u32, u32),
    /// Offset in `values`.
    values: u32,
}

/// Tables for a whole ensemble.
#[derive(Debug, Clone)]
pub struct ShapTables {
    /// Per tree: range of its leaves.
    trees: Vec<(u32, u32)>,
    leaves: Vec<Leaf>,
    features: Vec<u32>,
    /// (internal node, went left, bit): the row keeps bit `bit` only if it goes the
    /// same way at `node`.
    tests: Vec<(u32, bool, u8)>,
    /// Credits, stored as `f32` (half the memory, so more of it stays in cache); sums
    /// are accumulated in `f64`.
    values: Vec<f32>,
}

fn paths(
    t: &Tree,
    node: usize,
    path: &mut Vec<(u32, bool)>,
    out: &mut Vec<(usize, Vec<(u32, bool)>)>,
) {
    let n = &t.nodes[node];
    if n.left == LEAF {
        out.push((node, path.clone()));
        return;
    }
    path.push((node as u32, true));
    paths(t, n.left as usize, path, out);
    path.pop();
    path.push((node as u32, false));
    paths(t, n.right as usize, path, out);
    path.pop();
}

impl ShapTables {
    /// Builds the tables, or `None` above [`MAX_TABLE_VALUES`] / [`MAX_UNIQUE`].
    pub fn new(e: &Ensemble) -> Option<Self> {
        let mut s = Self {
            trees: Vec::with_capacity(e.trees.len()),
            leaves: Vec::new(),
            features: Vec::new(),
            tests: Vec::new(),
            values: Vec::new(),
        };
        let mut buf = vec![Elem::default(); MAX_UNIQUE + 2];
        for t in &e.trees {
            let first = s.leaves.len() as u32;
            let mut ps = Vec::new();
            paths(t, 0, &mut Vec::new(), &mut ps);
            for (leaf, path) in ps {
                // Unique features in path order with the product of cover fractions.
                let mut feats: Vec<u32> = Vec::new();
                let mut zeros: Vec<f64> = Vec::new();
                let f0 = s.features.len() as u32;
                let t0 = s.tests.len() as u32;
                for &(node, left) in &path {
                    let n = &t.nodes[node as usize];
                    let child = if left { n.left } else { n.right };
                    let frac = t.nodes[child as usize].cover as f64 / n.cover as f64;
                    let j = match feats.iter().position(|&f| f == n.feature) {
                        Some(j) => {
                            zeros[j] *= frac;
                            j
                        }
                        None => {
                            feats.push(n.feature);
                            zeros.push(frac);
                            feats.len() - 1
                        }
                    };
                    s.tests.push((node, left, j as u8));
                }
                let k = feats.len();
                if k > MAX_UNIQUE {
                    return None;
                }
                if s.values.len() + (k << k) > MAX_TABLE_VALUES {
                    return None;
                }
                let v0 = s.values.len() as u32;
                let value = t.nodes[leaf].value as f64;
                for subset in 0..(1usize << k) {
                    // The path as the recursive algorithm leaves it at this leaf.
                    extend(&mut buf, 0, 1.0, 1.0);
                    for (j, &z) in zeros.iter().enumerate() {
                        let one = ((subset >> j) & 1) as f64;
                        extend(&mut buf, j + 1, z, one);
                    }
                    for (j, &z) in zeros.iter().enumerate() {
                        let one = ((subset >> j) & 1) as f64;
                        let w = unwound_sum(&buf, k, j + 1);
                        s.values.push((w * (one - z) * value) as f32);
                    }
                }
                s.features.extend(&feats);
                s.leaves.push(Leaf {
                    feat: (f0, f0 + k as u32),
                    tests: (t0, s.tests.len() as u32),
                    values: v0,
                });
            }
            s.trees.push((first, s.leaves.len() as u32));
        }
        Some(s)
    }

    /// Number of table values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Adds the row's per-feature credits into `phi` (length >= features).
    pub fn add(&self, e: &Ensemble, x: &[f32], phi: &mut [f64]) {
        let mut goes_left = Vec::with_capacity(64);
        for (t, &(l0, l1)) in e.trees.iter().zip(&self.trees) {
            goes_left.clear();
            goes_left.extend(t.nodes.iter().map(|n| {
                if n.left == LEAF {
                    false
                } else {
                    let v = x[n.feature as usize];
                    if v.is_nan() {
                        n.default_left
                    } else {
                        v < n.threshold
                    }
                }
            }));
            for leaf in &self.leaves[l0 as usize..l1 as usize] {
                let k = (leaf.feat.1 - leaf.feat.0) as usize;
                let mut subset = (1usize << k) - 1;
                for &(node, left, j) in &self.tests[leaf.tests.0 as usize..leaf.tests.1 as usize] {
                    if goes_left[node as usize] != left {
                        subset &= !(1 << j);
                    }
                }
                let row = leaf.values as usize + subset * k;
                let feats = &self.features[leaf.feat.0 as usize..leaf.feat.1 as usize];
                for (f, v) in feats.iter().zip(&self.values[row..row + k]) {
                    phi[*f as usize] += *v as f64;
                }
            }
        }
    }
}
