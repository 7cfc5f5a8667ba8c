//! The audit trail is tamper-evident: an edited record (checksum recomputed), a dropped
//! record, swapped segments and a rewrite without the key are each found and named by the
//! first broken link; entity keys are pseudonymised with `[privacy] key`; files are private.

use crate::common::*;
use prost::Message;
use risk_core::audit::pb::{self, audit_record::Body};
use risk_core::audit::{AuditError, AuditReader, LogOptions, Query, SegmentLog};
use risk_core::pseudo::Pseudonymiser;
use risk_core::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const FLUSH: Duration = Duration::from_secs(30);

fn key() -> Pseudonymiser {
    Pseudonymiser::new("privacy.key", b"test-pseudonym-key-0123456789").unwrap()
}

/// A keyed log of `n` decisions over several segments (flushed in small batches so the
/// 4 KiB segments rotate).
fn write_log(dir: &Path, n: u64) {
    let mut o = LogOptions::new(dir);
    o.segment_bytes = 4096;
    o.pseudonymiser = Some(key());
    let log = Arc::new(SegmentLog::open(o).unwrap());
    let e = Engine::builder(schema())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.05)))
        .audit_log(Arc::clone(&log))
        .build()
        .unwrap();
    let s = e.schema().clone();
    for i in 1..=n {
        let t = Transaction::builder(&s)
            .id(i)
            .entity(5000 + i % 3)
            .timestamp_ms(1_767_571_200_000 + i as i64)
            .amount(10.0 + i as f64, "EUR")
            .country("FR")
            .build()
            .unwrap();
        e.decide(&t).unwrap();
        if i % 8 == 0 {
            log.flush(FLUSH).unwrap();
        }
    }
    log.close(FLUSH).unwrap();
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

/// A segment's frames' payloads (after its 16-byte header).
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    let mut at = 16;
    let mut out = Vec::new();
    while at + 8 <= b.len() {
        let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        out.push(b[at + 8..at + 8 + len].to_vec());
        at += 8 + len;
    }
    out
}

/// Rewrites a segment from payloads, with correct checksums (a deliberate edit).
fn rewrite(path: &Path, payloads: &[Vec<u8>]) {
    let b = std::fs::read(path).unwrap();
    let mut out = b[..16].to_vec();
    for p in payloads {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(p).to_le_bytes());
        out.extend_from_slice(p);
    }
    std::fs::write(path, out).unwrap();
}

fn tampered(r: Result<impl std::fmt::Debug, AuditError>) -> (PathBuf, u64, String) {
    match r {
        Err(AuditError::Tampered {
            path, seq, what, ..
        }) => (path, seq, what),
        other => panic!("expected a broken link, got {other:?}"),
    }
}

fn keyed_reader(dir: &Path) -> AuditReader {
    AuditReader::new(dir).with_pseudonymiser(key())
}

#[test]
fn an_intact_keyed_log_verifies_from_record_one() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 120);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3, "want several segments, got {}", segs.len());
    let rep = keyed_reader(dir.path()).verify_chain().unwrap();
    assert!(rep.keyed && rep.anchored_at_start);
    assert_eq!(rep.first_seq, 1);
    assert_eq!(rep.segments, segs.len());
    assert_eq!(rep.unlinked, 0);
    assert!(rep.records >= 120);
    assert!(keyed_reader(dir.path()).verify().is_ok());
    // The wrong key (or none, for a keyed log) breaks at the first record.
    let (_, seq, what) = tampered(AuditReader::new(dir.path()).verify_chain());
    assert_eq!(seq, 1);
    assert!(what.contains("chain key differs"), "{what}");
}

#[test]
fn an_edited_record_with_a_fixed_checksum_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 80);
    let seg = segments(dir.path())[1].clone();
    let mut payloads = frames(&seg);
    let k = payloads.len() / 2;
    let mut rec = pb::AuditRecord::decode(payloads[k].as_slice()).unwrap();
    let seq = rec.seq;
    match rec.body.as_mut() {
        Some(Body::Decision(d)) => d.score = 0.0,
        Some(Body::Schema(s)) => s.fingerprint ^= 1,
        other => panic!("unexpected record {other:?}"),
    }
    // The old link kept: the record still looks linked.
    payloads[k] = rec.encode_to_vec();
    rewrite(&seg, &payloads);
    let (path, at, what) = tampered(keyed_reader(dir.path()).verify_chain());
    assert_eq!((path, at), (seg.clone(), seq));
    assert!(what.contains("link does not match"), "{what}");
    // verify() (checksums and chain) fails too, naming the same record.
    let err = keyed_reader(dir.path()).verify().unwrap_err().to_string();
    assert!(err.contains(&format!("record {seq}")), "{err}");
}

