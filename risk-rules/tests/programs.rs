//! Property: for random rule sets of every shape the language has (AND / OR / NOT trees
//! over thresholds, field-vs-field, one-operation and nested arithmetic, `in` lists over
//! categories and numbers, categorical pairs, `is_missing`, constants), with shadow and
//! disabled rules, under every hit policy, the native code, the branch-program
//! interpreter and the reference interpreter give the same hits, shadow hits and
//! verdicts, on rows with missing, infinite, signed-zero and out-of-vocabulary values.

use crate::golden::schema;
use risk_core::synth::Rng;
use risk_rules::{Hits, NativeBackend, RuleSet};

const NUMS: [&str; 3] = ["amount", "velocity", "ratio"];
const KS: [&str; 12] = [
    "0", "1", "2.5", "-3", "100", "0.1", "1e3", "7", "-0.5", "1e39", "-1e39", "3",
];
const CMPS: [&str; 6] = ["<", "<=", ">", ">=", "==", "!="];

fn pick<'a>(r: &mut Rng, xs: &[&'a str]) -> &'a str {
    xs[r.below(xs.len() as u64) as usize]
}

fn leaf(r: &mut Rng) -> String {
    let (a, b, k, op) = (pick(r, &NUMS), pick(r, &NUMS), pick(r, &KS), pick(r, &CMPS));
    match r.below(16) {
        0 | 1 => format!("{a} {op} {k}"),
        2 => format!("{k} {op} {a}"),
        3 => format!("{a} {op} {b}"),
        4 => format!("{a} {op} {k} * {b}"),
        5 => format!("{a} {} {b} {op} {k}", pick(r, &["+", "-", "*", "/", "%"])),
        6 => format!("({a} + {b}) * {k} {op} {}", pick(r, &NUMS)),
        7 => format!("abs({a}) {op} {k}"),
        8 => {
            let n = 1 + r.below(4);
            let v: Vec<String> = (0..n)
                .map(|_| format!("\"{}\"", pick(r, &["US", "GB", "NG", "RU"])))
                .collect();
            let t = format!("country in [{}]", v.join(", "));
            if r.chance(0.4) {
                format!("!({t})")
            } else {
                t
            }
        }
        9 => {
            let n = 1 + r.below(20);
            let v: Vec<&str> = (0..n).map(|_| pick(r, &KS)).collect();
            format!("{a} in [{}]", v.join(", "))
        }
        10 => format!("country {} ip_country", pick(r, &["==", "!="])),
        11 => format!(
            "channel {} \"{}\"",
            pick(r, &["==", "!="]),
            pick(r, &["pos", "app"])
        ),
        12 => format!(
            "is_missing({})",
            pick(r, &["amount", "velocity", "country"])
        ),
        13 => pick(r, &["true", "false", "1 < 2", "3 == 4"]).to_string(),
        14 => format!("(({a} > 1) == ({b} < 2))"),
        _ => format!("min({a}, {b}) {op} {k}"),
    }
}

fn tree(r: &mut Rng, d: u32) -> String {
    if d == 0 || r.chance(0.3) {
        return leaf(r);
    }
    match r.below(5) {
        0 => format!("!({})", tree(r, d - 1)),
        1 | 2 => format!("({}) && ({})", tree(r, d - 1), tree(r, d - 1)),
        _ => format!("({}) || ({})", tree(r, d - 1), tree(r, d - 1)),
    }
}

fn row(r: &mut Rng, s: &std::sync::Arc<risk_core::FeatureSchema>) -> risk_core::Features {
    let mut f = s.features();
    let special = [
        0.0,
        -0.0,
        1.0,
        -3.0,
        2.5,
        100.0,
        0.1,
        1000.0,
        7.0,
        3.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
    ];
    for (i, v) in f.values_mut().iter_mut().enumerate() {
        *v = if r.chance(0.2) {
            f32::NAN
        } else if i >= 3 {
            // Category ids, including OTHER (0), ids past the vocabulary, fractions
            // and negatives (what a raw C caller could pass).
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 70.0, 1.5, -1.0][r.below(9) as usize]
        } else if r.chance(0.6) {
            special[r.below(special.len() as u64) as usize]
        } else {
            r.range(-1e3, 1e3) as f32
        };
    }
    f
}

