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
//! Where the CPU has AVX2 and BMI2 and the model fits the byte kernel's ranks (see
//! [`super::binner`]), the directions come faster: the row's bins decide all of a tree's
//! internal nodes (up to 64) at once as a bit mask, and each leaf's index is one `pext`
//! of its path's agreement bits. Credits are then added row by row of tables padded to
//! the deepest tree's depth (fixed-length loops) into four interleaved accumulators.
//!
//! Tables take `sum over leaves of 2^depth · k` values; [`ShapTables::new`] declines
//! (returns `None`) above a memory budget or depth, and the caller falls back to the
//! recursive algorithm.

use super::binner::{Binner, Pext};
use super::ensemble::{CatSplit, Ensemble, Tree, LEAF, NO_CAT};

/// Largest table set built (values).
pub const MAX_TABLE_VALUES: usize = 8 << 20;
/// Deepest leaf for which a table is built (its table has `2^depth` rows).
pub const MAX_LEAF_DEPTH: usize = 12;
/// Widest padded table row (ensembles deeper than this keep unpadded rows).
pub const MAX_WIDTH: usize = 8;

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
    /// Internal nodes: index in [`ShapTables::cats`] of a categorical split, or
    /// [`NO_CAT`].
    cat: u32,
}

/// A tree's node ranges.
#[derive(Debug, Clone, Copy)]
struct Ranges {
    internal: (u32, u32),
    leaves: (u32, u32),
}

/// Where a node's leaf index comes from: its parent's state (index `parent` in the
/// tree's state array; 0 is a sentinel parent for the root) and the bit it sets.
#[derive(Debug, Clone, Copy)]
struct Link {
    parent: u32,
    /// Depth of the parent (31 for the root: the bit is masked off).
    shift: u8,
    is_left: bool,
}

/// An internal node for the row pass.
#[derive(Debug, Clone, Copy)]
struct Internal {
    link: Link,
    /// Slot in the expanded row `[x with NaN → −inf, x with NaN → +inf]`: the feature,
    /// plus the feature count when missing values go right (as in the flat layout).
    slot: u32,
    threshold: f32,
    /// Index in [`ShapTables::cats`] of a categorical split, or [`NO_CAT`].
    cat: u32,
}

/// A leaf for the row pass.
#[derive(Debug, Clone, Copy)]
struct Leaf {
    link: Link,
    table: u32,
    feat: u32,
    k: u32,
}

/// The direction pass by bits (CPUs with AVX2 and POPCNT, `pext` from BMI2 where it is
/// fast ([`Pext`]); models within the byte kernel's limits, at most 64 internal nodes
/// per tree): the row's bins decide every internal node of a tree at once (32 per compare, [`Binner::right_bits`]), and a
/// leaf's table index is `pext(!(right ^ path_right), path_mask)` — its path's
/// agreement bits, root first, since preorder numbers ancestors first.
#[derive(Debug, Clone)]
struct BitPass {
    cpu: Pext,
    bin: Binner,
    /// Per tree: its internal nodes' slots and rank bytes, preorder, padded to 64.
    slot: Vec<[u8; 64]>,
    rank: Vec<[u8; 64]>,
    /// Per leaf (as `leaf_nodes`): its path's internal nodes, and which of them the
    /// path leaves to the right.
    mask: Vec<u64>,
    right: Vec<u64>,
}

