//! Quantized weight formats and their quantizers.
//!
//! - [`Int4Weight`]: 4-bit, asymmetric, one `f16` scale and one 4-bit zero point per
//!   `group` input channels of each output row: `w = (q − z)·s`, `q, z ∈ [0, 15]`. Held
//!   row-major (two values per byte, low nibble first) for the CPU kernels; converted to
//!   and from AutoAWQ's GEMM layout ([`AwqGemm`]) for files.
//! - [`Int8Weight`]: symmetric 8-bit, one `f32` scale per output row: `w = q·s`,
//!   `q ∈ [−127, 127]`.
//!
//! The quantizer follows AutoAWQ's `pseudo_quantize_tensor` (zero-point variant):
//! `s = max(max − min, 1e−5) / 15`, `z = clamp(−round(min / s), 0, 15)`,
//! `q = clamp(round(w / s) + z, 0, 15)`, rounding half to even (as `torch.round`); the
//! scale is rounded to `f16` first so that what is stored is what was used.

use super::error::QuantError;
use half::f16;

/// A 4-bit asymmetric group-quantized matrix `[out, inp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Int4Weight {
    /// Output channels (rows).
    pub out: usize,
    /// Input channels (columns).
    pub inp: usize,
    /// Input channels per scale / zero point.
    pub group: usize,
    /// `[out][inp / 2]`: column `2j` in the low nibble of byte `j`, `2j + 1` in the high.
    pub packed: Vec<u8>,
    /// `[out][inp / group]`.
    pub scales: Vec<f16>,
    /// `[out][ceil(groups / 2)]`: zero points, two per byte, low nibble first.
    pub zeros: Vec<u8>,
}

/// A symmetric 8-bit matrix `[out, inp]` with one scale per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Int8Weight {
    /// Output channels (rows).
    pub out: usize,
    /// Input channels (columns).
    pub inp: usize,
    /// `[out][inp]`.
    pub q: Vec<i8>,
    /// `[out]`.
    pub scales: Vec<f32>,
}

/// AutoAWQ's GEMM layout (`WQLinear_GEMM`): the transposed matrix `[inp, out]` with eight
/// 4-bit values per `i32`, interleaved: nibble `k` of word `c` holds column
/// `8c + ORDER[k]`, `ORDER = [0, 2, 4, 6, 1, 3, 5, 7]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AwqGemm {
    /// `[inp][out / 8]`.
    pub qweight: Vec<i32>,
    /// `[inp / group][out / 8]`.
    pub qzeros: Vec<i32>,
    /// `[inp / group][out]`.
    pub scales: Vec<f16>,
    /// Input channels.
    pub inp: usize,
    /// Output channels.
    pub out: usize,
    /// Group size.
    pub group: usize,
}

/// Nibble order inside an AutoAWQ word: nibble `k` holds column `ORDER[k]`.
pub const AWQ_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

fn shape_err(what: &str, reason: String) -> QuantError {
    QuantError::Shape {
        tensor: what.to_owned(),
        reason,
    }
}

/// Checks that `group` splits `inp` and is a supported size.
pub fn check_group(what: &str, inp: usize, group: usize) -> Result<(), QuantError> {
    if group == 0 || !inp.is_multiple_of(group) || !group.is_multiple_of(2) {
        return Err(QuantError::Group {
            tensor: what.to_owned(),
            inp,
            group,
        });
    }
    Ok(())
}

/// Checks a row-major `[out, inp]` matrix's length and that every value is finite.
fn check_matrix(what: &str, w: &[f32], out: usize, inp: usize) -> Result<(), QuantError> {
    if w.len() != out * inp {
        return Err(shape_err(
            what,
            format!("{} values for a {out}x{inp} matrix", w.len()),
        ));
    }
    if let Some(i) = w.iter().position(|x| !x.is_finite()) {
        return Err(shape_err(
            what,
            format!("non-finite weight at row {}, column {}", i / inp, i % inp),
        ));
    }
    Ok(())
}

