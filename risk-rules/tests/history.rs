//! Versions and rollback: every served set is recorded on disk, `rollback` restores one
//! atomically (by version, hash or "previous"), the history is bounded and survives a
//! restart, and a damaged history never replaces the serving set.

use crate::golden::schema;
use risk_core::Scorer;
use risk_rules::{History, HistoryError, ReloadError, RuleScorer, RuleSet};
use std::path::PathBuf;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("risk-history-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn src(v: &str, k: f64) -> String {
    format!("version \"{v}\"\nrule BIG {{ when amount > {k} score 0.5 }}\n")
}

fn txn(amount: f64) -> risk_core::Transaction {
    risk_core::Transaction::builder(&schema())
        .amount(amount, "USD")
        .build()
        .unwrap()
}

#[test]
fn rollback_restores_a_recorded_version_atomically() {
    let d = dir("rollback");
    let file = d.join("r.rules");
    std::fs::write(&file, src("v1", 100.0)).unwrap();
    let sc = RuleScorer::from_file(&file, schema())
        .unwrap()
        .with_history(History::open(d.join("hist"), 10).unwrap())
        .unwrap();
    let v1_id = sc.current().version_id();
    std::fs::write(&file, src("v2", 1000.0)).unwrap();
    sc.reload().unwrap();
    assert_eq!(sc.current().version(), "v2");
    let names: Vec<String> = sc.versions().into_iter().map(|v| v.version).collect();
    assert_eq!(names, ["v1", "v2"]);
    // 500 fires under v1 only.
    assert!(sc.score(&txn(500.0)).unwrap().fired.is_empty());
    let old = sc.rollback("v1").unwrap();
    assert_eq!(old.version(), "v2");
    assert_eq!(sc.current().version(), "v1");
    // The same identity as when it first served: name, version and content hash.
    assert_eq!(sc.current().version_id(), v1_id);
    let s = sc.score(&txn(500.0)).unwrap();
    assert_eq!(s.fired.total(), 1);
    assert_eq!(s.version, Some(v1_id));
    // v1 moved to the end; "previous" is v2 again; a hash names a version too.
    let names: Vec<String> = sc.versions().into_iter().map(|v| v.version).collect();
    assert_eq!(names, ["v2", "v1"]);
    sc.rollback("previous").unwrap();
    assert_eq!(sc.current().version(), "v2");
    sc.rollback(&format!("{:016x}", v1_id.hash())).unwrap();
    assert_eq!(sc.current().version(), "v1");
}

#[test]
fn unknown_or_damaged_versions_leave_the_serving_set() {
    let d = dir("damaged");
    let sc = RuleScorer::new(
        RuleSet::compile(&src("a", 1.0), "a.rules", &schema()).unwrap(),
        schema(),
    )
    .with_history(History::open(d.join("h"), 10).unwrap())
    .unwrap();
    sc.swap(RuleSet::compile(&src("b", 2.0), "a.rules", &schema()).unwrap())
        .unwrap();
    let e = sc.rollback("nope").unwrap_err();
    assert!(
        matches!(e, ReloadError::History(HistoryError::Unknown(_))),
        "{e}"
    );
    assert_eq!(sc.current().version(), "b");
    // A recorded text edited on disk no longer matches its hash: refused.
    let a = sc.versions()[0].clone();
    let path = d
        .join("h")
        .join(format!("{:06}-{:016x}.rules", a.seq, a.hash));
    std::fs::write(&path, src("a", 999.0)).unwrap();
    let e = sc.rollback("a").unwrap_err();
    assert!(
        matches!(e, ReloadError::History(HistoryError::Damaged { .. })),
        "{e}"
    );
    assert_eq!(sc.current().version(), "b");
    assert_eq!(sc.stats().failures, 2);
    assert!(sc.stats().last_error.unwrap().contains("no longer matches"));
    // Without a history, rollback says so.
    let plain = RuleScorer::new(
        RuleSet::compile(&src("a", 1.0), "a.rules", &schema()).unwrap(),
        schema(),
    );
    assert!(matches!(plain.rollback("a"), Err(ReloadError::NoHistory)));
    // A damaged index is refused at open, naming the file.
    std::fs::write(d.join("h").join("index.json"), "{not json").unwrap();
    let e = History::open(d.join("h"), 10).unwrap_err();
    assert!(e.to_string().contains("index.json"), "{e}");
    assert!(matches!(
        History::open(d.join("k"), 0),
        Err(HistoryError::Keep(0))
    ));
}

#[test]
fn the_history_is_bounded_and_survives_a_restart() {
    let d = dir("bounded");
    let h = d.join("h");
    let sc = RuleScorer::new(
        RuleSet::compile(&src("v0", 0.0), "r.rules", &schema()).unwrap(),
        schema(),
    )
    .with_history(History::open(&h, 3).unwrap())
    .unwrap();
    for i in 1..5 {
        sc.swap(RuleSet::compile(&src(&format!("v{i}"), i as f64), "r.rules", &schema()).unwrap())
            .unwrap();
    }
    let names: Vec<String> = sc.versions().into_iter().map(|v| v.version).collect();
    assert_eq!(names, ["v2", "v3", "v4"]);
    let files = std::fs::read_dir(&h)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "rules")
        })
        .count();
    assert_eq!(files, 3, "files past the bound are deleted");
    drop(sc);
    // A new process: the old versions are there to roll back to.
    let sc = RuleScorer::new(
        RuleSet::compile(&src("v9", 9.0), "r.rules", &schema()).unwrap(),
        schema(),
    )
    .with_history(History::open(&h, 3).unwrap())
    .unwrap();
    let names: Vec<String> = sc.versions().into_iter().map(|v| v.version).collect();
    assert_eq!(names, ["v3", "v4", "v9"]);
    sc.rollback("v3").unwrap();
    assert_eq!(sc.current().version(), "v3");
}

#[test]
fn the_history_is_private_and_an_open_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let d = dir("modes");
    let file = d.join("r.rules");
    std::fs::write(&file, src("v1", 100.0)).unwrap();
    let hist = d.join("deep/hist");
    let sc = RuleScorer::from_file(&file, schema())
        .unwrap()
        .with_history(History::open(&hist, 10).unwrap())
        .unwrap();
    std::fs::write(&file, src("v2", 1000.0)).unwrap();
    sc.reload().unwrap();
    assert_eq!(mode(&hist), 0o700);
    assert_eq!(mode(&d.join("deep")), 0o700);
    let mut files = 0;
    for e in std::fs::read_dir(&hist).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        files += 1;
    }
    assert!(files >= 3, "index and two versions: {files}");
    std::fs::set_permissions(&hist, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = History::open(&hist, 10).unwrap_err();
    assert!(matches!(e, HistoryError::Files(_)), "{e}");
    assert!(e.to_string().contains("writable by others"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
