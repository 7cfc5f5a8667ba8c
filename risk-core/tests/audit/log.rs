//! The segment log through the engine: every decision found again with its versions,
//! features and rules; recovery; damage; rotation and retention; shedding; config.

use crate::common::*;
use risk_core::audit::{
    AuditError, AuditReader, Durability, FeatureSelection, LogOptions, OnFull, Query, SegmentLog,
};
use risk_core::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const FLUSH: Duration = Duration::from_secs(30);

/// A rule scorer that reports fired rules and a per-score version, like a rule set.
struct FiringRules;

impl Scorer for FiringRules {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("rules:test", "v1", Latency::Bounded).with_content_hash(0xfeed)
    }
    fn score(&self, txn: &Transaction) -> Result<Score, ScoreError> {
        let mut s = Score::new(0.1);
        if txn.amount > 100.0 {
            s.fired.push(ReasonCode::intern("R_BIG_AMOUNT"));
            s.reasons.push(ReasonCode::intern("BIG"), 0.3);
            s.probability = 0.4;
        }
        if txn.id.0.is_multiple_of(2) {
            s.fired.push(ReasonCode::intern("R_EVEN"));
        }
        Ok(s)
    }
}

fn opts(dir: &Path) -> LogOptions {
    LogOptions::new(dir)
}

fn engine_with(log: Arc<SegmentLog>, clock: Arc<ManualClock>) -> Engine {
    Engine::builder(schema())
        .rules(Arc::new(FiringRules))
        .fast(Arc::new(ConstantScorer::new(0.05)))
        .clock(clock)
        .audit_log(log)
        .build()
        .unwrap()
}

fn varied(s: &Arc<FeatureSchema>, i: u64) -> Transaction {
    let c = ["US", "GB", "NG", "FR"][(i % 4) as usize];
    let mut b = Transaction::builder(s)
        .id(i)
        .entity(1000 + i % 7)
        .timestamp_ms(1_767_571_200_000 + i as i64)
        .amount(5.0 + (i * 37 % 300) as f64, "EUR")
        .country(c);
    if !i.is_multiple_of(3) {
        b = b.numeric("velocity_1h", (i % 11) as f32);
    }
    b.build().unwrap()
}

