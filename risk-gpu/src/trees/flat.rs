//! The fast layout: every tree padded to a complete binary tree of one depth `D`, stored
//! as `2^D - 1` internal nodes (threshold and feature slot, 8 bytes) and `2^D` leaves.
//! Traversal is branch-free: `i = 2i + 1 + (v >= t)`; eight trees advance in lockstep so
//! their independent loads overlap.
//!
//! Missing values cost nothing per step: each row is expanded once into `[x⁻, x⁺]`, where
//! `x⁻` has missing values replaced by `-inf` and `x⁺` by `+inf`. A node whose missing
//! values go left reads slot `f` of `x⁻` (`-inf >= t` is false: left); one whose missing
//! values go right reads slot `f` of `x⁺` (`+inf >= t` is true: right). Present values are
//! the same in both halves, so the split is unchanged.
//!
//! A leaf above depth `D` becomes a chain of pass-through nodes (threshold `+inf`,
//! missing goes left) whose every descendant leaf holds the leaf's value.

use super::avx512::{self, TopLevels};
use super::bytes::{self, ByteTrees, Split};
use super::ensemble::{Ensemble, Node, Tree};

/// Deepest padded layout built (2^10 leaves per tree); deeper ensembles use the walk.
pub const MAX_PADDED_DEPTH: usize = 10;
/// Most padded node slots (`trees · 2^depth`) built: under 300 MB of tables. A padded
/// tree costs 2^depth slots however few nodes it has, so a small file of many deep,
/// sparse trees would otherwise allocate far more than its own size; such ensembles use
/// the walk.
pub const MAX_PADDED_NODES: usize = 1 << 24;
const LANES: usize = 8;
/// Size of the stack buffer for an expanded row (models up to `XX / 2` features take the
/// bounds-check-free path).
const XX: usize = 512;

#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct FNode {
    threshold: f32,
    /// Slot in the expanded row: the feature, plus `num_features` when missing values
    /// go right.
    slot: u32,
}

/// Padded complete trees.
#[derive(Debug, Clone)]
pub struct Flat {
    num_features: usize,
    depth: usize,
    internal: usize,
    stride: usize,
    leaves_per_tree: usize,
    n_trees: usize,
    nodes: Vec<FNode>,
    leaves: Vec<f32>,
    /// The same nodes split into thresholds and one-byte slots, for models whose
    /// expanded row fits 256 slots: two plain loads per step, no masks.
    thresholds: Vec<f32>,
    slots8: Vec<u8>,
    /// The top levels for the AVX-512 kernel ([`avx512`]), when the CPU and model allow.
    top: Option<TopLevels>,
    /// The AVX2 byte-lane kernel ([`bytes`]), preferred when the CPU and model allow.
    bytes: Option<ByteTrees>,
    /// `leaves` as f64, for the byte kernel's leaf sum (one conversion per model, not
    /// one per tree and row).
    leaves64: Vec<f64>,
}

/// Most trees whose top-level positions fit the stack buffer of the AVX-512 path.
const MAX_TOP_TREES: usize = 1024;

