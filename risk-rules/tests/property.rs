//! Property: the compiled program equals the straightforward interpreter on random
//! expressions and random inputs (with missing values), and so do whole rule sets.

use crate::golden::schema;
use risk_core::synth::Rng;
use risk_rules::{Expression, Hits, RuleSet};

const NUMS: [&str; 3] = ["amount", "velocity", "ratio"];
const LITS: [&str; 9] = ["0", "1", "2.5", "-3", "100", "0.1", "1e3", "7", "-0.5"];

fn pick<'a>(r: &mut Rng, xs: &[&'a str]) -> &'a str {
    xs[r.below(xs.len() as u64) as usize]
}

fn num(r: &mut Rng, d: u32) -> String {
    if d == 0 || r.chance(0.3) {
        return if r.chance(0.5) {
            pick(r, &NUMS).into()
        } else {
            pick(r, &LITS).into()
        };
    }
    match r.below(6) {
        0 => format!("-({})", num(r, d - 1)),
        1 => format!("abs({})", num(r, d - 1)),
        2 => format!("log({})", num(r, d - 1)),
        3 => {
            let n = 1 + r.below(3);
            let args: Vec<String> = (0..n).map(|_| num(r, d - 1)).collect();
            format!(
                "{}({})",
                if r.chance(0.5) { "min" } else { "max" },
                args.join(", ")
            )
        }
        _ => {
            let op = pick(r, &["+", "-", "*", "/", "%"]);
            format!("({} {} {})", num(r, d - 1), op, num(r, d - 1))
        }
    }
}

fn boolean(r: &mut Rng, d: u32) -> String {
    if d == 0 || r.chance(0.2) {
        return match r.below(5) {
            0 => pick(r, &["true", "false"]).into(),
            1 => format!(
                "is_missing({})",
                pick(r, &["amount", "velocity", "country"])
            ),
            2 => format!("country == \"{}\"", pick(r, &["US", "GB", "NG", "RU"])),
            3 => format!("channel != \"{}\"", pick(r, &["pos", "ecom", "app"])),
            _ => format!("{} > {}", pick(r, &NUMS), pick(r, &LITS)),
        };
    }
    match r.below(8) {
        0 => format!("!({})", boolean(r, d - 1)),
        1 => format!("(({}) && ({}))", boolean(r, d - 1), boolean(r, d - 1)),
        2 => format!("(({}) || ({}))", boolean(r, d - 1), boolean(r, d - 1)),
        3 => format!("(({}) == ({}))", boolean(r, d - 1), boolean(r, d - 1)),
        4 => format!("country in [\"NG\", \"{}\"]", pick(r, &["US", "GB", "RU"])),
        5 => {
            let n = r.below(20);
            let items: Vec<String> = (0..n).map(|_| pick(r, &LITS).to_string()).collect();
            format!("({}) in [{}]", num(r, d - 1), items.join(", "))
        }
        _ => {
            let op = pick(r, &["<", "<=", ">", ">=", "==", "!="]);
            format!("({}) {} ({})", num(r, d - 1), op, num(r, d - 1))
        }
    }
}

fn random_features(
    r: &mut Rng,
    s: &std::sync::Arc<risk_core::FeatureSchema>,
) -> risk_core::Features {
    let mut f = s.features();
    let vals = [0.0, 1.0, -3.0, 2.5, 100.0, 0.1, 1000.0, 7.0, -0.5, -0.0];
    for (i, v) in f.values_mut().iter_mut().enumerate() {
        *v = if r.chance(0.25) {
            f32::NAN
        } else if i >= 3 {
            (1 + r.below(3)) as f32 // category ids
        } else if r.chance(0.5) {
            vals[r.below(vals.len() as u64) as usize]
        } else {
            r.range(-1e3, 1e3) as f32
        };
    }
    f
}

#[test]
fn compiled_equals_interpreted_on_random_expressions() {
    let s = schema();
    let mut r = Rng::new(2026);
    let mut compared = 0;
    for case in 0..3_000 {
        let src = if case % 3 == 0 {
            num(&mut r, 4)
        } else {
            boolean(&mut r, 4)
        };
        let e = Expression::compile(&src, "", &s).unwrap_or_else(|err| panic!("{src}: {err}"));
        for _ in 0..20 {
            let f = random_features(&mut r, &s);
            let (a, b) = (e.eval(&f), e.eval_reference(&f));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{src} on {f:?}");
            compared += 1;
        }
    }
    assert_eq!(compared, 60_000);
}

#[test]
fn compiled_rule_sets_equal_the_interpreter() {
    let s = schema();
    let mut r = Rng::new(7);
    for policy in ["collect_all sum cap 0.8", "collect_all max", "first_hit"] {
        let mut src = format!("policy {policy}\n");
        for i in 0..80 {
            let outcome = match r.below(4) {
                0 => "decline hard".to_string(),
                1 => "review".to_string(),
                _ => format!("score {:.2}", r.f64()),
            };
            src += &format!(
                "rule R{i} {{ when {} {} priority {} }}\n",
                boolean(&mut r, 3),
                outcome,
                r.below(5)
            );
        }
        let set = RuleSet::compile(&src, "random.rules", &s).unwrap();
        let (mut h1, mut h2) = (Hits::new(), Hits::new());
        for _ in 0..2_000 {
            let f = random_features(&mut r, &s);
            let a = set.evaluate(&f, &mut h1);
            let b = set.evaluate_reference(&f, &mut h2);
            assert_eq!(a, b, "{policy}");
            assert_eq!(h1.indices(), h2.indices());
        }
    }
}
