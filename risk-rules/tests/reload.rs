//! Hot reload under concurrent evaluation: no evaluation is lost, a broken file is
//! never served, swaps are atomic.

use crate::golden::schema;
use risk_core::{Engine, Transaction};
use risk_rules::{ReloadError, RuleScorer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn set(version: &str, score: f32) -> String {
    format!(
        "version \"{version}\"\nrule A {{ when amount > 1 score {score} }}\nrule B {{ when amount > 1 && velocity > 1 score 0.05 }}\n"
    )
}

#[test]
fn hot_reload_under_concurrent_decisions() {
    let dir = std::env::temp_dir().join(format!("risk-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("live.rules");
    std::fs::write(&path, set("v1", 0.1)).unwrap();
    let s = schema();
    let rules = Arc::new(RuleScorer::from_file(&path, s.clone()).unwrap());
    let engine = Engine::builder(s.clone())
        .rules(rules.clone())
        .build()
        .unwrap();
    let txn = Transaction::builder(&s)
        .amount(10.0, "USD")
        .build()
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (e, t, stop, seen) = (engine.clone(), txn.clone(), stop.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let d = e.decide(&t).expect("every decision succeeds");
                    let k = if d.rule_score == 0.1 {
                        0
                    } else if d.rule_score == 0.2 {
                        1
                    } else {
                        panic!(
                            "served a rule set that was never valid: score {}",
                            d.rule_score
                        )
                    };
                    seen[k].fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                n
            })
        })
        .collect();

    let mut ok = 0;
    for round in 0..150 {
        let (text, valid) = match round % 3 {
            0 => (set("v2", 0.2), true),
            1 => ("rule A { when amount >> 1 score 0.9 }".to_string(), false),
            _ => (set("v1", 0.1), true),
        };
        let before = rules.current().version().to_owned();
        std::fs::write(&path, text).unwrap();
        match rules.reload() {
            Ok(_) => {
                assert!(valid);
                ok += 1;
            }
            Err(e) => {
                assert!(!valid, "{e}");
                assert!(matches!(e, ReloadError::Load(_)));
                assert_eq!(
                    rules.current().version(),
                    before,
                    "a broken file replaced the serving set"
                );
            }
        }
    }
    // Reloading a missing file is an error too, and keeps serving.
    std::fs::remove_file(&path).unwrap();
    assert!(rules.reload().is_err());
    stop.store(true, Ordering::Relaxed);
    let total: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    let (a, b) = (
        seen[0].load(Ordering::Relaxed),
        seen[1].load(Ordering::Relaxed),
    );
    assert_eq!(
        a + b,
        total,
        "every evaluation returned a valid set's answer"
    );
    assert_eq!(engine.metrics().decisions, total);
    let st = rules.stats();
    assert_eq!((st.reloads, st.failures), (ok, 51));
    assert!(st.last_error.unwrap().contains("live.rules"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A ~1.8 MB rule whose condition is one long operator chain (no parentheses, under the
/// source limit) used to build a tree as tall as the chain and overflow the stack in the
/// checker, compiler, interpreter or `Drop`, aborting the host. It is refused with a typed
/// error naming file:line:col, on a thread with a small stack (as a JVM or cgo caller
/// may have), and the serving set stays.
#[test]
fn a_long_operator_chain_is_refused_not_a_stack_overflow() {
    let dir = std::env::temp_dir().join(format!("risk-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("chain.rules");
    std::fs::write(&path, set("v1", 0.1)).unwrap();
    let s = schema();
    let rules = Arc::new(RuleScorer::from_file(&path, s.clone()).unwrap());
    let chain = vec!["amount"; 200_000].join(" + ");
    let text = format!("version \"v2\"\nrule LONG {{\n  when {chain} > 0\n  score 0.5\n}}\n");
    assert!(text.len() > 1_700_000, "{}", text.len());
    std::fs::write(&path, &text).unwrap();
    let r = Arc::clone(&rules);
    let e = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || r.reload().map(|_| ()).unwrap_err())
        .unwrap()
        .join()
        .expect("reload did not crash its thread");
    let ReloadError::Load(load) = &e else {
        panic!("{e}")
    };
    let msg = load.to_string();
    // Line 3 ("  when amount + amount + ..."), at the operator that crossed the height
    // limit: the k-th `+` makes a tree of height k + 1 and sits at column 15 + 9 (k - 1).
    let col = 15 + 9 * (risk_rules::parser::MAX_TREE_DEPTH - 1);
    assert!(
        msg.contains(&format!("chain.rules:3:{col}:")),
        "{}",
        &msg[..msg.len().min(300)]
    );
    assert!(msg.contains("nested deeper than 256"), "{}", &msg[..300]);
    assert_eq!(rules.current().version(), "v1");
    std::fs::remove_dir_all(&dir).unwrap();
}
