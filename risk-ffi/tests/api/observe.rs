//! Monitors and drills over the C ABI.

use crate::*;
use risk_ffi::risk_result::*;
use std::ffi::CString;
use std::path::Path;

/// `fast_constant.toml` (rules 0.1, fast 0.9: they never agree) with monitors judged only
/// on demand, on every decision.
fn toml() -> String {
    let base = config("fast_constant.toml", &[("FAST_SCORE", "0.9")]);
    format!("{base}[monitor]\nsample_every = 1\nmin_samples = 10\ninterval_ms = 0\n")
}

fn text(
    e: *const risk_engine,
    f: unsafe extern "C" fn(
        *const risk_engine,
        *mut std::ffi::c_char,
        usize,
        *mut usize,
    ) -> risk_result,
) -> Result<serde_json::Value, risk_result> {
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0;
    // SAFETY: `buf` has its length in writable bytes; `len` is writable.
    match unsafe { f(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) } {
        RISK_OK => Ok(serde_json::from_slice(&buf[..len]).unwrap()),
        r => Err(r),
    }
}

#[test]
fn monitor_report_tick_and_a_drill() {
    let e = engine(&toml(), Path::new(".")).unwrap();
    for _ in 0..50 {
        assert_eq!(
            decide_json(e, r#"{"amount": 10, "currency": "USD"}"#).0,
            RISK_OK
        );
    }
    let mut raised = 0;
    // SAFETY: live handle; `raised` is writable.
    assert_eq!(unsafe { risk_engine_monitor_tick(e, &mut raised) }, RISK_OK);
    assert!(raised >= 1);
    let m = text(e, risk_engine_monitor_json).unwrap();
    assert_eq!(m["firing"][0], "agreement:agreement", "{m}");
    assert_eq!(m["recent"][0]["kind"], "agreement");
    assert_eq!(
        text(e, risk_engine_drill_report_json).unwrap_err(),
        RISK_ERR_EMPTY
    );
    let fault = CString::new("fast_down").unwrap();
    let txns = CString::new(r#"[{"id": 1, "amount": 10, "currency": "USD"}, {"id": 2, "amount": 20, "currency": "USD"}]"#).unwrap();
    let labels = CString::new("[false, true]").unwrap();
    // SAFETY: NUL-terminated arguments.
    let r = unsafe { risk_engine_drill(e, fault.as_ptr(), txns.as_ptr(), labels.as_ptr()) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    let d = text(e, risk_engine_drill_report_json).unwrap();
    assert_eq!(d["decisions"], 2);
    assert_eq!(d["by_tier"][0], serde_json::json!(["rules", 2]), "{d}");
    assert_eq!(d["fallbacks"][0], serde_json::json!(["error", 2]));
    for (f, t) in [("fast_sideways", &txns), ("fast_slow:x", &txns)] {
        let f = CString::new(f).unwrap();
        // SAFETY: as above.
        assert_eq!(
            unsafe { risk_engine_drill(e, f.as_ptr(), t.as_ptr(), std::ptr::null()) },
            RISK_ERR_INVALID
        );
    }
    let bad = CString::new(r#"[{"id": 1}]"#).unwrap();
    // SAFETY: as above.
    let r = unsafe { risk_engine_drill(e, fault.as_ptr(), bad.as_ptr(), std::ptr::null()) };
    assert_ne!(r, RISK_OK);
    assert!(last_error().contains("txns_json[0]"), "{}", last_error());
    free_engine(e);
    let plain = engine(&minimal(), Path::new(".")).unwrap();
    assert_eq!(
        text(plain, risk_engine_monitor_json).unwrap_err(),
        RISK_ERR_INVALID
    );
    free_engine(plain);
}
