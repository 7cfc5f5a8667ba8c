//! The deep tier on the device: SmolLM2-135M logits against the CPU in f32, f16 and
//! INT4, prefill with and without the cached prefix, the packed gray-zone batch; and
//! single quantized layers (f16, INT8, AWQ-INT4 storage) against the CPU kernel.

use crate::{max_abs_diff, median, ms, rel_l2, Opts, Report};
use candle_core::{Device, Tensor};
use risk_gpu::llm::{smollm2_gguf, KvCache, Llama};
use risk_gpu::quant::{Precision, QLinear, QuantPlan};
use std::time::Instant;

/// Deterministic token ids spread over the vocabulary (prefill cost does not depend on
/// which tokens they are; the comparisons need only the same ones on both sides).
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 100 + (i.wrapping_mul(7919).wrapping_add(seed * 104_729)) % 40_000)
        .collect()
}

fn host(t: &Tensor) -> Result<Vec<f32>, String> {
    t.flatten_all()
        .and_then(|t| t.to_dtype(candle_core::DType::F32))
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| e.to_string())
}

fn logits(m: &Llama, toks: &[u32]) -> Result<Vec<f32>, String> {
    let l = m
        .forward(toks, &mut KvCache::default())
        .map_err(|e| e.to_string())?;
    host(&l)
}

/// Relative max error of `other` against `reference`: max |Δ| / max |reference|.
fn rel_max(reference: &[f32], other: &[f32]) -> f64 {
    let (d, m) = max_abs_diff(reference, other);
    d / m.max(f64::MIN_POSITIVE)
}

/// The `llm` step.
pub fn llm(r: &mut Report, o: &Opts) {
    if let Err(e) = llm_inner(r, o) {
        r.fail("run", &e);
    }
}

fn llm_inner(r: &mut Report, o: &Opts) -> Result<(), String> {
    let path = smollm2_gguf()?;
    let dev = o.device.candle().map_err(|e| e.to_string())?;
    let cpu = Llama::from_gguf(&path, &Device::Cpu).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let gpu = if dev.is_cpu() {
        cpu.clone()
    } else {
        Llama::from_gguf(&path, &dev).map_err(|e| e.to_string())?
    };
    r.figure(
        "load_f32",
        ms(t.elapsed()),
        "ms",
        "GGUF read, dequantized to f32, on the device",
    );
    let layers = cpu.config().layers;
    let (np, ns) = if o.quick { (48, 16) } else { (500, 100) };
    let all = tokens(np + ns, 1);
    let (prefix, suffix) = all.split_at(np);
    let reference = logits(&cpu, &all)?;

    // Cold: the first forward after loading (kernel modules, handles, allocations).
    let t = Instant::now();
    let first = logits(&gpu, &all)?;
    r.figure(
        "cold_prefill_f32",
        ms(t.elapsed()),
        "ms",
        &format!("first forward of {} tokens after load", all.len()),
    );
    r.check(
        "logits_f32",
        rel_max(&reference, &first),
        1e-3,
        "last-token logits, max |Δ| / max |CPU f32|",
    );

    let plans = [
        ("f32", None),
        ("f16", Some(Precision::F16)),
        ("int4_g64", Some(Precision::RtnInt4 { group: 64 })),
    ];
    for (name, p) in plans {
        let (m, cpu_ref) = match p {
            None => (gpu.clone(), reference.clone()),
            Some(p) => {
                let plan = QuantPlan::uniform(layers, p);
                let m = gpu.quantize(&plan).map_err(|e| e.to_string())?;
                // INT4 is compared with the same INT4 weights on the CPU (its own kernel);
                // f16 with the f32 reference (the half-precision GEMM is the difference).
                let cpu_ref = if matches!(p, Precision::F16) {
                    reference.clone()
                } else {
                    logits(&cpu.quantize(&plan).map_err(|e| e.to_string())?, &all)?
                };
                (m, cpu_ref)
            }
        };
        let (full, out) = median(o.reps(), || logits(&m, &all))?;
        r.check(
            &format!("logits_{name}"),
            rel_max(&cpu_ref, &out),
            1e-2,
            "max |Δ| / max |CPU|, warmed run",
        );
        let toks = all.len() as f64;
        r.figure(
            &format!("prefill_{name}_full"),
            toks / full.as_secs_f64(),
            "tok/s",
            &format!(
                "{} tokens from an empty cache ({:.2} ms)",
                all.len(),
                ms(full)
            ),
        );
        let mut cache = KvCache::default();
        m.forward(prefix, &mut cache).map_err(|e| e.to_string())?;
        let (cached, out) = median(o.reps(), || {
            let l = m
                .forward(suffix, &mut cache.clone())
                .map_err(|e| e.to_string())?;
            host(&l)
        })?;
        r.check(
            &format!("cached_prefix_{name}"),
            rel_max(&out_full(&m, &all)?, &out),
            1e-3,
            "suffix on the cached prefix vs the full forward, same device",
        );
        r.figure(&format!("prefill_{name}_cached"), ns as f64 / cached.as_secs_f64(), "tok/s", &format!("{ns} suffix tokens on a cached {np}-token prefix ({:.2} ms, {:.1}x faster than full)", ms(cached), full.as_secs_f64() / cached.as_secs_f64()));
    }

    // The gray-zone batch: 8 suffixes of varied length on one shared prefix, packed
    // into one forward vs one forward each.
    let mut cache = KvCache::default();
    gpu.forward(prefix, &mut cache).map_err(|e| e.to_string())?;
    let lens: Vec<usize> = (0..8)
        .map(|i| if o.quick { 6 + i } else { 40 + 10 * i })
        .collect();
    let seqs: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| tokens(n, 10 + i as u32))
        .collect();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let (packed, hp) = median(o.reps(), || {
        host(
            &gpu.forward_packed(&cache, &refs)
                .map_err(|e| e.to_string())?,
        )
    })?;
    let (single, h1) = median(o.reps(), || {
        let mut v = Vec::new();
        for s in &refs {
            v.extend(host(
                &gpu.forward_hidden(s, &mut cache.clone())
                    .map_err(|e| e.to_string())?,
            )?);
        }
        Ok(v)
    })?;
    r.check(
        "batch8_packed_vs_single",
        rel_max(&h1, &hp),
        1e-3,
        "final hidden states, packed vs one by one",
    );
    r.figure(
        "batch8_packed",
        ms(packed),
        "ms",
        &format!(
            "8 suffixes ({} tokens) packed on a {np}-token prefix",
            lens.iter().sum::<usize>()
        ),
    );
    r.figure(
        "batch8_single",
        ms(single),
        "ms",
        &format!(
            "the same one by one ({:.2}x the packed time)",
            single.as_secs_f64() / packed.as_secs_f64()
        ),
    );
    Ok(())
}