fn clock() -> Arc<ManualClock> {
    let c = ManualClock::new();
    c.set_unix_origin_ms(1_767_600_000_000);
    c
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_decision_is_found_again_with_its_versions_features_and_rules() {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let log = Arc::new(SegmentLog::open_with_clock(opts(dir.path()), c.clone()).unwrap());
    let e = engine_with(Arc::clone(&log), c);
    let s = e.schema().clone();
    let mut decided = Vec::new();
    for i in 1..=500 {
        let t = varied(&s, i);
        decided.push((e.decide(&t).unwrap(), t));
    }
    let durable = log.flush(FLUSH).unwrap();
    let st = log.stats();
    assert_eq!(st.accepted, 500);
    assert_eq!(st.shed_full, 0);
    // 500 decisions plus one schema record.
    assert_eq!(durable, 501);
    assert_eq!(st.durable_seq, 501);
    let r = AuditReader::new(dir.path());
    for (d, t) in decided.iter().step_by(37) {
        let hits: Vec<_> = r
            .query(Query::txn(d.txn.0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(hits.len(), 1, "txn {}", d.txn.0);
        let rec = hits[0].decision().unwrap();
        let v = rec.versions.as_ref().unwrap();
        assert_eq!(v.rules.as_ref().unwrap().name, "rules:test");
        assert_eq!(v.rules.as_ref().unwrap().hash, 0xfeed);
        assert_eq!(v.fast.as_ref().unwrap().name, "constant");
        assert_eq!(
            v.fast.as_ref().unwrap().hash,
            d.versions.fast.unwrap().hash()
        );
        assert_eq!(v.config, e.config().fingerprint());
        assert_eq!(v.schema, s.fingerprint());
        assert_eq!(rec.score, d.score);
        assert_eq!(rec.entity, d.entity.0);
        assert_eq!(rec.event_time_ms, t.timestamp_ms);
        assert_eq!(rec.decided_at_ms, d.decided_at_ms);
        assert_eq!(rec.rules_fired, d.rules_fired.iter().collect::<Vec<_>>());
        assert_eq!(rec.rules_fired_total, d.rules_fired.total());
        assert_eq!(rec.features.len(), s.len());
        for (a, b) in rec.features.iter().zip(t.features.values()) {
            assert!(a == b || (a.is_nan() && b.is_nan()));
        }
        let j = hits[0].to_json();
        assert_eq!(j["action"], d.action.as_str());
        assert_eq!(j["features"]["amount"], serde_json::json!(t.amount as f32));
        let country = t.features.by_name("country").unwrap() as usize;
        let want = ["other", "US", "GB", "NG"][country];
        assert_eq!(j["features"]["country"], want, "{j}");
    }
    // By entity, by rule, by time.
    let by_entity = r.query(Query::entity(1003)).unwrap().count();
    assert_eq!(
        by_entity,
        decided.iter().filter(|(d, _)| d.entity.0 == 1003).count()
    );
    let big = r.query(Query::rule("R_BIG_AMOUNT")).unwrap().count();
    assert_eq!(
        big,
        decided.iter().filter(|(_, t)| t.amount > 100.0).count()
    );
    let at = decided[0].0.decided_at_ms;
    assert_eq!(r.query(Query::between(at, at + 1)).unwrap().count(), 500);
    assert_eq!(r.query(Query::between(at + 1, at + 2)).unwrap().count(), 0);
}

#[test]
fn deep_verdicts_are_recorded_with_the_ticket_of_their_decision() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SegmentLog::open(opts(dir.path())).unwrap());
    let e = Engine::builder(schema())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(Arc::new(ConstantScorer::new(0.9)))
        .deep_config(deep_cfg(10_000))
        .audit_log(Arc::clone(&log))
        .build()
        .unwrap();
    let verdicts = e.subscribe();
    let s = e.schema().clone();
    let d = e.decide(&txn(&s, 7, 70)).unwrap();
    let Escalation::Enqueued(ticket) = d.escalation else {
        panic!("not escalated: {:?}", d.escalation)
    };
    let v = verdicts.recv_timeout(FLUSH).unwrap();
    e.shutdown(Shutdown::Drain { timeout: FLUSH });
    let all: Vec<_> = log
        .reader()
        .query(Query::txn(7))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // Two records, in either order: the deep tier can answer before the deciding thread
    // has recorded its decision; the ticket joins them.
    assert_eq!(all.len(), 2);
    let rd = all.iter().find_map(|e| e.decision()).unwrap();
    assert_eq!(rd.ticket, ticket.0);
    let ve = all.iter().find(|e| e.verdict().is_some()).unwrap();
    let rv = ve.verdict().unwrap();
    assert_eq!(rv.ticket, ticket.0);
    assert_eq!(rv.score, v.score);
    assert_eq!(rv.deep.as_ref().unwrap().name, "constant");
    assert_eq!(ve.to_json()["source"], "model");
}

#[test]
fn feature_selection_keeps_what_it_names_and_none_keeps_nothing() {
    for (sel, want) in [
        (FeatureSelection::None, vec![]),
        (
            FeatureSelection::Named(vec!["country".into(), "amount".into()]),
            vec!["country", "amount"],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.features = sel;
        let log = Arc::new(SegmentLog::open(o).unwrap());
        let e = engine_with(Arc::clone(&log), clock());
        let t = varied(e.schema(), 2);
        e.decide(&t).unwrap();
        log.flush(FLUSH).unwrap();
        let got: Vec<_> = log
            .reader()
            .all()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let layout = got[0].layout.as_ref().unwrap();
        let names: Vec<&str> = layout.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, want);
        assert!(!layout.complete);
        assert_eq!(got[0].decision().unwrap().features.len(), want.len());
        if !want.is_empty() {
            assert_eq!(got[0].feature("amount"), Some(t.amount as f32));
        }
    }
    // A name the schema lacks is refused when the engine is built.
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.features = FeatureSelection::Named(vec!["no_such_field".into()]);
    let log = Arc::new(SegmentLog::open(o).unwrap());
    let err = Engine::builder(schema())
        .rules(rules(0.1))
        .audit_log(log)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("no_such_field"), "{err}");
}

