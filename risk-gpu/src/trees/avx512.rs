//! AVX-512 evaluation of the top levels of the padded trees: sixteen trees per vector, no
//! gathers (they are slow on this hardware class).
//!
//! For a group of sixteen trees and each of the top `L ≤ 4` levels, the thresholds and
//! feature indices of every node of that level are stored lane by lane
//! (`[node][tree]`). A lane's node at level `l` is one of `2^l` candidates; a blend tree
//! over the bits of the lane's position picks it (`2^l` loads, `2^l − 1` blends), the
//! feature value comes from the row held in two registers (`vpermt2ps`, up to 32
//! features), and one compare advances sixteen trees. Missing values: the feature index
//! carries bit 5 when missing values go right, and a NaN lane takes that bit as its
//! answer — the same rule as the scalar layout's `[x⁻, x⁺]` row. The remaining levels
//! continue in the scalar lockstep traversal from each tree's position.
//!
//! Used only when the CPU has AVX-512F (checked at run time when the model loads) and the
//! model reads at most 32 features; otherwise the scalar path runs alone.
#![allow(unsafe_code)]

/// Trees per vector.
pub(crate) const LANES: usize = 16;
/// Levels evaluated here (at most).
pub(crate) const MAX_LEVELS: usize = 4;
/// Features the two-register row holds.
pub(crate) const MAX_FEATURES: usize = 32;
/// Bit of a feature index meaning "missing values go right".
const RIGHT: i32 = 32;

/// The top levels of every group of sixteen trees, lane by lane.
#[derive(Debug, Clone)]
pub(crate) struct TopLevels {
    levels: usize,
    groups: usize,
    /// `[group][node of the top levels, level order][lane]`.
    thr: Vec<f32>,
    /// Feature index, `| RIGHT` when missing values go right; same layout.
    feat: Vec<i32>,
}

