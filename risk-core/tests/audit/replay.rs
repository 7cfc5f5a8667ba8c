//! Replay: recorded decisions re-decided by a candidate engine; the report equals what
//! deciding the same transactions directly on both engines gives.

use crate::common::*;
use risk_core::audit::{LogOptions, Query, SegmentLog};
use risk_core::replay::replay;
use risk_core::*;
use std::sync::Arc;
use std::time::Duration;

struct ByAmount;

impl Scorer for ByAmount {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("by-amount", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let mut s = Score::new((t.amount / 400.0).min(1.0) as f32);
        if t.amount > 200.0 {
            s.fired.push(ReasonCode::intern("R_OVER_200"));
        }
        Ok(s)
    }
}

fn build(decline_at: f32, log: Option<Arc<SegmentLog>>) -> Engine {
    let mut b = Engine::builder(schema())
        .rules(Arc::new(ByAmount))
        .fast(Arc::new(ByAmount))
        .thresholds(0.2, decline_at);
    if let Some(l) = log {
        b = b.audit_log(l);
    }
    b.build().unwrap()
}

#[test]
fn replay_reports_exactly_what_the_candidate_changes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(LogOptions::new(dir.path())).unwrap());
    let serving = build(0.7, Some(Arc::clone(&log)));
    let candidate = build(0.5, None);
    let s = serving.schema().clone();
    let mut want_changed = 0;
    for i in 1..=400u64 {
        let t = Transaction::builder(&s)
            .id(i)
            .entity(i % 9)
            .timestamp_ms(1_767_571_200_000 + i as i64)
            .amount((i * 7 % 400) as f64, "USD")
            .country(["US", "GB", "NG"][(i % 3) as usize])
            .build()
            .unwrap();
        let a = serving.decide(&t).unwrap();
        let b = candidate.decide(&t).unwrap();
        want_changed += u64::from(a.action != b.action);
    }
    log.flush(Duration::from_secs(30)).unwrap();
    // A fresh candidate (no entity history), as the replay would see it.
    let candidate = build(0.5, None);
    let rep = replay(log.reader().query(Query::default()).unwrap(), &candidate, 3);
    assert_eq!(rep.records, 400);
    assert_eq!(rep.replayed, 400);
    assert!(rep.skipped.is_empty(), "{:?}", rep.skipped);
    assert_eq!(rep.changed, want_changed);
    assert!(want_changed > 0);
    assert_eq!(
        rep.transitions
            .get(&(Action::Review, Action::Decline))
            .copied(),
        Some(want_changed)
    );
    assert_eq!(rep.examples.len(), 3);
    let r = rep.rules.iter().find(|r| r.rule == "R_OVER_200").unwrap();
    assert_eq!((r.started, r.stopped), (0, 0));
    assert_eq!(r.recorded, r.candidate);
    assert_eq!(rep.models.len(), 1);
    assert_eq!(rep.models[0].scored_both, 400);
    assert_eq!(rep.models[0].max_abs_delta, 0.0);

    // Records without features cannot be replayed: counted, with the reason.
    let dir = tempfile::tempdir().unwrap();
    let mut o = LogOptions::new(dir.path());
    o.features = risk_core::audit::FeatureSelection::None;
    let log = Arc::new(SegmentLog::open(o).unwrap());
    let e = build(0.7, Some(Arc::clone(&log)));
    e.decide(&txn(&s, 1, 1)).unwrap();
    log.flush(Duration::from_secs(30)).unwrap();
    let rep = replay(log.reader().all().unwrap(), &candidate, 0);
    assert_eq!((rep.records, rep.replayed), (1, 0));
    assert_eq!(rep.skipped.values().sum::<u64>(), 1);
}