/// Writes `n` decisions to a fresh log in `dir` and closes it.
fn fill(dir: &Path, n: u64, o: LogOptions) -> Engine {
    let log = Arc::new(SegmentLog::open(o).unwrap());
    let e = engine_with(Arc::clone(&log), clock());
    for i in 1..=n {
        e.decide(&varied(e.schema(), i)).unwrap();
    }
    log.close(FLUSH).unwrap();
    let _ = dir;
    e
}

#[test]
fn a_torn_tail_is_truncated_and_reported_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 20, opts(dir.path()));
    let seg = segments(dir.path()).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    // Half a frame: a length and checksum promising more bytes than follow.
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&200u32.to_le_bytes()).unwrap();
    f.write_all(&[0xAB; 4]).unwrap();
    f.write_all(&[1, 2, 3]).unwrap();
    drop(f);
    let log = Arc::new(SegmentLog::open(opts(dir.path())).unwrap());
    let rec = log.stats().recovery;
    assert_eq!(rec.truncated_bytes, 11);
    assert!(!rec.corrupt);
    assert_eq!(rec.last_seq, 21);
    assert_eq!(rec.segment.as_deref(), Some(seg.as_path()));
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), len);
    let e = engine_with(Arc::clone(&log), clock());
    e.decide(&varied(e.schema(), 99)).unwrap();
    // A schema record again (the reopened writer does not know the segment's), then it.
    assert_eq!(log.flush(FLUSH).unwrap(), 23);
    let seqs: Vec<u64> = log
        .reader()
        .query(Query::everything())
        .unwrap()
        .map(|e| e.unwrap().seq())
        .collect();
    assert_eq!(seqs, (1..=23).collect::<Vec<_>>());
}

#[test]
fn damage_is_reported_never_skipped() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 20, opts(dir.path()));
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    // The reader returns the damage as an error item.
    let items: Vec<_> = AuditReader::new(dir.path()).all().unwrap().collect();
    let bad = items.iter().filter(|r| r.is_err()).count();
    assert_eq!(bad, 1);
    assert!(matches!(
        items.iter().find(|r| r.is_err()),
        Some(Err(AuditError::Corrupt { .. }))
    ));
    assert!(AuditReader::new(dir.path()).verify().is_err());
    // Opening refuses a damaged last segment (not a torn write)...
    let err = SegmentLog::open(opts(dir.path())).unwrap_err();
    match err {
        AuditError::Corrupt { path, offset, .. } => {
            assert_eq!(path, seg);
            assert!(offset > 0 && offset <= mid as u64);
        }
        other => panic!("{other}"),
    }
    // ... unless told to cut it, and says so.
    let mut o = opts(dir.path());
    o.truncate_corrupt_tail = true;
    let log = SegmentLog::open(o).unwrap();
    let rec = log.stats().recovery;
    assert!(rec.corrupt);
    assert!(rec.truncated_bytes > 0);
    assert!(rec.last_seq < 21);
    drop(log);
    assert!(AuditReader::new(dir.path()).verify().is_ok());
}

