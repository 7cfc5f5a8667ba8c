//! TreeSHAP by subset tables (the idea of "Fast TreeSHAP v2", Yang 2021), summed over
//! the leaves of small subtrees.
//!
//! In path-dependent TreeSHAP a leaf credits each unique feature on its path with a
//! weight that depends only on that path's (zero, one) pairs: `zero` (the cover fraction
//! of the path through the feature's splits) is fixed by the tree, and `one` is whether
//! the row follows every split on that feature. So a leaf's credits are a function of
//! the row's directions at its path's nodes, and the credits of all the leaves of a
//! subtree a function of the directions at the subtree root's ancestors and at its own
//! internal nodes. Each such *unit* ([`super::shap_build`]) keeps one table of credit
//! rows indexed by those directions, computed once at load with the same extend / unwind
//! arithmetic as [`super::shap`]: a row costs one table row per unit, which for a
//! depth-6 tree is 16 rows (its depth-4 subtrees) instead of 64 (its leaves).
//!
//! Each tree is stored in preorder with, per internal node, its parent's position, so
//! one linear pass per tree computes every node's direction and every unit's index (the
//! directions at its ancestors, `idx(child) = idx(parent) | right(parent) << depth(parent)`,
//! then those below it, contiguous in preorder).
//!
//! Where the CPU has AVX2 and POPCNT and the model fits the byte kernel's ranks (see
//! [`super::binner`]), the directions come faster: the row's bins decide all of a tree's
//! internal nodes (up to 64) at once as a bit mask, and each unit's index is one `pext`
//! of it. Credits are then added row by row of tables padded to a power of two (at most
//! [`MAX_WIDTH`]: fixed-length loops, rows that never straddle a cache line) into four
//! interleaved accumulators.
//!
//! Tables take `sum over units of 2^bits · width` values; [`ShapTables::new`] declines
//! (returns `None`) above a memory budget or depth, and the caller falls back to the
//! recursive algorithm.

use super::binner::{Binner, Pext};
use super::ensemble::{CatSplit, Ensemble, NO_CAT};
use super::shap_build::{preorder, unit_table, units, Pre, GROUP_BITS};
use super::shap_spread::{self, Spread};

/// Largest table set built (values).
pub const MAX_TABLE_VALUES: usize = 8 << 20;
/// Deepest leaf for which a table is built (its table has `2^depth` rows).
pub const MAX_LEAF_DEPTH: usize = 12;
/// Widest padded table row (ensembles with wider units keep unpadded rows).
pub const MAX_WIDTH: usize = 8;

