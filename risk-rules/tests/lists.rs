//! `key in list.name`: rules read entity-state lists through the engine.

use risk_core::state::{KeySource, ListDef, StateConfig};
use risk_core::*;
use risk_rules::{RuleScorer, RuleSet};
use std::sync::Arc;

const RULES: &str = r#"
version "lists-1"
policy first_hit
rule BLOCKED { when device in list.blocked_devices  decline  hard }
rule NOT_VIP { when !(email in list.vip_emails) && amount > 500  review }
"#;

fn setup() -> (Engine, Arc<FeatureSchema>) {
    let cfg = StateConfig {
        lists: vec![
            ListDef {
                name: "blocked_devices".into(),
                key: KeySource::Device,
                file: None,
            },
            ListDef {
                name: "vip_emails".into(),
                key: KeySource::Email,
                file: None,
            },
        ],
        ..StateConfig::default()
    };
    let s = cfg
        .extend_schema(FeatureSchema::builder().numeric_required("amount"))
        .build()
        .unwrap();
    let rules = RuleScorer::new(
        RuleSet::compile(RULES, "lists.rules", &s).unwrap(),
        Arc::clone(&s),
    );
    let e = Engine::builder(Arc::clone(&s))
        .rules(Arc::new(rules))
        .state(cfg)
        .build()
        .unwrap();
    (e, s)
}

fn txn(s: &Arc<FeatureSchema>, device: u64, email: &str, amount: f64) -> Transaction {
    Transaction::builder(s)
        .id(1)
        .amount(amount, "USD")
        .device(device)
        .email(email)
        .build()
        .unwrap()
}

#[test]
fn rules_read_lists_and_see_changes_at_once() {
    let (e, s) = setup();
    let d = e.decide(&txn(&s, 42, "a@x.com", 20.0)).unwrap();
    assert_eq!(d.action, Action::Approve);
    e.lists()
        .unwrap()
        .add("blocked_devices", "42", None)
        .unwrap();
    let d = e.decide(&txn(&s, 42, "a@x.com", 20.0)).unwrap();
    assert_eq!((d.action, d.hard_rule), (Action::Decline, true));
    // Negation: not a VIP and a large amount.
    assert_eq!(
        e.decide(&txn(&s, 1, "a@x.com", 900.0)).unwrap().action,
        Action::Review
    );
    e.lists()
        .unwrap()
        .add("vip_emails", "A@X.com", None)
        .unwrap();
    assert_eq!(
        e.decide(&txn(&s, 1, "a@x.com", 900.0)).unwrap().action,
        Action::Approve
    );
}

#[test]
fn a_list_of_other_keys_or_no_list_is_a_compile_error() {
    let (_, s) = setup();
    let e = RuleSet::compile(
        "rule R { when ip in list.blocked_devices decline }",
        "x.rules",
        &s,
    )
    .unwrap_err();
    assert!(e.to_string().contains("device keys"), "{e}");
    let e =
        RuleSet::compile("rule R { when device in list.nope decline }", "x.rules", &s).unwrap_err();
    assert!(e.to_string().contains("list.nope"), "{e}");
}
