//! The rule tier: 100 rules (collect-all) over one transaction, against the same 100
//! conditions in zen-expression (GoRules), precompiled, in the same run; compile time.

use criterion::{black_box, Criterion};
use risk_core::synth::{generate, schema, Rng, SynthConfig, COUNTRIES, MCCS};
use risk_rules::{Hits, RuleSet, DEFAULT_RULES};
use zen_expression::vm::VM;
use zen_expression::{Isolate, Scope, Variable};

const NUMERIC: [(&str, &[f64], &[&str]); 14] = [
    ("amount", &[20.0, 100.0, 250.0, 1000.0], &[">", ">="]),
    ("txn_count_1h", &[2.0, 3.0, 5.0], &[">="]),
    ("txn_count_24h", &[5.0, 10.0, 20.0], &[">="]),
    ("small_count_1h", &[1.0, 3.0], &[">="]),
    ("device_new", &[1.0], &["=="]),
    ("is_foreign", &[1.0, 0.0], &["=="]),
    ("amount_ratio", &[2.0, 4.0, 8.0], &[">="]),
    ("merchant_txn_count_1h", &[3.0, 6.0], &[">="]),
    ("hour", &[5.0, 22.0], &["<", ">="]),
    ("distinct_countries_24h", &[2.0], &[">="]),
    ("card_age_days", &[60.0, 365.0], &["<"]),
    ("high_risk_country", &[1.0], &["=="]),
    ("amount_sum_24h", &[500.0, 2000.0], &[">"]),
    ("secs_since_last", &[60.0, 600.0], &["<"]),
];

/// 100 conditions of 1–5 comparisons each (about 300 in all), in both syntaxes.
pub fn conditions() -> Vec<(String, String)> {
    let mut r = Rng::new(100);
    (0..100)
        .map(|_| {
            let n = 1 + r.below(5);
            let mut ours = Vec::new();
            let mut zen = Vec::new();
            for _ in 0..n {
                match r.below(10) {
                    0 => {
                        let cs: Vec<String> = (0..3)
                            .map(|_| format!("\"{}\"", COUNTRIES[r.below(16) as usize]))
                            .collect();
                        let t = format!("country in [{}]", cs.join(", "));
                        ours.push(t.clone());
                        zen.push(t);
                    }
                    1 => {
                        let ms: Vec<String> = (0..2)
                            .map(|_| format!("\"{:04}\"", MCCS[r.below(14) as usize].0))
                            .collect();
                        let t = format!("mcc in [{}]", ms.join(", "));
                        ours.push(t.clone());
                        zen.push(t);
                    }
                    2 => {
                        let c = ["pos", "ecom", "app", "atm"][r.below(4) as usize];
                        ours.push(format!("channel == \"{c}\""));
                        zen.push(format!("channel == \"{c}\""));
                    }
                    _ => {
                        let (f, ks, ops) = NUMERIC[r.below(NUMERIC.len() as u64) as usize];
                        let k = ks[r.below(ks.len() as u64) as usize];
                        let op = ops[r.below(ops.len() as u64) as usize];
                        ours.push(format!("{f} {op} {k}"));
                        zen.push(format!("{f} {op} {k}"));
                    }
                }
            }
            (ours.join(" && "), zen.join(" and "))
        })
        .collect()
}

/// The 100 conditions as a rule file (collect-all, sum).
pub fn rule_file(conds: &[(String, String)]) -> String {
    let mut src = String::from("version \"bench-100\"\npolicy collect_all sum cap 1.0\n");
    for (i, (c, _)) in conds.iter().enumerate() {
        src += &format!("rule R{i:03} {{ when {c} score 0.05 }}\n");
    }
    src
}

/// A synthetic online transaction with every feature present (zen has no NaN).
fn full_row() -> risk_core::Transaction {
    generate(&SynthConfig::new(42, 5_000))
        .into_iter()
        .map(|r| r.txn)
        .find(|t| {
            t.features.values().iter().all(|v| !v.is_nan())
                && t.features.by_name("txn_count_1h") >= Some(2.0)
        })
        .expect("a complete row")
}

fn zen_context(t: &risk_core::Transaction) -> Variable {
    zen_context_of(&t.features)
}

/// A row as zen-expression's input: categorical ids as their strings, numbers as numbers.
pub fn zen_context_of(features: &risk_core::Features) -> Variable {
    let s = features.schema();
    let mut m = serde_json::Map::new();
    for (f, &v) in s.fields().iter().zip(features.values()) {
        let val = match f.kind {
            risk_core::FieldKind::Categorical => {
                serde_json::Value::String(f.value_of(v as u32).unwrap_or("").to_owned())
            }
            risk_core::FieldKind::Numeric => serde_json::json!(v as f64),
        };
        m.insert(f.name.clone(), val);
    }
    serde_json::Value::Object(m).into()
}

