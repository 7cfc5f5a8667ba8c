//! Model lifecycle over the C ABI: deploy through the gate, status JSON, refusals with
//! `RISK_ERR_DEPLOY`, rollback, promote, bad arguments, and a restart on the model
//! directory coming back on what served.

use crate::*;
use risk_ffi::risk_result::*;
use serde_json::Value;
use std::ffi::CString;

/// `fast_constant.toml` (fast tier 0.05) with model directories under `models/` in the base
/// directory, checked only on request.
fn toml() -> String {
    let base = config("fast_constant.toml", &[("FAST_SCORE", "0.05")]);
    format!("{base}[deploy]\ndir = \"models\"\ncheck_interval_ms = 3600000\n")
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn deploy(
    e: *const risk_engine,
    target: &str,
    cand: &str,
    plan: Option<&str>,
) -> (risk_result, u64) {
    let (t, cand) = (c(target), c(cand));
    let plan = plan.map(c);
    let mut id = 0;
    // SAFETY: the strings are NUL-terminated and live across the call; `id` is writable;
    // `e` is any handle value.
    let r = unsafe {
        risk_engine_deploy(
            e,
            t.as_ptr(),
            cand.as_ptr(),
            plan.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
            std::ptr::null(),
            &mut id,
        )
    };
    (r, id)
}

fn status(e: *const risk_engine, target: &str) -> Value {
    let t = c(target);
    let mut len = 0;
    // SAFETY: NULL buffer asks for the size; `len` is writable.
    let r =
        unsafe { risk_engine_deploy_status_json(e, t.as_ptr(), std::ptr::null_mut(), 0, &mut len) };
    assert_eq!(r, RISK_ERR_BUFFER_TOO_SMALL);
    let mut buf = vec![0u8; len + 1];
    // SAFETY: `buf` has `len + 1` writable bytes (the text and its NUL).
    let r = unsafe {
        risk_engine_deploy_status_json(e, t.as_ptr(), buf.as_mut_ptr().cast(), buf.len(), &mut len)
    };
    assert_eq!(r, RISK_OK, "{}", last_error());
    serde_json::from_slice(&buf[..len]).unwrap()
}

fn rollback(e: *const risk_engine, target: &str) -> risk_result {
    let t = c(target);
    // SAFETY: NUL-terminated target; NULL reason is allowed.
    unsafe { risk_engine_rollback(e, t.as_ptr(), std::ptr::null()) }
}

fn traffic(e: *const risk_engine, n: u64) -> f32 {
    let mut last = f32::NAN;
    for i in 0..n {
        let j = format!(
            r#"{{"id": {i}, "entity": {}, "amount": {}, "currency": "USD"}}"#,
            i % 100,
            i % 900
        );
        let (r, d) = decide_json(e, &j);
        assert_eq!(r, RISK_OK, "{}", last_error());
        last = d.model_score;
    }
    last
}

#[test]
fn deploy_status_refusal_rollback_promote_and_restart() {
    let dir = scratch("deploy");
    let e = engine(&toml(), &dir).unwrap();
    traffic(e, 1500);
    let (r, id) = deploy(
        e,
        "fast",
        "[scorer]\nkind = \"constant\"\nprobability = 0.06\n",
        Some("by = \"api\""),
    );
    assert_eq!(r, RISK_OK, "{}", last_error());
    assert!(id > 0);
    let s = status(e, "fast");
    assert_eq!(s["serving"]["version"], "0.06");
    assert_eq!(s["previous"][0]["version"], "0.05");
    assert_eq!(traffic(e, 10), 0.06);
    // A wildly different model is refused by the gate and never serves.
    let (r, _) = deploy(
        e,
        "fast",
        "[scorer]\nkind = \"constant\"\nprobability = 0.95\n",
        Some(""),
    );
    assert_eq!(r, RISK_ERR_DEPLOY);
    assert!(last_error().contains("gate"), "{}", last_error());
    assert_eq!(traffic(e, 10), 0.06);
    // A canary stays active; a second deploy to the target is refused; promote ends it.
    let plan = "[[canary]]\nshare = 0.5\nmin_decisions = 1000000\n";
    let (r, _) = deploy(
        e,
        "fast",
        "[scorer]\nkind = \"constant\"\nprobability = 0.07\n",
        Some(plan),
    );
    assert_eq!(r, RISK_OK, "{}", last_error());
    assert_eq!(status(e, "fast")["active"]["phase"], "canary");
    let (r, _) = deploy(
        e,
        "fast",
        "[scorer]\nkind = \"constant\"\nprobability = 0.08\n",
        Some(""),
    );
    assert_eq!(r, RISK_ERR_DEPLOY);
    assert!(last_error().contains("in progress"), "{}", last_error());
    let t = c("fast");
    // SAFETY: NUL-terminated target.
    assert_eq!(unsafe { risk_engine_promote(e, t.as_ptr()) }, RISK_OK);
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_promote(e, t.as_ptr()) },
        RISK_ERR_DEPLOY
    );
    // SAFETY: a live handle.
    assert_eq!(unsafe { risk_engine_deploy_tick(e) }, RISK_OK);
    assert_eq!(status(e, "fast")["serving"]["version"], "0.07");
    // Back twice: to 0.06, then to the configured 0.05; then nothing is left.
    assert_eq!(rollback(e, "fast"), RISK_OK);
    assert_eq!(rollback(e, "fast"), RISK_OK);
    assert_eq!(rollback(e, "fast"), RISK_ERR_DEPLOY);
    assert_eq!(traffic(e, 10), 0.05);
    // Bad arguments.
    assert_eq!(
        deploy(
            e,
            "turbo",
            "[scorer]\nkind = \"constant\"\nprobability = 0.05\n",
            None
        )
        .0,
        RISK_ERR_INVALID
    );
    assert_eq!(deploy(e, "fast", "[scorer", None).0, RISK_ERR_DEPLOY);
    assert_eq!(
        deploy(
            e,
            "fast",
            "[scorer]\nkind = \"constant\"\nprobability = 0.05\n",
            Some("[gate]\nsample = 0")
        )
        .0,
        RISK_ERR_INVALID
    );
    // SAFETY: NULL candidate is refused before it is read.
    let r = unsafe {
        risk_engine_deploy(
            e,
            t.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, RISK_ERR_NULL);
    // A policy deploy, then a restart on the directory: what served comes back.
    let (r, _) = deploy(
        e,
        "policy",
        "[policy]\napprove_below = 0.04\ndecline_at = 0.9\n",
        Some("[gate]\nmin_action_agreement = 0.0"),
    );
    assert_eq!(r, RISK_OK, "{}", last_error());
    let (_, d) = decide_json(e, r#"{"id": 99999, "amount": 5, "currency": "USD"}"#);
    assert_eq!(d.action, 1, "0.05 is review under approve_below 0.04");
    free_engine(e);
    let e = engine(&toml(), &dir).unwrap();
    assert_eq!(
        status(e, "fast")["serving"]["version"],
        "0.05",
        "rolled back to the configured model"
    );
    assert_eq!(
        status(e, "policy")["serving"]["version"],
        "approve<0.04 decline>=0.9"
    );
    free_engine(e);
    // A freed handle.
    assert_eq!(
        deploy(
            e,
            "fast",
            "[scorer]\nkind = \"constant\"\nprobability = 0.05\n",
            None
        )
        .0,
        RISK_ERR_HANDLE
    );
}