#[test]
fn segments_rotate_by_size_and_age_and_retention_deletes_the_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let mut o = opts(dir.path());
    o.segment_bytes = 4096;
    o.retention_bytes = Some(20_000);
    o.max_batch = 8;
    let log = Arc::new(SegmentLog::open_with_clock(o, c.clone()).unwrap());
    let e = engine_with(Arc::clone(&log), c.clone());
    for i in 1..=400 {
        e.decide(&varied(e.schema(), i)).unwrap();
        if i % 8 == 0 {
            log.flush(FLUSH).unwrap();
        }
    }
    log.flush(FLUSH).unwrap();
    let segs = segments(dir.path());
    let total: u64 = segs
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(segs.len() >= 4, "{segs:?}");
    assert!(log.stats().segments_deleted > 0);
    // Retention keeps the bound up to one segment of slack (the active one grows).
    assert!(total <= 20_000 + 4096 + 8 * 600, "{total}");
    // What is left reads back in order, each segment starting with its schema record.
    let seqs: Vec<u64> = log
        .reader()
        .query(Query::everything())
        .unwrap()
        .map(|e| e.unwrap().seq())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    assert_eq!(*seqs.last().unwrap(), log.stats().durable_seq);
    let first = log.reader().all().unwrap().next().unwrap().unwrap();
    assert!(first.layout.is_some(), "every segment carries its schema");

    // Age: a segment older than segment_age rotates; retention by age deletes it once
    // its successor is older than the retention.
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_age = Duration::from_secs(3600);
    o.retention_age = Some(Duration::from_secs(2 * 86_400));
    let log = Arc::new(SegmentLog::open_with_clock(o, c.clone()).unwrap());
    let e = engine_with(Arc::clone(&log), c.clone());
    e.decide(&varied(e.schema(), 1)).unwrap();
    log.flush(FLUSH).unwrap();
    c.advance(Duration::from_secs(3601));
    e.decide(&varied(e.schema(), 2)).unwrap();
    log.flush(FLUSH).unwrap();
    assert_eq!(segments(dir.path()).len(), 2);
    c.advance(Duration::from_secs(3 * 86_400));
    e.decide(&varied(e.schema(), 3)).unwrap();
    log.flush(FLUSH).unwrap();
    let left = segments(dir.path());
    assert_eq!(left.len(), 2, "{left:?}");
    assert_eq!(log.stats().segments_deleted, 1);
    let txns: Vec<u64> = log
        .reader()
        .all()
        .unwrap()
        .map(|e| e.unwrap().decision().unwrap().txn_id)
        .collect();
    assert_eq!(txns, vec![2, 3]);
}

#[test]
fn offers_are_accepted_or_shed_and_counted_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.queue_capacity = 4;
    o.on_full = OnFull::Drop;
    o.durability = Durability::None;
    let log = Arc::new(SegmentLog::open(o).unwrap());
    let e = engine_with(Arc::clone(&log), clock());
    let n = 20_000;
    let s = e.schema().clone();
    std::thread::scope(|sc| {
        for k in 0..2 {
            let e = &e;
            let s = &s;
            sc.spawn(move || {
                for i in 0..n / 2 {
                    e.decide(&varied(s, 1 + k * n + i)).unwrap();
                }
            });
        }
    });
    let durable = log.flush(FLUSH).unwrap();
    let st = log.stats();
    assert_eq!(st.accepted + st.shed_full, n);
    let decisions = log.reader().all().unwrap().count() as u64;
    assert_eq!(decisions, st.accepted);
    assert_eq!(durable, st.written_seq);
    assert_eq!(st.shed_closed, 0);
    e.shutdown(Shutdown::Abandon);
    // After close every offer sheds as closed.
    e.decide(&varied(&s, 1)).unwrap_err();
    assert!(log.flush(FLUSH).is_err());
}

#[test]
fn interval_and_none_durability_are_made_durable_by_flush() {
    for d in [
        Durability::Interval(Duration::from_secs(3600)),
        Durability::None,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.durability = d;
        let log = Arc::new(SegmentLog::open(o).unwrap());
        let e = engine_with(Arc::clone(&log), clock());
        for i in 1..=10 {
            e.decide(&varied(e.schema(), i)).unwrap();
        }
        assert_eq!(log.flush(FLUSH).unwrap(), 11, "{d:?}");
        assert_eq!(log.stats().durable_seq, 11);
    }
}

