//! Several threads polling one subscription share its verdicts: each verdict reaches exactly
//! one poller, none is lost while the receiver passes between them, and every poller ends
//! with `RISK_ERR_CLOSED` once the engine shuts down.

use crate::*;
use risk_ffi::risk_result::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::mpsc;
use std::thread;

/// Every decision's fast score (0.5) is in the gray band, so every one goes to the deep tier
/// (`gray_deep.toml`, the deep tier's default budget and batching).
fn gray() -> String {
    config("gray_deep.toml", &[("DEEP", "")])
}

/// Polls until the subscription closes; the tickets of the verdicts it got.
fn drain_on_thread(s: usize) -> mpsc::Receiver<Vec<u64>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let s = std::ptr::without_provenance::<risk_subscription>(s);
        let mut got = Vec::new();
        loop {
            let mut v = risk_verdict::default();
            // SAFETY: `v` is writable; `s` is a subscription handle.
            match unsafe { risk_subscription_poll(s, u32::MAX, &mut v) } {
                RISK_OK => got.push(v.ticket),
                RISK_ERR_CLOSED => break,
                r => panic!("poll gave {r:?}: {}", last_error()),
            }
        }
        let _ = tx.send(got);
    });
    rx
}

#[test]
fn pollers_share_verdicts_and_all_see_the_close() {
    let e = engine(&gray(), Path::new(".")).unwrap();
    let s = subscribe(e).unwrap();
    let pollers: Vec<_> = (0..4).map(|_| drain_on_thread(s.addr())).collect();
    let mut enqueued = BTreeSet::new();
    for i in 0..64 {
        let (r, d) = decide_json(
            e,
            &format!(r#"{{"id": {i}, "amount": 10, "currency": "USD"}}"#),
        );
        assert_eq!(r, RISK_OK, "{}", last_error());
        assert_eq!(d.escalation, RISK_ESCALATION_ENQUEUED);
        enqueued.insert(d.ticket);
    }
    assert_eq!(enqueued.len(), 64, "tickets are distinct");
    let (mut drained, mut abandoned) = (0, 0);
    // SAFETY: `e` is live; the counters are writable. The drain budget is the engine's, for
    // constant-scorer work that takes microseconds.
    let r = unsafe { risk_engine_shutdown(e, 60_000, &mut drained, &mut abandoned) };
    assert_eq!(r, RISK_OK);
    assert_eq!(abandoned, 0);
    let mut seen = Vec::new();
    for p in pollers {
        seen.extend(p.recv_timeout(HANG).expect("a poller hangs after shutdown"));
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        enqueued.into_iter().collect::<Vec<_>>(),
        "each verdict exactly once"
    );
    free_subscription(s);
    free_engine(e);
}
