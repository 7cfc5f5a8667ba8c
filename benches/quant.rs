//! Quantized linear layers on CPU (issue [5]), same run: for SmolLM2's MLP shape
//! (`1536 × 576`) and a transaction-suffix-sized and a prompt-sized input (75 and 256
//! tokens), the resident-f32 GEMM, our kernel (parallel table-driven dequantization into a
//! transient buffer, then GEMM) and the naive baseline (single-threaded scalar
//! dequantization, then the same GEMM), for INT4 (g64), INT8 and f16; and our
//! dequantization alone.

use candle_core::{Device, Tensor};
use criterion::{black_box, Criterion};
use risk_gpu::quant::{Precision, QLinear};
use std::time::Duration;

pub fn kernels(c: &mut Criterion) {
    let dev = Device::Cpu;
    let w = (Tensor::randn(0f32, 1.0, (1536, 576), &dev).unwrap() * 0.05).unwrap();
    let f32w = QLinear::f32(w.clone()).unwrap();
    let mut g = c.benchmark_group("quant");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for t in [75usize, 256] {
        let x = Tensor::randn(0f32, 1.0, (t, 576), &dev).unwrap();
        g.bench_function(format!("f32_resident_{t}"), |b| {
            b.iter(|| black_box(f32w.forward(&x).unwrap()))
        });
        for (name, p) in [
            ("int4_g64", Precision::RtnInt4 { group: 64 }),
            ("int8", Precision::Int8),
            ("f16", Precision::F16),
        ] {
            let q = QLinear::quantize("w", &w, p).unwrap();
            g.bench_function(format!("{name}_kernel_{t}"), |b| {
                b.iter(|| black_box(q.forward(&x).unwrap()))
            });
            g.bench_function(format!("{name}_naive_dequantize_then_gemm_{t}"), |b| {
                b.iter(|| black_box(q.forward_naive(&x).unwrap()))
            });
        }
    }
    for (name, p) in [
        ("int4_g64", Precision::RtnInt4 { group: 64 }),
        ("int8", Precision::Int8),
        ("f16", Precision::F16),
    ] {
        let q = QLinear::quantize("w", &w, p).unwrap();
        g.bench_function(format!("{name}_dequantize_only"), |b| {
            b.iter(|| black_box(q.dequantize().unwrap()))
        });
    }
    g.finish();
}

/// SmolLM2-135M forwards under different plans, same run: a 256-token prompt from scratch
/// and a 75-token transaction suffix on a cached 500-token prefix (the deep tier's shape).
pub fn prefill(c: &mut Criterion) {
    use criterion::SamplingMode;
    use risk_gpu::llm::{smollm2_gguf, KvCache, Llama};
    use risk_gpu::quant::QuantPlan;
    let gguf = smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let base = Llama::from_gguf(&gguf, &Device::Cpu).unwrap();
    let layers = base.config().layers;
    let tokens: Vec<u32> = (0..831u32).map(|i| 100 + (i * 7919) % 40_000).collect();
    let (prompt, rest) = tokens.split_at(256);
    let (prefix, suffix) = rest.split_at(500);
    let mut g = c.benchmark_group("quant");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    for (name, p) in [
        ("f32", None),
        ("f16", Some(Precision::F16)),
        ("int8", Some(Precision::Int8)),
        ("int4_g64", Some(Precision::RtnInt4 { group: 64 })),
    ] {
        let m = match p {
            None => base.clone(),
            Some(p) => base.quantize(&QuantPlan::uniform(layers, p)).unwrap(),
        };
        let mut cached = KvCache::default();
        m.forward_hidden(prefix, &mut cached).unwrap();
        g.bench_function(format!("smollm2_prefill_256_{name}"), |b| {
            b.iter(|| black_box(m.forward_hidden(prompt, &mut KvCache::default()).unwrap()))
        });
        g.bench_function(format!("smollm2_suffix_75_on_500_{name}"), |b| {
            b.iter(|| black_box(m.forward_hidden(suffix, &mut cached.clone()).unwrap()))
        });
    }
    g.finish();
}
