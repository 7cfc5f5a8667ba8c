//! `DeepScorer` on SmolLM2 with the committed prompt template: scores equal a full
//! prefill of prefix + suffix, batches equal single calls, the prefix state is cached,
//! pinned and keyed so that another prompt never reuses it, probes load and apply, and
//! the engine's gray zone gets model verdicts that feed back into later decisions.

use super::{gguf, model};
use candle_core::Device;
use risk_core::synth::{self, SynthConfig};
use risk_core::{Scorer, Transaction};
use risk_gpu::llm::{
    DeepHead, DeepOptions, DeepScorer, KvCache, LinearProbe, Llama, LlmError, LlmTokenizer,
    PrefixCache, PromptTemplate,
};
use std::sync::{Arc, OnceLock};

pub fn template_text() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts/fraud_analyst.txt"),
    )
    .unwrap()
}

fn shared_model() -> Arc<Llama> {
    static M: OnceLock<Arc<Llama>> = OnceLock::new();
    M.get_or_init(|| Arc::new(Llama::from_gguf(gguf(), &Device::Cpu).unwrap()))
        .clone()
}

fn tokenizer() -> LlmTokenizer {
    LlmTokenizer::from_gguf(gguf()).unwrap()
}

fn scorer_with(text: &str, cache: Arc<PrefixCache<KvCache>>, opts: DeepOptions) -> DeepScorer {
    let tok = tokenizer();
    let head = DeepScorer::answer_head(&tok, "yes", "no").unwrap();
    let tpl = PromptTemplate::parse(text, synth::schema()).unwrap();
    DeepScorer::new(shared_model(), tok, tpl, head, opts, cache).unwrap()
}

fn txns(n: usize) -> Vec<Transaction> {
    synth::generate(&SynthConfig::new(7, 400))
        .into_iter()
        .take(n)
        .map(|l| l.txn)
        .collect()
}

/// The answer probability from the whole prompt prefilled from scratch and the full
/// vocabulary's logits.
fn full_prefill(s: &DeepScorer, t: &Transaction) -> f32 {
    let tok = tokenizer();
    let (yes, no) = match DeepScorer::answer_head(&tok, "yes", "no").unwrap() {
        DeepHead::Answer { yes, no } => (yes, no),
        DeepHead::Probe(_) => unreachable!(),
    };
    let (_, suffix) = s.suffix(t).unwrap();
    let mut all = s.prefix_key().tokens().to_vec();
    all.extend(&suffix);
    let logits = model()
        .forward(&all, &mut KvCache::default())
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let mass = |ids: &[u32]| {
        ids.iter()
            .map(|&i| (logits[i as usize] as f64).exp())
            .sum::<f64>()
    };
    (mass(&yes) / (mass(&yes) + mass(&no))) as f32
}

#[test]
fn score_equals_a_full_prefill_and_batches_equal_single_calls() {
    let cache = Arc::new(PrefixCache::new(4, 256 << 20));
    let s = scorer_with(&template_text(), cache.clone(), DeepOptions::default());
    s.warmup().unwrap();
    let ts = txns(3);
    let refs: Vec<&Transaction> = ts.iter().collect();
    let mut batch = Vec::new();
    s.score_batch(&refs, &mut batch).unwrap();
    assert_eq!(batch.len(), 3);

    let tok = tokenizer();
    let yes = match DeepScorer::answer_head(&tok, "yes", "no").unwrap() {
        DeepHead::Answer { yes, .. } => yes,
        DeepHead::Probe(_) => unreachable!(),
    };
    assert!(yes.contains(&tok.single_token("Yes").unwrap()));
    for (i, t) in ts.iter().enumerate() {
        let single = s.score(t).unwrap().probability;
        assert!(
            (single - batch[i].probability).abs() <= 1e-4,
            "txn {i}: single {single} batch {}",
            batch[i].probability
        );
        let want = full_prefill(&s, t);
        assert!(
            (want - single).abs() <= 1e-4,
            "txn {i}: cached {single} vs full prefill {want}"
        );
        assert!((0.0..=1.0).contains(&single));
    }
    let st = s.stats();
    assert_eq!(st.cache.inserts, 1, "the system prompt is prefilled once");
    assert!(st.cache.hits >= 4);
    assert!(st.scored >= 6 && st.batches >= 4);
}