impl Flat {
    /// Builds the layout, or `None` if a tree has a categorical split, is deeper than [`MAX_PADDED_DEPTH`] or the
    /// layout would exceed [`MAX_PADDED_NODES`].
    pub fn new(e: &Ensemble) -> Option<Self> {
        let depth = e.max_depth();
        if depth > MAX_PADDED_DEPTH
            || e.trees.len() << depth > MAX_PADDED_NODES
            || e.has_categorical()
        {
            return None;
        }
        let internal = (1usize << depth) - 1;
        let leaves_per_tree = 1usize << depth;
        // Node storage per tree is 2^depth (one slot unused) so that a tree is a
        // power-of-two array and masked indices need no bounds checks.
        let stride = leaves_per_tree;
        let mut f = Self {
            num_features: e.num_features,
            depth,
            internal,
            stride,
            leaves_per_tree,
            n_trees: e.trees.len(),
            nodes: vec![
                FNode {
                    threshold: f32::INFINITY,
                    slot: 0
                };
                stride * e.trees.len()
            ],
            leaves: vec![0.0; leaves_per_tree * e.trees.len()],
            thresholds: Vec::new(),
            slots8: Vec::new(),
            top: None,
            bytes: None,
            leaves64: Vec::new(),
        };
        for (t, tree) in e.trees.iter().enumerate() {
            f.fill(t, tree, 0, 0, 0);
        }
        if 2 * e.num_features <= 256 {
            f.thresholds = f.nodes.iter().map(|n| n.threshold).collect();
            f.slots8 = f.nodes.iter().map(|n| n.slot as u8).collect();
            let nf = e.num_features;
            if nf > 0 {
                f.bytes = ByteTrees::new(f.n_trees, depth, nf, |t, pos| {
                    let n = f.nodes[t * stride + pos];
                    // Real thresholds are finite (validated); +inf marks a pass-through.
                    if n.threshold == f32::INFINITY {
                        Split::Pass
                    } else {
                        let slot = n.slot as usize;
                        Split::Test {
                            feature: slot % nf,
                            threshold: n.threshold,
                            right: slot >= nf,
                        }
                    }
                });
            }
            if f.bytes.is_some() {
                f.leaves64 = f.leaves.iter().map(|&v| v as f64).collect();
            }
            // The AVX-512 float kernel serves models the byte kernel refuses (more
            // distinct thresholds per feature than byte ranks hold).
            if f.bytes.is_none() && nf > 0 && f.n_trees <= MAX_TOP_TREES {
                f.top = TopLevels::new(f.n_trees, depth, nf, |t, pos| {
                    let n = f.nodes[t * stride + pos];
                    let slot = n.slot as usize;
                    (n.threshold, slot % nf, slot >= nf)
                });
            }
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
            self.nodes[t * self.stride + pos] = FNode {
                threshold: f32::INFINITY,
                slot: 0,
            };
            self.fill(t, tree, node, 2 * pos + 1, level + 1);
            self.fill(t, tree, node, 2 * pos + 2, level + 1);
            return;
        }
        let offset = if n.default_left {
            0
        } else {
            self.num_features as u32
        };
        self.nodes[t * self.stride + pos] = FNode {
            threshold: n.threshold,
            slot: n.feature + offset,
        };
        self.fill(t, tree, n.left as usize, 2 * pos + 1, level + 1);
        self.fill(t, tree, n.right as usize, 2 * pos + 2, level + 1);
    }

    /// Writes the expanded row `[x⁻, x⁺]` (see the module docs) into `xx`.
    #[inline]
    pub fn expand(&self, x: &[f32], xx: &mut [f32]) {
        let nf = self.num_features;
        for (i, &v) in x[..nf].iter().enumerate() {
            let nan = v.is_nan();
            xx[i] = if nan { f32::NEG_INFINITY } else { v };
            xx[nf + i] = if nan { f32::INFINITY } else { v };
        }
    }

    #[inline(always)]
    fn step(nodes: &[FNode], i: usize, xx: &[f32]) -> usize {
        let n = nodes[i];
        2 * i + 1 + (xx[n.slot as usize] >= n.threshold) as usize
    }

    /// Lockstep traversal with compile-time sizes. A group of eight trees is one
    /// `[FNode; G]` array (`G = 8N`, `N = 2^depth` per tree) and each lane keeps its
    /// position inside the group (`k·N + i`), so the next position is
    /// `2·g − k·N + 1 + (v >= t)` with `k·N` a constant: eight lanes, one base pointer, no
    /// bounds checks (masked indices into fixed-size arrays), no register spills.
    #[inline]
    fn leaf_sum_fixed<const N: usize, const G: usize, const X: usize>(&self, xx: &[f32; X]) -> f64 {
        debug_assert_eq!(G, LANES * N);
        let mut acc = [0f64; LANES];
        let full = self.n_trees / LANES * LANES;
        let mut t = 0;
        while t < full {
            let nodes: &[FNode; G] = self.nodes[t * N..t * N + G].try_into().expect("group");
            let leaves: &[f32; G] = self.leaves[t * N..t * N + G].try_into().expect("group");
            let mut g: [usize; LANES] = std::array::from_fn(|k| k * N);
            for _ in 0..self.depth {
                for (k, gk) in g.iter_mut().enumerate() {
                    let n = nodes[*gk & (G - 1)];
                    let c = (xx[n.slot as usize & (X - 1)] >= n.threshold) as usize;
                    *gk = 2 * *gk - k * N + 1 + c;
                }
            }
            for (a, gk) in acc.iter_mut().zip(g) {
                *a += leaves[(gk - (N - 1)) & (G - 1)] as f64;
            }
            t += LANES;
        }
        let mut sum: f64 = acc.iter().sum();
        for t in full..self.n_trees {
            let nodes: &[FNode; N] = self.nodes[t * N..(t + 1) * N].try_into().expect("tree");
            let leaves: &[f32; N] = self.leaves[t * N..(t + 1) * N].try_into().expect("tree");
            let mut i = 0;
            for _ in 0..self.depth {
                let n = nodes[i & (N - 1)];
                i = 2 * i + 1 + (xx[n.slot as usize & (X - 1)] >= n.threshold) as usize;
            }
            sum += leaves[(i - (N - 1)) & (N - 1)] as f64;
        }
        sum
    }

