//! A sequence model through ONNX Runtime: the GRU of `tools/train_sequence.py` (inputs
//! `seq` [B, N, 9], `mask` [B, N], `x` [B, 18]) scores as PyTorch did on the same
//! tensors; its inputs are checked at load; a transaction without its sequence fails the
//! tier with a typed error; and from `examples/risk_sequence.toml` the engine fills the
//! card's sequence from raw transactions and the tier scores it.

use crate::common::*;
use risk_core::synth::{generate_raw, schema, sequence_config, SynthConfig};
use risk_core::{Engine, ScoreError, Scorer, Sequence, Sequences, Tier, Transaction};
use risk_gpu::onnx::{InputMap, InputSource, OnnxConfig, OnnxScorer};
use std::path::Path;

const N: usize = 32;
const F: usize = 9;
const K: usize = 18;

fn map(name: &str, source: InputSource) -> InputMap {
    InputMap {
        name: name.into(),
        source,
    }
}

fn cfg(inputs: Vec<InputMap>) -> OnnxConfig {
    let mut c = OnnxConfig::new(models().join("seq_gru.onnx"));
    c.runtime = Some(onnxruntime());
    c.inputs = inputs;
    c
}

fn all_inputs() -> Vec<InputMap> {
    vec![
        map("x", InputSource::Features(None)),
        map("seq", InputSource::Sequence("card_seq".into())),
        map("mask", InputSource::Mask("card_seq".into())),
    ]
}

/// The reference rows as transactions: flat features and the card's sequence.
fn ref_txns() -> (Vec<Transaction>, Vec<f32>) {
    let (seq, mask, x, probs) = (
        f32s("seq_ref_seq.f32"),
        f32s("seq_ref_mask.f32"),
        f32s("seq_ref_x.f32"),
        f32s("seq_ref_probs.f32"),
    );
    let rows = probs.len();
    assert_eq!(
        (seq.len(), mask.len(), x.len()),
        (rows * N * F, rows * N, rows * K)
    );
    let s = schema();
    let txns = (0..rows)
        .map(|i| {
            let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
            t.features
                .values_mut()
                .copy_from_slice(&x[i * K..(i + 1) * K]);
            let len = mask[i * N..(i + 1) * N]
                .iter()
                .filter(|&&m| m == 1.0)
                .count();
            let q = Sequence::new(
                "card_seq",
                N,
                F,
                len,
                seq[i * N * F..(i + 1) * N * F].to_vec(),
            )
            .unwrap();
            t.sequences = Sequences::new(vec![q]);
            t
        })
        .collect();
    (txns, probs)
}

#[test]
fn sequence_model_scores_equal_pytorch() {
    let m = OnnxScorer::load(&cfg(all_inputs()), &schema()).unwrap();
    m.warmup().unwrap();
    let (txns, probs) = ref_txns();
    assert!(txns.len() >= 200);
    let mut worst = 0f32;
    for (t, want) in txns.iter().zip(&probs) {
        worst = worst.max((m.score(t).unwrap().probability - want).abs());
    }
    let refs: Vec<&Transaction> = txns.iter().collect();
    let mut out = Vec::new();
    m.score_batch(&refs, &mut out).unwrap();
    for (o, want) in out.iter().zip(&probs) {
        worst = worst.max((o.probability - want).abs());
    }
    assert!(worst <= 1e-5, "max |onnx - pytorch| = {worst:e}");
}

#[test]
fn every_model_input_is_fed_and_checked_at_load() {
    let s = schema();
    let e = OnnxScorer::load(&cfg(all_inputs()[..2].to_vec()), &s).unwrap_err();
    assert!(e.to_string().contains("\"mask\" is not fed"), "{e}");
    let mut extra = all_inputs();
    extra.push(map("lengths", InputSource::Length("card_seq".into())));
    let e = OnnxScorer::load(&cfg(extra), &s).unwrap_err();
    assert!(e.to_string().contains("no input named \"lengths\""), "{e}");
    // The sequence where the flat features go: wrong rank.
    let mut swapped = all_inputs();
    swapped[0] = map("x", InputSource::Sequence("card_seq".into()));
    swapped[1] = map("seq", InputSource::Features(None));
    let e = OnnxScorer::load(&cfg(swapped), &s).unwrap_err();
    assert!(e.to_string().contains("expected"), "{e}");
    // `features` beside `inputs` would be ignored: refused instead.
    let mut both = cfg(all_inputs());
    both.features = Some(vec!["amount".into()]);
    let e = OnnxScorer::load(&both, &s).unwrap_err();
    assert!(e.to_string().contains("map the features there"), "{e}");
    let mut short = all_inputs();
    short[0] = map("x", InputSource::Features(Some(vec!["amount".into()])));
    let e = OnnxScorer::load(&cfg(short), &s).unwrap_err();
    assert!(e.to_string().contains("18 features, 1 are mapped"), "{e}");
}

#[test]
fn a_transaction_without_its_sequence_fails_the_tier() {
    let m = OnnxScorer::load(&cfg(all_inputs()), &schema()).unwrap();
    let (mut txns, _) = ref_txns();
    let t = &mut txns[0];
    t.sequences = Sequences::default();
    match m.score(t) {
        Err(ScoreError::Failed(msg)) => assert!(msg.contains("card_seq"), "{msg}"),
        other => panic!("expected a typed failure, got {other:?}"),
    }
    // A sequence of another width is refused before the run.
    let q = Sequence::new("card_seq", N, 4, 1, vec![0.0; N * 4]).unwrap();
    t.sequences = Sequences::new(vec![q]);
    match m.score(t) {
        Err(ScoreError::Failed(msg)) => assert!(msg.contains("dimension 2"), "{msg}"),
        other => panic!("expected a typed failure, got {other:?}"),
    }
}

#[test]
fn the_sequence_tier_from_risk_toml_scores_the_engines_sequences() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/risk_sequence.toml");
    // The runtime named in the file, as a deployment without ORT_DYLIB_PATH would.
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "kind = \"onnx\"\n",
        &format!("kind = \"onnx\"\nruntime = {:?}\n", onnxruntime()),
    );
    let mut reg = risk_core::ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let e = Engine::from_toml_str(&text, path.parent().unwrap(), &path, &reg)
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(e.schema().fingerprint(), schema().fingerprint());
    // The same model called directly on tensors the state computes alone: the engine's
    // fast-tier score must be the model's on the engine's own sequences.
    let direct = OnnxScorer::load(&cfg(all_inputs()), &schema()).unwrap();
    let st = risk_core::state::StateEngine::new(sequence_config(), schema(), {
        let c = risk_core::ManualClock::new();
        c.set_unix_origin_ms(i64::MAX / 4);
        c
    })
    .unwrap();
    let rows = generate_raw(&SynthConfig::new(3, 3_000));
    let (mut fast, mut longest) = (0, 0);
    for r in &rows {
        let d = e.decide(&r.txn).unwrap();
        let mut t = r.txn.clone();
        st.apply(&mut t);
        longest = longest.max(t.sequences.get("card_seq").unwrap().len());
        let want = direct.score(&t).unwrap().probability;
        if d.tier == Tier::Fast {
            fast += 1;
            let got = d.model_score.unwrap();
            assert!((got - want).abs() <= 1e-5, "engine {got} vs direct {want}");
        }
    }
    assert!(
        fast > rows.len() / 2,
        "the sequence tier answered {fast} of {}",
        rows.len()
    );
    assert!(longest > 5, "cards had histories ({longest} rows)");
}