#[test]
fn another_prompt_or_model_identity_never_reuses_a_cached_prefix() {
    let cache = Arc::new(PrefixCache::new(4, 256 << 20));
    let a = scorer_with(&template_text(), cache.clone(), DeepOptions::default());
    let changed = template_text().replacen("fraud analyst", "fraud investigator", 1);
    let b = scorer_with(&changed, cache.clone(), DeepOptions::default());
    assert_ne!(a.prefix_key(), b.prefix_key());
    // The same weights under another precision plan.
    let f16 = shared_model()
        .quantize(&"layers.0=f16".parse().unwrap())
        .unwrap();
    let tok = tokenizer();
    let head = DeepScorer::answer_head(&tok, "yes", "no").unwrap();
    let tpl = PromptTemplate::parse(&template_text(), synth::schema()).unwrap();
    let c = DeepScorer::new(
        Arc::new(f16),
        tok,
        tpl,
        head,
        DeepOptions::default(),
        cache.clone(),
    )
    .unwrap();
    assert_eq!(c.prefix_key().plan(), "layers.0=f16");
    assert_ne!(
        a.prefix_key(),
        c.prefix_key(),
        "the precision plan is part of the key"
    );
    assert!(a.prefix_key().model().contains("gguf:"));

    let t = &txns(1)[0];
    let pa = a.score(t).unwrap().probability;
    let pb = b.score(t).unwrap().probability;
    assert_eq!(cache.stats().inserts, 2);
    // Each answer is its own prompt's, computed from scratch.
    assert!((full_prefill(&a, t) - pa).abs() <= 1e-4);
    assert!((full_prefill(&b, t) - pb).abs() <= 1e-4);
    // Invalidation by model identity drops both states; pinned entries included.
    assert_eq!(cache.invalidate_model(a.prefix_key().model()), 2);
    a.score(t).unwrap();
    assert_eq!(cache.stats().inserts, 3);
}

#[test]
fn history_is_rendered_and_dropped_to_fit_the_suffix_budget() {
    let cache = Arc::new(PrefixCache::new(4, 256 << 20));
    let ts = txns(60);
    // An entity with several transactions.
    let entity = ts
        .iter()
        .map(|t| t.entity)
        .max_by_key(|e| ts.iter().filter(|t| t.entity == *e).count())
        .unwrap();
    let mut mine: Vec<&Transaction> = ts.iter().filter(|t| t.entity == entity).collect();
    mine.sort_by_key(|t| t.timestamp_ms);
    assert!(mine.len() >= 2, "synthetic data has a repeat entity");
    let last = mine[mine.len() - 1];

    let roomy = scorer_with(&template_text(), cache.clone(), DeepOptions::default());
    for t in &mine[..mine.len() - 1] {
        roomy.observe(t);
    }
    let (text, ids) = roomy.suffix(last).unwrap();
    assert!(text.contains(" ago."), "history rendered:\n{text}");

    let (_, no_hist) = {
        let bare = scorer_with(&template_text(), cache.clone(), DeepOptions::default());
        bare.suffix(last).unwrap()
    };
    assert!(ids.len() > no_hist.len());
    // A budget between the two drops history lines instead of failing.
    let tight = DeepOptions {
        max_suffix_tokens: no_hist.len(),
        ..DeepOptions::default()
    };
    let s = scorer_with(&template_text(), cache.clone(), tight);
    for t in &mine[..mine.len() - 1] {
        s.observe(t);
    }
    let (_, fit) = s.suffix(last).unwrap();
    assert!(fit.len() <= no_hist.len());
    assert!(s.stats().history_dropped >= 1);
    // Below even the bare suffix: a typed error, and a tier failure when scoring.
    let tiny = DeepOptions {
        max_suffix_tokens: 8,
        ..DeepOptions::default()
    };
    let s = scorer_with(&template_text(), cache, tiny);
    assert!(matches!(s.suffix(last), Err(LlmError::Request(m)) if m.contains("max_suffix_tokens")));
    assert!(s.score(last).is_err());
    assert_eq!(s.stats().failures, 1);
}

