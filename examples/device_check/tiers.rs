//! The fast tiers on the device: BERT embeddings (candle) and the XGBoost ONNX model on
//! ONNX Runtime's CUDA execution provider, each against the CPU on the same inputs.

use crate::{max_abs_diff, median, ms, Opts, Report};
use risk_core::synth::{self, SynthConfig};
use risk_core::{Scorer, Transaction};
use risk_gpu::bert::{minilm_dir, BertFiles, BertScorer};
use risk_gpu::onnx::{OnnxConfig, OnnxScorer};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn root() -> PathBuf {
    std::env::var_os("RISK_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

/// The 64 rendered transactions of the BERT benchmark.
fn texts() -> Result<Vec<String>, String> {
    let p = root().join("testdata/bert/bench_texts.txt");
    let s = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(s.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect())
}

fn bert_scorer(device: risk_gpu::Device) -> Result<BertScorer, String> {
    let r = root();
    let mut f = BertFiles::new(
        minilm_dir()?,
        r.join("testdata/bert/text_head.safetensors"),
        r.join("risk-gpu/prompts/bert_text.txt"),
    );
    f.device = device;
    BertScorer::load(&f, synth::schema()).map_err(|e| e.to_string())
}

/// The `bert` step: all-MiniLM-L6-v2 embeddings of batch 1 and 32, f32.
pub fn bert(r: &mut Report, o: &Opts) {
    if let Err(e) = bert_inner(r, o) {
        r.fail("run", &e);
    }
}

fn bert_inner(r: &mut Report, o: &Opts) -> Result<(), String> {
    let texts = texts()?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let cpu = bert_scorer(risk_gpu::Device::Cpu)?;
    let t = Instant::now();
    let dev = bert_scorer(o.device)?;
    r.figure(
        "load",
        ms(t.elapsed()),
        "ms",
        "encoder and head onto the device",
    );
    let embed = |s: &BertScorer, b: &[&str]| -> Result<Vec<f32>, String> {
        Ok(s.embed(b, None).map_err(|e| e.to_string())?.concat())
    };
    for batch in [1usize, 32] {
        let b = &refs[..batch];
        let reference = embed(&cpu, b)?;
        let t = Instant::now();
        let cold = embed(&dev, b)?;
        let cold_t = t.elapsed();
        let (warm, out) = median(o.reps(), || embed(&dev, b))?;
        let (d, _) = max_abs_diff(&reference, &out);
        let (dc, _) = max_abs_diff(&reference, &cold);
        r.check(
            &format!("embeddings_b{batch}"),
            d.max(dc),
            1e-3,
            "normalised mean-pooled embeddings, max |Δ| vs CPU f32",
        );
        r.figure(
            &format!("embed_b{batch}"),
            ms(warm),
            "ms",
            &format!(
                "tokenize + forward + pool, {:.0} texts/s; cold {:.2} ms",
                batch as f64 / warm.as_secs_f64(),
                ms(cold_t)
            ),
        );
        let (cpu_t, _) = median(o.reps(), || embed(&cpu, b))?;
        r.figure(
            &format!("embed_b{batch}_cpu"),
            ms(cpu_t),
            "ms",
            "the same on this machine's CPU",
        );
    }
    Ok(())
}

fn onnx_scorer(device: risk_gpu::Device) -> Result<OnnxScorer, String> {
    let mut c = OnnxConfig::new(root().join("testdata/models/xgb_fraud.onnx"));
    c.device = Some(device);
    c.sessions = 1;
    c.intra_threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let s = OnnxScorer::load(&c, &synth::schema()).map_err(|e| e.to_string())?;
    Ok(s)
}

/// The `onnx` step: the committed XGBoost model (`testdata/models/xgb_fraud.onnx`) on
/// the CPU provider and on `--device`, batches of 1 and 1,024 synthetic transactions.
pub fn onnx(r: &mut Report, o: &Opts) {
    if let Err(e) = onnx_inner(r, o) {
        r.fail("run", &e);
    }
}

fn onnx_inner(r: &mut Report, o: &Opts) -> Result<(), String> {
    let rows: Vec<Transaction> = synth::generate(&SynthConfig::new(15, 1024))
        .into_iter()
        .map(|l| l.txn)
        .collect();
    let cpu = onnx_scorer(risk_gpu::Device::Cpu)?;
    let t = Instant::now();
    let dev = onnx_scorer(o.device)?;
    r.figure(
        "load",
        ms(t.elapsed()),
        "ms",
        "session created on the device's provider",
    );
    r.info("placement", dev.placement());
    let score = |s: &OnnxScorer, b: &[&Transaction]| -> Result<Vec<f32>, String> {
        let mut out = Vec::new();
        s.score_batch(b, &mut out).map_err(|e| e.to_string())?;
        Ok(out.iter().map(|p| p.probability).collect())
    };
    for batch in [1usize, 1024] {
        let b: Vec<&Transaction> = rows.iter().take(batch).collect();
        let reference = score(&cpu, &b)?;
        let t = Instant::now();
        let cold = score(&dev, &b)?;
        let cold_t = t.elapsed();
        let (warm, out) = median(o.reps() * 5, || score(&dev, &b))?;
        let (d, _) = max_abs_diff(&reference, &out);
        let (dc, _) = max_abs_diff(&reference, &cold);
        r.check(
            &format!("probabilities_b{batch}"),
            d.max(dc),
            1e-5,
            "fraud probability, max |Δ| vs the CPU provider",
        );
        let (cpu_t, _) = median(o.reps() * 5, || score(&cpu, &b))?;
        r.figure(
            &format!("score_b{batch}"),
            ms(warm) * 1e3,
            "us",
            &format!(
                "{:.0} rows/s; cold {:.1} us",
                batch as f64 / warm.as_secs_f64(),
                ms(cold_t) * 1e3
            ),
        );
        r.figure(
            &format!("score_b{batch}_cpu"),
            ms(cpu_t) * 1e3,
            "us",
            &format!(
                "CPU provider ({:.2}x the device time)",
                cpu_t.as_secs_f64() / warm.as_secs_f64()
            ),
        );
    }
    Ok(())
}
