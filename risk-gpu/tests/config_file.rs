//! `examples/risk.toml` builds the quickstart's rule and fast tiers from a file.

use risk_core::synth::{generate, SynthConfig};
use risk_core::{Engine, ScorerRegistry, Tier};
use std::path::Path;

#[test]
fn the_example_config_builds_a_working_engine() {
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/risk.toml");
    let e = Engine::from_config_with(&path, &reg).unwrap_or_else(|err| panic!("{err}"));
    // The file's schema is the synthetic one: generated transactions decide as they are.
    assert_eq!(
        e.schema().fingerprint(),
        risk_core::synth::schema().fingerprint()
    );
    let rows = generate(&SynthConfig::new(3, 500));
    let mut fast = 0;
    for r in &rows {
        let d = e.decide(&r.txn).unwrap();
        fast += (d.tier == Tier::Fast) as usize;
        assert!(d.model_score.is_some());
    }
    assert!(fast > 300, "{fast}");
}

/// `examples/risk.toml` with its `[fast.scorer]` table replaced by `fast`.
pub(crate) fn with_fast(fast: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/risk.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find("[fast.scorer]").unwrap();
    let end = start + text[start..].find("\n[thresholds]").unwrap();
    // A text model takes milliseconds: the file's 15 ms deadline would let a loaded
    // machine decide by fallback, and this test is about what the file builds.
    let head = text[..start].replace("deadline_ms = 15", "deadline_ms = 60000");
    assert_ne!(
        head,
        text[..start],
        "examples/risk.toml sets fast.deadline_ms = 15"
    );
    format!("{head}{fast}\n{}", &text[end..])
}

#[test]
fn risk_toml_names_a_bert_tier_alone_or_in_an_ensemble() {
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let model = crate::bert::minilm();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bert = format!(
        "kind = \"bert\"\nmodel = {:?}\nhead = \"../testdata/bert/text_head.safetensors\"\ntemplate = \"../risk-gpu/prompts/bert_text.txt\"\nmax_tokens = 96\n",
        model.display().to_string()
    );
    let alone = with_fast(&format!("[fast.scorer]\n{bert}"));
    let ensemble = with_fast(&format!(
        "[fast.scorer]\nkind = \"ensemble\"\n[[fast.scorer.members]]\nkind = \"xgboost\"\npath = \"../testdata/models/xgb_fraud.json\"\nweight = 0.5\n[[fast.scorer.members]]\n{bert}weight = 0.5\nprecision = \"int8\"\n"
    ));
    let origin = root.join("examples/risk.toml");
    let rows = generate(&SynthConfig::new(3, 20));
    for (text, name) in [(&alone, "bert:"), (&ensemble, "ensemble")] {
        let e = Engine::from_toml_str(text, &root.join("examples"), &origin, &reg)
            .unwrap_or_else(|err| panic!("{err}"));
        let fast = e.versions().fast.unwrap();
        assert!(fast.name().starts_with(name), "{fast}");
        for r in &rows[..3] {
            let d = e.decide(&r.txn).unwrap();
            assert_eq!(d.fallback, None, "{name}: the fast tier answered");
            assert!(d.model_score.is_some());
        }
    }
    // Typed errors name the key.
    let bad = with_fast(&format!("[fast.scorer]\n{bert}precision = \"int4\"\n"));
    let err = Engine::from_toml_str(&bad, &root.join("examples"), &origin, &reg).unwrap_err();
    assert!(err.to_string().contains("fast.scorer.precision"), "{err}");
    let bad = with_fast(&format!("[fast.scorer]\n{bert}sessions = 2\n"));
    let err = Engine::from_toml_str(&bad, &root.join("examples"), &origin, &reg).unwrap_err();
    assert!(err.to_string().contains("only for backend"), "{err}");
}

#[test]
fn risk_toml_places_an_onnx_tier_and_refuses_an_unknown_device() {
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let origin = root.join("examples/risk.toml");
    let onnx = format!(
        "[fast.scorer]\nkind = \"onnx\"\npath = \"../testdata/models/xgb_fraud.onnx\"\nruntime = {:?}\n",
        crate::common::onnxruntime().display().to_string()
    );
    let e = Engine::from_toml_str(
        &with_fast(&format!("{onnx}device = \"cpu\"\n")),
        &root.join("examples"),
        &origin,
        &reg,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    let row = &generate(&SynthConfig::new(3, 1))[0];
    assert_eq!(e.decide(&row.txn).unwrap().fallback, None);
    for (device, want) in [
        ("tpu", "fast.scorer.device"),
        ("cuda:x", "fast.scorer.device"),
    ] {
        let bad = with_fast(&format!("{onnx}device = \"{device}\"\n"));
        let err = Engine::from_toml_str(&bad, &root.join("examples"), &origin, &reg).unwrap_err();
        assert!(err.to_string().contains(want), "{device}: {err}");
    }
}
