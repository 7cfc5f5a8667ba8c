//! AVX2 byte-lane kernel: thirty-two trees per vector through every level (up to six),
//! exact, no gathers (they are microcoded and slower than scalar loads on AMD Zen).
//!
//! **Thresholds become ranks.** For each feature, the model's distinct thresholds
//! `u_1 < … < u_K` are known at load. A row's value `x` becomes its *bin*
//! `#{u_i ≤ x}`, and a node with threshold `u_r` sends `x` right (`x ≥ u_r`, XGBoost's
//! `!(x < t)`) exactly when `bin(x) ≥ r`: if `x ≥ u_r` then every `u_i ≤ u_r` is `≤ x`;
//! if `x < u_r` then `bin(x) ≤ r − 1`. So every node is two bytes (feature slot, rank)
//! and every comparison one signed byte compare (`bin > r − 1`, both biased by `0x80`),
//! thirty-two trees at once. Binning a row is a two-level search per feature: sixteen
//! block maxima, then the sixteen thresholds of one block, each an 8-wide compare and a
//! popcount.
//!
//! **Missing values** use the expanded row of the scalar layout: slot `f` holds the bin
//! with a missing value at `0` (every rank test fails: left) and slot `f + H` holds it
//! at `255` (above every `r − 1 ≤ 253`: right), `H` = 8, 16, 24 or 32. A node reads the
//! slot of its default direction; present values are the same in both halves.
//!
//! **A lane's node** at level `l` is one of `2^l` candidates stored lane by lane; the
//! comparison masks of the levels above (`0xFF` = went right) pick it by a blend tree
//! (`2^l − 1` `vpblendvb` per byte array), and the row's bins, held in up to four
//! 16-byte tables, give the feature value by `vpshufb`. Pass-through nodes (a leaf
//! above the padded depth) and padding lanes have rank byte `255`: never right.
//!
//! Used when the CPU has AVX2, the model reads at most 32 features, has at most 1,024
//! trees and at most [`MAX_CUTS`] distinct thresholds per feature. Deeper trees continue
//! in the scalar traversal below level six. The leaf sum is the scalar layout's, in the
//! same order, so margins are bit-identical.
#![allow(unsafe_code)]

/// Trees per vector.
pub(crate) const LANES: usize = 32;
/// Levels evaluated here (at most).
pub(crate) const MAX_LEVELS: usize = 6;
/// Features the four row tables hold.
pub(crate) const MAX_FEATURES: usize = 32;
/// Distinct thresholds per feature the byte ranks can express (ranks `1..=254`; `255`
/// is the missing-goes-right bin).
pub(crate) const MAX_CUTS: usize = 254;
/// Most trees (the caller's position buffer).
pub(crate) const MAX_TREES: usize = 1024;
/// Thresholds per search block.
const BLOCK: usize = 16;
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

/// A row's bins: 64 bytes, the kernels' four 16-byte row tables.
pub(crate) type Bins = [u8; 64];

/// Thresholds as ranks, rows as bins (see the module docs): per feature, the sorted
/// distinct thresholds of the nodes a kernel evaluates.
#[derive(Debug, Clone)]
pub(crate) struct Binner {
    num_features: usize,
    /// Slot offset of the missing-goes-right half: 8, 16, 24 or 32 (the row tables in
    /// use: `2 · half / 16`).
    half: usize,
    /// Per feature: its sorted distinct thresholds (for ranks at build time).
    sorted: Vec<Vec<f32>>,
    /// The features read, with where their thresholds are.
    used: Vec<Used>,
    /// Blocks of sixteen sorted distinct thresholds, NaN-padded; a feature's last block
    /// always has at least one pad (so the block search never runs past it).
    cuts: Vec<f32>,
    /// Per feature with more than one block, sixteen entries: the last value of each
    /// of its blocks, NaN beyond.
    top: Vec<f32>,
}

/// `Used::top` of a feature with one block.
const NO_TOP: u32 = u32::MAX;

/// A feature the kernel's levels read.
#[derive(Debug, Clone, Copy)]
struct Used {
    feature: u32,
    /// Its first block in `cuts`.
    first: u32,
    /// Its block maxima in `top`, or [`NO_TOP`].
    top: u32,
    /// Fewer than eight thresholds (one 8-wide compare).
    narrow: bool,
}

/// Whether this CPU can run the kernel.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Proof that this CPU has BMI2 (`pext`), AVX2 and POPCNT: only [`Bmi2::detect`] makes
/// one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bmi2(());

