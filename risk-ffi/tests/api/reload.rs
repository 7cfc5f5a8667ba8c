//! `risk_engine_reload_rules` reloads the rule tier's file, also when the fast tier is a
//! rule set too (it reloaded whichever `rules` scorer the config built last: the fast one).

use crate::*;
use risk_ffi::risk_result::*;

const TXN: &str = r#"{"amount": 10, "currency": "USD"}"#;

fn rules(version: &str, score: f32) -> String {
    format!("version \"{version}\"\nrule R {{ when amount > 0 score {score} }}\n")
}

const BROKEN: &str = "version \"broken\"\nrule R { when amount >\n";

fn scores(e: *const risk_engine) -> (f32, f32) {
    let (r, d) = decide_json(e, TXN);
    assert_eq!(r, RISK_OK, "{}", last_error());
    (d.rule_score, d.model_score)
}

fn reload(e: *const risk_engine) -> risk_result {
    // SAFETY: `e` is any handle value (the registry refuses one that is not live).
    unsafe { risk_engine_reload_rules(e) }
}

#[test]
fn reload_touches_the_rule_tier_not_a_fast_tier_of_kind_rules() {
    let dir = scratch("reload_two_rule_sets");
    std::fs::write(dir.join("tier.rules"), rules("tier-1", 0.2)).unwrap();
    std::fs::write(dir.join("fast.rules"), rules("fast-1", 0.6)).unwrap();
    let toml = config("rules_file.toml", &[("RULES_FILE", "tier.rules")])
        + "[fast.scorer]\nkind = \"rules\"\npath = \"fast.rules\"\n";
    let e = engine(&toml, &dir).unwrap();
    assert_eq!(scores(e), (0.2, 0.6));

    // A new rule-tier file is picked up; the fast tier's is not read.
    std::fs::write(dir.join("tier.rules"), rules("tier-2", 0.4)).unwrap();
    std::fs::write(dir.join("fast.rules"), BROKEN).unwrap();
    assert_eq!(reload(e), RISK_OK, "{}", last_error());
    assert_eq!(scores(e), (0.4, 0.6));

    // A rule-tier file that does not compile is refused and the serving rules stay.
    std::fs::write(dir.join("tier.rules"), BROKEN).unwrap();
    std::fs::write(dir.join("fast.rules"), rules("fast-2", 0.8)).unwrap();
    assert_eq!(reload(e), RISK_ERR_RELOAD);
    assert!(last_error().contains("tier.rules"), "{}", last_error());
    assert_eq!(scores(e), (0.4, 0.6));
    free_engine(e);
}

#[test]
fn a_fast_tier_of_kind_rules_is_not_a_rule_file_to_reload() {
    let dir = scratch("reload_fast_only");
    std::fs::write(dir.join("fast.rules"), rules("fast-1", 0.6)).unwrap();
    let toml = minimal() + "[fast.scorer]\nkind = \"rules\"\npath = \"fast.rules\"\n";
    let e = engine(&toml, &dir).unwrap();
    assert_eq!(reload(e), RISK_ERR_RELOAD);
    assert!(last_error().contains("no rule file"), "{}", last_error());
    free_engine(e);
}
