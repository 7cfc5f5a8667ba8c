//! AVX2 byte-lane kernel: thirty-two trees per vector through every level (up to six),
//! exact, no gathers (they are microcoded and slower than scalar loads on AMD Zen).
//!
//! Rows become bytes first ([`super::binner`]: thresholds as ranks, values as bins,
//! missing values in an expanded row); here every node is two bytes (feature slot, rank)
//! and every comparison one signed byte compare, thirty-two trees at once.
//!
//! **A lane's node** at level `l` is one of `2^l` candidates stored lane by lane; the
//! comparison masks of the levels above (`0xFF` = went right) pick it by a blend tree
//! (`2^l − 1` `vpblendvb` per byte array), and the row's bins, held in up to four
//! 16-byte tables, give the feature value by `vpshufb`. Pass-through nodes (a leaf
//! above the padded depth) and padding lanes have rank byte `255`: never right.
//!
//! Used when the CPU has AVX2, the model reads at most 32 features, has at most 1,024
//! trees and at most [`MAX_CUTS`](super::binner::MAX_CUTS) distinct thresholds per
//! feature. Deeper trees continue in the scalar traversal below level six. The leaf sum is the scalar layout's, in the
//! same order, so margins are bit-identical.
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use super::avx2::{load_128, load_256, store_256};
#[cfg(target_arch = "x86_64")]
use super::binner::lookup;
use super::binner::{available, Binner, MAX_FEATURES};

/// Trees per vector.
pub(crate) const LANES: usize = 32;
/// Levels evaluated here (at most).
pub(crate) const MAX_LEVELS: usize = 6;
/// Most trees (the caller's position buffer).
pub(crate) const MAX_TREES: usize = 1024;
/// Rank byte that never compares right.
const NEVER: u8 = 0x7f;

/// One padded-tree node as the kernel sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Split {
    /// `x[feature] >= threshold` goes right; a missing value goes right if `right`.
    Test {
        /// Feature read.
        feature: usize,
        /// Threshold (finite).
        threshold: f32,
        /// Missing values go right.
        right: bool,
    },
    /// Both subtrees hold the same leaf: always left.
    Pass,
}

/// The byte tables of every group of thirty-two trees and the per-feature thresholds.
#[derive(Debug, Clone)]
pub(crate) struct ByteTrees {
    bin: Binner,
    levels: usize,
    groups: usize,
    /// `[group][node of the top levels, level order][lane]`: the slot read.
    slot: Vec<u8>,
    /// Same layout: `(rank − 1) ^ 0x80`, or [`NEVER`].
    rank: Vec<u8>,
}

impl ByteTrees {
    /// Builds the tables from a node accessor `(tree, position in the padded tree)`;
    /// `None` when the CPU lacks AVX2 or the model is outside the limits above.
    pub(crate) fn new(
        n_trees: usize,
        depth: usize,
        num_features: usize,
        node: impl Fn(usize, usize) -> Split,
    ) -> Option<Self> {
        if !available() {
            return None;
        }
        Self::build(n_trees, depth, num_features, node)
    }

    fn build(
        n_trees: usize,
        depth: usize,
        num_features: usize,
        node: impl Fn(usize, usize) -> Split,
    ) -> Option<Self> {
        if num_features == 0
            || num_features > MAX_FEATURES
            || depth == 0
            || n_trees == 0
            || n_trees > MAX_TREES
        {
            return None;
        }
        let levels = depth.min(MAX_LEVELS);
        let nodes = (1 << levels) - 1;
        // The distinct thresholds of the kernel's levels, per feature (the scalar levels
        // below, if any, read the float row).
        let mut per_feature: Vec<Vec<f32>> = vec![Vec::new(); num_features];
        for t in 0..n_trees {
            for pos in 0..nodes {
                if let Split::Test {
                    feature, threshold, ..
                } = node(t, pos)
                {
                    per_feature[feature].push(threshold);
                }
            }
        }
        let bin = Binner::new(num_features, per_feature)?;
        let groups = n_trees.div_ceil(LANES);
        let mut slot = vec![0u8; groups * nodes * LANES];
        let mut rank = vec![NEVER; groups * nodes * LANES];
        for t in 0..n_trees {
            let (g, k) = (t / LANES, t % LANES);
            for pos in 0..nodes {
                let i = (g * nodes + pos) * LANES + k;
                if let Split::Test {
                    feature,
                    threshold,
                    right,
                } = node(t, pos)
                {
                    (slot[i], rank[i]) = bin.code(feature, threshold, right);
                }
            }
        }
        Some(Self {
            bin,
            levels,
            groups,
            slot,
            rank,
        })
    }

