//! Remote probabilities equal the native scorer's, single rows and batches.

use super::*;
use risk_core::Score;

#[test]
fn remote_probabilities_equal_the_native_scorer() {
    let r = reference();
    let native = native();
    let remote = load(&cfg(&[mlserver_url()]));
    assert!(remote.metadata_checked(), "MLServer declared the tensors");
    assert_eq!(remote.output(), Some("predict_proba"));
    assert!(!remote.binary(), "MLServer 1.7 lists no binary_tensor_data");
    assert_eq!(remote.metadata().name, MODEL);
    let all = txns(&r, r.rows);
    let before = remote.stats();
    // Every reference row (4.5% of values missing: they travel as null) in batches.
    let mut worst = 0f32;
    let mut out: Vec<Score> = Vec::new();
    for chunk in all.chunks(1000) {
        let refs: Vec<&Transaction> = chunk.iter().collect();
        remote
            .score_batch_within(&refs, Duration::from_secs(60), &mut out)
            .unwrap();
        assert_eq!(out.len(), refs.len());
        for (t, s) in chunk.iter().zip(&out) {
            worst = worst.max((s.probability - want(&native, t)).abs());
        }
    }
    assert!(
        worst <= 1e-6,
        "max |remote - native| over batches = {worst:e}"
    );
    // Single rows, one request each.
    let mut worst1 = 0f32;
    for t in all.iter().step_by(60) {
        let p = remote.score_within(t, Duration::from_secs(60)).unwrap();
        worst1 = worst1.max((p.probability - want(&native, t)).abs());
    }
    assert!(
        worst1 <= 1e-6,
        "max |remote - native| single rows = {worst1:e}"
    );
    let s = remote.stats();
    let calls = 12 + 200;
    assert_eq!(s.calls - before.calls, calls);
    assert_eq!(s.ok - before.ok, calls);
    assert_eq!(
        s.attempts - before.attempts,
        calls,
        "no hedge, no retry: {s:?}"
    );
    assert_eq!(s.rows - before.rows, r.rows as u64 + 200);
    assert_eq!(s.failures.total(), 0);
}

#[test]
fn a_batch_larger_than_max_batch_is_split_into_requests() {
    let r = reference();
    let native = native();
    let mut c = cfg(&[mlserver_url()]);
    c.max_batch = 64;
    let remote = load(&c);
    let all = txns(&r, 300);
    let refs: Vec<&Transaction> = all.iter().collect();
    let mut out = Vec::new();
    remote.score_batch(&refs, &mut out).unwrap();
    assert_eq!(out.len(), 300);
    for (t, s) in all.iter().zip(&out) {
        assert!((s.probability - want(&native, t)).abs() <= 1e-6);
    }
    assert_eq!(remote.stats().calls, 5, "300 rows in requests of 64");
    out.clear();
    remote.score_batch(&[], &mut out).unwrap();
    assert!(out.is_empty());
}