    /// [`leaf_sum_fixed`](Self::leaf_sum_fixed) over split arrays with one-byte slots
    /// indexing a 256-entry row: no masks on the row lookups. With `skip > 0`, each tree
    /// starts at position `start[t]` of level `skip` (the AVX-512 kernel ran the levels
    /// above).
    #[inline]
    fn leaf_sum_small<const N: usize, const G: usize>(
        &self,
        xx: &[f32; 256],
        start: &[u32],
        skip: usize,
    ) -> f64 {
        let first = (1usize << skip) - 1;
        let at = |t: usize| {
            if skip == 0 {
                0
            } else {
                first + start[t] as usize
            }
        };
        let mut acc = [0f64; LANES];
        let full = self.n_trees / LANES * LANES;
        let mut t = 0;
        while t < full {
            let thr: &[f32; G] = self.thresholds[t * N..t * N + G].try_into().expect("group");
            let slot: &[u8; G] = self.slots8[t * N..t * N + G].try_into().expect("group");
            let leaves: &[f32; G] = self.leaves[t * N..t * N + G].try_into().expect("group");
            let mut g: [usize; LANES] = std::array::from_fn(|k| k * N + at(t + k));
            for _ in skip..self.depth {
                for (k, gk) in g.iter_mut().enumerate() {
                    let i = *gk & (G - 1);
                    let c = (xx[slot[i] as usize] >= thr[i]) as usize;
                    *gk = 2 * *gk - k * N + 1 + c;
                }
            }
            for (a, gk) in acc.iter_mut().zip(g) {
                *a += leaves[(gk - (N - 1)) & (G - 1)] as f64;
            }
            t += LANES;
        }
        let mut sum: f64 = acc.iter().sum();
        for t in full..self.n_trees {
            let mut i = at(t);
            for _ in skip..self.depth {
                let j = t * N + i;
                i = 2 * i + 1 + (xx[self.slots8[j] as usize] >= self.thresholds[j]) as usize;
            }
            sum += self.leaves[t * N + i - (N - 1)] as f64;
        }
        sum
    }

    /// The AVX-512 kernel for the top levels, then the scalar traversal below them.
    #[inline]
    fn top_sum<const P: usize>(&self, x: &[f32], xx: &[f32; 256], top: &TopLevels) -> f64 {
        let mut pos = [0u32; P];
        let mut row = [0f32; avx512::MAX_FEATURES];
        row[..self.num_features].copy_from_slice(&x[..self.num_features]);
        top.run(&row, &mut pos);
        self.by_depth(xx, &pos, top.levels())
    }

    /// The AVX2 byte-lane kernel for the top (up to six) levels, the scalar traversal
    /// below them if the trees are deeper, then the leaf sum.
    #[inline]
    fn bytes_sum<const P: usize>(&self, x: &[f32], b: &ByteTrees) -> f64 {
        let mut pos = [0u8; P];
        b.run(x, &mut pos);
        if b.levels() == self.depth {
            return self.leaf_sum_at(&pos);
        }
        let start: Vec<u32> = pos[..self.n_trees].iter().map(|&p| p as u32).collect();
        let mut xx = [0f32; 256];
        self.expand(x, &mut xx);
        self.by_depth(&xx, &start, b.levels())
    }

