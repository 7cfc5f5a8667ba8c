//! Sequences: `cargo bench -p risk-benches --bench sequence` (a bench target of its own,
//! so a run sets up only what it measures).
//!
//! - `sequence_state`: the state stage (read + update of the synthetic set's 8 velocity
//!   features over card and terminal, in process) per raw transaction, against the same
//!   stage also keeping and reading the card's last 32 transactions (`card_seq`, 32 × 9,
//!   `synth::sequence_config()`): what a sequence adds to `decide`'s stage 1. The state is
//!   warmed with 80,000 raw transactions (4,000 cards, a month); the timed loop cycles over
//!   4,096 of them, moved a month forward on each pass.
//! - `sequence_tier`: batch-1 latency of the sequence tier (the GRU of
//!   `tools/train_sequence.py` through ONNX Runtime: 3 inputs, `[1, 32, 9]`) against the
//!   XGBoost tier on the same rows (native trees over the 18 flat features), and of a
//!   64-row batch. The peer in Python is `tools/bench_seq_ort.py` (ONNX Runtime's own
//!   Python API on the same model and rows), run beside this bench (BENCHMARKS.md).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use risk_core::state::{StateConfig, StateEngine};
use risk_core::synth::{generate_raw, schema, sequence_config, state_config, SynthConfig};
use risk_core::{ManualClock, Scorer, Sequence, Sequences, Transaction};
use risk_gpu::onnx::{InputMap, InputSource, OnnxConfig, OnnxScorer};
use risk_gpu::trees::XgbModel;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models")
}

fn f32s(name: &str) -> Vec<f32> {
    std::fs::read(models().join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn runtime() -> PathBuf {
    std::env::var_os("ORT_DYLIB_PATH")
        .map(Into::into)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ort/libonnxruntime.so.1.31.1")
        })
}

/// A state engine over `cfg` warmed with 80,000 raw transactions, and the 4,096 rows the
/// timed loop cycles over (a month after the warm-up).
fn warm(cfg: StateConfig) -> (StateEngine, Vec<Transaction>) {
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    let st = StateEngine::new(cfg, schema(), clock).unwrap();
    let rows: Vec<Transaction> = generate_raw(&SynthConfig::new(5, 80_000))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    for r in &rows {
        st.apply(&mut r.clone());
    }
    let span = rows.last().unwrap().timestamp_ms - rows[0].timestamp_ms + 86_400_000;
    let timed = rows[rows.len() - 4_096..]
        .iter()
        .cloned()
        .map(|mut t| {
            t.timestamp_ms += span;
            t
        })
        .collect();
    (st, timed)
}

/// Applies the rows in turn, moving them a pass's span forward after each pass.
fn cycle(st: &StateEngine, rows: &mut [Transaction], i: &mut usize, span: i64) {
    *i += 1;
    if *i == rows.len() {
        *i = 0;
        for r in rows.iter_mut() {
            r.timestamp_ms += span;
        }
    }
    let mut t = rows[*i].clone();
    black_box(st.apply(&mut t));
    black_box(&t);
}

pub fn state(c: &mut Criterion) {
    let mut g = c.benchmark_group("sequence_state");
    for (name, cfg) in [
        ("read_update_8_features", state_config()),
        ("read_update_8_features_card_seq_32x9", sequence_config()),
    ] {
        let (st, mut rows) = warm(cfg);
        let span = rows.last().unwrap().timestamp_ms - rows[0].timestamp_ms + 86_400_000;
        let mut i = 0;
        g.bench_function(name, |b| b.iter(|| cycle(&st, &mut rows, &mut i, span)));
    }
    g.finish();
}

/// The reference rows of `tools/train_sequence.py` as transactions (flat features and
/// the card's sequence).
fn ref_txns() -> Vec<Transaction> {
    let (seq, mask, x) = (
        f32s("seq_ref_seq.f32"),
        f32s("seq_ref_mask.f32"),
        f32s("seq_ref_x.f32"),
    );
    let (n, f, k) = (32, 9, 18);
    let s = schema();
    (0..x.len() / k)
        .map(|i| {
            let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
            t.features
                .values_mut()
                .copy_from_slice(&x[i * k..(i + 1) * k]);
            let len = mask[i * n..(i + 1) * n]
                .iter()
                .filter(|&&m| m == 1.0)
                .count();
            let v = seq[i * n * f..(i + 1) * n * f].to_vec();
            t.sequences = Sequences::new(vec![Sequence::new("card_seq", n, f, len, v).unwrap()]);
            t
        })
        .collect()
}

pub fn tier(c: &mut Criterion) {
    let mut cfg = OnnxConfig::new(models().join("seq_gru.onnx"));
    cfg.runtime = Some(runtime());
    cfg.sessions = 1;
    cfg.inputs = vec![
        InputMap {
            name: "x".into(),
            source: InputSource::Features(None),
        },
        InputMap {
            name: "seq".into(),
            source: InputSource::Sequence("card_seq".into()),
        },
        InputMap {
            name: "mask".into(),
            source: InputSource::Mask("card_seq".into()),
        },
    ];
    let gru = OnnxScorer::load(&cfg, &schema()).unwrap();
    gru.warmup().unwrap();
    let xgb = XgbModel::from_file(models().join("xgb_fraud.json")).unwrap();
    let txns = ref_txns();
    let mut g = c.benchmark_group("sequence_tier");
    let mut i = 0;
    g.bench_function("gru_onnx_one_row", |b| {
        b.iter(|| {
            i += 1;
            black_box(gru.score(black_box(&txns[i % txns.len()])).unwrap())
        })
    });
    g.bench_function("xgboost_native_one_row", |b| {
        b.iter(|| {
            i += 1;
            black_box(xgb.predict(black_box(txns[i % txns.len()].features.values())))
        })
    });
    g.throughput(Throughput::Elements(64));
    let batch: Vec<&Transaction> = txns.iter().take(64).collect();
    let mut out = Vec::new();
    g.bench_function("gru_onnx_batch_64", |b| {
        b.iter(|| {
            gru.score_batch(black_box(&batch), &mut out).unwrap();
            black_box(&out);
        })
    });
    g.finish();
}

criterion_group!(
    name = sequence;
    config = config();
    targets = state, tier
);
criterion_main!(sequence);
