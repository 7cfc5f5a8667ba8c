//! `y = x·Wᵀ` in integer arithmetic: INT8 weights (per output channel scales) and
//! activations quantized per row on the fly (symmetric, `absmax / 127`), products summed
//! exactly in `i32`, then scaled back: `y[t, o] = sx[t] · sw[o] · Σₖ qx[t, k] · qw[o, k]`.
//! This is what "dynamic INT8" means in ONNX Runtime and PyTorch; it is what makes an INT8
//! layer *faster* than f32, not only smaller ([`QLinear`](super::linear::QLinear)'s default INT8
//! path dequantizes the weights and runs the f32 GEMM).
//!
//! Hand-written because candle has no integer GEMM (its GGML Q8 kernels quantize in blocks
//! of 32 and are tuned for one token at a time). Both operands are widened to `i16` once
//! (weights at load, activations per call), so the AVX2 kernel is `vpmaddwd` (16 exact
//! multiply-adds into 8 `i32` lanes) over a 4-token × 2-channel register tile; the scalar
//! kernel computes the same integers, so both give bit-identical results.

#![allow(unsafe_code)]

use super::format::Int8Weight;
use rayon::prelude::*;

/// Input width is padded to a multiple of this (zeros), the AVX2 step.
const STEP: usize = 16;
/// Tokens per register tile.
const TM: usize = 4;
/// Output channels per parallel block (its widened weights stay in L2).
const BLOCK: usize = 64;

/// INT8 weights widened to `i16`, rows padded to a multiple of [`STEP`].
#[derive(Debug)]
pub struct WideInt8 {
    w: Vec<i16>,
    scales: Vec<f32>,
    out: usize,
    inp: usize,
    pad: usize,
}

impl WideInt8 {
    /// Widens `w` (2 bytes per weight: half of f32, twice INT8).
    pub fn new(w: &Int8Weight) -> Self {
        let pad = w.inp.div_ceil(STEP) * STEP;
        let mut wide = vec![0i16; w.out * pad];
        for (dst, src) in wide.chunks_exact_mut(pad).zip(w.q.chunks_exact(w.inp)) {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = *s as i16;
            }
        }
        Self {
            w: wide,
            scales: w.scales.clone(),
            out: w.out,
            inp: w.inp,
            pad,
        }
    }

    /// Output channels.
    pub fn out(&self) -> usize {
        self.out
    }
}

/// Quantizes `n` rows of `inp` floats to `i16` holding INT8 values (rows padded to
/// `pad`, row count padded to a multiple of [`TM`] with zero rows); returns the scales.
fn quantize_rows(x: &[f32], n: usize, inp: usize, pad: usize) -> (Vec<i16>, Vec<f32>) {
    let rows = n.div_ceil(TM) * TM;
    let mut q = vec![0i16; rows * pad];
    let mut s = vec![0f32; rows];
    for (t, row) in x.chunks_exact(inp).enumerate().take(n) {
        if row.iter().any(|v| !v.is_finite()) {
            // f32 would propagate it: keep it out of the integers, let the scale carry NaN.
            s[t] = f32::NAN;
            continue;
        }
        let m = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        if m == 0.0 {
            continue;
        }
        let scale = m / 127.0;
        let inv = 1.0 / scale;
        s[t] = scale;
        for (d, v) in q[t * pad..t * pad + inp].iter_mut().zip(row) {
            *d = (v * inv).round().clamp(-127.0, 127.0) as i16;
        }
    }
    (q, s)
}