impl Bmi2 {
    /// `Some` when the CPU has BMI2, AVX2 and POPCNT.
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        if available() && std::arch::is_x86_feature_detected!("bmi2") {
            return Some(Self(()));
        }
        None
    }

    /// The bits of `x` at the set bits of `m`, packed from bit 0 in order (`pext`).
    #[inline]
    pub(crate) fn pext(self, x: u64, m: u64) -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Bmi2` exists only where `detect` saw BMI2 on this CPU.
        unsafe {
            std::arch::x86_64::_pext_u64(x, m)
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("Bmi2 is detected only on x86-64")
    }
}

impl Binner {
    /// `None` beyond [`MAX_FEATURES`] features or [`MAX_CUTS`] distinct thresholds per
    /// feature. `per_feature[f]`: the thresholds (finite) nodes test on feature `f`.
    pub(crate) fn new(num_features: usize, mut per_feature: Vec<Vec<f32>>) -> Option<Self> {
        if num_features == 0 || num_features > MAX_FEATURES || per_feature.len() != num_features {
            return None;
        }
        for u in &mut per_feature {
            // Finite thresholds only (validated at load): `partial_cmp` is total here.
            u.sort_by(|a, b| a.partial_cmp(b).expect("finite thresholds"));
            // -0.0 == 0.0: one cut, as every comparison treats them alike.
            u.dedup_by(|a, b| a == b);
            if u.len() > MAX_CUTS {
                return None;
            }
        }
        let half = match num_features {
            0..=8 => 8,
            9..=16 => 16,
            17..=24 => 24,
            _ => 32,
        };
        let mut used = Vec::new();
        let mut cuts = Vec::new();
        let mut top = Vec::new();
        for (f, u) in per_feature.iter().enumerate() {
            if u.is_empty() {
                continue;
            }
            let blocks = u.len() / BLOCK + 1;
            let start = cuts.len();
            cuts.extend_from_slice(u);
            cuts.resize(start + blocks * BLOCK, f32::NAN);
            let t = if blocks == 1 {
                NO_TOP
            } else {
                let t = top.len();
                top.resize(t + BLOCK, f32::NAN);
                for b in 0..blocks {
                    top[t + b] = cuts[start + b * BLOCK + BLOCK - 1];
                }
                t as u32
            };
            used.push(Used {
                feature: f as u32,
                first: (start / BLOCK) as u32,
                top: t,
                narrow: u.len() < 8,
            });
        }
        Some(Self {
            num_features,
            half,
            sorted: per_feature,
            used,
            cuts,
            top,
        })
    }

    /// A node's `(slot, rank byte)`: the slot of its feature in the row's bins (the
    /// missing-goes-right half when `right`) and `(rank − 1) ^ 0x80`, where rank =
    /// `#{cuts ≤ threshold}` (at least 1: the threshold is one of the feature's cuts).
    pub(crate) fn code(&self, feature: usize, threshold: f32, right: bool) -> (u8, u8) {
        let r = self.sorted[feature].partition_point(|&c| c <= threshold);
        debug_assert!((1..=MAX_CUTS).contains(&r));
        let slot = (feature + if right { self.half } else { 0 }) as u8;
        (slot, ((r - 1) as u8) ^ 0x80)
    }

    /// The row's bins (`x`: at least the model's features, NaN for missing).
    pub(crate) fn bins(&self, x: &[f32]) -> Bins {
        assert!(x.len() >= self.num_features);
        let mut out = [0u8; 64];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Binner` is only used by kernels built after `available()` saw AVX2
        // and POPCNT on this CPU (`ByteTrees::new`, `ShapTables` checks it too).
        unsafe {
            self.bins_avx2(x, &mut out)
        };
        out
    }

    /// Bit `j` set when node `j` of `slot`/`rank` (up to 64 nodes, padded with
    /// [`NEVER`] ranks) sends the row right.
    pub(crate) fn right_bits(&self, bins: &Bins, slot: &[u8; 64], rank: &[u8; 64]) -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `bins`: AVX2 was seen on this CPU.
        unsafe {
            match self.half {
                8 => right_bits_avx2::<1>(bins, slot, rank),
                16 => right_bits_avx2::<2>(bins, slot, rank),
                24 => right_bits_avx2::<3>(bins, slot, rank),
                _ => right_bits_avx2::<4>(bins, slot, rank),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("kernels are built only on x86-64");
    }

    /// The row's bins, biased by `0x80`: slot `f` with missing values at bin 0, slot
    /// `f + half` with missing values at bin 255.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    fn bins_avx2(&self, x: &[f32], out: &mut Bins) {
        use std::arch::x86_64::*;
        let count = |s: &[f32], vx: __m256| -> usize {
            let s: &[f32; BLOCK] = s.try_into().expect("block");
            let lo = _mm256_cmp_ps::<_CMP_LE_OQ>(load_ps(&s[..8]), vx);
            let hi = _mm256_cmp_ps::<_CMP_LE_OQ>(load_ps(&s[8..]), vx);
            (_mm256_movemask_ps(lo) as u32 | (_mm256_movemask_ps(hi) as u32) << 8).count_ones()
                as usize
        };
        for u in &self.used {
            let f = u.feature as usize;
            let v = x[f];
            // A NaN `v` compares false everywhere: bin 0.
            let vx = _mm256_set1_ps(v);
            // Blocks wholly ≤ v (a prefix: the maxima are sorted, NaN pads last); no
            // search when the feature has one block.
            let c1 = match u.top {
                NO_TOP => 0,
                t => count(&self.top[t as usize..t as usize + BLOCK], vx),
            };
            let b0 = (u.first as usize + c1) * BLOCK;
            let b = if u.narrow {
                // At most seven thresholds: the first eight of the block suffice.
                let c = _mm256_cmp_ps::<_CMP_LE_OQ>(load_ps(&self.cuts[b0..b0 + 8]), vx);
                _mm256_movemask_ps(c).count_ones() as u8
            } else {
                (c1 * BLOCK + count(&self.cuts[b0..b0 + BLOCK], vx)) as u8
            };
            out[f] = b ^ 0x80;
            out[self.half + f] = if v.is_nan() { 0xff ^ 0x80 } else { b ^ 0x80 };
        }
    }
}

/// [`Binner::right_bits`] with `T` row tables.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn right_bits_avx2<const T: usize>(bins: &Bins, slot: &[u8; 64], rank: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    let tables: [__m256i; T] =
        std::array::from_fn(|k| _mm256_broadcastsi128_si256(load_128(&bins[16 * k..16 * (k + 1)])));
    let half = |h: usize| {
        let s = load_256(&slot[32 * h..32 * (h + 1)]);
        let v = lookup::<T>(&tables, s);
        let r = _mm256_cmpgt_epi8(v, load_256(&rank[32 * h..32 * (h + 1)]));
        _mm256_movemask_epi8(r) as u32 as u64
    };
    half(0) | half(1) << 32
}

/// Each lane's bin: byte `slot` of the row tables (`vpshufb` reads bits 0-3 — bit 7 is
/// clear, slots are below 64 — and bits 4 and 5 pick the table, moved to bit 7 of each
/// byte for `vpblendvb`).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn lookup<const T: usize>(
    tables: &[std::arch::x86_64::__m256i; T],
    slot: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    match T {
        1 => _mm256_shuffle_epi8(tables[0], slot),
        2 => _mm256_blendv_epi8(
            _mm256_shuffle_epi8(tables[0], slot),
            _mm256_shuffle_epi8(tables[1], slot),
            _mm256_slli_epi16::<3>(slot),
        ),
        3 => {
            // Slots 32-47 (bit 5) are all in the third table.
            let a = _mm256_blendv_epi8(
                _mm256_shuffle_epi8(tables[0], slot),
                _mm256_shuffle_epi8(tables[1 % T], slot),
                _mm256_slli_epi16::<3>(slot),
            );
            _mm256_blendv_epi8(
                a,
                _mm256_shuffle_epi8(tables[2 % T], slot),
                _mm256_slli_epi16::<2>(slot),
            )
        }
        _ => {
            let b4 = _mm256_slli_epi16::<3>(slot);
            let a = _mm256_blendv_epi8(
                _mm256_shuffle_epi8(tables[0], slot),
                _mm256_shuffle_epi8(tables[1 % T], slot),
                b4,
            );
            let b = _mm256_blendv_epi8(
                _mm256_shuffle_epi8(tables[2 % T], slot),
                _mm256_shuffle_epi8(tables[3 % T], slot),
                b4,
            );
            _mm256_blendv_epi8(a, b, _mm256_slli_epi16::<2>(slot))
        }
    }
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

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn load_ps(s: &[f32]) -> std::arch::x86_64::__m256 {
    let s: &[f32; 8] = s.try_into().expect("8 floats");
    // SAFETY: `s` is eight readable floats; the load is unaligned.
    unsafe { std::arch::x86_64::_mm256_loadu_ps(s.as_ptr()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn load_256(s: &[u8]) -> std::arch::x86_64::__m256i {
    let s: &[u8; 32] = s.try_into().expect("32 bytes");
    // SAFETY: `s` is 32 readable bytes; the load is unaligned.
    unsafe { std::arch::x86_64::_mm256_loadu_si256(s.as_ptr().cast()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn load_128(s: &[u8]) -> std::arch::x86_64::__m128i {
    let s: &[u8; 16] = s.try_into().expect("16 bytes");
    // SAFETY: `s` is 16 readable bytes; the load is unaligned.
    unsafe { std::arch::x86_64::_mm_loadu_si128(s.as_ptr().cast()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn store_256(d: &mut [u8], v: std::arch::x86_64::__m256i) {
    let d: &mut [u8; 32] = d.try_into().expect("32 bytes");
    // SAFETY: `d` is 32 writable bytes; the store is unaligned.
    unsafe { std::arch::x86_64::_mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
}

#[cfg(test)]
mod tests {
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
