//! The default rule set over the synthetic data: compiles, matches the interpreter, fires
//! on fraud far more than on normal traffic, and impact analysis reports a change.

use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Engine, Policy, ScorerRegistry};
use risk_rules::{impact, Hits, RuleSet, DEFAULT_RULES};
use std::path::Path;

#[test]
fn default_rules_compile_and_have_sixty_or_more_rules() {
    let s = schema();
    let set = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap();
    assert!(set.rules().len() >= 60, "{}", set.rules().len());
    assert!(set.rules().iter().filter(|r| r.hard).count() >= 4);
    assert!(set.rules().iter().any(|r| !r.enabled));
}

#[test]
fn default_rules_separate_fraud_and_agree_with_the_interpreter() {
    let s = schema();
    let set = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap();
    let rows = generate(&SynthConfig::new(11, 20_000));
    let (mut h1, mut h2) = (Hits::new(), Hits::new());
    let (mut fraud, mut fraud_hit, mut normal, mut normal_hit) = (0, 0, 0, 0);
    let mut score_fraud = 0.0;
    let mut score_normal = 0.0;
    for r in &rows {
        let a = set.evaluate(&r.txn.features, &mut h1);
        let b = set.evaluate_reference(&r.txn.features, &mut h2);
        assert_eq!(a, b);
        assert_eq!(h1.indices(), h2.indices());
        let flagged =
            a.score >= 0.3 || a.directive.is_some_and(|d| d != risk_core::Action::Approve);
        if r.is_fraud {
            fraud += 1;
            fraud_hit += flagged as u32;
            score_fraud += a.score as f64;
        } else {
            normal += 1;
            normal_hit += flagged as u32;
            score_normal += a.score as f64;
        }
    }
    let (tpr, fpr) = (
        fraud_hit as f64 / fraud as f64,
        normal_hit as f64 / normal as f64,
    );
    assert!(tpr > 0.5, "recall {tpr}");
    assert!(fpr < 0.05, "false positive rate {fpr}");
    assert!(score_fraud / fraud as f64 > 5.0 * score_normal / normal as f64);
}

#[test]
fn impact_of_a_tightened_rule() {
    let s = schema();
    let serving = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap();
    let candidate_src = DEFAULT_RULES.replace(
        "when txn_count_1h >= 4\n  score 0.25",
        "when txn_count_1h >= 2\n  score 0.45",
    );
    assert_ne!(candidate_src, DEFAULT_RULES);
    let candidate = RuleSet::compile(&candidate_src, "candidate.rules", &s).unwrap();
    let rows: Vec<_> = generate(&SynthConfig::new(5, 10_000))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    let rep = impact(&serving, &candidate, &rows, &Policy::default(), 5);
    assert_eq!(rep.transactions, 10_000);
    assert!(rep.changed > 0);
    assert_eq!(rep.examples.len(), 5);
    let top = &rep.rules[0];
    assert_eq!(top.id, "R_VEL_1H_4");
    assert!(top.candidate > top.serving);
    // Only that rule's counts change.
    assert!(rep.rules[1..].iter().all(|d| d.serving == d.candidate));
    assert!(rep.to_string().contains("R_VEL_1H_4"));
    // Identical sets change nothing.
    let same = impact(&serving, &serving, &rows, &Policy::default(), 5);
    assert_eq!((same.changed, same.examples.len()), (0, 0));
}

#[test]
fn risk_toml_can_name_a_rule_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        "{}[rules.scorer]\nkind = \"rules\"\npath = \"rules/default.rules\"\n",
        schema().to_toml()
    );
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    let e = Engine::from_toml_str(&text, dir, Path::new("risk.toml"), &reg).unwrap();
    let row = &generate(&SynthConfig::new(1, 10))[0];
    assert!(e.decide(&row.txn).is_ok());
    // A bad path names the key.
    let bad = text.replace("rules/default.rules", "rules/nope.rules");
    let err = Engine::from_toml_str(&bad, dir, Path::new("risk.toml"), &reg).unwrap_err();
    assert_eq!(err.key(), Some("rules.scorer"), "{err}");
}