    /// Levels evaluated.
    pub(crate) fn levels(&self) -> usize {
        self.levels
    }

    /// Slots of [`run`](Self::run)'s output (trees rounded up to thirty-two).
    pub(crate) fn slots(&self) -> usize {
        self.groups * LANES
    }

    /// Writes each tree's position within level [`levels`](Self::levels)
    /// (`0..2^levels`, at most 64) into `out` (at least [`slots`](Self::slots) long);
    /// `x` holds the row's features (NaN for missing), at least the model's number.
    pub(crate) fn run(&self, x: &[f32], out: &mut [u8]) {
        assert!(out.len() >= self.slots());
        let bins = self.bin.bins(x);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `ByteTrees` is only built by `new`, after `available()` saw AVX2 and
        // POPCNT on this CPU, so calling these `avx2,popcnt` functions is sound.
        unsafe {
            match self.bin.half {
                8 => self.run_avx2::<1>(&bins, out),
                16 => self.run_avx2::<2>(&bins, out),
                24 => self.run_avx2::<3>(&bins, out),
                _ => self.run_avx2::<4>(&bins, out),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("ByteTrees is built only on x86-64");
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    fn run_avx2<const T: usize>(&self, bins: &[u8; 64], out: &mut [u8]) {
        use std::arch::x86_64::*;
        let tables: [__m256i; T] = std::array::from_fn(|k| {
            _mm256_broadcastsi128_si256(load_128(&bins[16 * k..16 * (k + 1)]))
        });
        let nodes = (1 << self.levels) - 1;
        let zero = _mm256_setzero_si256();
        for g in 0..self.groups {
            let base = g * nodes * LANES;
            let mut m = [zero; MAX_LEVELS];
            m[0] = self.level::<1, T>(base, &m, &tables);
            if self.levels > 1 {
                m[1] = self.level::<2, T>(base, &m, &tables);
            }
            if self.levels > 2 {
                m[2] = self.level::<4, T>(base, &m, &tables);
            }
            if self.levels > 3 {
                m[3] = self.level::<8, T>(base, &m, &tables);
            }
            if self.levels > 4 {
                m[4] = self.level::<16, T>(base, &m, &tables);
            }
            if self.levels > 5 {
                m[5] = self.level::<32, T>(base, &m, &tables);
            }
            // Position = the levels' bits, first level most significant.
            let mut pos = zero;
            for (l, &ml) in m[..self.levels].iter().enumerate() {
                let bit = _mm256_set1_epi8(1 << (self.levels - 1 - l));
                pos = _mm256_or_si256(pos, _mm256_and_si256(ml, bit));
            }
            store_256(&mut out[g * LANES..(g + 1) * LANES], pos);
        }
    }

    /// One level with `C` candidate nodes per tree: pick each lane's node by the masks
    /// of the levels above, look its feature up in the row's bins, compare.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    fn level<const C: usize, const T: usize>(
        &self,
        base: usize,
        m: &[std::arch::x86_64::__m256i; MAX_LEVELS],
        tables: &[std::arch::x86_64::__m256i; T],
    ) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        let first = base + (C - 1) * LANES;
        let slot = select::<C>(&self.slot[first..first + C * LANES], m);
        let v = lookup::<T>(tables, slot);
        let rank = select::<C>(&self.rank[first..first + C * LANES], m);
        _mm256_cmpgt_epi8(v, rank)
    }
}

/// Each lane's byte among `C` candidate vectors (`v`: `C × 32` bytes, candidate-major),
/// picked by the masks of the levels above: a blend tree written out per size (the
/// first level's mask splits the candidates in halves, the next level's the halves…),
/// evaluated depth first so at most `log2(C)` partial results are live (AVX2 has
/// sixteen registers and the masks and row tables need some).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn select<const C: usize>(
    v: &[u8],
    m: &[std::arch::x86_64::__m256i; MAX_LEVELS],
) -> std::arch::x86_64::__m256i {
    let v = &v[..C * LANES];
    match C {
        1 => sel1(v, 0, 0, m),
        2 => sel2(v, 0, 0, m),
        4 => sel4(v, 0, 0, m),
        8 => sel8(v, 0, 0, m),
        16 => sel16(v, 0, 0, m),
        _ => sel32(v, 0, 0, m),
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn sel1(
    v: &[u8],
    at: usize,
    _: usize,
    _: &[std::arch::x86_64::__m256i; MAX_LEVELS],
) -> std::arch::x86_64::__m256i {
    load_256(&v[at * LANES..(at + 1) * LANES])
}

/// `sel{2n}` = blend of the two `sel{n}` halves by the mask of level `d`.
macro_rules! sel {
    ($name:ident, $half:ident, $n:expr) => {
        #[cfg(target_arch = "x86_64")]
        #[inline]
        #[target_feature(enable = "avx2")]
        fn $name(
            v: &[u8],
            at: usize,
            d: usize,
            m: &[std::arch::x86_64::__m256i; MAX_LEVELS],
        ) -> std::arch::x86_64::__m256i {
            let lo = $half(v, at, d + 1, m);
            let hi = $half(v, at + $n, d + 1, m);
            std::arch::x86_64::_mm256_blendv_epi8(lo, hi, m[d])
        }
    };
}
sel!(sel2, sel1, 1);
sel!(sel4, sel2, 2);
sel!(sel8, sel4, 4);
sel!(sel16, sel8, 8);
sel!(sel32, sel16, 16);

#[cfg(test)]
mod tests {
    use super::super::binner::MAX_CUTS;
    use super::*;

    /// xorshift64*: deterministic test data without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Position within level `levels` by walking the accessor: the definition.
    fn walk(node: &impl Fn(usize, usize) -> Split, t: usize, levels: usize, x: &[f32]) -> u8 {
        let mut i = 0;
        for _ in 0..levels {
            let right = match node(t, i) {
                Split::Pass => false,
                Split::Test {
                    feature,
                    threshold,
                    right,
                } => {
                    let v = x[feature];
                    if v.is_nan() {
                        right
                    } else {
                        v >= threshold
                    }
                }
            };
            i = 2 * i + 1 + right as usize;
        }
        (i + 1 - (1 << levels)) as u8
    }

    fn check_model(
        n_trees: usize,
        depth: usize,
        nf: usize,
        node: impl Fn(usize, usize) -> Split,
        rows: &[Vec<f32>],
    ) {
        #[cfg(target_arch = "x86_64")]
        assert!(available(), "these tests need an x86-64 CPU with AVX2");
        let b = ByteTrees::new(n_trees, depth, nf, &node).expect("within the limits");
        let mut out = vec![0u8; b.slots()];
        for (r, x) in rows.iter().enumerate() {
            b.run(x, &mut out);
            for (t, &got) in out.iter().enumerate().take(n_trees) {
                let want = walk(&node, t, b.levels(), x);
                assert_eq!(
                    got, want,
                    "{n_trees} trees, depth {depth}, {nf} features: row {r} {x:?}, tree {t}"
                );
            }
        }
    }

    /// Random padded trees (pass-throughs included) over a small pool of thresholds
    /// (ties across nodes, -0.0 and 0.0, subnormals, the largest floats) and rows
    /// drawn from the same pool, its neighbours, NaN and the infinities; every table
    /// count (1 to 4 row tables) and depths below, at and beyond six levels.
    #[test]
    fn positions_equal_the_walk_on_adversarial_models() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pool: Vec<f32> = vec![
            -0.0,
            0.0,
            1e-45,
            -1e-45,
            f32::MIN_POSITIVE,
            1.0,
            1.0 + f32::EPSILON,
            -1.0,
            0.5,
            3.0e38,
            -3.0e38,
            f32::MAX,
            f32::MIN,
            123.456,
            -7.25,
        ];
        for case in 0..60 {
            let nf = [1, 5, 8, 9, 16, 17, 18, 24, 25, 32][case % 10];
            let depth = 1 + case % 8;
            let n_trees = 1 + rng.below(70);
            let nodes = (1usize << depth.min(MAX_LEVELS)) - 1;
            let table: Vec<Split> = (0..n_trees * nodes)
                .map(|_| {
                    if rng.below(6) == 0 {
                        Split::Pass
                    } else {
                        Split::Test {
                            feature: rng.below(nf),
                            threshold: pool[rng.below(pool.len())],
                            right: rng.below(2) == 1,
                        }
                    }
                })
                .collect();
            let node = |t: usize, pos: usize| table[t * nodes + pos];
            let rows: Vec<Vec<f32>> = (0..40)
                .map(|_| {
                    (0..nf)
                        .map(|_| match rng.below(8) {
                            0 => f32::NAN,
                            1 => f32::INFINITY,
                            2 => f32::NEG_INFINITY,
                            3 => {
                                let p = pool[rng.below(pool.len())];
                                if rng.below(2) == 0 {
                                    p.next_up()
                                } else {
                                    p.next_down()
                                }
                            }
                            _ => pool[rng.below(pool.len())],
                        })
                        .collect()
                })
                .collect();
            check_model(n_trees, depth, nf, node, &rows);
        }
    }

    /// A feature with the most distinct thresholds the ranks hold: every bin, both
    /// missing directions, values at, just below and just above each threshold.
    #[test]
    fn the_full_rank_range_is_exact() {
        let cuts: Vec<f32> = (0..MAX_CUTS).map(|i| i as f32 * 0.25 - 20.0).collect();
        let node = |t: usize, _| Split::Test {
            feature: 0,
            threshold: cuts[t],
            right: t % 2 == 1,
        };
        let mut rows = vec![vec![f32::NAN, 0.0], vec![f32::INFINITY, 0.0]];
        for &c in &cuts {
            for v in [c, c.next_down(), c.next_up()] {
                rows.push(vec![v, 0.0]);
            }
        }
        check_model(MAX_CUTS, 1, 2, node, &rows);
    }

    /// A model whose thresholds do not fit byte ranks is refused (the caller falls back).
    #[test]
    fn too_many_distinct_thresholds_are_refused() {
        // 300 trees of depth 1 on feature 0, each with its own threshold.
        let built = ByteTrees::build(300, 1, 4, |t, _| Split::Test {
            feature: 0,
            threshold: t as f32 * 0.5,
            right: false,
        });
        assert!(built.is_none());
        let ok = ByteTrees::build(254, 1, 4, |t, _| Split::Test {
            feature: 0,
            threshold: t as f32 * 0.5,
            right: false,
        });
        assert!(ok.is_some());
    }

    #[test]
    fn limits_refuse_rather_than_truncate() {
        let s = |_, _| Split::Pass;
        assert!(ByteTrees::build(10, 3, 33, s).is_none(), "33 features");
        assert!(ByteTrees::build(MAX_TREES + 1, 3, 4, s).is_none(), "trees");
        assert!(ByteTrees::build(0, 3, 4, s).is_none(), "no trees");
        assert!(ByteTrees::build(10, 0, 4, s).is_none(), "no levels");
        assert_eq!(ByteTrees::build(10, 9, 4, s).unwrap().levels(), MAX_LEVELS);
    }
}