/// Where a node's index starts: its parent's state (index `parent` in the tree's state
/// array; 0 is a sentinel parent for the root) and the bit the parent's direction sets.
#[derive(Debug, Clone, Copy)]
struct Link {
    parent: u32,
    /// Depth of the parent (31 for the root: the bit is masked off).
    shift: u8,
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

/// A unit (a subtree sharing one table) for the row pass.
#[derive(Debug, Clone, Copy)]
struct Unit {
    link: Link,
    /// The unit root's index among its tree's internal nodes, and how many internal
    /// nodes its subtree holds from there (0 for a leaf).
    start: u32,
    m: u32,
    /// Depth of the unit root: where the bits of the nodes below it start.
    depth: u32,
    table: u32,
    feat: u32,
    /// Values per row.
    k: u32,
}

/// A tree's ranges in `internal` and `units`.
#[derive(Debug, Clone, Copy)]
struct Ranges {
    internal: (u32, u32),
    units: (u32, u32),
}

/// The direction pass by bits (CPUs with AVX2 and POPCNT, `pext` from BMI2 where it is
/// fast ([`Pext`]); models within the byte kernel's limits, at most 64 internal nodes
/// per tree): the row's bins decide every internal node of a tree at once (32 per
/// compare, [`Binner::right_bits`]), and a unit's table index is `pext(right, mask)`,
/// its nodes' directions in preorder (ancestors first).
#[derive(Debug, Clone)]
struct BitPass {
    cpu: Pext,
    bin: Binner,
    /// Per tree: its internal nodes' slots and rank bytes, preorder, padded to 64.
    slot: Vec<[u8; 64]>,
    rank: Vec<[u8; 64]>,
    /// Per unit (as `units`): the internal nodes whose directions index its table.
    mask: Vec<u64>,
}

/// Sixteen table values on one cache line: rows padded to a power of two never
/// straddle two lines.
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Tables for a whole ensemble.
#[derive(Debug, Clone)]
pub struct ShapTables {
    trees: Vec<Ranges>,
    /// Internal nodes in preorder, per tree.
    internal: Vec<Internal>,
    /// Units, per tree, in preorder of their roots.
    units: Vec<Unit>,
    /// Features the model reads (the expanded row has twice as many slots).
    num_features: usize,
    /// Most internal nodes in one tree.
    max_nodes: usize,
    /// The faster direction pass, where the CPU and model allow.
    bits: Option<BitPass>,
    /// Values per table row when every row is padded to one width (a power of two, at
    /// most [`MAX_WIDTH`]): fixed-length credit loops, no mispredicted loop exits. 0:
    /// rows hold exactly their unit's features.
    width: usize,
    features: Vec<u32>,
    /// Credits, stored as `f32` (half the memory, so more of it stays in cache); sums
    /// are accumulated in `f64`.
    values: Vec<Line>,
    /// The categorical splits of every tree (a model with any takes the threshold pass,
    /// not the bit pass).
    cats: Vec<CatSplit>,
    /// The AVX2 credit pass, where the CPU has it and rows are eight wide.
    spread: Option<Spread>,
    /// Trees with a leaf deeper than [`MAX_LEAF_DEPTH`]: no tables, the caller explains
    /// them by the recursive algorithm ([`deep_trees`](Self::deep_trees)).
    deep: Vec<usize>,
}

impl ShapTables {
    /// Builds the tables, or `None` above [`MAX_TABLE_VALUES`] or when every tree has a
    /// leaf deeper than [`MAX_LEAF_DEPTH`] (the others are [`deep_trees`](Self::deep_trees)).
    /// Subtrees share tables where the budget allows; otherwise every leaf has its own.
    pub fn new(e: &Ensemble) -> Option<Self> {
        Self::build(e, GROUP_BITS).or_else(|| Self::build(e, 0))
    }