pub fn evaluate(c: &mut Criterion) {
    let s = schema();
    let conds = conditions();
    let comparisons: usize = conds.iter().map(|c| c.0.matches(" && ").count() + 1).sum();
    let set = RuleSet::compile(&rule_file(&conds), "bench.rules", &s).unwrap();
    let interpreted = RuleSet::compile(&rule_file(&conds), "bench.rules", &s).unwrap();
    let default = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap();
    set.native().expect("native code on this host");
    default.native().expect("native code on this host");
    let t = full_row();

    // zen: compile once, one reused VM and scope; the input is built outside the loop.
    let compiled: Vec<_> = conds
        .iter()
        .map(|(_, z)| Isolate::new().compile_standard(z).expect("zen compiles"))
        .collect();
    let scope = Scope::new(zen_context(&t));
    let mut vm = VM::new();
    let zen_hits = |vm: &mut VM| {
        compiled
            .iter()
            .filter(|e| matches!(e.evaluate_with_scope(&scope, vm), Ok(Variable::Bool(true))))
            .count()
    };
    // Both engines agree on which conditions hold.
    let mut hits = Hits::new();
    let ours = set.evaluate(&t.features, &mut hits).hits;
    assert_eq!(ours, zen_hits(&mut vm), "risk-rules and zen disagree");
    println!("rules/100: {comparisons} comparisons, {ours} of 100 rules fire on the bench row");

    let mut g = c.benchmark_group("rules");
    g.bench_function("risk_rules_100_collect_all", |b| {
        b.iter(|| black_box(set.evaluate(black_box(&t.features), &mut hits)))
    });
    g.bench_function("risk_rules_100_collect_all_interpreter", |b| {
        b.iter(|| black_box(interpreted.evaluate(black_box(&t.features), &mut hits)))
    });
    g.bench_function("zen_expression_100_precompiled", |b| {
        b.iter(|| black_box(zen_hits(&mut vm)))
    });
    g.bench_function("risk_rules_default_set_63", |b| {
        b.iter(|| black_box(default.evaluate(black_box(&t.features), &mut hits)))
    });
    // The default set over varied synthetic rows, bare and through the rule tier's
    // Scorer (atomic set load, reason codes).
    let rows: Vec<_> = generate(&SynthConfig::new(9, 1024))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    let mut i = 0;
    g.bench_function("risk_rules_default_set_63_varied_rows", |b| {
        b.iter(|| {
            i = (i + 1) % rows.len();
            black_box(default.evaluate(black_box(&rows[i].features), &mut hits))
        })
    });
    let scorer = risk_rules::RuleScorer::new(
        RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap(),
        s.clone(),
    );
    scorer.current().native().expect("native code on this host");
    g.bench_function("rule_scorer_default_set_63_varied_rows", |b| {
        b.iter(|| {
            i = (i + 1) % rows.len();
            black_box(risk_core::Scorer::score(&scorer, black_box(&rows[i])).unwrap())
        })
    });
    // The same with ten shadow rules added: what shadow evaluation and recording cost.
    let mut shadowed = DEFAULT_RULES.to_owned();
    for i in 0..10 {
        shadowed += &format!(
            "rule S_SHADOW_{i} {{ when amount > {} && txn_count_1h >= {} score 0.1 shadow }}\n",
            50 * (i + 1),
            i % 3
        );
    }
    let shadow_scorer = risk_rules::RuleScorer::new(
        RuleSet::compile(&shadowed, "default+shadow.rules", &s).unwrap(),
        s.clone(),
    );
    shadow_scorer
        .current()
        .native()
        .expect("native code on this host");
    g.bench_function(
        "rule_scorer_default_set_63_plus_10_shadow_varied_rows",
        |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                black_box(risk_core::Scorer::score(&shadow_scorer, black_box(&rows[i])).unwrap())
            })
        },
    );
    let src = rule_file(&conds);
    g.bench_function("compile_100_rules", |b| {
        b.iter(|| black_box(RuleSet::compile(black_box(&src), "bench.rules", &s).unwrap()))
    });
    g.bench_function("compile_100_rules_and_native_code", |b| {
        b.iter(|| {
            let set = RuleSet::compile(black_box(&src), "bench.rules", &s).unwrap();
            set.native().unwrap();
            black_box(set)
        })
    });
    g.finish();
}
