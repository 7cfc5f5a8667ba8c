//! [`QLinear`]: a weight matrix `[out, inp]` stored at any [`Precision`], and `y = x·Wᵀ`.
//!
//! CPU (the default): weights stay quantized in memory; the forward dequantizes the
//! matrix into a transient f32 buffer (all cores; INT4 through a 16-entry table per
//! group, f16/bf16 with the CPU's conversion instructions) and multiplies with candle's
//! f32 GEMM. The buffer lives for one layer call, so a quantized model never holds its
//! f32 copy. A tiled variant (dequantize a cache-sized tile of rows, GEMM, next tile) was
//! measured slower here — each GEMM call has a fixed cost — and is not used; see
//! BENCHMARKS.md [5]. [`QLinear::forward_naive`] is the straightforward baseline
//! (single-threaded scalar dequantization, then GEMM) the kernel is measured against.
//!
//! Other devices (CUDA with `--features cuda`): the quantized tensors live on the device
//! and are dequantized there to `f16` with tensor ops (nibbles split by a division by
//! 16), then one `f16` GEMM. The same code runs on the CPU in tests
//! ([`QLinear::forward_device_path`]), which is how it is checked without a GPU.

use super::error::QuantError;
use super::format::{Int4Weight, Int8Weight};
use super::plan::Precision;
use candle_core::{DType, Device, Tensor};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use std::sync::Arc;

#[derive(Debug)]
enum Host {
    F32(Tensor),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Int8(Int8Weight),
    Int4(Int4Weight),
}

/// The same weights on a non-CPU device.
#[derive(Debug)]
enum OnDevice {
    /// `f16`/`bf16` matrix.
    Half(Tensor),
    /// `q + 128` as `u8` `[out, inp]`, scales `f32` `[out]`.
    Int8 { q: Tensor, scales: Tensor },
    /// Packed nibbles `u8` `[out, inp/2]`, scales `f16` and zeros `u8` `[out, groups]`.
    Int4 {
        packed: Tensor,
        scales: Tensor,
        zeros: Tensor,
        group: usize,
    },
}

/// A linear layer's weight at some precision (cheap to clone: shared).
#[derive(Debug, Clone)]
pub struct QLinear {
    precision: Precision,
    out: usize,
    inp: usize,
    host: Arc<Host>,
    on_device: Option<Arc<OnDevice>>,
    device: Device,
    /// Set by [`QLinear::with_dynamic_int8`]: the integer GEMM's widened weights.
    a8: Option<Arc<super::int8_gemm::WideInt8>>,
}

fn cerr(e: candle_core::Error) -> QuantError {
    QuantError::Tensor(e.to_string())
}

impl QLinear {
    /// Wraps an `f32` matrix `[out, inp]` (no copy).
    pub fn f32(w: Tensor) -> Result<Self, QuantError> {
        let (out, inp) = w.dims2().map_err(cerr)?;
        let device = w.device().clone();
        let w = w.to_dtype(DType::F32).map_err(cerr)?;
        Ok(Self {
            precision: Precision::F32,
            out,
            inp,
            host: Arc::new(Host::F32(w)),
            on_device: None,
            a8: None,
            device,
        })
    }

    /// Quantizes `w` (`f32`, `[out, inp]`) to `precision`; `name` appears in errors.
    /// For [`Precision::AwqInt4`] the AWQ scaling must already be folded into `w`
    /// (see [`crate::quant::awq`]): the quantizer itself is round-to-nearest.
    pub fn quantize(name: &str, w: &Tensor, precision: Precision) -> Result<Self, QuantError> {
        let (out, inp) = w.dims2().map_err(cerr)?;
        let device = w.device().clone();
        if precision == Precision::F32 {
            return Self::f32(w.clone());
        }
        let v: Vec<f32> = w
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(cerr)?;
        let host = match precision {
            Precision::F32 => unreachable!("handled above"),
            Precision::F16 => Host::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            Precision::Bf16 => Host::Bf16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
            Precision::Int8 => Host::Int8(Int8Weight::quantize(name, &v, out, inp)?),
            Precision::RtnInt4 { group } | Precision::AwqInt4 { group } => {
                Host::Int4(Int4Weight::quantize(name, &v, out, inp, group)?)
            }
        };
        Self::from_host(precision, out, inp, host, &device)
    }

    /// Wraps already quantized INT4 weights (e.g. read from an AutoAWQ checkpoint).
    pub fn int4(w: Int4Weight, precision: Precision, device: &Device) -> Result<Self, QuantError> {
        w.validate("int4 weight")?;
        if precision.group() != Some(w.group) {
            return Err(QuantError::Shape {
                tensor: "int4 weight".into(),
                reason: format!("group {} does not match precision {precision}", w.group),
            });
        }
        Self::from_host(precision, w.out, w.inp, Host::Int4(w), device)
    }