#[test]
fn probes_round_trip_and_are_checked_against_the_model() {
    let dir = std::env::temp_dir().join(format!("risk-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("probe.safetensors");
    let weight: Vec<f32> = (0..576)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 500.0)
        .collect();
    let p = LinearProbe {
        weight,
        bias: -0.25,
        model: Some(shared_model().identity().to_owned()),
    };
    p.save_with(&path, serde_json::json!({ "note": "test" }))
        .unwrap();
    let q = LinearProbe::load(&path).unwrap();
    assert_eq!(p, q);
    // A probe fitted on other weights is refused.
    let other = LinearProbe {
        model: Some("SmolLM2 gguf:0000000000000000".into()),
        ..q.clone()
    };
    let e = DeepScorer::new(
        shared_model(),
        tokenizer(),
        PromptTemplate::parse(&template_text(), synth::schema()).unwrap(),
        DeepHead::Probe(other),
        DeepOptions::default(),
        Arc::new(PrefixCache::new(4, 256 << 20)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("fitted on model"), "{e}");
    // The committed probe (examples/fit_probe) belongs to this model and loads.
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/models/deep_probe_smollm2.safetensors");
    let cp = LinearProbe::load(&committed).unwrap();
    assert_eq!(cp.model.as_deref(), Some(shared_model().identity()));

    let tok = tokenizer();
    let tpl = PromptTemplate::parse(&template_text(), synth::schema()).unwrap();
    let cache = Arc::new(PrefixCache::new(4, 256 << 20));
    let s = DeepScorer::new(
        shared_model(),
        tok.clone(),
        tpl.clone(),
        DeepHead::Probe(q.clone()),
        DeepOptions::default(),
        cache.clone(),
    )
    .unwrap();
    let ts = txns(2);
    let refs: Vec<&Transaction> = ts.iter().collect();
    let h = s.hidden_states(&refs).unwrap();
    let mut out = Vec::new();
    s.score_batch(&refs, &mut out).unwrap();
    for (row, sc) in h.iter().zip(&out) {
        assert!((q.apply(row) - sc.probability).abs() <= 1e-6);
    }

    let short = LinearProbe {
        weight: vec![0.0; 10],
        bias: 0.0,
        model: None,
    };
    let e = DeepScorer::new(
        shared_model(),
        tok,
        tpl,
        DeepHead::Probe(short),
        DeepOptions::default(),
        cache,
    )
    .unwrap_err();
    assert!(e.to_string().contains("hidden size is 576"), "{e}");
    std::fs::write(dir.join("bad.safetensors"), b"not a safetensors file").unwrap();
    assert!(LinearProbe::load(dir.join("bad.safetensors")).is_err());
    assert!(matches!(
        LinearProbe::load(dir.join("missing.safetensors")),
        Err(LlmError::Io { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gray_zone_transactions_get_model_verdicts_that_shift_the_next_decision() {
    use risk_core::{
        CircuitConfig, ConstantScorer, DeepConfig, DeepSource, Engine, Escalation, ManualClock,
    };
    use std::time::Duration;
    let clock = ManualClock::new();
    let cache = Arc::new(PrefixCache::new(4, 256 << 20));
    let deep = Arc::new(scorer_with(&template_text(), cache, DeepOptions::default()));
    let e = Engine::builder(synth::schema())
        .clock(clock.clone())
        .rules(Arc::new(ConstantScorer::new(0.0)))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(deep.clone())
        .deep_config(DeepConfig {
            // The engine measures the budget on its (manual) clock, which never moves; the
            // scorer stops a forward past the budget measured on the real clock
            // (`score_batch_within`), so the budget must outlast a forward on a busy machine.
            budget: Duration::from_secs(3600),
            max_batch: 4,
            max_wait: Duration::ZERO,
            workers: 1,
            global_prior: 0.5,
            subscriber_capacity: 64,
        })
        .circuit(CircuitConfig {
            min_calls: 1_000_000,
            ..Default::default()
        })
        .build()
        .unwrap();
    let verdicts = e.subscribe();
    // Three transactions of three entities, all in the gray zone (fast score 0.5).
    let mut ts = Vec::new();
    for t in txns(200) {
        if ts.iter().all(|x: &Transaction| x.entity != t.entity) {
            ts.push(t);
        }
        if ts.len() == 3 {
            break;
        }
    }
    for t in &ts {
        let d = e.decide(t).unwrap();
        assert!(matches!(d.escalation, Escalation::Enqueued(_)), "{d:?}");
        assert_eq!(d.threshold_shift, 0.0);
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        // The manual clock never moves, so the budget cannot expire: every verdict is
        // the model's.
        got.push(verdicts.recv_timeout(Duration::from_secs(120)).unwrap());
    }
    for v in &got {
        assert_eq!(v.source, DeepSource::Model, "{v:?}");
        let t = ts.iter().find(|t| t.id == v.txn).unwrap();
        let direct = deep.score(t).unwrap().probability;
        assert!((direct - v.score).abs() <= 1e-4, "{direct} vs {}", v.score);
        let fb = e.feedback(t.entity).expect("feedback stored");
        assert_eq!(fb.deep_score, v.score);
        // The entity's next transaction reads the verdict.
        let mut next = t.clone();
        next.id.0 += 1_000_000;
        next.timestamp_ms += 60_000;
        let d = e.decide(&next).unwrap();
        assert_eq!(d.threshold_shift, fb.threshold_shift);
        if (v.score - 0.5).abs() > 0.01 {
            assert_ne!(d.threshold_shift, 0.0);
        }
    }
    assert!(deep.stats().scored >= 3);
}

#[test]
fn risk_toml_builds_the_llm_deep_tier_and_names_bad_keys() {
    use risk_core::{Engine, ScorerRegistry};
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let base = std::fs::read_to_string(examples.join("risk.toml")).unwrap();
    let dir = std::env::temp_dir().join(format!("risk-llm-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Relative paths in the base file resolve against examples/: keep them valid.
    let base = base.replace("\"../", &format!("\"{}/../", examples.display()));
    let tpl = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts/fraud_analyst.txt");
    let deep = |extra: &str| {
        format!(
            "{base}\n[deep]\nbudget_ms = 2000\nmax_batch = 4\n[deep.scorer]\nkind = \"llm\"\nmodel = {:?}\ntemplate = {:?}\nmax_suffix_tokens = 120\n{extra}\n",
            gguf().display().to_string(),
            tpl.display().to_string()
        )
    };
    let path = dir.join("risk.toml");
    std::fs::write(&path, deep("history = 1")).unwrap();
    let e = Engine::from_config_with(&path, &reg).unwrap_or_else(|err| panic!("{err}"));
    let info = e.scorers();
    assert!(
        info.iter()
            .any(|(stage, i)| *stage == "deep" && i.name == "llm" && i.version.contains("gguf:")),
        "{info:?}"
    );

    // A precision plan in risk.toml: the tier serves the quantized model.
    let plan =
        "[deep.scorer.quant]\n\"layers.0-27\" = \"rtn_int4_g64\"\n\"layers.28-29\" = \"f16\"";
    std::fs::write(&path, deep(plan)).unwrap();
    let e = Engine::from_config_with(&path, &reg).unwrap_or_else(|err| panic!("{err}"));
    assert!(
        e.scorers().iter().any(|(stage, i)| *stage == "deep"
            && i.version
                .contains("layers.0-27=rtn_int4_g64,layers.28-29=f16")),
        "{:?}",
        e.scorers()
    );
    for (bad, want) in [
        ("\"layers.28-31\" = \"f16\"", "layers.28-31"),
        ("\"layers.0-3\" = \"int5\"", "deep.scorer.quant.layers.0-3"),
        ("\"layers.0-3\" = \"awq_int4_g64\"", "quant_report"),
    ] {
        std::fs::write(&path, deep(&format!("[deep.scorer.quant]\n{bad}"))).unwrap();
        let err = Engine::from_config_with(&path, &reg)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
    }

    std::fs::write(&path, deep("histroy = 1")).unwrap();
    let err = Engine::from_config_with(&path, &reg)
        .unwrap_err()
        .to_string();
    assert!(err.contains("deep.scorer.histroy"), "{err}");

    std::fs::write(&path, deep("").replace("fraud_analyst.txt", "missing.txt")).unwrap();
    let err = Engine::from_config_with(&path, &reg)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("deep.scorer") && err.contains("missing.txt"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn probe_fit_separates_a_linear_signal_and_folds_the_standardisation() {
    // Rows with a known direction: label = x·u > 0 on shifted, scaled inputs.
    let mut rng = risk_core::synth::Rng::new(5);
    let k = 16;
    let u: Vec<f64> = (0..k)
        .map(|j| if j % 3 == 0 { 1.0 } else { -0.5 })
        .collect();
    let mut rows = Vec::new();
    let mut labels = Vec::new();
    for _ in 0..600 {
        let r: Vec<f32> = (0..k)
            .map(|j| (rng.range(-1.0, 1.0) * (j + 1) as f64 + 3.0) as f32)
            .collect();
        let z: f64 = r
            .iter()
            .zip(&u)
            .enumerate()
            .map(|(j, (&v, c))| (v as f64 - 3.0) / (j + 1) as f64 * c)
            .sum();
        labels.push(z > 0.0);
        rows.push(r);
    }
    let p = LinearProbe::fit(&rows, &labels, risk_gpu::llm::ProbeFit::default()).unwrap();
    let correct = rows
        .iter()
        .zip(&labels)
        .filter(|(r, &y)| (p.apply(r) > 0.5) == y)
        .count();
    assert!(correct >= 570, "{correct}/600");
    assert!(LinearProbe::fit(&rows, &vec![true; 600], Default::default()).is_err());
    assert!(LinearProbe::fit(&rows[..2], &labels, Default::default()).is_err());
}

/// Defect 10 of the reliability review: a late deep batch could not be cancelled (the
/// forward ran to completion and blocked the next batch). With no budget left it stops
/// before its first layer; a budget that passes mid-forward stops at the next layer; with
/// time to spare it answers exactly what `score_batch` answers.
#[test]
fn a_batch_past_its_budget_stops_between_layers() {
    use risk_core::ScoreError;
    use std::time::Duration;
    let cache = Arc::new(PrefixCache::new(4, 256 << 20));
    let s = scorer_with(&template_text(), cache, DeepOptions::default());
    s.warmup().unwrap();
    let ts = txns(4);
    let refs: Vec<&Transaction> = ts.iter().collect();
    let mut out = Vec::new();
    assert_eq!(
        s.score_batch_within(&refs, Duration::ZERO, &mut out),
        Err(ScoreError::Cancelled)
    );
    assert_eq!(s.stats().cancelled, 1);
    // Stopped part-way: the layer count says where.
    let toks: Vec<Vec<u32>> = ts.iter().map(|t| s.suffix(t).unwrap().1).collect();
    let seqs: Vec<&[u32]> = toks.iter().map(|v| v.as_slice()).collect();
    let prefix = s.prefix_state().unwrap();
    let m = shared_model();
    let start = std::time::Instant::now();
    let full = m.forward_packed(&prefix, &seqs).unwrap();
    let whole = start.elapsed();
    match m.forward_packed_until(&prefix, &seqs, Some(std::time::Instant::now() + whole / 3)) {
        Err(LlmError::Cancelled { layers }) => {
            assert!(layers > 0 && layers < m.config().layers, "{layers}")
        }
        // A machine that got much faster between the two runs finished in time: the
        // answer must then be the full one.
        Ok(h) => assert_eq!(h.to_vec2::<f32>().unwrap(), full.to_vec2::<f32>().unwrap()),
        Err(e) => panic!("{e}"),
    }
    let mut batch = Vec::new();
    s.score_batch(&refs, &mut batch).unwrap();
    s.score_batch_within(&refs, Duration::from_secs(3600), &mut out)
        .unwrap();
    let p = |v: &[risk_core::Score]| v.iter().map(|x| x.probability).collect::<Vec<_>>();
    assert_eq!(p(&out), p(&batch));
}
