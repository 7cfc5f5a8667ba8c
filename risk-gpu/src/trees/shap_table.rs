//! TreeSHAP by per-leaf subset tables (the idea of "Fast TreeSHAP v2", Yang 2021).
//!
//! In path-dependent TreeSHAP a leaf credits each unique feature on its path with a
//! weight that depends only on that path's (zero, one) pairs: `zero` (the cover fraction
//! of the path through the feature's splits) is fixed by the tree, and `one` is whether
//! the row follows every split on that feature. So for a leaf with `k` unique features
//! there are only `2^k` possible credit vectors. They are computed once, at load, with the
//! same extend / unwind arithmetic as [`super::shap`].
//!
//! A leaf's table is indexed by its path's *level bits*: bit `l` is set when the row goes
//! the path's way at depth `l` (a feature's `one` is the AND of the bits of its levels).
//! Each tree is stored in preorder with, per node, its parent's position, so one linear
//! pass per tree computes every node's direction and every leaf's index (`idx(child) =
//! idx(parent) | agree << depth(parent)`): about five operations per node, then `k`
//! additions per leaf, instead of a test loop per leaf or `O(depth²)` unwinding.
//!
//! Tables take `sum over leaves of 2^depth · k` values; [`ShapTables::new`] declines
//! (returns `None`) above a memory budget or depth, and the caller falls back to the
//! recursive algorithm.

use super::ensemble::{Ensemble, Tree, LEAF};

/// Largest table set built (values).
pub const MAX_TABLE_VALUES: usize = 8 << 20;
/// Deepest leaf for which a table is built (its table has `2^depth` rows).
pub const MAX_LEAF_DEPTH: usize = 12;

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

/// One node in preorder.
#[derive(Debug, Clone, Copy)]
struct PreNode {
    /// Split feature (internal nodes).
    feature: u32,
    /// Split threshold (internal nodes).
    threshold: f32,
    /// Parent's position in preorder (the root points at itself).
    parent: u32,
    /// Leaf: offset of its table in `values`; internal: [`LEAF`].
    table: u32,
    /// Leaf: range start of its features in `features` (length `k`).
    feat: u32,
    /// Leaf: number of unique features on its path.
    k: u8,
    /// Depth of the parent (the bit this node sets in its leaf index).
    shift: u8,
    /// Whether this node is its parent's left child.
    is_left: bool,
    /// Internal nodes: direction of a missing value.
    default_left: bool,
}

/// Tables for a whole ensemble.
#[derive(Debug, Clone)]
pub struct ShapTables {
    /// Per tree: range of its nodes in `nodes`.
    trees: Vec<(u32, u32)>,
    nodes: Vec<PreNode>,
    /// Most nodes in one tree.
    max_nodes: usize,
    features: Vec<u32>,
    /// Credits, stored as `f32` (half the memory, so more of it stays in cache); sums
    /// are accumulated in `f64`.
    values: Vec<f32>,
}

/// Preorder of a tree: (node, parent position, is left child, depth).
fn preorder(t: &Tree) -> Vec<(usize, usize, bool, usize)> {
    let mut out = Vec::with_capacity(t.nodes.len());
    let mut stack = vec![(0usize, 0usize, false, 0usize)];
    while let Some((node, parent, is_left, depth)) = stack.pop() {
        let pos = out.len();
        out.push((node, parent, is_left, depth));
        let n = &t.nodes[node];
        if n.left != LEAF {
            stack.push((n.right as usize, pos, false, depth + 1));
            stack.push((n.left as usize, pos, true, depth + 1));
        }
    }
    out
}