    /// Builds with units of up to `group_bits` index bits (0: one unit per leaf).
    fn build(e: &Ensemble, group_bits: usize) -> Option<Self> {
        let nf = e.num_features;
        let orders: Vec<Vec<Pre>> = e.trees.iter().map(preorder).collect();
        // Every unit's table (f64 rows of its own width), within the budget.
        let mut tables = Vec::with_capacity(e.trees.len());
        let (mut total, mut rows) = (0usize, 0usize);
        let mut deep = Vec::new();
        for (ti, (t, order)) in e.trees.iter().zip(&orders).enumerate() {
            let mut of_tree = Vec::new();
            let roots = units(order, group_bits);
            let bits_of = |g: usize| {
                let p = &order[g];
                p.depth + if p.leaf { 0 } else { p.internal }
            };
            // A tree with a leaf deeper than the tables go is explained by the recursive
            // algorithm, the rest of the ensemble by tables.
            if roots.iter().any(|&g| bits_of(g) > MAX_LEAF_DEPTH) {
                deep.push(ti);
                tables.push(of_tree);
                continue;
            }
            for g in roots {
                let bits = bits_of(g);
                // At least a row per index (the width is not known yet).
                total += 1 << bits;
                rows += 1 << bits;
                if total > MAX_TABLE_VALUES {
                    return None;
                }
                let u = unit_table(t, order, g, MAX_LEAF_DEPTH)?;
                total += u.rows.len().saturating_sub(1 << bits);
                of_tree.push((g, u));
            }
            tables.push(of_tree);
        }
        if deep.len() == e.trees.len() {
            return None;
        }
        let widest = tables
            .iter()
            .flatten()
            .map(|(_, u)| u.features.len())
            .max()
            .unwrap_or(0);
        // Eight wide where the AVX2 credit pass takes the rows (one row a register) and
        // the budget allows it.
        let width = if widest > MAX_WIDTH {
            0
        } else if shap_spread::available()
            && nf <= shap_spread::MAX_FEATURES
            && rows * MAX_WIDTH <= MAX_TABLE_VALUES
        {
            MAX_WIDTH
        } else {
            widest.next_power_of_two()
        };
        let mut s = Self {
            trees: Vec::with_capacity(e.trees.len()),
            internal: Vec::new(),
            units: Vec::new(),
            num_features: nf,
            max_nodes: 0,
            bits: None,
            width,
            features: Vec::new(),
            values: Vec::new(),
            cats: Vec::new(),
            spread: None,
            deep,
        };
        let mut values: Vec<f32> = Vec::new();
        let mut masks: Vec<u64> = Vec::new();
        for (ti, ((t, order), of_tree)) in e.trees.iter().zip(&orders).zip(tables).enumerate() {
            let (i0, u0) = (s.internal.len() as u32, s.units.len() as u32);
            if s.deep.contains(&ti) {
                // No nodes and no units: the recursive algorithm explains it.
                s.trees.push(Ranges {
                    internal: (i0, i0),
                    units: (u0, u0),
                });
                continue;
            }
            let cat0 = s.cats.len() as u32;
            s.cats.extend(t.cats.iter().cloned());
            // State index of an internal node: 1 + its index (0: the root's sentinel).
            let link = |pos: usize| Link {
                parent: if pos == 0 {
                    0
                } else {
                    order[order[pos].parent].iidx as u32 + 1
                },
                shift: if pos == 0 {
                    31
                } else {
                    order[pos].depth as u8 - 1
                },
            };
            for (pos, p) in order.iter().enumerate().filter(|(_, p)| !p.leaf) {
                let n = &t.nodes[p.node];
                let right = if n.default_left { 0 } else { nf as u32 };
                s.internal.push(Internal {
                    link: link(pos),
                    slot: n.feature + right,
                    threshold: n.threshold,
                    cat: if n.cat == NO_CAT {
                        NO_CAT
                    } else {
                        cat0 + n.cat
                    },
                });
            }
            for (g, u) in of_tree {
                let k = u.features.len();
                let stride = if width > 0 { width } else { k };
                if values.len() + (stride << u.bits.len()) > MAX_TABLE_VALUES {
                    return None;
                }
                let p = &order[g];
                s.units.push(Unit {
                    link: link(g),
                    start: p.iidx as u32,
                    m: if p.leaf { 0 } else { p.internal as u32 },
                    depth: p.depth as u32,
                    table: values.len() as u32,
                    feat: s.features.len() as u32,
                    k: stride as u32,
                });
                masks.push(u.bits.iter().fold(0u64, |m, &b| {
                    m | 1u64.checked_shl(order[b].iidx as u32).unwrap_or(0)
                }));
                for row in u.rows.chunks_exact(k.max(1)) {
                    values.extend(row.iter().take(k).map(|&v| v as f32));
                    // Pads credit nothing to the scratch slot `num_features`.
                    values.resize(values.len() + stride - k, 0.0);
                }
                s.features.extend(&u.features);
                s.features.resize(s.features.len() + stride - k, nf as u32);
            }
            let count = s.internal.len() as u32 - i0;
            s.max_nodes = s.max_nodes.max(count as usize);
            s.trees.push(Ranges {
                internal: (i0, s.internal.len() as u32),
                units: (u0, s.units.len() as u32),
            });
        }
        s.values = vec![Line([0.0; 16]); values.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<Line, f32>(&mut s.values)[..values.len()]
            .copy_from_slice(&values);
        s.bits = s.bit_pass(masks);
        if width == 8 {
            let trees = s.trees.iter().map(|r| r.units).collect();
            s.spread = Spread::new(&s.features, nf, trees);
        }
        Some(s)
    }

    /// Builds the [`BitPass`], or `None` where the CPU or the model does not allow it.
    fn bit_pass(&self, mask: Vec<u64>) -> Option<BitPass> {
        if !self.cats.is_empty() {
            return None;
        }
        let cpu = Pext::detect()?;
        let nf = self.num_features;
        if self.max_nodes > 64 {
            return None;
        }
        let mut per_feature = vec![Vec::new(); nf];
        for n in &self.internal {
            per_feature[n.slot as usize % nf].push(n.threshold);
        }
        let bin = Binner::new(nf, per_feature)?;
        let (mut slot, mut rank) = (Vec::new(), Vec::new());
        for r in &self.trees {
            let internal = &self.internal[r.internal.0 as usize..r.internal.1 as usize];
            // Padding nodes never go right (and no unit's index includes them).
            let (mut s, mut k) = ([0u8; 64], [0x7fu8; 64]);
            for (j, n) in internal.iter().enumerate() {
                let f = n.slot as usize % nf;
                (s[j], k[j]) = bin.code(f, n.threshold, n.slot as usize >= nf);
            }
            slot.push(s);
            rank.push(k);
        }
        Some(BitPass {
            cpu,
            bin,
            slot,
            rank,
            mask,
        })
    }

    /// The trees these tables do not explain (leaves deeper than [`MAX_LEAF_DEPTH`]).
    pub fn deep_trees(&self) -> &[usize] {
        &self.deep
    }

    /// The credit pass: `"avx2-shap"` or `"scalar"`.
    pub fn kernel(&self) -> &'static str {
        if self.spread.is_some() {
            "avx2-shap"
        } else {
            "scalar"
        }
    }

