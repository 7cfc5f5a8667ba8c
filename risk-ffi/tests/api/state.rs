//! Entity state over the C ABI: features computed from `[state]`, `risk_decision.state`,
//! lists, labels, the state JSON and snapshots, typed `RISK_ERR_STATE` refusals, and the
//! `risk_txn` / `risk_decision` layouts (the new decision field sits in padding).

use crate::*;
use risk_ffi::risk_result::*;
use std::ffi::CString;

/// Entity state with lists in `lists/` (`state_list_dir.toml`).
fn toml() -> String {
    config("state_list_dir.toml", &[])
}

const RULES: &str = r#"
version "state-1"
policy first_hit
rule BLOCKED  { when device in list.blocked_devices  decline  hard }
rule VELOCITY { when card_count_1h >= 2  review }
"#;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn txn(id: u64) -> String {
    format!(
        r#"{{"id": {id}, "entity": 7, "timestamp_ms": {}, "amount": 20.0, "currency": "USD", "device": 42, "merchant": "T-1", "ip": "10.0.0.1", "email": "A@b.com"}}"#,
        1_767_571_200_000i64 + id as i64 * 60_000
    )
}

fn state_json(e: *const risk_engine) -> serde_json::Value {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    // SAFETY: `buf` has `cap` writable bytes, `len` is writable.
    let r = unsafe { risk_engine_state_json(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    serde_json::from_slice(&buf[..len]).unwrap()
}

#[test]
fn state_over_the_c_abi() {
    let dir = scratch("state");
    std::fs::write(dir.join("state.rules"), RULES).unwrap();
    let e = engine(&toml(), &dir).unwrap();
    let actions: Vec<u8> = (1..=3)
        .map(|i| {
            let (r, d) = decide_json(e, &txn(i));
            assert_eq!(r, RISK_OK, "{}", last_error());
            assert_eq!(d.state, 1, "fresh");
            d.action
        })
        .collect();
    assert_eq!(
        actions,
        vec![RISK_ACTION_APPROVE, RISK_ACTION_APPROVE, RISK_ACTION_REVIEW]
    );
    let (list, dev) = (c("blocked_devices"), c("42"));
    // SAFETY: NUL-terminated strings; `e` live.
    assert_eq!(
        unsafe { risk_engine_list_add(e, list.as_ptr(), dev.as_ptr(), 0) },
        RISK_OK
    );
    let mut hit = false;
    // SAFETY: as above; `hit` writable.
    assert_eq!(
        unsafe { risk_engine_list_contains(e, list.as_ptr(), dev.as_ptr(), &mut hit) },
        RISK_OK
    );
    assert!(hit);
    let (_, d) = decide_json(e, &txn(4));
    assert_eq!((d.action, d.hard_rule), (RISK_ACTION_DECLINE, true));
    let mut removed = false;
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_list_remove(e, list.as_ptr(), dev.as_ptr(), &mut removed) },
        RISK_OK
    );
    assert!(removed);
    // Typed refusals.
    let nope = c("nope");
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_list_add(e, nope.as_ptr(), dev.as_ptr(), 0) },
        RISK_ERR_STATE
    );
    assert!(last_error().contains("nope"), "{}", last_error());
    // SAFETY: `e` live; NULL out pointer allowed.
    assert_eq!(
        unsafe { risk_engine_list_contains(e, list.as_ptr(), dev.as_ptr(), std::ptr::null_mut()) },
        RISK_ERR_NULL
    );
    let mut reached = 0;
    // SAFETY: `reached` writable.
    assert_eq!(
        unsafe { risk_engine_report_label(e, 2, true, 1_767_657_600_000, &mut reached) },
        RISK_OK
    );
    assert_eq!(reached, 1);
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_report_label(e, 999, true, 1_767_657_600_000, &mut reached) },
        RISK_ERR_STATE
    );
    let j = state_json(e);
    assert_eq!(j["stats"]["updates"], 4);
    assert_eq!(j["stats"]["labels"], 1);
    assert_eq!(j["stats"]["labels_unknown"], 1);
    assert_eq!(j["lists"]["blocked_devices"], 0);
    let snap = c(dir.join("s.snap").to_str().unwrap());
    // SAFETY: NUL-terminated path.
    assert_eq!(
        unsafe { risk_engine_state_snapshot(e, snap.as_ptr()) },
        RISK_OK
    );
    assert!(std::fs::metadata(dir.join("s.snap")).unwrap().len() > 28);
    // SAFETY: no path given, none configured.
    assert_eq!(
        unsafe { risk_engine_state_snapshot(e, std::ptr::null()) },
        RISK_ERR_STATE
    );
    // SAFETY: `e` was created above and is freed once.
    unsafe { risk_engine_free(e) };
}

