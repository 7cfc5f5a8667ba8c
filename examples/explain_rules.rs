//! Why a rule did or did not fire: the default rule set on a few synthetic transactions,
//! each rule's outcome with the sub-condition that decided it and the values it read.
//!
//! ```text
//! cargo run --release --example explain_rules
//! cargo run --release --example explain_rules -- R_CARD_TESTING   # one rule, why / why not
//! ```

use risk_core::synth::{generate, schema, SynthConfig};
use risk_rules::{FieldValue, RuleSet, DEFAULT_RULES};

fn show(v: &FieldValue) -> String {
    match v {
        FieldValue::Num(n) => format!("{n}"),
        FieldValue::Category(c) => format!("{c:?}"),
        FieldValue::Other => "(outside the vocabulary)".into(),
        FieldValue::Missing => "(missing)".into(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let only = std::env::args().nth(1);
    let s = schema();
    let set = RuleSet::compile(DEFAULT_RULES, "default.rules", &s)?;
    if let Some(id) = &only {
        if !set.rules().iter().any(|r| &r.id == id) {
            return Err(format!("no rule {id} in default.rules").into());
        }
    }
    let rows = generate(&SynthConfig::new(5, 2_000));
    // Two transactions with hits and one without.
    let mut picked: Vec<_> = rows
        .iter()
        .filter(|r| {
            let e = set.explain(&r.txn.features);
            e.rules.iter().any(|x| x.counted)
        })
        .take(2)
        .collect();
    picked.extend(
        rows.iter()
            .find(|r| !set.explain(&r.txn.features).rules.iter().any(|x| x.fired)),
    );
    for r in picked {
        let e = set.explain(&r.txn.features);
        let fired: Vec<&str> = e
            .rules
            .iter()
            .filter(|x| x.counted)
            .map(|x| x.id.as_str())
            .collect();
        println!(
            "txn {} ({} {:.2}): rules {} ({}) fired: {:?}",
            r.txn.id.0,
            r.txn.currency.as_str(),
            r.txn.amount,
            e.version,
            e.hash,
            fired
        );
        for x in &e.rules {
            if only.as_ref().is_some_and(|id| id != &x.id)
                || (only.is_none() && !x.fired && x.steps.len() < 2)
            {
                continue;
            }
            let verdict = if x.disabled {
                "disabled".to_string()
            } else if x.fired {
                "FIRED".to_string()
            } else {
                "did not fire".to_string()
            };
            match &x.decided_by {
                Some(d) => {
                    let vals: Vec<String> = d
                        .values
                        .iter()
                        .map(|(k, v)| format!("{k} = {}", show(v)))
                        .collect();
                    println!(
                        "  {:<24} {verdict:<13} decided by `{}` ({}) at default.rules:{}:{}  [{}]",
                        x.id,
                        d.condition,
                        d.holds,
                        d.line,
                        d.col,
                        vals.join(", ")
                    );
                }
                None => println!("  {:<24} {verdict}", x.id),
            }
        }
    }
    Ok(())
}