    /// Number of table values.
    pub fn len(&self) -> usize {
        self.values.len() * 16
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Adds the row's per-feature credits into `phi` (length >= features).
    pub fn add(&self, x: &[f32], phi: &mut [f64]) {
        // Per state index: the index bits of the node's ancestors, plus bit 31 when the
        // row goes right at that internal node. Index 0 is the root's sentinel parent.
        const RIGHT: u32 = 1 << 31;
        let nf = self.num_features;
        let values: &[f32] = bytemuck::cast_slice(&self.values);
        // Every unit's table row (prefetched as soon as known), then the credits. The
        // rows are scattered over megabytes of tables; found inline, each miss stalled
        // the traversal.
        let mut rows: Vec<(u32, u32)> = Vec::with_capacity(self.units.len());
        let mut push = |u: &Unit, i: u32| {
            let row = u.table + i * u.k;
            prefetch(&values[row as usize..]);
            rows.push((row, u.feat));
        };
        if let Some(b) = &self.bits {
            let bins = b.bin.bins(x);
            for (t, r) in self.trees.iter().enumerate() {
                let go_right = b.bin.right_bits(&bins, &b.slot[t], &b.rank[t]);
                for j in r.units.0 as usize..r.units.1 as usize {
                    push(&self.units[j], b.cpu.pext(go_right, b.mask[j]) as u32);
                }
            }
        } else {
            // Branch-free passes per tree: internal nodes (directions, from the expanded
            // row: missing values read −inf, going left, or +inf, going right), then
            // units.
            let mut xx = vec![0f32; 2 * nf];
            for (i, &v) in x[..nf].iter().enumerate() {
                let nan = v.is_nan();
                xx[i] = if nan { f32::NEG_INFINITY } else { v };
                xx[nf + i] = if nan { f32::INFINITY } else { v };
            }
            let mut state: Vec<u32> = vec![0; self.max_nodes + 1];
            // The directions again as bits, for the nodes below a unit's root (two
            // words more: a unit's bits are read as a 128-bit window).
            let mut right: Vec<u64> = vec![0; self.max_nodes.div_ceil(64) + 2];
            let index = |state: &[u32], l: Link| {
                let p = state[l.parent as usize];
                // The root's shift is 31, so it starts at 0.
                (p & !RIGHT) | ((p >> 31) << l.shift & !RIGHT)
            };
            for r in &self.trees {
                let internal = &self.internal[r.internal.0 as usize..r.internal.1 as usize];
                right.fill(0);
                for (j, n) in internal.iter().enumerate() {
                    let goes_right = if n.cat == NO_CAT {
                        xx[n.slot as usize] >= n.threshold
                    } else {
                        !self.cats[n.cat as usize].goes_left(x[n.slot as usize % nf])
                    };
                    state[j + 1] = index(&state, n.link) | (goes_right as u32) << 31;
                    right[j / 64] |= (goes_right as u64) << (j % 64);
                }
                for u in &self.units[r.units.0 as usize..r.units.1 as usize] {
                    let mut i = index(&state, u.link);
                    if u.m > 0 {
                        let (w, b) = (u.start as usize / 64, u.start % 64);
                        let window = right[w] as u128 | (right[w + 1] as u128) << 64;
                        let below = (window >> b) as u32 & ((1u32 << u.m) - 1);
                        i |= below << u.depth;
                    }
                    push(u, i);
                }
            }
        }
        if let Some(sp) = &self.spread {
            sp.add(values, &rows, phi);
            return;
        }
        // Four interleaved accumulators per feature (plus the pads' scratch slot):
        // consecutive units credit the same few features, and one memory accumulator
        // made every credit wait for the last.
        if nf < SMALL && (1..=8).contains(&self.width) {
            // Fixed-size accumulators: feature indices masked, no bounds checks.
            let mut acc = [[0f64; SMALL]; WAYS];
            match self.width {
                1 => self.credits_small::<1>(values, &rows, &mut acc),
                2 => self.credits_small::<2>(values, &rows, &mut acc),
                4 => self.credits_small::<4>(values, &rows, &mut acc),
                _ => self.credits_small::<8>(values, &rows, &mut acc),
            }
            for (f, p) in phi[..nf].iter_mut().enumerate() {
                *p += (acc[0][f] + acc[1][f]) + (acc[2][f] + acc[3][f]);
            }
            return;
        }
        // Wider models: accumulators on the heap, each row's own length.
        let w = nf + 1;
        let mut acc = vec![0f64; WAYS * w];
        for (j, (&(row, feat), u)) in rows.iter().zip(&self.units).enumerate() {
            let (row, feat, k) = (row as usize, feat as usize, u.k as usize);
            let acc = &mut acc[(j % WAYS) * w..(j % WAYS + 1) * w];
            for (f, v) in self.features[feat..feat + k]
                .iter()
                .zip(&values[row..row + k])
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
        values: &[f32],
        rows: &[(u32, u32)],
        acc: &mut [[f64; SMALL]; WAYS],
    ) {
        for (j, &(row, feat)) in rows.iter().enumerate() {
            let (row, feat) = (row as usize, feat as usize);
            let acc = &mut acc[j % WAYS];
            let f: &[u32; K] = self.features[feat..feat + K].try_into().expect("K");
            let v: &[f32; K] = values[row..row + K].try_into().expect("K");
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

#[cfg(test)]
mod tests {
    use super::super::XgbModel;
    use std::path::Path;

    /// The AVX2 credit pass and the scalar one over the same tables, on the committed
    /// XGBoost model and LightGBM's 120 depth-6 trees, rows with missing values.
    #[test]
    fn the_avx2_credit_pass_equals_the_scalar_pass() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models");
        for file in ["xgb_fraud.json", "lgbm/shap_120x6.txt"] {
            let m = XgbModel::from_file(dir.join(file)).unwrap();
            let t = m.tables.as_ref().expect("tables");
            if t.spread.is_none() {
                assert!(
                    !super::shap_spread::available(),
                    "{file}: AVX2 here, not used"
                );
                eprintln!("{file}: the AVX2 credit pass could NOT run here (no AVX2)");
                continue;
            }
            eprintln!("{file}: the AVX2 credit pass runs");
            let mut scalar = t.clone();
            scalar.spread = None;
            let nf = m.num_features();
            let mut s = 0x9e37_79b9_7f4a_7c15u64;
            for r in 0..500 {
                let x: Vec<f32> = (0..nf)
                    .map(|_| {
                        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                        if u < 0.1 {
                            f32::NAN
                        } else {
                            (u - 0.5) * 400.0
                        }
                    })
                    .collect();
                let (mut a, mut b) = (vec![0f64; nf + 1], vec![0f64; nf + 1]);
                m.input(&x, |x| {
                    t.add(x, &mut a);
                    scalar.add(x, &mut b);
                });
                for f in 0..nf {
                    assert!(
                        (a[f] - b[f]).abs() < 1e-6,
                        "{file} row {r} feature {f}: {a:?} vs {b:?}"
                    );
                }
            }
        }
    }
}
