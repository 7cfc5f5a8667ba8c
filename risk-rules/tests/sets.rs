//! Hit policies, outcomes, hard rules, limits, and evaluation without allocation.

use crate::golden::schema;
use risk_core::{Action, Scorer, Transaction};
use risk_rules::{ErrorKind, Hits, RuleScorer, RuleSet, MAX_RULES};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts allocations made by the current thread.
struct Counting;
thread_local!(static ALLOCS: Cell<u64> = const { Cell::new(0) });
// SAFETY: delegates to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}
#[global_allocator]
static A: Counting = Counting;

const SET: &str = r#"
version "t-1"
policy collect_all sum cap 0.9
review_score 0.4
rule LOW  { when amount > 10   score 0.3  reason "AMT" priority 1 }
rule MID  { when amount > 100  score 0.5  priority 5 }
rule REV  { when velocity > 3  review }
rule HARD { when country == "NG" && amount > 1000  decline  hard  priority 9 }
rule OK   { when country == "US" && amount < 5  approve  hard }
rule OFF  { when amount > 0  score 1.0  disabled }
"#;

fn txn(amount: f64, velocity: Option<f32>, country: &str) -> Transaction {
    let s = schema();
    let mut b = Transaction::builder(&s)
        .amount(amount, "USD")
        .country(country);
    if let Some(v) = velocity {
        b = b.numeric("velocity", v);
    }
    b.build().unwrap()
}

#[test]
fn collect_sum_caps_and_hard_rules_set_directives() {
    let s = schema();
    let set = RuleSet::compile(SET, "t.rules", &s).unwrap();
    assert_eq!(set.version(), "t-1");
    let mut h = Hits::new();
    let v = set.evaluate(&txn(50.0, None, "GB").features, &mut h);
    assert_eq!((v.score, v.directive, v.hits), (0.3, None, 1));
    let v = set.evaluate(&txn(500.0, Some(5.0), "GB").features, &mut h);
    assert!(
        (v.score - 0.9).abs() < 1e-6,
        "0.3 + 0.5 + 0.4 capped at 0.9: {v:?}"
    );
    let v = set.evaluate(&txn(2000.0, None, "NG").features, &mut h);
    assert_eq!(v.directive, Some(Action::Decline));
    // Evaluation order is by priority: HARD (9), MID (5), LOW (1).
    let ids: Vec<&str> = h
        .indices()
        .iter()
        .map(|&i| set.rules()[i as usize].id.as_str())
        .collect();
    assert_eq!(ids, vec!["HARD", "MID", "LOW"]);
    let v = set.evaluate(&txn(1.0, None, "US").features, &mut h);
    assert_eq!((v.directive, v.score), (Some(Action::Approve), 0.0));
    // The disabled rule never fires.
    assert!(h
        .indices()
        .iter()
        .all(|&i| set.rules()[i as usize].id != "OFF"));
}

#[test]
fn first_hit_and_max_policies() {
    let s = schema();
    let first = SET.replace("collect_all sum cap 0.9", "first_hit");
    let set = RuleSet::compile(&first, "t.rules", &s).unwrap();
    let mut h = Hits::new();
    let v = set.evaluate(&txn(500.0, Some(5.0), "GB").features, &mut h);
    assert_eq!(
        (v.score, v.hits),
        (0.5, 1),
        "MID has the highest priority among hits"
    );
    let max = SET.replace("collect_all sum cap 0.9", "collect_all max");
    let set = RuleSet::compile(&max, "t.rules", &s).unwrap();
    let v = set.evaluate(&txn(500.0, Some(5.0), "GB").features, &mut h);
    assert_eq!((v.score, v.hits), (0.5, 3));
}

#[test]
fn scorer_reports_reasons_hard_first() {
    let s = schema();
    let sc = RuleScorer::new(RuleSet::compile(SET, "t.rules", &s).unwrap(), s.clone());
    let out = sc.score(&txn(2000.0, Some(9.0), "NG")).unwrap();
    let names: Vec<&str> = out.reasons.iter().map(|r| r.code.name()).collect();
    assert_eq!(names[0], "HARD");
    assert!(names.contains(&"AMT") && names.contains(&"MID") && names.contains(&"REV"));
    assert_eq!(out.directive, Some(Action::Decline));
    assert!(sc.info().version == "t-1");
}

