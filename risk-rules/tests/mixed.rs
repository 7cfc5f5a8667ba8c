//! The mixed benchmark rule set (`testdata/rules/mixed_100.rules`): generated here, with
//! the same conditions in zen-expression syntax (`mixed_100.zen`) and as a hand-written
//! style Rust if-chain (`benches/rules_mixed_ifchain.rs`). The test regenerates all
//! three and fails if a committed file differs; `RISK_BLESS_RULES=1 cargo test -p
//! risk-rules --test rules mixed` rewrites them. It also checks the set's shape (the
//! proportions of OR / NOT, field-vs-field and arithmetic rules the benchmark promises)
//! and that the compiled set equals the reference interpreter on the benchmark rows.

use risk_core::synth::{wide_rows, wide_schema, COUNTRIES, CURRENCIES, DEVICE_OS, MCCS};
use risk_core::FeatureSchema;
use risk_rules::{Hits, RuleSet};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Thresholds analysts would write, per numeric field: (field, constants, operators).
const NUMERIC: [(&str, &[f64], &[&str]); 22] = [
    (
        "amount",
        &[20.0, 100.0, 250.0, 1000.0, 2500.0],
        &[">", ">=", "<"],
    ),
    ("hour", &[1.0, 5.0, 22.0], &["<", ">="]),
    ("is_foreign", &[1.0], &["=="]),
    ("device_new", &[1.0, 0.0], &["==", "!="]),
    ("txn_count_1h", &[2.0, 3.0, 5.0], &[">=", ">"]),
    ("txn_count_24h", &[5.0, 10.0, 20.0], &[">="]),
    ("amount_sum_24h", &[500.0, 2000.0, 5000.0], &[">"]),
    ("small_count_1h", &[1.0, 3.0], &[">="]),
    ("distinct_countries_24h", &[2.0, 3.0], &[">="]),
    ("secs_since_last", &[30.0, 60.0, 600.0], &["<"]),
    ("amount_ratio", &[2.0, 4.0, 8.0], &[">=", ">"]),
    ("card_age_days", &[7.0, 60.0, 365.0], &["<", "<="]),
    ("merchant_txn_count_1h", &[3.0, 6.0], &[">="]),
    ("high_risk_country", &[1.0], &["==", "!="]),
    ("avg_amount_30d", &[50.0, 200.0], &["<", ">"]),
    ("max_amount_30d", &[500.0, 1500.0], &[">"]),
    ("amount_sum_1h", &[300.0, 1000.0], &[">"]),
    ("account_age_days", &[30.0, 90.0], &["<"]),
    ("email_age_days", &[7.0, 30.0], &["<"]),
    ("failed_logins_24h", &[1.0, 3.0], &[">="]),
    ("distinct_devices_7d", &[2.0, 3.0], &[">="]),
    ("chargebacks_90d", &[0.0, 1.0], &[">", ">="]),
];

/// Numeric pairs analysts compare directly: `a op b`.
const PAIRS: [(&str, &str, &[&str]); 6] = [
    ("amount", "max_amount_30d", &[">", ">="]),
    ("amount", "avg_amount_30d", &[">", "<"]),
    ("txn_count_1h", "distinct_merchants_24h", &[">=", ">"]),
    ("distinct_devices_7d", "txn_count_24h", &[">="]),
    ("account_age_days", "card_age_days", &["<", "<="]),
    ("amount_sum_1h", "amount_sum_24h", &[">="]),
];

