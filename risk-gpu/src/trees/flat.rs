//! The fast layout: every tree padded to a complete binary tree of one depth `D`, stored
//! as `2^D - 1` internal nodes (threshold, feature, missing direction packed in 8 bytes)
//! and `2^D` leaves. Traversal is branch-free: `i = 2i + 1 + right`, with
//! `right = (x >= t) | (x is NaN & default_right)`; eight trees advance in lockstep so
//! their independent loads overlap.
//!
//! A leaf above depth `D` becomes a chain of pass-through nodes (threshold `+inf`,
//! missing goes left) whose every descendant leaf holds the leaf's value.

use super::ensemble::{Ensemble, Node, Tree};

/// Deepest padded layout built (2^10 leaves per tree); deeper ensembles use the walk.
pub const MAX_PADDED_DEPTH: usize = 10;
const LANES: usize = 8;
const DEFAULT_RIGHT: u32 = 1 << 31;

#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct FNode {
    threshold: f32,
    /// Feature index; the top bit set means a missing value goes right.
    feature: u32,
}

/// Padded complete trees.
#[derive(Debug, Clone)]
pub struct Flat {
    depth: usize,
    internal: usize,
    leaves_per_tree: usize,
    n_trees: usize,
    nodes: Vec<FNode>,
    leaves: Vec<f32>,
}

impl Flat {
    /// Builds the layout, or `None` if a tree is deeper than [`MAX_PADDED_DEPTH`].
    pub fn new(e: &Ensemble) -> Option<Self> {
        let depth = e.max_depth();
        if depth > MAX_PADDED_DEPTH {
            return None;
        }
        let internal = (1usize << depth) - 1;
        let leaves_per_tree = 1usize << depth;
        let mut f = Self {
            depth,
            internal,
            leaves_per_tree,
            n_trees: e.trees.len(),
            nodes: vec![
                FNode {
                    threshold: f32::INFINITY,
                    feature: 0
                };
                internal * e.trees.len()
            ],
            leaves: vec![0.0; leaves_per_tree * e.trees.len()],
        };
        for (t, tree) in e.trees.iter().enumerate() {
            f.fill(t, tree, 0, 0, 0);
        }
        Some(f)
    }

    fn fill(&mut self, t: usize, tree: &Tree, node: usize, pos: usize, level: usize) {
        let n: &Node = &tree.nodes[node];
        if level == self.depth {
            self.leaves[t * self.leaves_per_tree + pos - self.internal] = n.value;
            return;
        }
        if n.is_leaf() {
            // Pass-through: both subtrees carry the leaf.
            self.nodes[t * self.internal + pos] = FNode {
                threshold: f32::INFINITY,
                feature: 0,
            };
            self.fill(t, tree, node, 2 * pos + 1, level + 1);
            self.fill(t, tree, node, 2 * pos + 2, level + 1);
            return;
        }
        self.nodes[t * self.internal + pos] = FNode {
            threshold: n.threshold,
            feature: n.feature | if n.default_left { 0 } else { DEFAULT_RIGHT },
        };
        self.fill(t, tree, n.left as usize, 2 * pos + 1, level + 1);
        self.fill(t, tree, n.right as usize, 2 * pos + 2, level + 1);
    }

    #[inline(always)]
    fn step(&self, t: usize, i: usize, x: &[f32]) -> usize {
        let n = self.nodes[t * self.internal + i];
        let v = x[(n.feature & !DEFAULT_RIGHT) as usize];
        let right =
            (v >= n.threshold) as usize | (v.is_nan() as usize & (n.feature >> 31) as usize);
        2 * i + 1 + right
    }

    /// Sum of leaf values over all trees for one row (`x` must have every feature the
    /// model reads: checked by the caller once, at load).
    #[inline]
    pub fn leaf_sum(&self, x: &[f32]) -> f64 {
        let mut acc = [0f64; LANES];
        let full = self.n_trees / LANES * LANES;
        let mut t = 0;
        while t < full {
            let mut idx = [0usize; LANES];
            for _ in 0..self.depth {
                for (k, i) in idx.iter_mut().enumerate() {
                    *i = self.step(t + k, *i, x);
                }
            }
            for (k, (a, i)) in acc.iter_mut().zip(idx).enumerate() {
                *a += self.leaves[(t + k) * self.leaves_per_tree + i - self.internal] as f64;
            }
            t += LANES;
        }
        let mut sum: f64 = acc.iter().sum();
        for t in full..self.n_trees {
            let mut i = 0;
            for _ in 0..self.depth {
                i = self.step(t, i, x);
            }
            sum += self.leaves[t * self.leaves_per_tree + i - self.internal] as f64;
        }
        sum
    }

    /// Leaf sums for many rows: tree-major, so each tree's nodes stay in cache while the
    /// rows' independent traversals overlap.
    pub fn leaf_sums(&self, rows: &[&[f32]], out: &mut [f64]) {
        let mut acc = vec![0f64; rows.len()];
        let mut idx = vec![0usize; rows.len()];
        for t in 0..self.n_trees {
            idx.iter_mut().for_each(|i| *i = 0);
            for _ in 0..self.depth {
                for (i, x) in idx.iter_mut().zip(rows) {
                    *i = self.step(t, *i, x);
                }
            }
            let leaves = &self.leaves[t * self.leaves_per_tree..(t + 1) * self.leaves_per_tree];
            for (a, &i) in acc.iter_mut().zip(&idx) {
                *a += leaves[i - self.internal] as f64;
            }
        }
        out.copy_from_slice(&acc);
    }
}
