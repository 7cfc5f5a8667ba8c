//! Handle lifetimes: a freed handle stays refused however many handles come after it, and a
//! subscription handle is never taken for an engine.

use crate::*;
use risk_ffi::risk_result::*;
use std::path::Path;

const TXN: &str = r#"{"amount": 10, "currency": "USD"}"#;

#[test]
fn stale_handles_are_refused_and_never_reissued() {
    let e = engine(&minimal(), Path::new(".")).unwrap();
    assert_eq!(decide_json(e, TXN).0, RISK_OK);
    free_engine(e);
    let live = engine(&minimal(), Path::new(".")).unwrap();
    let s0 = subscribe(live).unwrap();
    free_subscription(s0);
    for _ in 0..1_000 {
        let s = subscribe(live).unwrap();
        assert_ne!(
            s.cast::<risk_engine>(),
            e,
            "a new handle reuses a freed one"
        );
        assert_ne!(s, s0, "a new handle reuses a freed one");
        free_subscription(s);
    }
    assert_eq!(decide_json(e, TXN).0, RISK_ERR_HANDLE);
    assert!(
        last_error().contains("not a live engine handle"),
        "{}",
        last_error()
    );
    assert_eq!(poll(s0, 0), RISK_ERR_HANDLE);
    // Freeing again, or freeing a value of the other type, is ignored.
    free_engine(e);
    free_subscription(live.cast());
    assert_eq!(decide_json(live, TXN).0, RISK_OK);
    free_engine(live);
    assert_eq!(decide_json(live, TXN).0, RISK_ERR_HANDLE);
}