    /// Sum of each tree's leaf `leaf[t]` (index among its leaves), in the order of
    /// [`leaf_sum_small`](Self::leaf_sum_small) (eight accumulators by tree index
    /// modulo eight, then the trees past the last full eight): bit-identical sums.
    #[inline]
    fn leaf_sum_at(&self, leaf: &[u8]) -> f64 {
        match self.leaves_per_tree {
            2 => self.leaf_sum_at_n::<2, 16>(leaf),
            4 => self.leaf_sum_at_n::<4, 32>(leaf),
            8 => self.leaf_sum_at_n::<8, 64>(leaf),
            16 => self.leaf_sum_at_n::<16, 128>(leaf),
            32 => self.leaf_sum_at_n::<32, 256>(leaf),
            _ => self.leaf_sum_at_n::<64, 512>(leaf),
        }
    }

    /// [`leaf_sum_at`](Self::leaf_sum_at) for `N` leaves per tree (`G = 8N`), over the
    /// leaves widened to f64 at load.
    #[inline]
    fn leaf_sum_at_n<const N: usize, const G: usize>(&self, leaf: &[u8]) -> f64 {
        let full = self.n_trees / LANES * LANES;
        let mut acc = [0f64; LANES];
        for (lv, p) in self.leaves64[..full * N]
            .chunks_exact(G)
            .zip(leaf[..full].chunks_exact(LANES))
        {
            let lv: &[f64; G] = lv.try_into().expect("group");
            for (k, a) in acc.iter_mut().enumerate() {
                *a += lv[(k * N + p[k] as usize) & (G - 1)];
            }
        }
        let mut sum: f64 = acc.iter().sum();
        for (t, &p) in leaf.iter().enumerate().take(self.n_trees).skip(full) {
            sum += self.leaves64[t * N + (p as usize & (N - 1))];
        }
        sum
    }

    #[inline]
    fn by_depth(&self, xx: &[f32; 256], p: &[u32], skip: usize) -> f64 {
        match self.depth {
            0 => self.leaf_sum_small::<1, 8>(xx, p, skip),
            1 => self.leaf_sum_small::<2, 16>(xx, p, skip),
            2 => self.leaf_sum_small::<4, 32>(xx, p, skip),
            3 => self.leaf_sum_small::<8, 64>(xx, p, skip),
            4 => self.leaf_sum_small::<16, 128>(xx, p, skip),
            5 => self.leaf_sum_small::<32, 256>(xx, p, skip),
            6 => self.leaf_sum_small::<64, 512>(xx, p, skip),
            7 => self.leaf_sum_small::<128, 1024>(xx, p, skip),
            8 => self.leaf_sum_small::<256, 2048>(xx, p, skip),
            9 => self.leaf_sum_small::<512, 4096>(xx, p, skip),
            _ => self.leaf_sum_small::<1024, 8192>(xx, p, skip),
        }
    }

    /// Sum of leaf values over all trees for one row (`x` must have every feature the
    /// model reads: checked by the caller).
    #[inline]
    pub fn leaf_sum(&self, x: &[f32]) -> f64 {
        self.leaf_sum_with(x, true)
    }

    /// Whether a SIMD kernel is in use (see [`kernel`](Self::kernel)).
    pub fn uses_simd(&self) -> bool {
        self.bytes.is_some() || self.top.is_some()
    }

