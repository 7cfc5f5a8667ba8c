//! XGBoost variants on the native tree tier (`testdata/models/xgb_variants/`,
//! `tools/xgb_variants.py`): a model with categorical splits against its numeric twin of
//! the same size (same data and parameters, the categorical features as numbers), and a
//! three-class `multi:softprob` model, on the reference rows. The peer, xgboost's own
//! predict and `pred_contribs` on the same models and rows, is
//! `tools/bench_xgb_variants.py`.

use criterion::{black_box, Criterion, Throughput};
use risk_gpu::trees::multiclass::MultiClassModel;
use risk_gpu::trees::XgbModel;
use std::path::Path;

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/xgb_variants")
}

fn rows() -> (usize, Vec<f32>) {
    crate::reference_rows::read(&dir().join("reference.json"))
}

/// `tree_variants/{predict_one_row, tree_shap_one_row}/{numeric, categorical}` and
/// `tree_variants/probabilities_one_row/multiclass`.
pub fn predict(c: &mut Criterion) {
    let (nf, x) = rows();
    let n = x.len() / nf;
    let row = |i: usize| &x[(i % n) * nf..(i % n + 1) * nf];
    let mut g = c.benchmark_group("tree_variants");
    g.throughput(Throughput::Elements(1));
    for name in ["numeric", "categorical"] {
        let m = XgbModel::from_file(dir().join(format!("{name}.json"))).unwrap();
        eprintln!("tree_variants/{name}: kernel {}", m.kernel());
        let mut i = 0usize;
        g.bench_function(format!("predict_one_row/{name}"), |b| {
            b.iter(|| {
                i += 1;
                black_box(m.predict(black_box(row(i))))
            })
        });
        let mut phi = Vec::new();
        g.bench_function(format!("tree_shap_one_row/{name}"), |b| {
            b.iter(|| {
                i += 1;
                m.contributions(black_box(row(i)), &mut phi);
                black_box(&phi);
            })
        });
    }
    let m = MultiClassModel::from_file(dir().join("multiclass.json")).unwrap();
    let mut p = Vec::new();
    let mut i = 0usize;
    g.bench_function("probabilities_one_row/multiclass", |b| {
        b.iter(|| {
            i += 1;
            m.probabilities(black_box(row(i)), &mut p);
            black_box(&p);
        })
    });
    g.finish();
}