#[test]
fn evaluation_allocates_nothing() {
    let s = schema();
    let set = RuleSet::compile(SET, "t.rules", &s).unwrap();
    let sc = RuleScorer::new(RuleSet::compile(SET, "t.rules", &s).unwrap(), s.clone());
    let t = txn(2000.0, Some(9.0), "NG");
    let mut h = Hits::new();
    set.evaluate(&t.features, &mut h); // grows the buffer once
    sc.score(&t).unwrap(); // initialises the thread-local buffer
                           // The interpreter, then native code (the scorer's set turns native in the
                           // background; `native()` waits for it).
    let before = ALLOCS.with(|a| a.get());
    for _ in 0..1_000 {
        std::hint::black_box(set.evaluate(&t.features, &mut h));
    }
    assert_eq!(set.backend(), "interpreter");
    assert_eq!(ALLOCS.with(|a| a.get()) - before, 0);
    set.native().unwrap();
    sc.current().native().unwrap();
    assert_eq!(sc.current().backend(), "native");
    // Native code reserves room for every rule's hit, once per buffer.
    set.evaluate(&t.features, &mut h);
    sc.score(&t).unwrap();
    let before = ALLOCS.with(|a| a.get());
    for _ in 0..1_000 {
        std::hint::black_box(set.evaluate(&t.features, &mut h));
        std::hint::black_box(sc.score(&t).unwrap());
    }
    assert_eq!(ALLOCS.with(|a| a.get()) - before, 0);
}

#[test]
fn limits_are_enforced_at_compile_time() {
    let s = schema();
    let mut big = String::new();
    for i in 0..=MAX_RULES {
        big += &format!("rule R{i} {{ when amount > 1 score 0.1 }}\n");
    }
    let e = RuleSet::compile(&big, "big.rules", &s).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::TooLarge(_)), "{e}");
    assert_eq!(e.line, MAX_RULES + 1);

    let list: Vec<String> = (0..10_001).map(|i| i.to_string()).collect();
    let src = format!(
        "rule L {{ when velocity in [{}] score 0.1 }}",
        list.join(",")
    );
    let e = RuleSet::compile(&src, "list.rules", &s).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::TooLarge(_)), "{e}");

    let wide = format!(
        "rule W {{ when max({}) > 1 score 0.1 }}",
        vec!["amount"; 17].join(",")
    );
    assert!(matches!(
        RuleSet::compile(&wide, "w.rules", &s).unwrap_err().kind,
        ErrorKind::WrongArity { .. }
    ));

    // Deep but legal nesting compiles; deeper is refused before any recursion blows up.
    let ok = format!(
        "rule D {{ when {}amount > 1{} score 0.1 }}",
        "(".repeat(30),
        ")".repeat(30)
    );
    assert!(RuleSet::compile(&ok, "d.rules", &s).is_ok());
    let deep = format!(
        "rule D {{ when {}amount > 1{} score 0.1 }}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    assert!(matches!(
        RuleSet::compile(&deep, "d.rules", &s).unwrap_err().kind,
        ErrorKind::TooDeep(_)
    ));
}

#[test]
fn errors_render_file_line_col_and_caret() {
    let s = schema();
    let src = "version \"x\"\nrule A {\n  when amonut > 3\n  score 0.1\n}\n";
    let e = RuleSet::compile(src, "rules/a.rules", &s).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rules/a.rules:3:8: unknown field or constant `amonut`\n    3 |   when amonut > 3\n      |        ^^^^^^"
    );
}

#[test]
fn a_rule_set_for_another_schema_is_refused() {
    let s = schema();
    let other = risk_core::FeatureSchema::builder()
        .numeric_required("amount")
        .build()
        .unwrap();
    let sc = RuleScorer::new(RuleSet::compile(SET, "t.rules", &s).unwrap(), s.clone());
    let foreign =
        RuleSet::compile("rule X { when amount > 1 score 0.1 }", "x.rules", &other).unwrap();
    assert!(sc.swap(foreign).is_err());
    assert_eq!(sc.current().version(), "t-1");
    assert_eq!(sc.stats().failures, 1);
}