/// A value with a line break cannot forge a journal line through the C ABI (regression:
/// `remove("x\n+43")` planted an entry, `remove("x\nzzz")` broke the next start).
#[test]
fn list_entries_with_line_breaks_are_refused_over_the_c_abi() {
    let dir = scratch("state-list-inject");
    std::fs::write(dir.join("state.rules"), RULES).unwrap();
    let e = engine(&toml(), &dir).unwrap();
    let (list, dev) = (c("blocked_devices"), c("42"));
    // SAFETY: NUL-terminated strings; `e` live.
    assert_eq!(
        unsafe { risk_engine_list_add(e, list.as_ptr(), dev.as_ptr(), 0) },
        RISK_OK
    );
    let journal = dir.join("lists/blocked_devices.journal");
    let before = std::fs::read(&journal).unwrap();
    for bad in ["x\n+43", "x\nzzz", "42\r\n-42", "42\n"] {
        let v = c(bad);
        let mut removed = true;
        // SAFETY: as above; `removed` writable.
        let r = unsafe { risk_engine_list_remove(e, list.as_ptr(), v.as_ptr(), &mut removed) };
        assert_eq!(r, RISK_ERR_STATE, "{bad:?}");
        let msg = last_error();
        assert!(
            msg.contains("blocked_devices") && msg.contains("control character"),
            "{msg}"
        );
        // SAFETY: as above.
        let r = unsafe { risk_engine_list_add(e, list.as_ptr(), v.as_ptr(), 0) };
        assert_eq!(r, RISK_ERR_STATE, "{bad:?}");
    }
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        before,
        "journal unchanged"
    );
    let (forged, mut hit) = (c("43"), true);
    // SAFETY: as above; `hit` writable.
    assert_eq!(
        unsafe { risk_engine_list_contains(e, list.as_ptr(), forged.as_ptr(), &mut hit) },
        RISK_OK
    );
    assert!(!hit, "no entry planted");
    // SAFETY: freed once.
    unsafe { risk_engine_free(e) };
    // The next start reads the journal back.
    let e = engine(&toml(), &dir).unwrap();
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_list_contains(e, list.as_ptr(), dev.as_ptr(), &mut hit) },
        RISK_OK
    );
    assert!(hit);
    // SAFETY: freed once.
    unsafe { risk_engine_free(e) };
}

#[test]
fn an_engine_without_state_refuses_state_calls() {
    let e = engine(&minimal(), Path::new(".")).unwrap();
    let (l, v) = (c("x"), c("1"));
    // SAFETY: NUL-terminated strings; `e` live.
    assert_eq!(
        unsafe { risk_engine_list_add(e, l.as_ptr(), v.as_ptr(), 0) },
        RISK_ERR_STATE
    );
    assert!(last_error().contains("no [state]"), "{}", last_error());
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_report_label(e, 1, true, 0, std::ptr::null_mut()) },
        RISK_ERR_STATE
    );
    assert!(last_error().contains("no [state]"), "{}", last_error());
    let (r, d) = decide_json(e, r#"{"amount": 1, "currency": "USD"}"#);
    assert_eq!((r, d.state), (RISK_OK, 0));
    // SAFETY: freed once.
    unsafe { risk_engine_free(e) };
}

/// The decision's new field took padding: every other offset and the size are as before.
#[test]
fn layouts_are_stable() {
    assert_eq!(std::mem::offset_of!(risk_decision, hard_rule), 20);
    assert_eq!(std::mem::offset_of!(risk_decision, state), 21);
    assert_eq!(std::mem::offset_of!(risk_decision, ticket), 24);
    assert_eq!(std::mem::offset_of!(risk_txn, n_features), 80);
    assert_eq!(std::mem::offset_of!(risk_txn, merchant), 88);
    assert_eq!(std::mem::size_of::<risk_txn>(), 112);
}

/// The library is built with the Redis store: `[state.redis]` is accepted, and an
/// unreachable server is a configuration error naming it (not a missing feature).
#[test]
fn the_redis_store_is_built_in() {
    let toml = toml().replace(
        "dir = \"lists\"",
        "dir = \"lists\"\n[state.redis]\nurl = \"redis://127.0.0.1:1/\"\ntimeout_ms = 200",
    );
    let dir = scratch("state-redis");
    std::fs::write(dir.join("state.rules"), RULES).unwrap();
    let (r, msg) = engine(&toml, &dir).unwrap_err();
    assert_eq!(r, RISK_ERR_CONFIG);
    assert!(
        msg.contains("state.redis") && msg.contains("127.0.0.1:1") && !msg.contains("lacks"),
        "{msg}"
    );
}

/// No secret crosses the C ABI: a Redis password in the URL, in its own key, a Kafka SASL
/// password and a too-short pseudonymisation key each fail the build with a message that
/// names the key or the server and never the value.
#[test]
fn no_secret_reaches_the_last_error() {
    const PW: &str = "Ffi-Secret-Value-Never-Shown-7";
    let dir = scratch("state-secrets");
    std::fs::write(dir.join("state.rules"), RULES).unwrap();
    let cases = [
        format!("[state.redis]\nurl = \"redis://risk:{PW}@127.0.0.1:1/\"\ntimeout_ms = 200"),
        format!(
            "[state.redis]\nurl = \"redis://127.0.0.1:1/\"\nusername = \"risk\"\npassword = \"{PW}\"\ntimeout_ms = 200"
        ),
        format!("[privacy]\nkey = \"{}\"", &PW[..12]),
    ];
    for (i, extra) in cases.iter().enumerate() {
        let toml = if extra.starts_with("[privacy]") {
            format!("{}\n{extra}\n", toml())
        } else {
            toml().replace("dir = \"lists\"", &format!("dir = \"lists\"\n{extra}"))
        };
        let (r, msg) = engine(&toml, &dir).unwrap_err();
        assert_eq!(r, RISK_ERR_CONFIG, "case {i}: {msg}");
        assert!(
            !msg.contains(PW) && !msg.contains(&PW[..12]),
            "case {i} leaks: {msg}"
        );
        assert!(!last_error().contains(&PW[..12]), "case {i}");
    }
}