    fn from_host(
        precision: Precision,
        out: usize,
        inp: usize,
        host: Host,
        device: &Device,
    ) -> Result<Self, QuantError> {
        let on_device = if device.is_cpu() {
            None
        } else {
            Some(Arc::new(upload(&host, out, inp, device).map_err(cerr)?))
        };
        Ok(Self {
            precision,
            out,
            inp,
            host: Arc::new(host),
            on_device,
            device: device.clone(),
            a8: None,
        })
    }

    /// Storage precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// `(out, inp)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.out, self.inp)
    }

    /// The INT4 weights, if stored as INT4.
    pub fn as_int4(&self) -> Option<&Int4Weight> {
        match &*self.host {
            Host::Int4(w) => Some(w),
            _ => None,
        }
    }

    /// Bytes the weights occupy (scales and zero points included).
    pub fn bytes(&self) -> usize {
        match &*self.host {
            Host::F32(_) => 4 * self.out * self.inp,
            Host::F16(v) => 2 * v.len(),
            Host::Bf16(v) => 2 * v.len(),
            Host::Int8(w) => w.bytes(),
            Host::Int4(w) => w.bytes(),
        }
    }

    /// Dequantizes rows `r0..r0 + dst.len() / inp` into `dst` (any precision).
    fn rows_into(&self, r0: usize, dst: &mut [f32]) -> Result<(), QuantError> {
        let inp = self.inp;
        let n = dst.len();
        match &*self.host {
            Host::F32(t) => {
                let v: Vec<f32> = t
                    .narrow(0, r0, n / inp)
                    .and_then(|t| t.flatten_all())
                    .and_then(|t| t.to_vec1())
                    .map_err(cerr)?;
                dst.copy_from_slice(&v);
            }
            Host::F16(v) => dst
                .par_chunks_mut(inp)
                .zip(v[r0 * inp..r0 * inp + n].par_chunks(inp))
                .for_each(|(d, s)| s.convert_to_f32_slice(d)),
            Host::Bf16(v) => dst
                .par_chunks_mut(inp)
                .zip(v[r0 * inp..r0 * inp + n].par_chunks(inp))
                .for_each(|(d, s)| s.convert_to_f32_slice(d)),
            Host::Int8(w) => dst
                .par_chunks_mut(inp)
                .enumerate()
                .for_each(|(i, row)| w.dequantize_row(r0 + i, row)),
            Host::Int4(w) => dst
                .par_chunks_mut(inp)
                .enumerate()
                .for_each(|(i, row)| w.dequantize_row(r0 + i, row)),
        }
        Ok(())
    }

    /// The whole matrix as `f32` `[out, inp]` on the layer's device.
    pub fn dequantize(&self) -> Result<Tensor, QuantError> {
        if let Host::F32(t) = &*self.host {
            return Ok(t.clone());
        }
        let mut buf = vec![0f32; self.out * self.inp];
        self.rows_into(0, &mut buf)?;
        Tensor::from_vec(buf, (self.out, self.inp), &self.device).map_err(cerr)
    }

    /// Rows `ids` as `f32` `[ids, inp]` (embedding lookups, head rows).
    pub fn rows(&self, ids: &[u32]) -> Result<Tensor, QuantError> {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.out) {
            return Err(QuantError::Shape {
                tensor: "rows".into(),
                reason: format!("row {bad} of {}", self.out),
            });
        }
        if let Host::F32(t) = &*self.host {
            let idx = Tensor::new(ids, &self.device).map_err(cerr)?;
            return t.index_select(&idx, 0).map_err(cerr);
        }
        let mut buf = vec![0f32; ids.len() * self.inp];
        for (row, &i) in buf.chunks_exact_mut(self.inp).zip(ids) {
            self.rows_into(i as usize, row)?;
        }
        Tensor::from_vec(buf, (ids.len(), self.inp), &self.device).map_err(cerr)
    }

    /// An INT8 layer on the CPU that also quantizes its input per row and multiplies in
    /// integers ([`super::int8_gemm`]): faster than f32, at the cost of activation
    /// rounding. Other precisions and devices are returned unchanged.
    pub fn with_dynamic_int8(mut self) -> Self {
        if let (Host::Int8(w), None, Device::Cpu) = (&*self.host, &self.on_device, &self.device) {
            self.a8 = Some(Arc::new(super::int8_gemm::WideInt8::new(w)));
        }
        self
    }

    /// Whether [`forward`](Self::forward) multiplies in integers.
    pub fn is_dynamic_int8(&self) -> bool {
        self.a8.is_some()
    }

    /// `y = x·Wᵀ` for `x` of shape `[n, inp]` (`f32`).
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if let Some(w) = &self.a8 {
            let (n, _) = x.dims2()?;
            let v = x.flatten_all()?.to_vec1::<f32>()?;
            let y = super::int8_gemm::matmul(&v, n, w, true);
            return Tensor::from_vec(y, (n, self.out), &self.device);
        }
        match (&*self.host, &self.on_device) {
            (Host::F32(w), _) => x.matmul(&w.t()?),
            (_, Some(_)) => self.forward_device_path(x),
            _ => {
                let w = self
                    .dequantize()
                    .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
                x.matmul(&w.t()?)
            }
        }
    }

    /// Baseline for benchmarks and tests: single-threaded scalar dequantization of the
    /// whole matrix (`(q − z)·s` per value), then one GEMM.
    pub fn forward_naive(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (out, inp) = (self.out, self.inp);
        let v: Vec<f32> = match &*self.host {
            Host::F32(w) => return x.matmul(&w.t()?),
            Host::F16(v) => v.iter().map(|h| h.to_f32()).collect(),
            Host::Bf16(v) => v.iter().map(|h| h.to_f32()).collect(),
            Host::Int8(w) => (0..out * inp)
                .map(|i| w.q[i] as f32 * w.scales[i / inp])
                .collect(),
            Host::Int4(w) => (0..out * inp)
                .map(|i| {
                    let (r, c) = (i / inp, i % inp);
                    let g = c / w.group;
                    (w.q(r, c) as f32 - w.zero(r, g) as f32)
                        * w.scales[r * (inp / w.group) + g].to_f32()
                })
                .collect(),
        };
        let w = Tensor::from_vec(v, (out, inp), &self.device)?;
        x.matmul(&w.t()?)
    }

    /// The device path (dequantize with tensor ops on the weights' device, then GEMM in
    /// `f16` on CUDA or `f32` on the CPU). Used for every non-CPU device; public so that
    /// it can be checked against the CPU kernel without a GPU.
    pub fn forward_device_path(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let owned;
        let dev = match &self.on_device {
            Some(d) => d.as_ref(),
            None => {
                owned = upload(&self.host, self.out, self.inp, x.device())?;
                &owned
            }
        };
        let dt = if x.device().is_cuda() {
            DType::F16
        } else {
            DType::F32
        };
        let w = dequantize_on_device(dev, self.out, self.inp, dt)?;
        x.to_dtype(dt)?.matmul(&w.t()?)?.to_dtype(x.dtype())
    }
}