    /// The kernel [`leaf_sum`](Self::leaf_sum) runs: `"avx2-bytes"` (every level up to
    /// six in byte lanes), `"avx512-top"` (the top four levels in float lanes) or
    /// `"scalar"`.
    pub fn kernel(&self) -> &'static str {
        if self.bytes.is_some() {
            "avx2-bytes"
        } else if self.top.is_some() {
            "avx512-top"
        } else {
            "scalar"
        }
    }

    /// [`leaf_sum`](Self::leaf_sum) without the SIMD kernels (the reference they are
    /// tested against).
    pub fn leaf_sum_scalar(&self, x: &[f32]) -> f64 {
        self.leaf_sum_with(x, false)
    }

    /// [`leaf_sum`](Self::leaf_sum) of many rows into `out` (bit for bit the same),
    /// with the kernel chosen once and one position buffer for the batch.
    pub fn leaf_sums(&self, rows: &[&[f32]], out: &mut [f64]) {
        if let Some(b) = self.bytes.as_ref().filter(|b| b.levels() == self.depth) {
            let mut pos = vec![0u8; b.slots()];
            for (o, x) in out.iter_mut().zip(rows) {
                b.run(x, &mut pos);
                *o = self.leaf_sum_at(&pos);
            }
            return;
        }
        for (o, x) in out.iter_mut().zip(rows) {
            *o = self.leaf_sum(x);
        }
    }

    #[inline]
    fn leaf_sum_with(&self, x: &[f32], simd: bool) -> f64 {
        if let (Some(b), true) = (&self.bytes, simd) {
            return match b.slots() {
                0..=128 => self.bytes_sum::<128>(x, b),
                129..=512 => self.bytes_sum::<512>(x, b),
                _ => self.bytes_sum::<{ bytes::MAX_TREES + bytes::LANES }>(x, b),
            };
        }
        if !self.slots8.is_empty() {
            let mut xx = [0f32; 256];
            self.expand(x, &mut xx);
            if let (Some(top), true) = (&self.top, simd) {
                // Position buffers sized to the model (zeroing 4 KB per row would show).
                return match top.slots() {
                    0..=128 => self.top_sum::<128>(x, &xx, top),
                    129..=512 => self.top_sum::<512>(x, &xx, top),
                    _ => self.top_sum::<{ MAX_TOP_TREES + avx512::LANES }>(x, &xx, top),
                };
            }
            return self.by_depth(&xx, &[], 0);
        }
        // Models with more than 128 features (no one-byte slots): masked indices into a
        // fixed 512-slot row while it fits, slices beyond.
        if 2 * self.num_features <= XX {
            let mut xx = [0f32; XX];
            self.expand(x, &mut xx);
            return match self.depth {
                0 => self.leaf_sum_fixed::<1, 8, XX>(&xx),
                1 => self.leaf_sum_fixed::<2, 16, XX>(&xx),
                2 => self.leaf_sum_fixed::<4, 32, XX>(&xx),
                3 => self.leaf_sum_fixed::<8, 64, XX>(&xx),
                4 => self.leaf_sum_fixed::<16, 128, XX>(&xx),
                5 => self.leaf_sum_fixed::<32, 256, XX>(&xx),
                6 => self.leaf_sum_fixed::<64, 512, XX>(&xx),
                7 => self.leaf_sum_fixed::<128, 1024, XX>(&xx),
                8 => self.leaf_sum_fixed::<256, 2048, XX>(&xx),
                9 => self.leaf_sum_fixed::<512, 4096, XX>(&xx),
                _ => self.leaf_sum_fixed::<1024, 8192, XX>(&xx),
            };
        }
        self.leaf_sum_slices(x)
    }

    /// The same with slices (models with more than `XX / 2` features).
    fn leaf_sum_slices(&self, x: &[f32]) -> f64 {
        let mut xx = vec![0f32; 2 * self.num_features];
        self.expand(x, &mut xx);
        let xx = &xx[..];
        let mut acc = [0f64; LANES];
        let full = self.n_trees / LANES * LANES;
        let mut t = 0;
        while t < full {
            let trees: [&[FNode]; LANES] = std::array::from_fn(|k| {
                &self.nodes[(t + k) * self.stride..(t + k + 1) * self.stride]
            });
            let mut idx = [0usize; LANES];
            for _ in 0..self.depth {
                for k in 0..LANES {
                    idx[k] = Self::step(trees[k], idx[k], xx);
                }
            }
            for (k, (a, i)) in acc.iter_mut().zip(idx).enumerate() {
                *a += self.leaves[(t + k) * self.leaves_per_tree + i - self.internal] as f64;
            }
            t += LANES;
        }
        let mut sum: f64 = acc.iter().sum();
        for t in full..self.n_trees {
            let tree = &self.nodes[t * self.stride..(t + 1) * self.stride];
            let mut i = 0;
            for _ in 0..self.depth {
                i = Self::step(tree, i, xx);
            }
            sum += self.leaves[t * self.leaves_per_tree + i - self.internal] as f64;
        }
        sum
    }
}