#[test]
fn a_rewrite_without_the_key_is_found() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 40);
    // A forger edits record 3 and recomputes every later link, unkeyed.
    let mut prev = [0u8; 16];
    let mut first_bad = None;
    for seg in segments(dir.path()) {
        let mut payloads = frames(&seg);
        for p in payloads.iter_mut() {
            let mut rec = pb::AuditRecord::decode(p.as_slice()).unwrap();
            if rec.seq == 3 {
                if let Some(Body::Decision(d)) = rec.body.as_mut() {
                    d.amount += 1000.0;
                }
                first_bad = Some(rec.seq);
            }
            rec.chain.clear();
            let mut body = rec.encode_to_vec();
            let mut h = blake3::Hasher::new();
            h.update(&prev);
            h.update(&body);
            prev.copy_from_slice(&h.finalize().as_bytes()[..16]);
            body.extend_from_slice(&[0x7a, 16]);
            body.extend_from_slice(&prev);
            *p = body;
        }
        rewrite(&seg, &payloads);
    }
    assert!(first_bad.is_some());
    // Consistent for an unkeyed check, broken at record 1 for the keyed one.
    assert!(AuditReader::new(dir.path()).verify_chain().is_ok());
    let (_, seq, _) = tampered(keyed_reader(dir.path()).verify_chain());
    assert_eq!(seq, 1);
}

#[test]
fn a_dropped_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 60);
    let seg = segments(dir.path())[1].clone();
    let mut payloads = frames(&seg);
    let k = payloads.len() / 2;
    let gone = pb::AuditRecord::decode(payloads[k].as_slice()).unwrap().seq;
    payloads.remove(k);
    rewrite(&seg, &payloads);
    let (path, seq, what) = tampered(keyed_reader(dir.path()).verify_chain());
    assert_eq!(path, seg);
    assert_eq!(seq, gone + 1);
    assert!(what.contains(&format!("where {gone} was due")), "{what}");
}

#[test]
fn swapped_segments_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 80);
    let segs = segments(dir.path());
    let (a, b) = (
        std::fs::read(&segs[1]).unwrap(),
        std::fs::read(&segs[2]).unwrap(),
    );
    std::fs::write(&segs[1], &b).unwrap();
    std::fs::write(&segs[2], &a).unwrap();
    let (path, _, what) = tampered(keyed_reader(dir.path()).verify_chain());
    assert_eq!(path, segs[1]);
    assert!(what.contains("renamed or swapped"), "{what}");
    // A deleted middle segment: the next one's first record is not the one due.
    std::fs::write(&segs[1], &a).unwrap();
    std::fs::write(&segs[2], &b).unwrap();
    assert!(keyed_reader(dir.path()).verify_chain().is_ok());
    std::fs::remove_file(&segs[1]).unwrap();
    let (path, _, what) = tampered(keyed_reader(dir.path()).verify_chain());
    assert_eq!(path, segs[2]);
    assert!(what.contains("was due"), "{what}");
}

#[test]
fn the_oldest_kept_segment_anchors_the_chain_after_retention() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 80);
    std::fs::remove_file(&segments(dir.path())[0]).unwrap();
    let rep = keyed_reader(dir.path()).verify_chain().unwrap();
    assert!(!rep.anchored_at_start);
    assert!(rep.first_seq > 1);
}

#[test]
fn reopening_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 30);
    write_log(dir.path(), 30);
    let rep = keyed_reader(dir.path()).verify_chain().unwrap();
    assert!(rep.anchored_at_start);
    assert!(rep.records >= 60);
}

#[test]
fn entity_keys_are_pseudonymised_and_found_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 30);
    let raw: Vec<u64> = AuditReader::new(dir.path())
        .all()
        .unwrap()
        .filter_map(|e| e.unwrap().decision().map(|d| d.entity))
        .collect();
    assert_eq!(raw.len(), 30);
    assert!(
        raw.iter().all(|&e| !(5000..5003).contains(&e)),
        "raw entity ids on disk"
    );
    let with_key = keyed_reader(dir.path())
        .query(Query::entity(5001))
        .unwrap()
        .count();
    assert_eq!(with_key, 10);
    let without = AuditReader::new(dir.path())
        .query(Query::entity(5001))
        .unwrap()
        .count();
    assert_eq!(without, 0);
}

#[cfg(unix)]
#[test]
fn the_log_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("audit");
    write_log(&logdir, 10);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&logdir), 0o700);
    for s in segments(&logdir) {
        assert_eq!(mode(&s), 0o600, "{}", s.display());
    }
    // A directory anyone can write to is refused, by name.
    std::fs::set_permissions(&logdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = SegmentLog::open(LogOptions::new(&logdir)).unwrap_err();
    assert!(matches!(err, AuditError::Files(_)), "{err}");
    assert!(err.to_string().contains("writable by others"), "{err}");
}
