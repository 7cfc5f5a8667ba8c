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

#[test]
fn shadow_hits_and_a_rollback_are_on_the_record() {
    let dir = std::env::temp_dir().join(format!("risk-rules-audit-shadow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = schema();
    let v1 = "version \"s-1\"\nrule BIG { when amount > 100 score 0.3 }\n\
              rule WATCH { when amount > 200 decline hard shadow }\n";
    let v2 = "version \"s-2\"\nrule BIG { when amount > 100 score 0.6 }\n";
    let scorer = Arc::new(
        RuleScorer::new(
            risk_rules::RuleSet::compile(v1, "s.rules", &s).unwrap(),
            s.clone(),
        )
        .with_history(risk_rules::History::open(dir.join("hist"), 5).unwrap())
        .unwrap(),
    );
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.join("audit"))).unwrap());
    let engine = Engine::builder(s.clone())
        .rules(scorer.clone())
        .audit_log(log.clone())
        .build()
        .unwrap();
    let rows = generate(&SynthConfig::new(3, 400));
    let big = |r: &risk_core::synth::Labeled| r.txn.amount > 200.0;
    let mut shadowed = 0;
    for r in &rows[..200] {
        let d = engine.decide(&r.txn).unwrap();
        let w: Vec<&str> = d.rules_shadow.iter().collect();
        assert_eq!(w == ["WATCH"], big(r));
        // The shadow decline never decides.
        assert!(!(d.action == risk_core::Action::Decline && d.rules_fired.total() == 0));
        shadowed += usize::from(big(r));
    }
    assert!(shadowed > 0);
    scorer
        .swap(risk_rules::RuleSet::compile(v2, "s.rules", &s).unwrap())
        .unwrap();
    scorer.rollback("s-1").unwrap();
    for r in &rows[200..] {
        engine.decide(&r.txn).unwrap();
    }
    log.flush(Duration::from_secs(30)).unwrap();
    let mut with_shadow = 0;
    for e in log.reader().query(Query::default()).unwrap() {
        let e = e.unwrap();
        let d = e.decision().unwrap();
        assert_eq!(
            d.versions.as_ref().unwrap().rules.as_ref().unwrap().version,
            "s-1"
        );
        with_shadow += usize::from(d.rules_shadow == ["WATCH"] && d.rules_shadow_total == 1);
    }
    assert_eq!(with_shadow, rows.iter().filter(|r| big(r)).count());
    let _ = std::fs::remove_dir_all(&dir);
}