/// Whether this CPU can run the kernel.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl TopLevels {
    /// Builds the tables from a node accessor `(tree, position in the padded tree) →
    /// (threshold, feature, missing goes right)`; `None` when the CPU lacks AVX-512F or
    /// the model has too many features or no internal levels.
    pub(crate) fn new(
        n_trees: usize,
        depth: usize,
        num_features: usize,
        node: impl Fn(usize, usize) -> (f32, usize, bool),
    ) -> Option<Self> {
        if !available() || num_features > MAX_FEATURES || depth == 0 || n_trees == 0 {
            return None;
        }
        let levels = depth.min(MAX_LEVELS);
        let nodes = (1 << levels) - 1;
        let groups = n_trees.div_ceil(LANES);
        // Padding lanes: threshold +inf, missing goes left: always left, never read.
        let mut thr = vec![f32::INFINITY; groups * nodes * LANES];
        let mut feat = vec![0i32; groups * nodes * LANES];
        for t in 0..n_trees {
            let (g, k) = (t / LANES, t % LANES);
            for pos in 0..nodes {
                let (th, f, right) = node(t, pos);
                let i = (g * nodes + pos) * LANES + k;
                thr[i] = th;
                feat[i] = f as i32 | if right { RIGHT } else { 0 };
            }
        }
        Some(Self {
            levels,
            groups,
            thr,
            feat,
        })
    }

    /// Levels evaluated.
    pub(crate) fn levels(&self) -> usize {
        self.levels
    }

    /// Slots of [`run`](Self::run)'s output (trees rounded up to sixteen).
    pub(crate) fn slots(&self) -> usize {
        self.groups * LANES
    }

    /// Writes each tree's position within level `levels` (`0..2^levels`) into `out`
    /// (at least [`slots`](Self::slots) long); `x` holds the row's features, NaN for
    /// missing, zeros beyond the model's features.
    pub(crate) fn run(&self, x: &[f32; MAX_FEATURES], out: &mut [u32]) {
        assert!(out.len() >= self.slots());
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `TopLevels` exists only if `available()` saw AVX-512F on this CPU, so
        // calling the `avx512f` function is sound; `out` is long enough (asserted).
        unsafe {
            self.run_avx512(x, out)
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn run_avx512(&self, x: &[f32; MAX_FEATURES], out: &mut [u32]) {
        use std::arch::x86_64::*;
        let nodes = (1 << self.levels) - 1;
        let xlo = load_ps(x[..16].try_into().expect("16"));
        let xhi = load_ps(x[16..].try_into().expect("16"));
        for g in 0..self.groups {
            let base = g * nodes;
            let mut j = _mm512_setzero_si512();
            // Unrolled per level (candidate counts are constants: the blend trees stay in
            // registers).
            j = self.level::<1>(base, j, xlo, xhi);
            if self.levels > 1 {
                j = self.level::<2>(base, j, xlo, xhi);
            }
            if self.levels > 2 {
                j = self.level::<4>(base, j, xlo, xhi);
            }
            if self.levels > 3 {
                j = self.level::<8>(base, j, xlo, xhi);
            }
            let dst: &mut [u32; LANES] = (&mut out[g * LANES..(g + 1) * LANES])
                .try_into()
                .expect("16");
            store_epi32(dst, j);
        }
    }

    /// One level with `C` candidate nodes per tree: pick each lane's node, compare,
    /// advance the positions `j`.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn level<const C: usize>(
        &self,
        base: usize,
        j: std::arch::x86_64::__m512i,
        xlo: std::arch::x86_64::__m512,
        xhi: std::arch::x86_64::__m512,
    ) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let first = (base + C - 1) * LANES;
        let t: [__m512; C] = std::array::from_fn(|c| {
            load_ps(
                self.thr[first + c * LANES..first + (c + 1) * LANES]
                    .try_into()
                    .expect("16"),
            )
        });
        let f: [__m512i; C] = std::array::from_fn(|c| {
            load_epi32(
                self.feat[first + c * LANES..first + (c + 1) * LANES]
                    .try_into()
                    .expect("16"),
            )
        });
        let (mut t, mut f, mut width, mut b) = (t, f, C, 0);
        // Blend tree: bit b of a lane's position picks between candidates that differ
        // in bit b.
        while width > 1 {
            let m = _mm512_test_epi32_mask(j, _mm512_set1_epi32(1 << b));
            for c in 0..width / 2 {
                t[c] = _mm512_mask_blend_ps(m, t[2 * c], t[2 * c + 1]);
                f[c] = _mm512_mask_blend_epi32(m, f[2 * c], f[2 * c + 1]);
            }
            width /= 2;
            b += 1;
        }
        let v = _mm512_permutex2var_ps(xlo, f[0], xhi);
        let ge = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(v, t[0]);
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        let right = ge | (nan & _mm512_test_epi32_mask(f[0], _mm512_set1_epi32(RIGHT)));
        let j2 = _mm512_add_epi32(j, j);
        _mm512_mask_add_epi32(j2, right, j2, _mm512_set1_epi32(1))
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
fn load_ps(s: &[f32; LANES]) -> std::arch::x86_64::__m512 {
    // SAFETY: `s` is sixteen readable floats; the load is unaligned.
    unsafe { std::arch::x86_64::_mm512_loadu_ps(s.as_ptr()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
fn load_epi32(s: &[i32; LANES]) -> std::arch::x86_64::__m512i {
    // SAFETY: `s` is sixteen readable i32; the load is unaligned.
    unsafe { std::arch::x86_64::_mm512_loadu_epi32(s.as_ptr()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
fn store_epi32(d: &mut [u32; LANES], v: std::arch::x86_64::__m512i) {
    // SAFETY: `d` is sixteen writable u32; the store is unaligned.
    unsafe { std::arch::x86_64::_mm512_storeu_epi32(d.as_mut_ptr() as *mut i32, v) }
}