#[test]
fn native_interpreted_and_reference_agree_on_random_sets() {
    let s = schema();
    let mut r = Rng::new(12);
    let mut fired = 0usize;
    let mut shadow_fired = 0usize;
    for set_no in 0..12 {
        let policy = ["collect_all sum cap 0.8", "collect_all max", "first_hit"][set_no % 3];
        let mut src = format!("version \"p{set_no}\"\npolicy {policy}\n");
        for i in 0..60 {
            let outcome = match r.below(4) {
                0 => "decline hard",
                1 => "review",
                _ => "score 0.3",
            };
            let extra = match r.below(8) {
                0 => "shadow",
                1 => "disabled",
                _ => "",
            };
            src += &format!(
                "rule R{i} {{ when {} {outcome} priority {} {extra} }}\n",
                tree(&mut r, 4),
                r.below(4)
            );
        }
        let set = RuleSet::compile(&src, "random.rules", &s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.backend(), "interpreter");
        set.native().expect("native code on this host");
        assert_eq!(set.backend(), "native");
        // Both code generators: the x86-64 templates (the default there) and Cranelift.
        let cl = RuleSet::compile(&src, "random.rules", &s).unwrap();
        cl.native_with(NativeBackend::Cranelift).unwrap();
        assert_eq!(cl.native_backend(), Some("cranelift"));
        if cfg!(all(target_arch = "x86_64", unix)) {
            assert_eq!(set.native_backend(), Some("x64"));
        }
        let (mut a, mut b, mut c, mut d) = (Hits::new(), Hits::new(), Hits::new(), Hits::new());
        for _ in 0..1_500 {
            let f = row(&mut r, &s);
            let va = set.evaluate(&f, &mut a);
            let vb = set.evaluate_interpreted(&f, &mut b);
            let vc = set.evaluate_reference(&f, &mut c);
            let vd = cl.evaluate(&f, &mut d);
            assert_eq!(
                a.indices(),
                c.indices(),
                "native vs reference, {policy}, {f:?}"
            );
            assert_eq!(d.indices(), c.indices(), "cranelift vs reference, {policy}");
            assert_eq!(d.shadow(), c.shadow());
            assert_eq!(vd, vc);
            assert_eq!(
                b.indices(),
                c.indices(),
                "interpreter vs reference, {policy}"
            );
            assert_eq!(a.shadow(), c.shadow(), "shadow hits, {policy}");
            assert_eq!(b.shadow(), c.shadow());
            assert_eq!(va, vc);
            assert_eq!(vb, vc);
            fired += a.indices().len();
            shadow_fired += a.shadow().len();
        }
    }
    assert!(fired > 5_000, "{fired}");
    assert!(shadow_fired > 500, "{shadow_fired}");
}

#[test]
fn shadow_rules_never_count_in_score_or_action() {
    let s = schema();
    let src = r#"
        rule LIVE { when amount > 100 score 0.2 }
        rule SHADOW_BLOCK { when amount > 100 decline hard shadow }
        rule SHADOW_SCORE { when amount > 50 score 0.9 shadow }
    "#;
    let set = RuleSet::compile(src, "shadow.rules", &s).unwrap();
    set.native().unwrap();
    let mut f = s.features();
    f.set_numeric("amount", 500.0).unwrap();
    let mut h = Hits::new();
    for v in [
        set.evaluate(&f, &mut h),
        set.evaluate_interpreted(&f, &mut h),
    ] {
        assert_eq!(v.score, 0.2);
        assert_eq!(v.directive, None);
        assert_eq!(v.hits, 1);
        assert_eq!(h.shadow(), &[1, 2]);
    }
}

#[test]
fn shadow_impact_reports_the_would_be_effect() {
    let s = schema();
    let src = r#"
        rule LIVE { when amount > 100 score 0.2 }
        rule WATCH_BLOCK { when amount > 1000 decline hard shadow }
    "#;
    let set = RuleSet::compile(src, "shadow.rules", &s).unwrap();
    let txns: Vec<risk_core::Transaction> = [50.0, 500.0, 5_000.0, 20_000.0]
        .iter()
        .map(|&a| {
            risk_core::Transaction::builder(&s)
                .amount(a, "USD")
                .build()
                .unwrap()
        })
        .collect();
    let rep = risk_rules::shadow_impact(&set, &txns, &risk_core::Policy::default(), 10).unwrap();
    assert_eq!(rep.transactions, 4);
    assert_eq!(rep.changed, 2, "{rep}");
    assert!(rep
        .examples
        .iter()
        .all(|e| e.after.0 == risk_core::Action::Decline));
    let w = rep.rules.iter().find(|d| d.id == "WATCH_BLOCK").unwrap();
    assert_eq!((w.serving, w.candidate), (0, 2));
}
