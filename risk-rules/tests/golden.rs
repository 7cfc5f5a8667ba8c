//! Replays `testdata/rules/expressions.toml`: values and errors with positions.

use risk_core::{FeatureSchema, Features};
use risk_rules::{Expression, RuleSet, Value};
use std::path::Path;
use std::sync::Arc;

pub fn schema() -> Arc<FeatureSchema> {
    FeatureSchema::builder()
        .numeric_required("amount")
        .numeric("velocity")
        .numeric("ratio")
        .categorical("country", &["US", "GB", "NG", "RU"])
        .categorical("channel", &["pos", "ecom", "app"])
        .categorical("ip_country", &["GB", "US", "FR"])
        .build()
        .unwrap()
}

fn features(s: &Arc<FeatureSchema>, input: Option<&toml::Table>) -> Features {
    let mut f = s.features();
    for (k, v) in input.into_iter().flatten() {
        let slot = s
            .slot(k)
            .unwrap_or_else(|| panic!("test input names unknown field {k}"));
        let val = match v {
            toml::Value::String(x) if x == "missing" => f32::NAN,
            toml::Value::String(x) if x == "other" => risk_core::schema::OTHER as f32,
            toml::Value::String(x) => s.field(slot).lookup(x).expect("vocab value") as f32,
            toml::Value::Integer(i) => *i as f32,
            toml::Value::Float(x) => *x as f32,
            other => panic!("bad input {other}"),
        };
        f.values_mut()[slot.index()] = val;
    }
    f
}

#[test]
fn golden_vectors() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/rules/expressions.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let consts = doc["consts"].as_str().unwrap();
    let cases = doc["case"].as_array().unwrap();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let s = schema();
    let mut kinds = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let c = c.as_table().unwrap();
        let (label, result) = if let Some(expr) = c.get("expr").and_then(|v| v.as_str()) {
            (
                expr.to_owned(),
                Expression::compile(expr, consts, &s).map(Some),
            )
        } else {
            let file = c["file"].as_str().unwrap();
            (
                file.to_owned(),
                RuleSet::compile(file, "case.rules", &s).map(|_| None),
            )
        };
        match (c.get("error"), result) {
            (Some(kind), Err(e)) => {
                kinds.insert(e.kind.name());
                if e.kind.name() != kind.as_str().unwrap() {
                    failures.push(format!("#{i} {label:?}: expected {kind}, got {e}"));
                    continue;
                }
                if let Some(at) = c.get("at").and_then(|v| v.as_array()) {
                    let want = (
                        at[0].as_integer().unwrap() as usize,
                        at[1].as_integer().unwrap() as usize,
                    );
                    if (e.line, e.col) != want {
                        failures.push(format!("#{i} {label:?}: expected at {want:?}, got {e}"));
                    }
                }
                // Every error renders with its position and a caret.
                let shown = e.to_string();
                assert!(
                    shown.contains(&format!(":{}:{}:", e.line, e.col)) && shown.contains('^'),
                    "{shown}"
                );
            }
            (Some(kind), Ok(_)) => {
                failures.push(format!("#{i} {label:?}: expected error {kind}, compiled"))
            }
            (None, Err(e)) => failures.push(format!("#{i} {label:?}: unexpected error {e}")),
            (None, Ok(expr)) => {
                let expr = expr.expect("value cases are expressions");
                let f = features(&s, c.get("input").and_then(|v| v.as_table()));
                let got = expr.eval(&f);
                assert_eq!(
                    format!("{got:?}"),
                    format!("{:?}", expr.eval_reference(&f)),
                    "#{i} {label:?}: compiled and reference disagree"
                );
                let want = match &c["expect"] {
                    toml::Value::Boolean(b) => Value::Bool(*b),
                    toml::Value::String(x) if x == "missing" => Value::Missing,
                    toml::Value::Integer(n) => Value::Num(*n as f32),
                    toml::Value::Float(x) => Value::Num(*x as f32),
                    other => panic!("bad expect {other}"),
                };
                let ok = match (got, want) {
                    (Value::Num(a), Value::Num(b)) => (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    (a, b) => a == b,
                };
                if !ok {
                    failures.push(format!("#{i} {label:?}: expected {want:?}, got {got:?}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Every error kind that a source text can produce is covered.
    for k in [
        "unexpected_char",
        "unterminated_string",
        "bad_number",
        "expected",
        "unknown_field",
        "unknown_function",
        "wrong_arity",
        "type_mismatch",
        "unknown_category",
        "duplicate_rule",
        "duplicate_const",
        "missing_clause",
        "duplicate_clause",
        "invalid_value",
        "too_deep",
    ] {
        assert!(kinds.contains(k), "no golden case for error kind {k}");
    }
}
