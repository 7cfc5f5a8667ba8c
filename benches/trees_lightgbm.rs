//! LightGBM text models on the native tree tier (`testdata/models/lgbm/`,
//! `tools/lightgbm_models.py`): one row, a batch of 1,024 and exact TreeSHAP per row, on
//! the reference rows (NaN, zeros, values on the models' thresholds). The peer, the
//! `lightgbm` library through its C API on the same models and rows in the same session,
//! is `tools/bench_lightgbm.py` (Python has no place in a criterion run).

use criterion::{black_box, Criterion, Throughput};
use risk_gpu::trees::XgbModel;
use std::path::Path;

fn lgbm() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/lgbm")
}

fn rows() -> (usize, Vec<f32>) {
    crate::reference_rows::read(&lgbm().join("reference.json"))
}

/// `lightgbm/{predict_one_row, predict_batch_1024, tree_shap_one_row}/{model}` for the
/// 80-tree 31-leaf model (leaf-wise, deeper than the padded layout: the plain walk) and
/// the 120-tree depth-6 one (the padded layout and its SIMD kernel).
pub fn predict(c: &mut Criterion) {
    let (nf, x) = rows();
    let n = x.len() / nf;
    let row = |i: usize| &x[(i % n) * nf..(i % n + 1) * nf];
    let mut g = c.benchmark_group("lightgbm");
    for name in ["binary_nan", "shap_120x6"] {
        let m = XgbModel::from_file(lgbm().join(format!("{name}.txt"))).unwrap();
        eprintln!("lightgbm/{name}: kernel {}", m.kernel());
        let mut i = 0usize;
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("predict_one_row/{name}"), |b| {
            b.iter(|| {
                i += 1;
                black_box(m.predict(black_box(row(i))))
            })
        });
        let batch: Vec<&[f32]> = (0..1024).map(row).collect();
        let mut out = vec![0f32; 1024];
        g.throughput(Throughput::Elements(1024));
        g.bench_function(format!("predict_batch_1024/{name}"), |b| {
            b.iter(|| {
                m.predict_batch(black_box(&batch), &mut out);
                black_box(&out);
            })
        });
        let mut phi = Vec::new();
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("tree_shap_one_row/{name}"), |b| {
            b.iter(|| {
                i += 1;
                m.contributions(black_box(row(i)), &mut phi);
                black_box(&phi);
            })
        });
    }
    g.finish();
}

/// What two of the tree tier's options add to a row on the same model and rows: LightGBM's
/// `zero_as_missing` (`binary_zero.txt`: the row copied with its zero range read as
/// missing before the trees, [`Ensemble::prepare`], against the whole prediction) and a
/// regression's `score_transform` (`regression.txt`'s output mapped to a score, against
/// the prediction without it).
///
/// [`Ensemble::prepare`]: risk_gpu::trees::ensemble::Ensemble::prepare
pub fn options(c: &mut Criterion) {
    use risk_gpu::trees::score_transform::ScoreTransform;
    let (nf, x) = rows();
    let n = x.len() / nf;
    let row = |i: usize| &x[(i % n) * nf..(i % n + 1) * nf];
    let mut g = c.benchmark_group("tree_options");
    let zero = XgbModel::from_file(lgbm().join("binary_zero.txt")).unwrap();
    assert!(!zero.ensemble().zero_as_missing.is_empty());
    let mut i = 0usize;
    g.bench_function("zero_as_missing/predict_one_row", |b| {
        b.iter(|| {
            i += 1;
            black_box(zero.predict(black_box(row(i))))
        })
    });
    // The option's whole work, alone (the trees themselves cost the same either way).
    let mut buf = Vec::new();
    g.bench_function("zero_as_missing/prepare_alone", |b| {
        b.iter(|| {
            i += 1;
            black_box(zero.ensemble().prepare(black_box(row(i)), &mut buf).len())
        })
    });
    let reg = XgbModel::from_file(lgbm().join("regression.txt")).unwrap();
    g.bench_function("score_transform/off_predict", |b| {
        b.iter(|| {
            i += 1;
            black_box(reg.predict(black_box(row(i))))
        })
    });
    for t in ["clamp", "logistic", "linear:0:500"] {
        let st = ScoreTransform::parse(t).unwrap();
        g.bench_function(format!("score_transform/{t}"), |b| {
            b.iter(|| {
                i += 1;
                black_box(st.apply(reg.predict(black_box(row(i)))))
            })
        });
    }
    g.finish();
}