/// One generated condition.
#[derive(Debug, Clone)]
enum G {
    /// `field op k`
    Num(&'static str, &'static str, f64),
    /// `field == "v"` / `field != "v"`
    Cat(&'static str, bool, String),
    /// `field in [..]`, negated with `!( .. )`
    In(&'static str, Vec<String>, bool),
    /// `a op b` (numeric fields)
    Fvf(&'static str, &'static str, &'static str),
    /// `card_country == ip_country` / `!=`
    CatFvf(&'static str, &'static str, bool),
    /// Arithmetic between fields: `(a ⊕ b) op k` or `a op k * b`.
    Arith(Ar),
    And(Vec<G>),
    Or(Vec<G>),
    Not(Box<G>),
}

#[derive(Debug, Clone)]
enum Ar {
    /// `a op k * b`
    Scaled(&'static str, &'static str, f64, &'static str),
    /// `a - b op k`
    Diff(&'static str, &'static str, &'static str, f64),
    /// `a / b op k` (b is never zero in hand-written code: guarded)
    Ratio(&'static str, &'static str, &'static str, f64),
    /// `a + b op k`
    Total(&'static str, &'static str, &'static str, f64),
}

fn vocab(f: &str) -> Vec<String> {
    match f {
        "country" | "card_country" | "ip_country" => COUNTRIES.map(String::from).to_vec(),
        "currency" => CURRENCIES.map(String::from).to_vec(),
        "mcc" => MCCS.iter().map(|m| format!("{:04}", m.0)).collect(),
        "device_os" => DEVICE_OS.map(String::from).to_vec(),
        "channel" => risk_core::Channel::ALL
            .iter()
            .map(|c| c.as_str().to_owned())
            .collect(),
        _ => unreachable!("{f}"),
    }
}

struct Gen {
    r: risk_core::synth::Rng,
}

impl Gen {
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.r.below(xs.len() as u64) as usize]
    }

    fn num(&mut self) -> G {
        let (f, ks, ops) = self.pick(&NUMERIC);
        G::Num(f, self.pick(ops), self.pick(ks))
    }

    fn list(&mut self, neg: bool) -> G {
        let f = self.pick(&[
            "country",
            "mcc",
            "currency",
            "ip_country",
            "card_country",
            "device_os",
        ]);
        let mut v = vocab(f);
        let n = (2 + self.r.below(19) as usize).min(v.len() - 1);
        let mut out = Vec::new();
        for _ in 0..n {
            let i = self.r.below(v.len() as u64) as usize;
            out.push(v.swap_remove(i));
        }
        G::In(f, out, neg)
    }

    fn cat(&mut self) -> G {
        let f = self.pick(&["channel", "device_os", "country", "currency"]);
        let v = vocab(f);
        let i = self.r.below(v.len() as u64) as usize;
        G::Cat(f, self.r.chance(0.7), v[i].clone())
    }

    fn fvf(&mut self) -> G {
        if self.r.chance(0.3) {
            let (a, b) = self.pick(&[
                ("card_country", "ip_country"),
                ("country", "ip_country"),
                ("card_country", "country"),
            ]);
            return G::CatFvf(a, b, self.r.chance(0.2));
        }
        let (a, b, ops) = self.pick(&PAIRS);
        G::Fvf(a, self.pick(ops), b)
    }

    fn arith(&mut self) -> G {
        G::Arith(match self.r.below(4) {
            0 => Ar::Scaled(
                "amount",
                self.pick(&[">", ">="]),
                self.pick(&[2.0, 3.0, 5.0]),
                self.pick(&["avg_amount_30d", "max_amount_30d"]),
            ),
            1 => Ar::Diff(
                self.pick(&["amount_sum_24h", "max_amount_30d"]),
                "amount",
                ">",
                self.pick(&[200.0, 500.0, 1000.0]),
            ),
            2 => Ar::Ratio(
                self.pick(&["amount", "amount_sum_1h"]),
                "avg_amount_30d",
                self.pick(&[">=", ">"]),
                self.pick(&[3.0, 4.0, 10.0]),
            ),
            _ => Ar::Total(
                "amount",
                "amount_sum_1h",
                ">",
                self.pick(&[800.0, 1500.0, 3000.0]),
            ),
        })
    }

    /// One leaf, by the benchmark's mix of shapes.
    fn atom(&mut self) -> G {
        match self.r.below(20) {
            0..=7 => self.num(),
            8..=9 => self.cat(),
            10..=12 => {
                let neg = self.r.chance(0.35);
                self.list(neg)
            }
            13..=15 => self.fvf(),
            _ => self.arith(),
        }
    }

    fn term(&mut self) -> G {
        match self.r.below(20) {
            0..=5 => {
                let n = 2 + self.r.below(2) as usize;
                G::Or(
                    (0..n)
                        .map(|_| {
                            if self.r.chance(0.3) {
                                G::And(vec![self.atom(), self.atom()])
                            } else {
                                self.atom()
                            }
                        })
                        .collect(),
                )
            }
            6..=7 => {
                let inner = if self.r.chance(0.5) {
                    G::And(vec![self.atom(), self.atom()])
                } else {
                    self.atom()
                };
                G::Not(Box::new(inner))
            }
            _ => self.atom(),
        }
    }

    fn rule(&mut self) -> G {
        let n = 1 + self.r.below(4) as usize;
        let terms: Vec<G> = (0..n).map(|_| self.term()).collect();
        if n == 1 {
            terms.into_iter().next().expect("one term")
        } else {
            G::And(terms)
        }
    }
}

/// The 100 generated conditions (deterministic).
fn conditions() -> Vec<G> {
    let mut g = Gen {
        r: risk_core::synth::Rng::new(20_261_201),
    };
    (0..100).map(|_| g.rule()).collect()
}

fn k(v: f64) -> String {
    format!("{v}")
}

fn quoted(vs: &[String]) -> String {
    vs.iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn arith_text(a: &Ar) -> String {
    match a {
        Ar::Scaled(x, op, m, y) => format!("{x} {op} {} * {y}", k(*m)),
        Ar::Diff(x, y, op, c) => format!("{x} - {y} {op} {}", k(*c)),
        Ar::Ratio(x, y, op, c) => format!("{x} / {y} {op} {}", k(*c)),
        Ar::Total(x, y, op, c) => format!("{x} + {y} {op} {}", k(*c)),
    }
}

/// The condition in the rule language (`zen = false`) or in zen-expression.
fn text(g: &G, zen: bool) -> String {
    let (and, or) = if zen {
        (" and ", " or ")
    } else {
        (" && ", " || ")
    };
    match g {
        G::Num(f, op, c) => format!("{f} {op} {}", k(*c)),
        G::Cat(f, eq, v) => format!("{f} {} \"{v}\"", if *eq { "==" } else { "!=" }),
        G::In(f, vs, false) => format!("{f} in [{}]", quoted(vs)),
        G::In(f, vs, true) if zen => format!("{f} not in [{}]", quoted(vs)),
        G::In(f, vs, true) => format!("!({f} in [{}])", quoted(vs)),
        G::Fvf(a, op, b) => format!("{a} {op} {b}"),
        G::CatFvf(a, b, eq) => format!("{a} {} {b}", if *eq { "==" } else { "!=" }),
        G::Arith(a) => arith_text(a),
        G::And(xs) => xs
            .iter()
            .map(|x| paren(x, zen))
            .collect::<Vec<_>>()
            .join(and),
        G::Or(xs) => xs
            .iter()
            .map(|x| paren(x, zen))
            .collect::<Vec<_>>()
            .join(or),
        G::Not(x) if zen => format!("not ({})", text(x, zen)),
        G::Not(x) => format!("!({})", text(x, zen)),
    }
}

fn paren(g: &G, zen: bool) -> String {
    match g {
        G::And(_) | G::Or(_) => format!("({})", text(g, zen)),
        _ => text(g, zen),
    }
}

/// The condition as hand-written Rust over `x: &[f32; 30]` (complete rows).
fn rust(g: &G, s: &FeatureSchema) -> String {
    let slot = |f: &str| s.slot(f).expect("a wide field").index();
    let id = |f: &str, v: &str| {
        s.field(s.slot(f).expect("a field"))
            .lookup(v)
            .expect("in the vocabulary")
    };
    let lit = |v: f64| format!("{:?}", v as f32);
    match g {
        G::Num(f, op, c) => format!("x[{}] {op} {}", slot(f), lit(*c)),
        G::Cat(f, eq, v) => format!(
            "x[{}] {} {}",
            slot(f),
            if *eq { "==" } else { "!=" },
            lit(id(f, v) as f64)
        ),
        G::In(f, vs, neg) => {
            let ids: Vec<String> = vs.iter().map(|v| id(f, v).to_string()).collect();
            format!(
                "{}matches!(x[{}] as u32, {})",
                if *neg { "!" } else { "" },
                slot(f),
                ids.join(" | ")
            )
        }
        G::Fvf(a, op, b) => format!("x[{}] {op} x[{}]", slot(a), slot(b)),
        G::CatFvf(a, b, eq) => format!(
            "x[{}] {} x[{}]",
            slot(a),
            if *eq { "==" } else { "!=" },
            slot(b)
        ),
        G::Arith(Ar::Scaled(a, op, m, b)) => {
            format!("x[{}] {op} {} * x[{}]", slot(a), lit(*m), slot(b))
        }
        G::Arith(Ar::Diff(a, b, op, c)) => {
            format!("x[{}] - x[{}] {op} {}", slot(a), slot(b), lit(*c))
        }
        G::Arith(Ar::Ratio(a, b, op, c)) => format!(
            "(x[{b}] != 0.0 && x[{a}] / x[{b}] {op} {})",
            lit(*c),
            a = slot(a),
            b = slot(b)
        ),
        G::Arith(Ar::Total(a, b, op, c)) => {
            format!("x[{}] + x[{}] {op} {}", slot(a), slot(b), lit(*c))
        }
        G::And(xs) => xs
            .iter()
            .map(|x| rust_paren(x, s))
            .collect::<Vec<_>>()
            .join(" && "),
        G::Or(xs) => xs
            .iter()
            .map(|x| rust_paren(x, s))
            .collect::<Vec<_>>()
            .join(" || "),
        G::Not(x) => format!("!({})", rust(x, s)),
    }
}

fn rust_paren(g: &G, s: &FeatureSchema) -> String {
    match g {
        G::And(_) | G::Or(_) => format!("({})", rust(g, s)),
        _ => rust(g, s),
    }
}

fn any(g: &G, p: &dyn Fn(&G) -> bool) -> bool {
    p(g) || match g {
        G::And(xs) | G::Or(xs) => xs.iter().any(|x| any(x, p)),
        G::Not(x) => any(x, p),
        _ => false,
    }
}

fn files() -> (String, String, String) {
    let s = wide_schema();
    let conds = conditions();
    let mut rules = String::from(
        "# @generated by risk-rules/tests/mixed.rs: 100 rules of the shapes analysts write\n\
         # (OR groups, negations, in-lists and negated lists, field-vs-field comparisons,\n\
         # arithmetic between fields) over the 30 fields of risk_core::synth::wide_schema().\n\
         # Regenerate: RISK_BLESS_RULES=1 cargo test -p risk-rules --test rules mixed\n\
         version \"mixed-100\"\npolicy collect_all sum cap 1.0\n",
    );
    let mut zen = String::from(
        "# @generated by risk-rules/tests/mixed.rs: the conditions of mixed_100.rules in\n\
         # zen-expression syntax, one per line, in rule order.\n",
    );
    let mut rs = String::from(
        "//! @generated by risk-rules/tests/mixed.rs: the conditions of\n\
         //! `testdata/rules/mixed_100.rules` as a hand-written Rust if-chain over the 30 slots of\n\
         //! `risk_core::synth::wide_schema()` (complete rows: categorical ids compared as\n\
         //! numbers, divisions guarded). Regenerate: `RISK_BLESS_RULES=1 cargo test -p\n\
         //! risk-rules --test rules mixed`.\n\
         #![allow(clippy::all)]\n\n\
         /// Pushes the index of every rule whose condition holds on `x`.\n\
         #[inline(never)]\n\
         pub fn mixed_100(x: &[f32; 30], hits: &mut Vec<u32>) {\n",
    );
    for (i, c) in conds.iter().enumerate() {
        let _ = writeln!(
            rules,
            "rule M{i:03} {{ when {}  score 0.05 }}",
            text(c, false)
        );
        let _ = writeln!(zen, "{}", text(c, true));
        let _ = writeln!(
            rs,
            "    if {} {{\n        hits.push({i});\n    }}",
            rust(c, &s)
        );
    }
    rs += "}\n";
    (rules, zen, rs)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn mixed_set_files_are_generated_from_this_generator() {
    let (rules, zen, rs) = files();
    let targets = [
        ("testdata/rules/mixed_100.rules", rules),
        ("testdata/rules/mixed_100.zen", zen),
        ("benches/rules_mixed_ifchain.rs", rs),
    ];
    let bless = std::env::var_os("RISK_BLESS_RULES").is_some();
    for (p, want) in targets {
        let path = root().join(p);
        if bless {
            std::fs::write(&path, &want).expect("write the generated file");
        }
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            got == want,
            "{p} is not what the generator writes: RISK_BLESS_RULES=1 cargo test -p risk-rules --test rules mixed"
        );
    }
}

#[test]
fn mixed_set_has_the_promised_shape() {
    let conds = conditions();
    let count = |p: &dyn Fn(&G) -> bool| conds.iter().filter(|c| any(c, p)).count();
    let or_not = count(&|g| matches!(g, G::Or(_) | G::Not(_) | G::In(_, _, true)));
    let fvf = count(&|g| matches!(g, G::Fvf(..) | G::CatFvf(..)));
    let arith = count(&|g| matches!(g, G::Arith(_)));
    let neg_list = count(&|g| matches!(g, G::In(_, _, true)));
    let lists = count(&|g| matches!(g, G::In(..)));
    for c in &conds {
        any(c, &|g| {
            if let G::In(_, v, _) = g {
                assert!((2..=20).contains(&v.len()), "list of {}", v.len());
            }
            false
        });
    }
    eprintln!(
        "mixed set: {or_not} with OR or NOT, {fvf} field-vs-field, {arith} arithmetic, \
         {lists} with in-lists, {neg_list} with negated lists"
    );
    assert!(or_not >= 30, "{or_not} rules with OR or NOT");
    assert!(fvf >= 15, "{fvf} rules with a field-vs-field comparison");
    assert!(arith >= 15, "{arith} rules with arithmetic between fields");
    assert!(neg_list >= 5, "{neg_list} rules with a negated list");
    assert!(lists >= 15, "{lists} rules with an in-list");
}

#[test]
fn mixed_set_compiled_equals_reference_on_the_benchmark_rows() {
    let s = wide_schema();
    let (src, _, _) = files();
    let set = RuleSet::compile(&src, "mixed_100.rules", &s).expect("the mixed set compiles");
    assert_eq!(set.rules().len(), 100);
    let (mut a, mut b) = (Hits::new(), Hits::new());
    let mut fired = 0usize;
    for f in wide_rows(11, 2_000) {
        let va = set.evaluate(&f, &mut a);
        let vb = set.evaluate_reference(&f, &mut b);
        assert_eq!(a.indices(), b.indices());
        assert_eq!(va, vb);
        fired += va.hits;
    }
    // Rules fire at realistic rates: neither almost never nor on most rows.
    let per_row = fired as f64 / 2_000.0;
    assert!((1.0..40.0).contains(&per_row), "{per_row} hits per row");
}