#[test]
fn an_unusable_directory_is_a_typed_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    match SegmentLog::open(opts(&file.join("audit"))) {
        Err(AuditError::Files(risk_core::files::FilesError::Io { path, .. })) => {
            assert!(path.starts_with(&file))
        }
        other => panic!("{other:?}"),
    }
    let mut o = opts(dir.path());
    o.queue_capacity = 0;
    assert!(matches!(
        SegmentLog::open(o),
        Err(AuditError::Invalid {
            key: "queue_capacity",
            ..
        })
    ));
}

#[test]
fn audit_config_in_risk_toml() {
    let dir = tempfile::tempdir().unwrap();
    let base = r#"
[schema]
fields = [ { name = "amount", kind = "numeric", required = true } ]
[rules.scorer]
kind = "constant"
probability = 0.1
"#;
    let load = |audit: &str| {
        Engine::from_toml_str(
            &format!("{base}\n[audit]\n{audit}"),
            dir.path(),
            Path::new("risk.toml"),
            &ScorerRegistry::default(),
        )
    };
    let e = load("dir = \"log\"\ndurability = \"interval\"\nfsync_interval_ms = 50\nfeatures = [\"amount\"]\nretention_days = 30").unwrap();
    let log = e.audit_log().expect("a segment log");
    assert_eq!(log.dir(), dir.path().join("log"));
    let t = Transaction::builder(e.schema())
        .id(5)
        .amount(12.5, "USD")
        .build()
        .unwrap();
    e.decide(&t).unwrap();
    log.flush(FLUSH).unwrap();
    let got: Vec<_> = log
        .reader()
        .all()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got[0].feature("amount"), Some(12.5));
    for (bad, key) in [
        (
            "dir = \"x\"\ndurability = \"sometimes\"",
            "audit.durability",
        ),
        ("dir = \"x\"\non_full = \"wait\"", "audit.on_full"),
        ("dir = \"x\"\nfeatures = \"some\"", "audit.features"),
        (
            "dir = \"x\"\nfsync_interval_ms = 5",
            "audit.fsync_interval_ms",
        ),
        ("dir = \"x\"\nretention_days = -1", "audit.retention_days"),
        ("dir = \"x\"\nsegment_bytes = 10", "audit.dir"),
        ("dir = \"x\"\nfeatures = [\"nope\"]", "audit.features"),
        ("dir = \"x\"\ncolour = 1", "colour"),
    ] {
        let err = load(bad).unwrap_err().to_string();
        assert!(err.contains(key), "{bad:?}: {err}");
    }
}

#[test]
fn mutated_segments_are_refused_or_read_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 30, opts(dir.path()));
    let seg = segments(dir.path()).pop().unwrap();
    let good = std::fs::read(&seg).unwrap();
    // A small LCG: reproducible byte flips, truncations and garbage appends.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (x >> 33) as usize
    };
    let (mut opened, mut refused) = (0, 0);
    for round in 0..300 {
        let mut b = good.clone();
        match round % 3 {
            0 => {
                for _ in 0..1 + next() % 4 {
                    let i = next() % b.len();
                    b[i] ^= 1 << (next() % 8);
                }
            }
            1 => b.truncate(next() % b.len()),
            _ => b.extend((0..1 + next() % 64).map(|_| next() as u8)),
        }
        std::fs::write(&seg, &b).unwrap();
        // Reading reports what it cannot read; it never panics or allocates a bad length.
        let read: Vec<_> = AuditReader::new(dir.path()).all().unwrap().collect();
        assert!(read.len() <= 30 + 1);
        match SegmentLog::open(opts(dir.path())) {
            Ok(log) => {
                opened += 1;
                let rec = log.stats().recovery;
                assert!(rec.last_seq <= 31, "{rec:?}");
                drop(log);
                // After recovery the log verifies clean.
                AuditReader::new(dir.path()).verify().unwrap();
            }
            Err(AuditError::Corrupt { .. }) => refused += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        // Reset to the good segment (recovery may have truncated it; more segments may
        // have been created by a reopened writer).
        for p in segments(dir.path()) {
            std::fs::remove_file(p).unwrap();
        }
        std::fs::write(&seg, &good).unwrap();
    }
    assert!(opened > 0 && refused > 0, "{opened} {refused}");
}
