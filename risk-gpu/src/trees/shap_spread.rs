//! The credit pass of [`super::shap_table`] with AVX2: each unit's row of eight credits
//! is spread over the model's features, eight features a block, by one `vpermps` with
//! a per-unit selector, and added to that block's accumulator.
//!
//! The scalar pass does a load, an add and a store into a per-feature accumulator for
//! every credit (with its feature index loaded too): on 120 depth-6 trees that is
//! ~15,000 read-modify-writes a row, bound by the load and store ports (`perf`: ~60% of
//! the row's time in those stores). Here a unit costs one load and, per block, a
//! selector load, a permute, a mask and an add, in registers. Credits are summed per
//! tree in `f32` (at most a tree's units, ≤ 16 on a depth-6 tree), then per tree into
//! `f64` accumulators, so the ensemble's sum keeps the scalar pass's `f64` precision
//! across trees.
#![allow(unsafe_code)]

/// Most features the spread handles (four blocks of eight).
pub(super) const MAX_FEATURES: usize = 32;

/// Selector byte of a feature no column of the unit credits (its sign bit masks it).
const NONE: u8 = 0x80;

/// Per unit and block of eight features: for each feature, the row column that credits
/// it, or [`NONE`].
#[derive(Debug, Clone)]
pub(super) struct Spread {
    blocks: usize,
    sel: Vec<u64>,
    /// Per tree: its range of units.
    trees: Vec<(u32, u32)>,
}

impl Spread {
    /// Selectors for units whose eight columns credit `features` (eight per unit, `nf`
    /// for a pad; a tree's units are `trees` ranges), or `None` where the CPU lacks AVX2
    /// or the model has more than [`MAX_FEATURES`] features.
    pub(super) fn new(features: &[u32], nf: usize, trees: Vec<(u32, u32)>) -> Option<Self> {
        if !available() || nf > MAX_FEATURES {
            return None;
        }
        let blocks = nf.div_ceil(8).max(1);
        let mut sel = Vec::with_capacity(features.len() / 8 * blocks);
        for cols in features.chunks_exact(8) {
            for b in 0..blocks {
                let mut s = [NONE; 8];
                for (lane, byte) in s.iter_mut().enumerate() {
                    let f = (8 * b + lane) as u32;
                    if (f as usize) < nf {
                        if let Some(c) = cols.iter().position(|&x| x == f) {
                            *byte = c as u8;
                        }
                    }
                }
                sel.push(u64::from_le_bytes(s));
            }
        }
        Some(Self { blocks, sel, trees })
    }

    /// Adds the credits of the rows at `rows` (one per unit, in unit order) to
    /// `phi[..nf]`.
    pub(super) fn add(&self, values: &[f32], rows: &[(u32, u32)], phi: &mut [f64]) {
        let mut acc = [0f64; MAX_FEATURES];
        let (units, sel) = (&self.trees[..], &self.sel[..]);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `new` made a `Spread` only where `available()` saw AVX2.
        unsafe {
            match self.blocks {
                1 => spread::<1>(values, rows, units, sel, &mut acc),
                2 => spread::<2>(values, rows, units, sel, &mut acc),
                3 => spread::<3>(values, rows, units, sel, &mut acc),
                _ => spread::<4>(values, rows, units, sel, &mut acc),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (values, rows, units, sel);
        for (p, a) in phi.iter_mut().zip(acc) {
            *p += a;
        }
    }
}

/// Whether this CPU has AVX2.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn spread<const NB: usize>(
    values: &[f32],
    rows: &[(u32, u32)],
    units: &[(u32, u32)],
    sel: &[u64],
    acc: &mut [f64; MAX_FEATURES],
) {
    use std::arch::x86_64::*;
    let mut total = [_mm256_setzero_pd(); 8];
    for &(a, b) in units {
        let mut tree = [_mm256_setzero_ps(); NB];
        for j in a as usize..b as usize {
            let row = rows[j].0 as usize;
            let v = super::avx2::load_ps(&values[row..row + 8]);
            let s: &[u64; NB] = sel[j * NB..(j + 1) * NB].try_into().expect("NB");
            for k in 0..NB {
                let idx = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(s[k] as i64));
                let credit = _mm256_permutevar8x32_ps(v, idx);
                // Lanes of no column: the selector's sign bit, all ones after the shift.
                let none = _mm256_castsi256_ps(_mm256_srai_epi32::<31>(idx));
                tree[k] = _mm256_add_ps(tree[k], _mm256_andnot_ps(none, credit));
            }
        }
        for k in 0..NB {
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(tree[k]));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(tree[k]));
            total[2 * k] = _mm256_add_pd(total[2 * k], lo);
            total[2 * k + 1] = _mm256_add_pd(total[2 * k + 1], hi);
        }
    }
    for (k, t) in total.iter().enumerate().take(2 * NB) {
        let out: &mut [f64; 4] = (&mut acc[4 * k..4 * k + 4]).try_into().expect("4");
        // SAFETY: `out` is four writable doubles; the store is unaligned.
        unsafe { _mm256_storeu_pd(out.as_mut_ptr(), *t) }
    }
}
