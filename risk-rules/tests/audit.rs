//! The rule tier as the audit trail sees it: the exact rules that fired, by id, and the
//! version of the set that ran, across a hot reload.

use risk_core::audit::{LogOptions, Query, SegmentLog};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::Engine;
use risk_rules::{Hits, RuleScorer, DEFAULT_RULES};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn records_name_every_rule_that_fired_and_the_set_version_that_ran() {
    let dir = std::env::temp_dir().join(format!("risk-rules-audit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rules_path = dir.join("live.rules");
    std::fs::write(&rules_path, DEFAULT_RULES).unwrap();
    let s = schema();
    let scorer = Arc::new(RuleScorer::from_file(&rules_path, s.clone()).unwrap());
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.join("audit"))).unwrap());
    let engine = Engine::builder(s.clone())
        .rules(scorer.clone())
        .audit_log(log.clone())
        .build()
        .unwrap();
    let rows = generate(&SynthConfig::new(11, 3000));
    let set = scorer.current();
    let mut hits = Hits::new();
    let mut fired_any = 0;
    for r in &rows[..2000] {
        let d = engine.decide(&r.txn).unwrap();
        // The decision names exactly the rules the set fires, in evaluation order.
        let v = set.evaluate(&r.txn.features, &mut hits);
        let want: Vec<&str> = hits
            .indices()
            .iter()
            .take(risk_core::FiredRules::CAPACITY)
            .map(|&i| set.rules()[i as usize].id.as_str())
            .collect();
        assert_eq!(d.rules_fired.iter().collect::<Vec<_>>(), want);
        assert_eq!(d.rules_fired.total() as usize, v.hits);
        fired_any += usize::from(v.hits > 0);
    }
    assert!(fired_any > 100, "{fired_any}");
    let v1 = set.version_id();
    // A reload with a changed file: later decisions record the new set.
    let edited = DEFAULT_RULES.replace("version \"default-2026-11-29.1\"", "version \"edited-1\"");
    assert_ne!(edited, DEFAULT_RULES);
    std::fs::write(&rules_path, &edited).unwrap();
    scorer.reload().unwrap();
    assert_eq!(engine.versions().rules.version(), "edited-1");
    for r in &rows[2000..] {
        engine.decide(&r.txn).unwrap();
    }
    log.flush(Duration::from_secs(30)).unwrap();
    let (mut old, mut new) = (0, 0);
    for e in log.reader().query(Query::default()).unwrap() {
        let e = e.unwrap();
        let d = e.decision().unwrap();
        let r = d.versions.as_ref().unwrap().rules.as_ref().unwrap();
        if r.hash == v1.hash() {
            assert_eq!(r.version, "default-2026-11-29.1");
            old += 1;
        } else {
            assert_eq!(r.version, "edited-1");
            assert_eq!(r.hash, risk_core::schema::Fnv::hash(edited.as_bytes()));
            new += 1;
        }
    }
    assert_eq!((old, new), (2000, 1000));
    // By rule: the records where a rule fired are exactly the decisions that say so.
    let name = "R_CT_SMALL_BURST";
    let by_rule = log.reader().query(Query::rule(name)).unwrap().count();
    let expected = rows
        .iter()
        .filter(|r| {
            set.evaluate(&r.txn.features, &mut hits);
            hits.indices()
                .iter()
                .any(|&i| set.rules()[i as usize].id == name)
        })
        .count();
    assert_eq!(by_rule, expected);
    let _ = std::fs::remove_dir_all(&dir);
}