impl ShapTables {
    /// Builds the tables, or `None` above [`MAX_TABLE_VALUES`] / [`MAX_LEAF_DEPTH`].
    pub fn new(e: &Ensemble) -> Option<Self> {
        let mut s = Self {
            trees: Vec::with_capacity(e.trees.len()),
            nodes: Vec::new(),
            max_nodes: 0,
            features: Vec::new(),
            values: Vec::new(),
        };
        let mut buf = vec![Elem::default(); MAX_LEAF_DEPTH + 2];
        let mut subset_credits: Vec<f64> = Vec::new();
        for t in &e.trees {
            let first = s.nodes.len() as u32;
            let order = preorder(t);
            // Path from the root (preorder positions) of the node being visited.
            let mut path: Vec<usize> = Vec::new();
            for (pos, &(node, parent, is_left, depth)) in order.iter().enumerate() {
                path.truncate(depth);
                path.push(pos);
                let n = &t.nodes[node];
                let mut pn = PreNode {
                    feature: n.feature,
                    threshold: n.threshold,
                    parent: parent as u32,
                    table: LEAF,
                    feat: 0,
                    k: 0,
                    // The root's bit lands on the masked-off bit 31: it starts at 0.
                    shift: if depth == 0 { 31 } else { depth as u8 - 1 },
                    is_left,
                    default_left: n.default_left,
                };
                if n.left == LEAF {
                    if depth > MAX_LEAF_DEPTH {
                        return None;
                    }
                    // Unique features in path order, the product of their cover
                    // fractions, and the level bits that decide each one's `one`.
                    let mut feats: Vec<u32> = Vec::new();
                    let mut zeros: Vec<f64> = Vec::new();
                    let mut level_masks: Vec<usize> = Vec::new();
                    for l in 0..depth {
                        let (pnode, ..) = order[path[l]];
                        let (_, _, child_left, _) = order[path[l + 1]];
                        let p = &t.nodes[pnode];
                        let child = if child_left { p.left } else { p.right };
                        let frac = t.nodes[child as usize].cover as f64 / p.cover as f64;
                        match feats.iter().position(|&f| f == p.feature) {
                            Some(j) => {
                                zeros[j] *= frac;
                                level_masks[j] |= 1 << l;
                            }
                            None => {
                                feats.push(p.feature);
                                zeros.push(frac);
                                level_masks.push(1 << l);
                            }
                        }
                    }
                    let k = feats.len();
                    if s.values.len() + (k << depth) > MAX_TABLE_VALUES {
                        return None;
                    }
                    // Credits per feature subset, then one row per level-bit pattern.
                    let value = n.value as f64;
                    subset_credits.clear();
                    for subset in 0..(1usize << k) {
                        extend(&mut buf, 0, 1.0, 1.0);
                        for (j, &z) in zeros.iter().enumerate() {
                            extend(&mut buf, j + 1, z, ((subset >> j) & 1) as f64);
                        }
                        for (j, &z) in zeros.iter().enumerate() {
                            let one = ((subset >> j) & 1) as f64;
                            subset_credits.push(unwound_sum(&buf, k, j + 1) * (one - z) * value);
                        }
                    }
                    pn.table = s.values.len() as u32;
                    pn.feat = s.features.len() as u32;
                    pn.k = k as u8;
                    for bits in 0..(1usize << depth) {
                        let subset = level_masks
                            .iter()
                            .enumerate()
                            .filter(|(_, &m)| bits & m == m)
                            .fold(0usize, |acc, (j, _)| acc | 1 << j);
                        s.values.extend(
                            subset_credits[subset * k..(subset + 1) * k]
                                .iter()
                                .map(|&v| v as f32),
                        );
                    }
                    s.features.extend(&feats);
                }
                s.nodes.push(pn);
            }
            s.max_nodes = s.max_nodes.max(order.len());
            s.trees.push((first, s.nodes.len() as u32));
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
    pub fn add(&self, x: &[f32], phi: &mut [f64]) {
        // Per preorder position: the leaf index so far, plus bit 31 when the row goes
        // left at that (internal) node.
        const LEFT: u32 = 1 << 31;
        let mut state: Vec<u32> = vec![0; self.max_nodes];
        for &(n0, n1) in &self.trees {
            let nodes = &self.nodes[n0 as usize..n1 as usize];
            let state = &mut state[..nodes.len()];
            for pos in 0..nodes.len() {
                let n = &nodes[pos];
                let p = state[n.parent as usize];
                // The root is its own parent with `shift` 31, so it starts at 0.
                let agree = ((p & LEFT != 0) == n.is_left) as u32;
                let i = (p & !LEFT) | (agree << n.shift & !LEFT);
                if n.table == LEAF {
                    let v = x[n.feature as usize];
                    let goes_left = if v.is_nan() {
                        n.default_left
                    } else {
                        v < n.threshold
                    };
                    state[pos] = i | (goes_left as u32) << 31;
                } else {
                    let k = n.k as usize;
                    let row = n.table as usize + i as usize * k;
                    let feats = &self.features[n.feat as usize..n.feat as usize + k];
                    for (f, v) in feats.iter().zip(&self.values[row..row + k]) {
                        phi[*f as usize] += *v as f64;
                    }
                }
            }
        }
    }
}
