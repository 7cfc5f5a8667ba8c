//! Distinct counts over a window: exact `(hash, last bucket)` pairs, or a HyperLogLog
//! per bucket whose registers a Redis script computes identically.

use super::ring::Ring;
use serde::{Deserialize, Serialize};

/// HyperLogLog registers of one bucket.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub(crate) struct Regs(#[serde(with = "serde_regs")] pub [u8; HLL_M]);

impl Default for Regs {
    fn default() -> Self {
        Regs([0; HLL_M])
    }
}

mod serde_regs {
    use super::HLL_M;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(r: &[u8; HLL_M], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(r)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; HLL_M], D::Error> {
        let v: Vec<u8> = Vec::deserialize(d)?;
        v.try_into()
            .map_err(|_| serde::de::Error::custom("HyperLogLog registers of the wrong length"))
    }
}

/// Registers per HyperLogLog (standard error 1.04 / sqrt(128) = 9.2%).
pub(crate) const HLL_M: usize = 128;

/// Distinct values: exact `(hash, last bucket)` pairs, or a HyperLogLog per bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) enum Distinct {
    Exact(Vec<(u64, i64)>),
    Sketch(Ring<Regs>),
}

/// Sets the register of a 52-bit hash (52 bits so that a server-side script, whose
/// numbers are doubles, computes the very same registers): the top 7 bits pick the
/// register, the rank is one plus the leading zeros of the other 45.
fn hll_set(r: &mut Regs, h: u64) {
    let j = ((h >> 45) & 0x7f) as usize;
    let w = h & ((1 << 45) - 1);
    let rank = (w.leading_zeros() - 19) as u8 + 1;
    r.0[j] = r.0[j].max(rank);
}

fn hll_estimate(m: &[u8; HLL_M]) -> f64 {
    let mf = HLL_M as f64;
    let alpha = 0.7213 / (1.0 + 1.079 / mf);
    let (sum, zeros) = m.iter().fold((0.0, 0u32), |(s, z), &r| {
        (s + 2f64.powi(-(r as i32)), z + (r == 0) as u32)
    });
    let e = alpha * mf * mf / sum;
    if e <= 2.5 * mf && zeros > 0 {
        mf * (mf / zeros as f64).ln()
    } else {
        e
    }
}

impl Distinct {
    pub(super) fn count(&self, lo: i64, hi: i64) -> f64 {
        match self {
            Distinct::Exact(v) => v.iter().filter(|e| e.1 >= lo && e.1 <= hi).count() as f64,
            Distinct::Sketch(ring) => {
                let mut m = [0u8; HLL_M];
                for r in ring.range(lo, hi) {
                    for (a, b) in m.iter_mut().zip(r.0.iter()) {
                        *a = (*a).max(*b);
                    }
                }
                hll_estimate(&m).round()
            }
        }
    }

    /// Adds hash `h` at bucket `b`; past `exact_limit` distinct values the exact set turns
    /// into a sketch of `ring_len` buckets.
    pub(super) fn add(
        &mut self,
        h: u64,
        b: i64,
        lo: i64,
        head: i64,
        exact_limit: usize,
        ring_len: usize,
    ) {
        match self {
            Distinct::Exact(v) => {
                if let Some(e) = v.iter_mut().find(|e| e.0 == h) {
                    e.1 = e.1.max(b);
                    return;
                }
                v.retain(|e| e.1 >= lo);
                v.push((h, b));
                if v.len() > exact_limit {
                    let mut ring = Ring::<Regs>::new(ring_len);
                    ring.advance(head);
                    for &(h, b) in v.iter() {
                        if let Some(r) = ring.get_mut(b) {
                            hll_set(r, h);
                        }
                    }
                    *self = Distinct::Sketch(ring);
                }
            }
            Distinct::Sketch(ring) => {
                if let Some(r) = ring.get_mut(b) {
                    hll_set(r, h);
                }
            }
        }
    }
}
