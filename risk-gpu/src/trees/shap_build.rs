//! Building the subset tables of [`super::shap_table`]: which subtrees share a table,
//! and each table's credit rows.
//!
//! A *unit* is a subtree whose leaves' credits are summed into one table. Its index bits
//! are the row's directions (1 = right) at the unit root's ancestors, root first, then at
//! the internal nodes below it in preorder: every leaf of the unit has all of its path's
//! nodes among them, so the bits fix each leaf's level bits, hence its credits, and the
//! row holds their sum over the union of the leaves' features. A leaf alone is a unit
//! with `depth` bits (the per-leaf table of "Fast TreeSHAP v2"); a unit of `m` internal
//! nodes at depth `d` replaces `m + 1` lookups a row by one at the price of `2^(d + m)`
//! rows, which for the bottom two levels of a depth-6 tree (`d = 4`, `m = 3`) is half the
//! rows of its four leaves' tables.

use super::ensemble::{Tree, LEAF};

/// Most index bits of a unit that holds more than one leaf ([`units`]).
pub(super) const GROUP_BITS: usize = 8;

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

/// One node of a tree in preorder.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pre {
    /// The node's index in the tree.
    pub node: usize,
    /// Preorder position of the parent (the root points at itself).
    pub parent: usize,
    /// Whether this node is its parent's left child.
    pub is_left: bool,
    pub depth: usize,
    /// Nodes in the subtree (itself included): it spans `pos..pos + size` in preorder.
    pub size: usize,
    /// Internal nodes in the subtree (itself included).
    pub internal: usize,
    /// Internal nodes before this one in preorder (its index among them if internal).
    pub iidx: usize,
    pub leaf: bool,
}

/// A tree in preorder.
pub(super) fn preorder(t: &Tree) -> Vec<Pre> {
    let mut out: Vec<Pre> = Vec::with_capacity(t.nodes.len());
    let mut stack = vec![(0usize, 0usize, false, 0usize)];
    let mut iidx = 0;
    while let Some((node, parent, is_left, depth)) = stack.pop() {
        let pos = out.len();
        let n = &t.nodes[node];
        let leaf = n.left == LEAF;
        out.push(Pre {
            node,
            parent,
            is_left,
            depth,
            size: 1,
            internal: usize::from(!leaf),
            iidx,
            leaf,
        });
        if !leaf {
            iidx += 1;
            stack.push((n.right as usize, pos, false, depth + 1));
            stack.push((n.left as usize, pos, true, depth + 1));
        }
    }
    // Children follow their parents in preorder: sizes by a backward pass.
    for pos in (1..out.len()).rev() {
        let (p, size, internal) = (out[pos].parent, out[pos].size, out[pos].internal);
        out[p].size += size;
        out[p].internal += internal;
    }
    out
}

/// The unit roots of a tree (preorder positions, in preorder): a subtree is one unit
/// when its depth plus its internal nodes is at most `bits`; otherwise its children are
/// split further, down to single leaves.
pub(super) fn units(order: &[Pre], bits: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![0usize];
    while let Some(pos) = stack.pop() {
        let p = &order[pos];
        if p.leaf || p.depth + p.internal <= bits {
            out.push(pos);
        } else {
            let left = pos + 1;
            stack.push(left + order[left].size);
            stack.push(left);
        }
    }
    out
}

/// One unit's table.
pub(super) struct UnitTable {
    /// Preorder positions of the nodes whose directions index the table, bit 0 first.
    pub bits: Vec<usize>,
    /// The union of its leaves' path features, the order of the rows' values.
    pub features: Vec<u32>,
    /// `2^bits.len()` rows of `features.len()` credits.
    pub rows: Vec<f64>,
}

/// A leaf's credits per subset of its path's unique features (the extend / unwind of
/// [`super::shap`]), and for each level which of those features it decides.
struct LeafCredits {
    /// Per level, root first: (index bit of the level's node, whether the path goes
    /// right there).
    levels: Vec<(usize, bool)>,
    /// Per unique feature: its column in the unit's row, and the levels it splits at.
    cols: Vec<usize>,
    level_masks: Vec<usize>,
    /// `2^k` subsets × `k` credits.
    credits: Vec<f64>,
}

/// The table of the unit rooted at preorder position `g`; `None` when it would need
/// more than `max_bits` index bits.
pub(super) fn unit_table(t: &Tree, order: &[Pre], g: usize, max_bits: usize) -> Option<UnitTable> {
    let mut bits = Vec::new();
    let mut up = g;
    while up != 0 {
        up = order[up].parent;
        bits.push(up);
    }
    bits.reverse();
    let span = g..g + order[g].size;
    bits.extend(span.clone().filter(|&p| !order[p].leaf));
    if bits.len() > max_bits {
        return None;
    }
    let bit_of = |pos: usize| bits.iter().position(|&b| b == pos).expect("path node");
    let mut features: Vec<u32> = Vec::new();
    let mut buf = vec![Elem::default(); max_bits + 2];
    let mut leaves = Vec::new();
    for pos in span.filter(|&p| order[p].leaf) {
        // The path from the root: positions by depth, then the leaf.
        let mut path = vec![pos];
        while *path.last().expect("non-empty") != 0 {
            path.push(order[*path.last().expect("non-empty")].parent);
        }
        path.reverse();
        let mut feats: Vec<u32> = Vec::new();
        let mut zeros: Vec<f64> = Vec::new();
        let mut level_masks: Vec<usize> = Vec::new();
        let mut levels = Vec::new();
        for l in 0..order[pos].depth {
            let (parent, child) = (&order[path[l]], &order[path[l + 1]]);
            let p = &t.nodes[parent.node];
            let frac = t.nodes[child.node].cover as f64 / p.cover as f64;
            levels.push((bit_of(path[l]), !child.is_left));
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
        let value = t.nodes[order[pos].node].value as f64;
        let mut credits = Vec::with_capacity(k << k);
        for subset in 0..(1usize << k) {
            extend(&mut buf, 0, 1.0, 1.0);
            for (j, &z) in zeros.iter().enumerate() {
                extend(&mut buf, j + 1, z, ((subset >> j) & 1) as f64);
            }
            for (j, &z) in zeros.iter().enumerate() {
                let one = ((subset >> j) & 1) as f64;
                credits.push(unwound_sum(&buf, k, j + 1) * (one - z) * value);
            }
        }
        let cols = feats
            .iter()
            .map(|f| match features.iter().position(|g| g == f) {
                Some(c) => c,
                None => {
                    features.push(*f);
                    features.len() - 1
                }
            })
            .collect();
        leaves.push(LeafCredits {
            levels,
            cols,
            level_masks,
            credits,
        });
    }
    let width = features.len();
    let mut rows = vec![0f64; width << bits.len()];
    for (r, row) in rows.chunks_exact_mut(width.max(1)).enumerate() {
        for leaf in &leaves {
            // The leaf's level bits under these directions, then its features' subset.
            let level_bits = leaf
                .levels
                .iter()
                .enumerate()
                .fold(0usize, |acc, (l, &(b, right))| {
                    acc | usize::from(((r >> b) & 1 == 1) == right) << l
                });
            let subset = leaf
                .level_masks
                .iter()
                .enumerate()
                .filter(|(_, &m)| level_bits & m == m)
                .fold(0usize, |acc, (j, _)| acc | 1 << j);
            let k = leaf.cols.len();
            for (j, &c) in leaf.cols.iter().enumerate() {
                row[c] += leaf.credits[subset * k + j];
            }
        }
    }
    Some(UnitTable {
        bits,
        features,
        rows,
    })
}
