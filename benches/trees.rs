//! Fast tier: native XGBoost vs ONNX Runtime on the committed model, same rows, same run.

use criterion::{black_box, Criterion, Throughput};
use risk_core::synth::schema;
use risk_core::{Scorer, Transaction};
use risk_gpu::onnx::{OnnxConfig, OnnxScorer};
use risk_gpu::trees::XgbModel;
use std::path::Path;
use std::time::Instant;

fn models() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models")
}

fn rows() -> (usize, Vec<f32>) {
    let bytes = std::fs::read(models().join("xgb_ref_features.f32")).unwrap();
    let x: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (18, x)
}

fn runtime() -> std::path::PathBuf {
    std::env::var_os("ORT_DYLIB_PATH")
        .map(Into::into)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ort/libonnxruntime.so.1.31.1")
        })
}

/// p50 and p99 of single calls, each timed with `Instant` (includes ~40 ns of timer
/// overhead on this VM, the same for both).
fn percentiles(mut f: impl FnMut(usize)) -> (f64, f64) {
    let mut t = Vec::with_capacity(100_000);
    for i in 0..100_000 {
        let s = Instant::now();
        f(i);
        t.push(s.elapsed().as_nanos() as f64);
    }
    t.sort_by(f64::total_cmp);
    (t[t.len() / 2], t[t.len() * 99 / 100])
}

pub fn native_vs_ort(c: &mut Criterion) {
    let model = XgbModel::from_file(models().join("xgb_fraud.json")).unwrap();
    let s = schema();
    let mut cfg = OnnxConfig::new(models().join("xgb_fraud.onnx"));
    cfg.runtime = Some(runtime());
    cfg.sessions = 1;
    let ort = OnnxScorer::load(&cfg, &s).unwrap();
    ort.warmup().unwrap();
    let (nf, x) = rows();
    let n = x.len() / nf;
    let row = |i: usize| &x[(i % n) * nf..(i % n + 1) * nf];
    let txns: Vec<Transaction> = (0..1024)
        .map(|i| {
            let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
            t.features.values_mut().copy_from_slice(row(i));
            t
        })
        .collect();

    let (np50, np99) = percentiles(|i| {
        black_box(model.predict(black_box(row(i))));
    });
    let (op50, op99) = percentiles(|i| {
        black_box(ort.score(black_box(&txns[i % txns.len()])).unwrap());
    });
    println!(
        "trees/one_row per-call: native p50 {np50:.0} ns p99 {np99:.0} ns; ort p50 {op50:.0} ns p99 {op99:.0} ns ({:.1}x at p50)",
        op50 / np50
    );

    let mut g = c.benchmark_group("trees");
    let mut i = 0;
    g.bench_function("native_one_row", |b| {
        b.iter(|| {
            i += 1;
            black_box(model.predict(black_box(row(i))))
        })
    });
    // Same run: the scalar traversal alone (no SIMD kernel).
    g.bench_function("native_one_row_scalar", |b| {
        b.iter(|| {
            i += 1;
            black_box(model.margin_scalar(black_box(row(i))))
        })
    });
    g.bench_function("ort_one_row", |b| {
        b.iter(|| {
            i += 1;
            black_box(ort.score(black_box(&txns[i % txns.len()])).unwrap())
        })
    });
    g.throughput(Throughput::Elements(64));
    let batch: Vec<&[f32]> = (0..64).map(row).collect();
    let mut out = vec![0f32; 64];
    g.bench_function("native_batch_64", |b| {
        b.iter(|| {
            model.predict_batch(black_box(&batch), &mut out);
            black_box(&out);
        })
    });
    let tb: Vec<&Transaction> = txns.iter().take(64).collect();
    let mut scores = Vec::new();
    g.bench_function("ort_batch_64", |b| {
        b.iter(|| {
            ort.score_batch(black_box(&tb), &mut scores).unwrap();
            black_box(&scores);
        })
    });
    g.throughput(Throughput::Elements(1));
    let mut phi = Vec::new();
    g.bench_function("tree_shap_one_row", |b| {
        b.iter(|| {
            i += 1;
            model.contributions(black_box(row(i)), &mut phi);
            black_box(&phi);
        })
    });
    g.finish();
}

/// Loading the committed model from its JSON and from its UBJSON file (the same trees,
/// `tools/xgb_ubjson.py`): parse, validate, build the padded layout and SHAP tables.
pub fn load(c: &mut Criterion) {
    let json = std::fs::read(models().join("xgb_fraud.json")).unwrap();
    let ubj = std::fs::read(models().join("xgb_fraud.ubj")).unwrap();
    let mut g = c.benchmark_group("trees_load");
    g.bench_function("json", |b| {
        b.iter(|| black_box(XgbModel::from_json(black_box(&json)).unwrap()))
    });
    g.bench_function("ubjson", |b| {
        b.iter(|| black_box(XgbModel::from_ubjson(black_box(&ubj)).unwrap()))
    });
    g.finish();
}
