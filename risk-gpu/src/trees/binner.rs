//! Thresholds as ranks, rows as bins: the byte form the AVX2 tree kernel
//! ([`super::bytes`]) and the SHAP direction table ([`super::shap_table`]) read.
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
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use super::avx2::{load_128, load_256, load_ps};

/// Features the four row tables hold.
pub(crate) const MAX_FEATURES: usize = 32;
/// Distinct thresholds per feature the byte ranks can express (ranks `1..=254`; `255`
/// is the missing-goes-right bin).
pub(crate) const MAX_CUTS: usize = 254;
/// Thresholds per search block.
const BLOCK: usize = 16;

/// A row's bins: 64 bytes, the kernels' four 16-byte row tables.
pub(crate) type Bins = [u8; 64];

/// Thresholds as ranks, rows as bins (see the module docs): per feature, the sorted
/// distinct thresholds of the nodes a kernel evaluates.
#[derive(Debug, Clone)]
pub(crate) struct Binner {
    num_features: usize,
    /// Slot offset of the missing-goes-right half: 8, 16, 24 or 32 (the row tables in
    /// use: `2 · half / 16`).
    pub(super) half: usize,
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

/// Proof that this CPU has AVX2 and POPCNT (the bit pass), and how it runs `pext`:
/// only [`Pext::detect`] makes one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pext {
    /// BMI2's `pext` in hardware at a few cycles; otherwise a loop over the mask's bits.
    hardware: bool,
}

impl Pext {
    /// `Some` when the CPU has AVX2 and POPCNT.
    ///
    /// BMI2's `pext` is used where it is fast: AMD (and Hygon) CPUs before Zen 3 (family
    /// `0x19`) run it in microcode, tens to hundreds of cycles growing with the mask's
    /// set bits, against 3 on Intel since Haswell and on Zen 3. On a Zen 1 EPYC
    /// `_pext_u64` was 16% of all samples of `examples/lean_replay.rs` (`perf`, TreeSHAP
    /// for 2% of the rows); a leaf's path mask has a few bits, which the loop takes in a
    /// few cycles each.
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        if available() {
            let bmi2 = std::arch::is_x86_feature_detected!("bmi2");
            return Some(Self {
                hardware: bmi2 && !microcoded_pext(),
            });
        }
        None
    }

    /// Whether `pext` runs in hardware here.
    #[cfg(test)]
    pub(crate) fn hardware(self) -> bool {
        self.hardware
    }

    /// The bits of `x` at the set bits of `m`, packed from bit 0 in order (`pext`).
    #[inline]
    pub(crate) fn pext(self, x: u64, m: u64) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.hardware {
            // SAFETY: `hardware` is set only where `detect` saw BMI2 on this CPU.
            return unsafe { pext_bmi2(x, m) };
        }
        pext_loop(x, m)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
unsafe fn pext_bmi2(x: u64, m: u64) -> u64 {
    std::arch::x86_64::_pext_u64(x, m)
}

/// `pext` one set bit of the mask at a time.
#[inline]
pub(crate) fn pext_loop(x: u64, mut m: u64) -> u64 {
    let (mut out, mut bit) = (0u64, 1u64);
    while m != 0 {
        let low = m & m.wrapping_neg();
        if x & low != 0 {
            out |= bit;
        }
        bit <<= 1;
        m &= m - 1;
    }
    out
}

/// An AMD or Hygon CPU of a family before Zen 3 (BMI2 in microcode).
#[cfg(target_arch = "x86_64")]
fn microcoded_pext() -> bool {
    let id = raw_cpuid::CpuId::new();
    let vendor = id.get_vendor_info();
    let slow_vendor = vendor
        .as_ref()
        .is_some_and(|v| matches!(v.as_str(), "AuthenticAMD" | "HygonGenuine"));
    let family = id.get_feature_info().map_or(0, |f| f.family_id());
    slow_vendor && family < 0x19
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
    /// `NEVER` ranks) sends the row right.
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
pub(super) fn lookup<const T: usize>(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop against BMI2's `pext` on random and sparse masks (the machines this
    /// runs on all have BMI2: the test says so when one does not).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn pext_loop_equals_bmi2() {
        assert!(
            std::arch::is_x86_feature_detected!("bmi2"),
            "no BMI2 on this CPU: nothing to compare the loop with"
        );
        let hw = Pext::detect().is_some_and(|p| p.hardware());
        eprintln!("pext on this CPU: {}", if hw { "BMI2" } else { "the loop" });
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for i in 0..200_000 {
            let x = next();
            // Dense, sparse (a leaf's path: a few bits) and empty masks.
            let m = match i % 3 {
                0 => next(),
                1 => next() & next() & next(),
                _ => 0,
            };
            // SAFETY: BMI2 is present (asserted above).
            let want = unsafe { pext_bmi2(x, m) };
            assert_eq!(pext_loop(x, m), want, "x {x:#x} m {m:#x}");
        }
    }
}