/// Copies host weights to `device` in the [`OnDevice`] layout.
fn upload(host: &Host, out: usize, inp: usize, device: &Device) -> candle_core::Result<OnDevice> {
    Ok(match host {
        Host::F32(t) => OnDevice::Half(t.to_device(device)?),
        Host::F16(v) => OnDevice::Half(Tensor::from_slice(v, (out, inp), device)?),
        Host::Bf16(v) => OnDevice::Half(Tensor::from_slice(v, (out, inp), device)?),
        Host::Int8(w) => {
            let q: Vec<u8> = w.q.iter().map(|&q| (q as i16 + 128) as u8).collect();
            OnDevice::Int8 {
                q: Tensor::from_vec(q, (out, inp), device)?,
                scales: Tensor::from_slice(&w.scales, out, device)?,
            }
        }
        Host::Int4(w) => {
            let groups = inp / w.group;
            let zeros: Vec<u8> = (0..out)
                .flat_map(|r| (0..groups).map(move |g| (r, g)))
                .map(|(r, g)| w.zero(r, g))
                .collect();
            OnDevice::Int4 {
                packed: Tensor::from_slice(&w.packed, (out, inp / 2), device)?,
                scales: Tensor::from_slice(&w.scales, (out, groups), device)?,
                zeros: Tensor::from_vec(zeros, (out, groups), device)?,
                group: w.group,
            }
        }
    })
}

fn dequantize_on_device(
    d: &OnDevice,
    out: usize,
    inp: usize,
    dt: DType,
) -> candle_core::Result<Tensor> {
    match d {
        OnDevice::Half(t) => t.to_dtype(dt),
        OnDevice::Int8 { q, scales } => (q.to_dtype(DType::F32)? - 128.0)?
            .broadcast_mul(&scales.unsqueeze(1)?)?
            .to_dtype(dt),
        OnDevice::Int4 {
            packed,
            scales,
            zeros,
            group,
        } => {
            let p = packed.to_dtype(DType::F32)?;
            let hi = (&p / 16.0)?.floor()?;
            let lo = (p - (&hi * 16.0)?)?;
            let groups = inp / group;
            let q = Tensor::stack(&[lo, hi], 2)?.reshape((out, groups, *group))?;
            let z = zeros.to_dtype(DType::F32)?.unsqueeze(2)?;
            let s = scales.to_dtype(DType::F32)?.unsqueeze(2)?;
            q.broadcast_sub(&z)?
                .broadcast_mul(&s)?
                .reshape((out, inp))?
                .to_dtype(dt)
        }
    }
}