/// Which kernel [`matmul`] uses on this CPU.
pub fn kernel() -> &'static str {
    if avx2() {
        "avx2-int8"
    } else {
        "scalar"
    }
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `y` (`n × out`, row-major) = `x` (`n × inp`) · `Wᵀ`. `simd = false` forces the scalar
/// kernel (tests compare the two).
pub fn matmul(x: &[f32], n: usize, w: &WideInt8, simd: bool) -> Vec<f32> {
    assert_eq!(x.len(), n * w.inp, "x is n × inp");
    let (qx, sx) = quantize_rows(x, n, w.inp, w.pad);
    let rows = sx.len();
    let simd = simd && avx2();
    // Rows are split into one chunk per thread (at most 64 rows, a multiple of the
    // tile): each chunk writes its own rows of `y`, and inside it every block of output
    // channels (its widened weights stay in L1/L2) is used by all of the chunk's tiles.
    let threads = rayon::current_num_threads().max(1);
    let per = rows.div_ceil(threads).div_ceil(TM).clamp(1, 64 / TM) * TM;
    let mut y = vec![0f32; rows * w.out];
    y.par_chunks_mut(per * w.out)
        .enumerate()
        .for_each(|(c, ychunk)| {
            let r0 = c * per;
            let nr = ychunk.len() / w.out;
            for o0 in (0..w.out).step_by(BLOCK) {
                let o1 = (o0 + BLOCK).min(w.out);
                for t0 in (0..nr).step_by(TM) {
                    let xr = |i: usize| &qx[(r0 + t0 + i) * w.pad..][..w.pad];
                    let mut o = o0;
                    while o < o1 {
                        let pair = (o1 - o).min(2);
                        let wr = |j: usize| &w.w[(o + j.min(pair - 1)) * w.pad..][..w.pad];
                        let mut acc = [[0i32; 2]; TM];
                        if simd {
                            #[cfg(target_arch = "x86_64")]
                            // SAFETY: AVX2 was detected at run time (`avx2()`); every row
                            // slice is `pad` long, a multiple of 16 `i16`s, as the kernel reads.
                            unsafe {
                                tile_avx2([xr(0), xr(1), xr(2), xr(3)], [wr(0), wr(1)], &mut acc)
                            };
                        } else {
                            tile_scalar([xr(0), xr(1), xr(2), xr(3)], [wr(0), wr(1)], &mut acc);
                        }
                        for (i, a) in acc.iter().enumerate() {
                            let sx_i = sx[r0 + t0 + i];
                            let yrow = &mut ychunk[(t0 + i) * w.out..][..w.out];
                            for j in 0..pair {
                                yrow[o + j] = a[j] as f32 * sx_i * w.scales[o + j];
                            }
                        }
                        o += pair;
                    }
                }
            }
        });
    y.truncate(n * w.out);
    y
}

fn tile_scalar(x: [&[i16]; TM], w: [&[i16]; 2], acc: &mut [[i32; 2]; TM]) {
    for (i, xi) in x.iter().enumerate() {
        for (j, wj) in w.iter().enumerate() {
            acc[i][j] = xi.iter().zip(*wj).map(|(a, b)| *a as i32 * *b as i32).sum();
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2(x: [&[i16]; TM], w: [&[i16]; 2], acc: &mut [[i32; 2]; TM]) {
    use std::arch::x86_64::*;
    let len = w[0].len();
    let mut a = [[_mm256_setzero_si256(); 2]; TM];
    let mut k = 0;
    while k < len {
        // SAFETY: `k + 16 <= len` and every slice has `len` elements, so each unaligned
        // 32-byte load stays inside its slice; AVX2 is enabled for this function.
        unsafe {
            let w0 = _mm256_loadu_si256(w[0].as_ptr().add(k) as *const __m256i);
            let w1 = _mm256_loadu_si256(w[1].as_ptr().add(k) as *const __m256i);
            for i in 0..TM {
                let xv = _mm256_loadu_si256(x[i].as_ptr().add(k) as *const __m256i);
                a[i][0] = _mm256_add_epi32(a[i][0], _mm256_madd_epi16(xv, w0));
                a[i][1] = _mm256_add_epi32(a[i][1], _mm256_madd_epi16(xv, w1));
            }
        }
        k += STEP;
    }
    for i in 0..TM {
        for j in 0..2 {
            let v = a[i][j];
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
            acc[i][j] = _mm_cvtsi128_si32(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn simd_equals_scalar_and_approximates_f32() {
        let mut seed = 5;
        for (n, inp, out) in [(1, 16, 2), (5, 37, 3), (64, 384, 130), (7, 1536, 65)] {
            let wf: Vec<f32> = (0..out * inp).map(|_| lcg(&mut seed) * 0.1).collect();
            let x: Vec<f32> = (0..n * inp).map(|_| lcg(&mut seed) * 3.0).collect();
            let w = WideInt8::new(&Int8Weight::quantize("t", &wf, out, inp).unwrap());
            let a = matmul(&x, n, &w, true);
            let b = matmul(&x, n, &w, false);
            assert_eq!(a, b, "{n}×{inp}·{out}: kernel {}", kernel());
            let mut worst = 0f32;
            for t in 0..n {
                for o in 0..out {
                    let exact: f32 = (0..inp).map(|k| x[t * inp + k] * wf[o * inp + k]).sum();
                    let scale: f32 = (0..inp)
                        .map(|k| (x[t * inp + k] * wf[o * inp + k]).abs())
                        .sum();
                    worst = worst.max((a[t * out + o] - exact).abs() / scale.max(1e-6));
                }
            }
            assert!(worst < 0.02, "{n}×{inp}·{out}: relative error {worst}");
        }
        // A zero row stays zero; a NaN row is NaN, as in f32.
        let w = WideInt8::new(&Int8Weight::quantize("t", &[0.5; 32], 2, 16).unwrap());
        let mut x = vec![0f32; 32];
        x[16] = f32::NAN;
        let y = matmul(&x, 2, &w, true);
        assert_eq!(&y[..2], &[0.0, 0.0]);
        assert!(y[2].is_nan() && y[3].is_nan());
    }
}