fn out_full(m: &Llama, all: &[u32]) -> Result<Vec<f32>, String> {
    logits(m, all)
}

/// A seeded weight matrix `[out, inp]` of small values with some larger outliers.
fn weights(out: usize, inp: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..out * inp)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            if i % 97 == 0 {
                u * 0.4
            } else {
                u * 0.05
            }
        })
        .collect()
}

/// The `quant` step: SmolLM2's MLP shapes (576→1536, 1536→576) at f16, INT8 and AWQ-INT4
/// storage (the AWQ format: 4-bit, group 64; its scaling is folded into the weights
/// before quantization, so the kernel is the RTN one), each against the CPU's forward of
/// the same quantized weights.
pub fn quant(r: &mut Report, o: &Opts) {
    if let Err(e) = quant_inner(r, o) {
        r.fail("run", &e);
    }
}

fn quant_inner(r: &mut Report, o: &Opts) -> Result<(), String> {
    let dev = o.device.candle().map_err(|e| e.to_string())?;
    let ce = |e: candle_core::Error| e.to_string();
    let ns: &[usize] = if o.quick { &[8, 64] } else { &[8, 512] };
    for (out, inp) in [(1536, 576), (576, 1536)] {
        let w = weights(out, inp, (out * 31 + inp) as u64);
        let wc = Tensor::from_vec(w, (out, inp), &Device::Cpu).map_err(ce)?;
        let wd = wc.to_device(&dev).map_err(ce)?;
        let mut f16_time = Vec::new();
        for p in [
            Precision::F16,
            Precision::Int8,
            Precision::AwqInt4 { group: 64 },
        ] {
            let qc = QLinear::quantize("w", &wc, p).map_err(|e| e.to_string())?;
            let qd = QLinear::quantize("w", &wd, p).map_err(|e| e.to_string())?;
            for (k, &n) in ns.iter().enumerate() {
                let x = Tensor::from_vec(weights(n, inp, 7 + n as u64), (n, inp), &Device::Cpu)
                    .map_err(ce)?;
                let xd = x.to_device(&dev).map_err(ce)?;
                let reference = host(&qc.forward(&x).map_err(ce)?)?;
                let run = || -> Result<Vec<f32>, String> {
                    let y = if dev.is_cpu() {
                        qd.forward_device_path(&xd)
                    } else {
                        qd.forward(&xd)
                    };
                    host(&y.map_err(ce)?)
                };
                let t = Instant::now();
                let cold = run()?;
                let cold_t = t.elapsed();
                let (warm, y) = median(o.reps(), run)?;
                let name = format!("{p}_{out}x{inp}_n{n}");
                r.check(
                    &name,
                    rel_l2(&reference, &y).max(rel_l2(&reference, &cold)),
                    1e-2,
                    "‖Δ‖/‖CPU‖ of y = x·Wᵀ, same quantized weights",
                );
                let gflops = 2.0 * (n * out * inp) as f64 / warm.as_secs_f64() / 1e9;
                let vs = match p {
                    Precision::F16 => {
                        f16_time.push(warm);
                        String::new()
                    }
                    _ => format!(
                        ", {:.2}x the f16 time",
                        warm.as_secs_f64() / f16_time[k].as_secs_f64()
                    ),
                };
                r.figure(
                    &name,
                    ms(warm) * 1e3,
                    "us",
                    &format!(
                        "{gflops:.1} GFLOP/s (dequantize + GEMM){vs}; cold {:.1} us",
                        ms(cold_t) * 1e3
                    ),
                );
            }
        }
    }
    Ok(())
}
