//! Static checks: rules that can never fire, rules made redundant by a higher-priority
//! hard decline (or unreachable under first_hit), duplicates; warnings with
//! file:line:col, and none on sound rules.

use crate::golden::schema;
use risk_rules::{RuleSet, WarningKind, DEFAULT_RULES};

fn warnings(src: &str) -> Vec<(String, WarningKind, String)> {
    RuleSet::compile(src, "lint.rules", &schema())
        .unwrap()
        .warnings()
        .iter()
        .map(|w| (w.rule.clone(), w.kind.clone(), w.to_string()))
        .collect()
}

#[test]
fn contradictions_are_reported_with_their_position() {
    let w = warnings(
        r#"
rule NUM { when amount > 500 && velocity > 1 && amount < 100 score 0.1 }
rule EDGE { when amount > 100 && amount <= 100 score 0.1 }
rule CAT { when country == "US" && country == "GB" score 0.1 }
rule LIST { when channel == "pos" && channel in ["ecom", "app"] score 0.1 }
rule LISTS { when country in ["US", "GB"] && country in ["NG"] score 0.1 }
rule FALSE { when false score 0.1 }
rule FINE { when amount > 100 && amount < 200 && country in ["US", "GB"] && country != "US" score 0.1 }
rule NOT_SIMPLE { when !(country in ["US"]) && country == "US" score 0.1 }
"#,
    );
    let never: Vec<&str> = w
        .iter()
        .filter(|x| x.1 == WarningKind::NeverFires)
        .map(|x| x.0.as_str())
        .collect();
    assert_eq!(never, ["NUM", "EDGE", "CAT", "LIST", "LISTS", "FALSE"]);
    assert_eq!(w.len(), 6, "{w:?}");
    assert!(
        w[0].2
            .starts_with("lint.rules:2:6: warning: rule NUM: its tests on `amount` contradict"),
        "{}",
        w[0].2
    );
}

#[test]
fn redundancy_under_a_hard_decline_and_first_hit() {
    let w = warnings(
        r#"
rule BLOCK { when amount > 1000 && country in ["NG", "RU"] decline hard priority 10 }
rule BIG_NG { when amount > 5000 && country == "NG" && velocity > 2 score 0.3 }
rule BIG { when amount > 5000 score 0.3 }
rule SAME { when amount > 5000 score 0.4 }
"#,
    );
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0].0, "BIG_NG");
    assert_eq!(w[0].1, WarningKind::Redundant("BLOCK".into()));
    assert_eq!(w[1].0, "SAME");
    assert_eq!(w[1].1, WarningKind::Duplicate("BIG".into()));
    // A review (not decline) hard rule does not make others redundant under collect-all;
    // under first_hit any earlier rule it implies does.
    let w = warnings(
        r#"
policy first_hit
rule FIRST { when amount > 1000 score 0.5 priority 5 }
rule LATER { when amount >= 2000 && channel == "ecom" score 0.9 }
rule OTHER { when amount >= 2000 || channel == "ecom" score 0.9 }
"#,
    );
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1, WarningKind::Redundant("FIRST".into()));
    assert!(w[0].2.contains("unreachable under first_hit"), "{}", w[0].2);
}

#[test]
fn the_default_rule_set_has_no_warnings() {
    let s = risk_core::synth::schema();
    let set = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap();
    let w: Vec<String> = set.warnings().iter().map(|w| w.to_string()).collect();
    assert!(w.is_empty(), "{w:#?}");
}