/// `(scale, zero)` of one group (AutoAWQ's zero-point quantizer, scale rounded to f16).
#[inline]
pub fn group_params(w: &[f32]) -> (f16, u8) {
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &x in w {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    let s = f16::from_f32(((hi - lo).max(1e-5)) / 15.0);
    let sf = s.to_f32();
    let z = (-(lo / sf).round_ties_even()).clamp(0.0, 15.0);
    (s, z as u8)
}

#[inline]
fn quantize_value(x: f32, s: f32, z: u8) -> u8 {
    ((x / s).round_ties_even() + z as f32).clamp(0.0, 15.0) as u8
}

impl Int4Weight {
    /// Quantizes a row-major `[out, inp]` matrix (round to nearest; AWQ scaling, when
    /// used, is applied to `w` beforehand).
    pub fn quantize(
        what: &str,
        w: &[f32],
        out: usize,
        inp: usize,
        group: usize,
    ) -> Result<Self, QuantError> {
        check_group(what, inp, group)?;
        check_matrix(what, w, out, inp)?;
        let groups = inp / group;
        let zrow = groups.div_ceil(2);
        let mut packed = vec![0u8; out * inp / 2];
        let mut scales = Vec::with_capacity(out * groups);
        let mut zeros = vec![0u8; out * zrow];
        for r in 0..out {
            let row = &w[r * inp..(r + 1) * inp];
            for g in 0..groups {
                let vals = &row[g * group..(g + 1) * group];
                let (s, z) = group_params(vals);
                scales.push(s);
                zeros[r * zrow + g / 2] |= z << (4 * (g % 2));
                let sf = s.to_f32();
                for (j, &x) in vals.iter().enumerate() {
                    let c = g * group + j;
                    packed[r * inp / 2 + c / 2] |= quantize_value(x, sf, z) << (4 * (c % 2));
                }
            }
        }
        Ok(Self {
            out,
            inp,
            group,
            packed,
            scales,
            zeros,
        })
    }

    /// Checks that the fields are consistent (sizes, group); every constructor here
    /// produces valid weights, this guards hand-built ones.
    pub fn validate(&self, what: &str) -> Result<(), QuantError> {
        check_group(what, self.inp, self.group)?;
        let groups = self.inp / self.group;
        for (name, got, want) in [
            ("packed", self.packed.len(), self.out * self.inp / 2),
            ("scales", self.scales.len(), self.out * groups),
            ("zeros", self.zeros.len(), self.out * groups.div_ceil(2)),
        ] {
            if got != want {
                return Err(shape_err(
                    &format!("{what}.{name}"),
                    format!(
                        "{got} bytes/values, expected {want} for {}x{} with group {}",
                        self.out, self.inp, self.group
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The 4-bit value at `(r, c)`.
    #[inline]
    pub fn q(&self, r: usize, c: usize) -> u8 {
        (self.packed[r * self.inp / 2 + c / 2] >> (4 * (c % 2))) & 15
    }

    /// The zero point of group `g` of row `r`.
    #[inline]
    pub fn zero(&self, r: usize, g: usize) -> u8 {
        let zrow = (self.inp / self.group).div_ceil(2);
        (self.zeros[r * zrow + g / 2] >> (4 * (g % 2))) & 15
    }

    /// Writes row `r` dequantized into `dst` (`inp` values).
    #[inline]
    pub fn dequantize_row(&self, r: usize, dst: &mut [f32]) {
        let groups = self.inp / self.group;
        let half = self.group / 2;
        let bytes = &self.packed[r * self.inp / 2..(r + 1) * self.inp / 2];
        for g in 0..groups {
            let s = self.scales[r * groups + g].to_f32();
            let z = self.zero(r, g) as f32;
            // The group's 16 possible values, computed once: `(q − z)·s` exactly.
            let lut: [f32; 16] = std::array::from_fn(|q| (q as f32 - z) * s);
            let src = &bytes[g * half..(g + 1) * half];
            let out = &mut dst[g * self.group..(g + 1) * self.group];
            for (pair, &b) in out.chunks_exact_mut(2).zip(src) {
                pair[0] = lut[(b & 15) as usize];
                pair[1] = lut[(b >> 4) as usize];
            }
        }
    }

    /// The whole matrix dequantized, row-major `[out, inp]`.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.out * self.inp];
        for (r, row) in w.chunks_exact_mut(self.inp).enumerate() {
            self.dequantize_row(r, row);
        }
        w
    }

    /// Bytes held (values, scales, zero points).
    pub fn bytes(&self) -> usize {
        self.packed.len() + 2 * self.scales.len() + self.zeros.len()
    }

    /// Reorders output rows: row `i` of the result is row `perm[i]` of `self`.
    pub fn permute_rows(&self, perm: &[usize]) -> Self {
        let (pb, sb) = (self.inp / 2, self.inp / self.group);
        let zb = sb.div_ceil(2);
        let mut out = self.clone();
        for (i, &p) in perm.iter().enumerate() {
            out.packed[i * pb..(i + 1) * pb].copy_from_slice(&self.packed[p * pb..(p + 1) * pb]);
            out.scales[i * sb..(i + 1) * sb].copy_from_slice(&self.scales[p * sb..(p + 1) * sb]);
            out.zeros[i * zb..(i + 1) * zb].copy_from_slice(&self.zeros[p * zb..(p + 1) * zb]);
        }
        out
    }

    /// Converts to AutoAWQ's GEMM layout (`out` must be a multiple of 8).
    pub fn to_awq(&self) -> Result<AwqGemm, QuantError> {
        if !self.out.is_multiple_of(8) {
            return Err(shape_err(
                "qweight",
                format!("{} output channels: AutoAWQ packs 8 per word", self.out),
            ));
        }
        let (inp, out, groups) = (self.inp, self.out, self.inp / self.group);
        let words = out / 8;
        let mut qweight = vec![0i32; inp * words];
        for i in 0..inp {
            for c in 0..words {
                let mut word = 0u32;
                for (k, &o) in AWQ_ORDER.iter().enumerate() {
                    word |= (self.q(8 * c + o, i) as u32) << (4 * k);
                }
                qweight[i * words + c] = word as i32;
            }
        }
        let mut qzeros = vec![0i32; groups * words];
        let mut scales = vec![f16::ZERO; groups * out];
        for g in 0..groups {
            for c in 0..words {
                let mut word = 0u32;
                for (k, &o) in AWQ_ORDER.iter().enumerate() {
                    word |= (self.zero(8 * c + o, g) as u32) << (4 * k);
                }
                qzeros[g * words + c] = word as i32;
            }
            for o in 0..out {
                scales[g * out + o] = self.scales[o * groups + g];
            }
        }
        Ok(AwqGemm {
            qweight,
            qzeros,
            scales,
            inp,
            out,
            group: self.group,
        })
    }

    /// Reads AutoAWQ's GEMM layout, checking every shape.
    pub fn from_awq(what: &str, a: &AwqGemm) -> Result<Self, QuantError> {
        let (inp, out, group) = (a.inp, a.out, a.group);
        if out == 0 || inp == 0 || out % 8 != 0 {
            return Err(shape_err(
                &format!("{what}.qweight"),
                format!("{inp} inputs x {out} outputs: outputs must be a non-zero multiple of 8"),
            ));
        }
        check_group(what, inp, group)?;
        let (words, groups) = (out / 8, inp / group);
        for (name, got, want) in [
            ("qweight", a.qweight.len(), inp * words),
            ("qzeros", a.qzeros.len(), groups * words),
            ("scales", a.scales.len(), groups * out),
        ] {
            if got != want {
                return Err(shape_err(
                    &format!("{what}.{name}"),
                    format!("{got} values, expected {want} for {inp} inputs, {out} outputs, group {group}"),
                ));
            }
        }
        if let Some(i) = a.scales.iter().position(|s| !s.to_f32().is_finite()) {
            return Err(shape_err(
                &format!("{what}.scales"),
                format!("non-finite scale at index {i}"),
            ));
        }
        let zrow = groups.div_ceil(2);
        let mut w = Self {
            out,
            inp,
            group,
            packed: vec![0u8; out * inp / 2],
            scales: vec![f16::ZERO; out * groups],
            zeros: vec![0u8; out * zrow],
        };
        for i in 0..inp {
            for c in 0..words {
                let word = a.qweight[i * words + c] as u32;
                for (k, &o) in AWQ_ORDER.iter().enumerate() {
                    let q = ((word >> (4 * k)) & 15) as u8;
                    let r = 8 * c + o;
                    w.packed[r * inp / 2 + i / 2] |= q << (4 * (i % 2));
                }
            }
        }
        for g in 0..groups {
            for c in 0..words {
                let word = a.qzeros[g * words + c] as u32;
                for (k, &o) in AWQ_ORDER.iter().enumerate() {
                    let z = ((word >> (4 * k)) & 15) as u8;
                    w.zeros[(8 * c + o) * zrow + g / 2] |= z << (4 * (g % 2));
                }
            }
            for o in 0..out {
                w.scales[o * groups + g] = a.scales[g * out + o];
            }
        }
        Ok(w)
    }
}

impl Int8Weight {
    /// Quantizes a row-major `[out, inp]` matrix: `s = max|w| / 127` per row (1 for an
    /// all-zero row), `q = round(w / s)` (half to even).
    pub fn quantize(what: &str, w: &[f32], out: usize, inp: usize) -> Result<Self, QuantError> {
        check_matrix(what, w, out, inp)?;
        let mut q = Vec::with_capacity(out * inp);
        let mut scales = Vec::with_capacity(out);
        for row in w.chunks_exact(inp) {
            let m = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            let s = if m > 0.0 { m / 127.0 } else { 1.0 };
            scales.push(s);
            q.extend(
                row.iter()
                    .map(|&x| (x / s).round_ties_even().clamp(-127.0, 127.0) as i8),
            );
        }
        Ok(Self {
            out,
            inp,
            q,
            scales,
        })
    }

    /// Writes row `r` dequantized into `dst`.
    #[inline]
    pub fn dequantize_row(&self, r: usize, dst: &mut [f32]) {
        let s = self.scales[r];
        for (d, &q) in dst
            .iter_mut()
            .zip(&self.q[r * self.inp..(r + 1) * self.inp])
        {
            *d = q as f32 * s;
        }
    }

    /// The whole matrix dequantized, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.out * self.inp];
        for (r, row) in w.chunks_exact_mut(self.inp).enumerate() {
            self.dequantize_row(r, row);
        }
        w
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * self.scales.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(out: usize, inp: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..out * inp)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
            })
            .collect()
    }

    #[test]
    fn int4_error_is_bounded_by_half_a_step() {
        let (out, inp) = (16, 128);
        let w = matrix(out, inp, 1);
        for g in [32, 64, 128] {
            let q = Int4Weight::quantize("w", &w, out, inp, g).unwrap();
            let d = q.dequantize();
            for r in 0..out {
                for c in 0..inp {
                    let s = q.scales[r * (inp / g) + c / g].to_f32();
                    let e = (d[r * inp + c] - w[r * inp + c]).abs();
                    assert!(e <= 0.5 * s + 1e-6, "g{g} ({r},{c}): {e} > {s}/2");
                }
            }
        }
    }

    #[test]
    fn awq_layout_round_trips() {
        let (out, inp) = (24, 64);
        let q = Int4Weight::quantize("w", &matrix(out, inp, 2), out, inp, 32).unwrap();
        let a = q.to_awq().unwrap();
        assert_eq!(a.qweight.len(), inp * out / 8);
        assert_eq!(Int4Weight::from_awq("w", &a).unwrap(), q);
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let w = matrix(8, 96, 3);
        assert!(matches!(
            Int4Weight::quantize("layers.0.q", &w, 8, 96, 64),
            Err(QuantError::Group { .. })
        ));
        let a = Int4Weight::quantize("w", &w, 8, 96, 32)
            .unwrap()
            .to_awq()
            .unwrap();
        let mut bad = a.clone();
        bad.qzeros.pop();
        let e = Int4Weight::from_awq("layers.3.q", &bad).unwrap_err();
        assert!(e.to_string().contains("layers.3.q.qzeros"), "{e}");
        let mut bad = a.clone();
        bad.group = 64;
        assert!(Int4Weight::from_awq("w", &bad).is_err());
        let mut bad = a;
        bad.out = 12;
        assert!(Int4Weight::from_awq("w", &bad).is_err());
        let mut nan = w.clone();
        nan[5] = f32::NAN;
        assert!(Int4Weight::quantize("w", &nan, 8, 96, 32).is_err());
        assert!(Int8Weight::quantize("w", &nan, 8, 96).is_err());
    }
}
