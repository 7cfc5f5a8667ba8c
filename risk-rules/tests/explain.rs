//! The explain API: each rule's outcome and the sub-condition that decided it, with the
//! values read and its position in the file.

use crate::golden::schema;
use risk_rules::{FieldValue, RuleSet};

const SRC: &str = r#"version "ex-1"
policy first_hit
rule BIG_RISKY { when amount > 100 && (country == "NG" || velocity >= 5) review priority 9 }
rule NOT_HIGH { when !(country in ["NG", "RU"]) && ratio < 2 score 0.1 priority 5 }
rule WATCH { when velocity >= 1 score 0.9 shadow }
rule OLD { when amount > 0 score 0.2 disabled }
rule ALWAYS { when true score 0.01 }
"#;

fn row(amount: f32, country: &str, velocity: Option<f32>, ratio: f32) -> risk_core::Features {
    let s = schema();
    let mut f = s.features();
    f.set_numeric("amount", amount).unwrap();
    f.set_categorical("country", country).unwrap();
    match velocity {
        Some(v) => f.set_numeric("velocity", v).unwrap(),
        None => f.set_missing("velocity").unwrap(),
    }
    f.set_numeric("ratio", ratio).unwrap();
    f
}

#[test]
fn explain_names_the_deciding_sub_condition_with_its_values() {
    let set = RuleSet::compile(SRC, "ex.rules", &schema()).unwrap();
    let e = set.explain(&row(50.0, "NG", None, 1.0));
    assert_eq!(e.version, "ex-1");
    // Evaluation order: live by priority, shadow, then disabled.
    let ids: Vec<&str> = e.rules.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["BIG_RISKY", "NOT_HIGH", "ALWAYS", "WATCH", "OLD"]);

    let big = e.rule("BIG_RISKY").unwrap();
    assert!(!big.fired && !big.counted);
    let d = big.decided_by.as_ref().unwrap();
    assert_eq!(d.condition, "amount > 100");
    assert!(!d.holds);
    assert_eq!((d.line, d.col), (3, 23));
    assert_eq!(d.values, [("amount".to_string(), FieldValue::Num(50.0))]);

    // A negated list: the inner `in` held, so the rule did not fire.
    let nh = e.rule("NOT_HIGH").unwrap();
    assert!(!nh.fired);
    let d = nh.decided_by.as_ref().unwrap();
    assert_eq!(d.condition, "country in [\"NG\", \"RU\"]");
    assert!(d.holds);
    assert_eq!(
        d.values,
        [("country".to_string(), FieldValue::Category("NG".into()))]
    );

    // Missing values are shown as such; the shadow rule did not count.
    let w = e.rule("WATCH").unwrap();
    assert!(w.shadow && !w.fired);
    assert_eq!(
        w.decided_by.as_ref().unwrap().values[0].1,
        FieldValue::Missing
    );
    let old = e.rule("OLD").unwrap();
    assert!(old.disabled && !old.fired && old.decided_by.is_none());
    // A constant condition fired with nothing to show; it is the first hit here.
    let always = e.rule("ALWAYS").unwrap();
    assert!(always.fired && always.counted && always.steps.is_empty());
}

#[test]
fn explain_agrees_with_evaluate_and_shows_every_step() {
    let set = RuleSet::compile(SRC, "ex.rules", &schema()).unwrap();
    let f = row(500.0, "US", Some(7.0), 3.0);
    let e = set.explain(&f);
    let big = e.rule("BIG_RISKY").unwrap();
    assert!(big.fired && big.counted);
    let steps: Vec<(&str, bool)> = big
        .steps
        .iter()
        .map(|s| (s.condition.as_str(), s.holds))
        .collect();
    assert_eq!(
        steps,
        [
            ("amount > 100", true),
            ("country == \"NG\"", false),
            ("velocity >= 5", true)
        ]
    );
    assert_eq!(big.decided_by.as_ref().unwrap().condition, "velocity >= 5");
    // Under first_hit only the first live hit counts; the shadow rule fired apart.
    assert!(!e.rule("ALWAYS").unwrap().counted && e.rule("ALWAYS").unwrap().fired);
    assert!(e.rule("WATCH").unwrap().fired && !e.rule("WATCH").unwrap().counted);
    let mut h = risk_rules::Hits::new();
    set.evaluate(&f, &mut h);
    let counted: Vec<&str> = e
        .rules
        .iter()
        .filter(|r| r.counted)
        .map(|r| r.id.as_str())
        .collect();
    let evaluated: Vec<&str> = h
        .indices()
        .iter()
        .map(|&i| set.rules()[i as usize].id.as_str())
        .collect();
    assert_eq!(counted, evaluated);
    let json = e.to_json();
    assert!(json.contains("\"decided_by\""), "{json}");
}