/// Tables for a whole ensemble.
#[derive(Debug, Clone)]
pub struct ShapTables {
    /// Per tree: ranges of its internal nodes in `internal` and of its leaves in
    /// `leaves`.
    trees: Vec<Ranges>,
    /// Internal nodes in preorder, per tree.
    internal: Vec<Internal>,
    /// Leaves, per tree.
    leaf_nodes: Vec<Leaf>,
    /// Features the model reads (the expanded row has twice as many slots).
    num_features: usize,
    /// Most internal nodes in one tree.
    max_nodes: usize,
    /// The faster direction pass, where the CPU and model allow.
    bits: Option<BitPass>,
    /// Values per table row when every row is padded to one width (the deepest tree's
    /// depth, at most [`MAX_WIDTH`]): fixed-length credit loops, no mispredicted loop
    /// exits. 0: rows hold exactly their leaf's features.
    width: usize,
    features: Vec<u32>,
    /// Credits, stored as `f32` (half the memory, so more of it stays in cache); sums
    /// are accumulated in `f64`.
    values: Vec<f32>,
    /// The categorical splits of every tree (a model with any takes the threshold pass,
    /// not the bit pass).
    cats: Vec<CatSplit>,
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
            internal: Vec::new(),
            leaf_nodes: Vec::new(),
            num_features: e.num_features,
            max_nodes: 0,
            bits: None,
            width: if e.max_depth() <= MAX_WIDTH {
                e.max_depth()
            } else {
                0
            },
            features: Vec::new(),
            values: Vec::new(),
            cats: Vec::new(),
        };
        let mut buf = vec![Elem::default(); MAX_LEAF_DEPTH + 2];
        let mut subset_credits: Vec<f64> = Vec::new();
        for t in &e.trees {
            let cat0 = s.cats.len() as u32;
            s.cats.extend(t.cats.iter().cloned());
            let mut nodes: Vec<PreNode> = Vec::new();
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
                    cat: if n.cat == NO_CAT {
                        NO_CAT
                    } else {
                        cat0 + n.cat
                    },
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
                    // Rows padded to `width` (fixed-length credit loops) when it is set.
                    let stride = if s.width > 0 { s.width } else { k };
                    if s.values.len() + (stride << depth) > MAX_TABLE_VALUES {
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
                    pn.k = stride as u8;
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
                        // Pads credit nothing to the scratch slot `num_features`.
                        s.values.resize(s.values.len() + stride - k, 0.0);
                    }
                    s.features.extend(&feats);
                    s.features
                        .resize(s.features.len() + stride - k, e.num_features as u32);
                }
                nodes.push(pn);
            }
            s.push_tree(&nodes);
        }
        s.bits = s.bit_pass();
        Some(s)
    }

    /// Builds the [`BitPass`], or `None` where the CPU or the model does not allow it.
    fn bit_pass(&self) -> Option<BitPass> {
        if !self.cats.is_empty() {
            return None;
        }
        let cpu = Pext::detect()?;
        let nf = self.num_features;
        if self.trees.iter().any(|r| r.internal.1 - r.internal.0 > 64) {
            return None;
        }
        let mut per_feature = vec![Vec::new(); nf];
        for n in &self.internal {
            per_feature[n.slot as usize % nf].push(n.threshold);
        }
        let bin = Binner::new(nf, per_feature)?;
        let (mut slot, mut rank) = (Vec::new(), Vec::new());
        let (mut mask, mut right) = (Vec::new(), Vec::new());
        for r in &self.trees {
            let internal = &self.internal[r.internal.0 as usize..r.internal.1 as usize];
            // Padding nodes never go right (and no leaf's path includes them).
            let (mut s, mut k) = ([0u8; 64], [0x7fu8; 64]);
            for (j, n) in internal.iter().enumerate() {
                let f = n.slot as usize % nf;
                (s[j], k[j]) = bin.code(f, n.threshold, n.slot as usize >= nf);
            }
            slot.push(s);
            rank.push(k);
            for l in &self.leaf_nodes[r.leaves.0 as usize..r.leaves.1 as usize] {
                let (mut m, mut rt) = (0u64, 0u64);
                let mut link = l.link;
                // State index 0 is the root's sentinel parent; internal node j is j + 1.
                while link.parent != 0 {
                    let j = link.parent as usize - 1;
                    m |= 1 << j;
                    if !link.is_left {
                        rt |= 1 << j;
                    }
                    link = internal[j].link;
                }
                mask.push(m);
                right.push(rt);
            }
        }
        Some(BitPass {
            cpu,
            bin,
            slot,
            rank,
            mask,
            right,
        })
    }

    /// Splits a tree's preorder nodes into internal nodes (state index = 1 + their
    /// index; 0 is the root's sentinel parent) and leaves.
    fn push_tree(&mut self, nodes: &[PreNode]) {
        let mut state_of = vec![0u32; nodes.len()];
        let (i0, l0) = (self.internal.len() as u32, self.leaf_nodes.len() as u32);
        let mut count = 0;
        // (`table` is `LEAF` on internal nodes: they have no table.)
        for (pos, n) in nodes.iter().enumerate() {
            if n.table == LEAF {
                count += 1;
                state_of[pos] = count;
            }
        }
        for (pos, n) in nodes.iter().enumerate() {
            let link = Link {
                parent: if pos == 0 {
                    0
                } else {
                    state_of[n.parent as usize]
                },
                shift: n.shift,
                is_left: n.is_left,
            };
            if n.table == LEAF {
                let right = if n.default_left {
                    0
                } else {
                    self.num_features as u32
                };
                self.internal.push(Internal {
                    link,
                    slot: n.feature + right,
                    threshold: n.threshold,
                    cat: n.cat,
                });
            } else {
                self.leaf_nodes.push(Leaf {
                    link,
                    table: n.table,
                    feat: n.feat,
                    k: n.k as u32,
                });
            }
        }
        self.max_nodes = self.max_nodes.max(count as usize);
        self.trees.push(Ranges {
            internal: (i0, self.internal.len() as u32),
            leaves: (l0, self.leaf_nodes.len() as u32),
        });
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
        // Per state index: the leaf index so far, plus bit 31 when the row goes left
        // at that internal node. Index 0 is the root's sentinel parent (state 0).
        const LEFT: u32 = 1 << 31;
        let nf = self.num_features;
        // Every leaf's table row (prefetched as soon as known), then the credits. The
        // rows are scattered over megabytes of tables; found inline, each miss stalled
        // the traversal.
        let mut rows: Vec<(u32, u32, u32)> = Vec::with_capacity(self.leaf_nodes.len());
        let mut push = |n: &Leaf, i: u32| {
            let row = n.table + i * n.k;
            prefetch(&self.values[row as usize..]);
            rows.push((row, n.feat, n.k));
        };
        if let Some(b) = &self.bits {
            let bins = b.bin.bins(x);
            for (t, r) in self.trees.iter().enumerate() {
                let go_right = b.bin.right_bits(&bins, &b.slot[t], &b.rank[t]);
                for j in r.leaves.0 as usize..r.leaves.1 as usize {
                    let i = b.cpu.pext(!(go_right ^ b.right[j]), b.mask[j]) as u32;
                    push(&self.leaf_nodes[j], i);
                }
            }
        } else {
            // Two branch-free passes per tree: internal nodes (directions, from the
            // expanded row: missing values read −inf, going left, or +inf, going right),
            // then leaves.
            let mut xx = vec![0f32; 2 * nf];
            for (i, &v) in x[..nf].iter().enumerate() {
                let nan = v.is_nan();
                xx[i] = if nan { f32::NEG_INFINITY } else { v };
                xx[nf + i] = if nan { f32::INFINITY } else { v };
            }
            let mut state: Vec<u32> = vec![0; self.max_nodes + 1];
            let index = |state: &[u32], l: Link| {
                let p = state[l.parent as usize];
                // The root's shift is 31, so it starts at 0.
                let agree = ((p & LEFT != 0) == l.is_left) as u32;
                (p & !LEFT) | (agree << l.shift & !LEFT)
            };
            for r in &self.trees {
                let internal = &self.internal[r.internal.0 as usize..r.internal.1 as usize];
                for (j, n) in internal.iter().enumerate() {
                    let goes_left = if n.cat == NO_CAT {
                        xx[n.slot as usize] < n.threshold
                    } else {
                        self.cats[n.cat as usize].goes_left(x[n.slot as usize % nf])
                    };
                    state[j + 1] = index(&state, n.link) | (goes_left as u32) << 31;
                }
                for n in &self.leaf_nodes[r.leaves.0 as usize..r.leaves.1 as usize] {
                    push(n, index(&state, n.link));
                }
            }
        }
        // Four interleaved accumulators per feature (plus the pads' scratch slot):
        // consecutive leaves credit the same few features, and one memory accumulator
        // made every credit wait for the last.
        if nf < SMALL && (1..=8).contains(&self.width) {
            // Fixed-size accumulators: feature indices masked, no bounds checks.
            let mut acc = [[0f64; SMALL]; WAYS];
            match self.width {
                1 => self.credits_small::<1>(&rows, &mut acc),
                2 => self.credits_small::<2>(&rows, &mut acc),
                3 => self.credits_small::<3>(&rows, &mut acc),
                4 => self.credits_small::<4>(&rows, &mut acc),
                5 => self.credits_small::<5>(&rows, &mut acc),
                6 => self.credits_small::<6>(&rows, &mut acc),
                7 => self.credits_small::<7>(&rows, &mut acc),
                _ => self.credits_small::<8>(&rows, &mut acc),
            }
            for (f, p) in phi[..nf].iter_mut().enumerate() {
                *p += (acc[0][f] + acc[1][f]) + (acc[2][f] + acc[3][f]);
            }
            return;
        }
        // Wider models: accumulators on the heap, each row's own length.
        let w = nf + 1;
        let mut acc = vec![0f64; WAYS * w];
        for (j, &(row, feat, k)) in rows.iter().enumerate() {
            let (row, feat, k) = (row as usize, feat as usize, k as usize);
            let acc = &mut acc[(j % WAYS) * w..(j % WAYS + 1) * w];
            for (f, v) in self.features[feat..feat + k]
                .iter()
                .zip(&self.values[row..row + k])
            {
                acc[*f as usize] += *v as f64;
            }
        }
        for (f, p) in phi[..nf].iter_mut().enumerate() {
            *p += (acc[f] + acc[w + f]) + (acc[2 * w + f] + acc[3 * w + f]);
        }
    }

    /// The credit pass over rows padded to `K` values, into fixed-size accumulators
    /// (fewer than [`SMALL`] features, the pads' scratch slot included).
    #[inline]
    fn credits_small<const K: usize>(
        &self,
        rows: &[(u32, u32, u32)],
        acc: &mut [[f64; SMALL]; WAYS],
    ) {
        for (j, &(row, feat, _)) in rows.iter().enumerate() {
            let (row, feat) = (row as usize, feat as usize);
            let acc = &mut acc[j % WAYS];
            let f: &[u32; K] = self.features[feat..feat + K].try_into().expect("K");
            let v: &[f32; K] = self.values[row..row + K].try_into().expect("K");
            for c in 0..K {
                acc[f[c] as usize & (SMALL - 1)] += v[c] as f64;
            }
        }
    }
}

/// Accumulator width of [`ShapTables::credits_small`] (models with fewer features).
const SMALL: usize = 64;

/// Interleaved accumulators of the credit pass.
const WAYS: usize = 4;

/// Hints that `v[0]` will be read soon (a no-op off x86-64).
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch(v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline, and a prefetch never faults or
    // reads into the program; the address comes from a live slice anyway.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(v.as_ptr().cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}
