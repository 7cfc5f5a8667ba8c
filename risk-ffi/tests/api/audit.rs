//! The audit trail over the C ABI: an engine with `[audit]` in its TOML logs every
//! decision; `risk_engine_audit_flush` makes them durable, `risk_audit_query_json` finds
//! them again (versions, rules fired, features by name), `risk_engine_audit_stats_json`
//! counts them. Also: the `(buf, cap, *len)` protocol, bad queries, engines without a log,
//! `RISK_ERR_AUDIT` for a closed log, and a damaged segment read back as a `"damaged"`
//! element.

use crate::*;
use risk_ffi::risk_result::*;
use serde_json::Value;
use std::ffi::CString;
use std::path::Path;

/// Rules that fire on known transactions: a scored pair, and two hard rules setting the
/// action (so the three transactions below get three different actions).
const RULES: &str = r#"version "audit-test-1"
rule BIG_AMOUNT { when amount > 500 score 0.5 reason "BIG" }
rule NIGHT { when hour < 5 score 0.2 reason "NIGHT" }
rule BLOCK {
  when amount > 5000
  decline
  hard
  reason "BLOCKED"
}
rule HOLD {
  when segment == "a"
  review
  hard
  reason "HELD"
}
"#;

/// Transactions 1 (approve, BIG_AMOUNT and NIGHT fire), 2 (approve, nothing fires,
/// features missing) and 3 (decline by the hard rule BLOCK).
const TXNS: [&str; 3] = [
    r#"{"id": 1, "entity": 7, "timestamp_ms": 1767571200000, "amount": 1000, "currency": "USD",
        "features": {"hour": 3, "segment": "b"}}"#,
    r#"{"id": 2, "entity": 8, "amount": 10, "currency": "EUR", "features": {"hour": null}}"#,
    r#"{"id": 3, "entity": 7, "amount": 9000, "currency": "USD", "features": {"hour": 12}}"#,
];

/// Generous flush timeout: a hang detector, never reached by a passing run.
const FLUSH_MS: u32 = 60_000;

/// A directory with `audit.rules` and an engine logging to `<dir>/audit`.
fn audit_engine(name: &str) -> (std::path::PathBuf, *mut risk_engine) {
    let dir = scratch(name);
    std::fs::write(dir.join("audit.rules"), RULES).unwrap();
    let e = engine(&config("audit.toml", &[]), &dir).unwrap_or_else(|(r, m)| panic!("{r:?}: {m}"));
    (dir, e)
}

/// Decides every transaction of [`TXNS`], returning the decisions.
fn decide_all(e: *const risk_engine) -> Vec<risk_decision> {
    TXNS.iter()
        .map(|t| {
            let (r, d) = decide_json(e, t);
            assert_eq!(r, RISK_OK, "{t}: {}", last_error());
            d
        })
        .collect()
}

/// `risk_engine_audit_flush`: the code and the durable sequence number.
fn flush(e: *const risk_engine, timeout_ms: u32) -> (risk_result, u64) {
    let mut seq = u64::MAX;
    // SAFETY: `seq` is writable; `e` is any handle value.
    let r = unsafe { risk_engine_audit_flush(e, timeout_ms, &mut seq) };
    (r, seq)
}

/// Reads a `(buf, cap, *len)` text with the size query then the copy.
fn read_text(
    f: impl Fn(*mut std::ffi::c_char, usize, *mut usize) -> risk_result,
) -> Result<String, risk_result> {
    let mut len = 0;
    match f(std::ptr::null_mut(), 0, &mut len) {
        RISK_ERR_BUFFER_TOO_SMALL => {}
        r => return Err(r),
    }
    let mut buf = vec![0u8; len + 1];
    let r = f(buf.as_mut_ptr().cast(), buf.len(), &mut len);
    if r != RISK_OK {
        return Err(r);
    }
    assert_eq!(buf[len], 0, "the text is NUL-terminated");
    Ok(String::from_utf8(buf[..len].to_vec()).unwrap())
}

/// `risk_audit_query_json(dir, query)` as text, or the failing code.
fn query_text(dir: &Path, query: Option<&str>) -> Result<String, risk_result> {
    let d = CString::new(dir.to_str().unwrap()).unwrap();
    let q = query.map(|q| CString::new(q).unwrap());
    let qp = q.as_ref().map_or(std::ptr::null(), |q| q.as_ptr());
    // SAFETY: `d` and `q` are NUL-terminated (or NULL); buffer and length come from
    // `read_text`.
    read_text(|buf, cap, len| unsafe { risk_audit_query_json(d.as_ptr(), qp, buf, cap, len) })
}

/// The records matching `query` in `dir`, parsed.
fn query(dir: &Path, query: Option<&str>) -> Vec<Value> {
    let text =
        query_text(dir, query).unwrap_or_else(|r| panic!("{query:?}: {r:?}: {}", last_error()));
    match serde_json::from_str(&text).unwrap() {
        Value::Array(v) => v,
        other => panic!("not an array: {other}"),
    }
}

fn stats(e: *const risk_engine) -> Result<Value, risk_result> {
    // SAFETY: buffer and length come from `read_text`; `e` is any handle value.
    read_text(|buf, cap, len| unsafe { risk_engine_audit_stats_json(e, buf, cap, len) })
        .map(|t| serde_json::from_str(&t).unwrap())
}

fn txn_ids(records: &[Value]) -> Vec<u64> {
    records
        .iter()
        .map(|r| r["txn_id"].as_u64().unwrap())
        .collect()
}

#[test]
fn audit_error_is_code_14() {
    assert_eq!(RISK_ERR_AUDIT as u32, 14);
    assert_ne!(RISK_ERR_AUDIT, RISK_ERR_CLOSED);
}

#[test]
fn a_decision_is_found_again_by_txn_with_its_versions_rules_and_features() {
    let (dir, e) = audit_engine("audit_query");
    let decisions = decide_all(e);
    let (r, durable) = flush(e, FLUSH_MS);
    assert_eq!(r, RISK_OK, "{}", last_error());
    // Three decisions and the schema record written before the first of them.
    assert_eq!(durable, 4);
    let s = stats(e).unwrap_or_else(|r| panic!("{r:?}: {}", last_error()));
    assert_eq!(s["accepted"], 3, "{s}");
    assert_eq!(s["durable_seq"], 4, "{s}");
    assert_eq!(s["written_seq"], 4, "{s}");
    assert_eq!(
        (s["shed_full"].as_u64(), s["shed_closed"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(s["io_errors"], 0, "{s}");
    assert!(s["last_error"].is_null(), "{s}");
    // Exactly the keys the header documents.
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&s),
        [
            "accepted",
            "batches",
            "durable_seq",
            "io_errors",
            "last_error",
            "recovery",
            "segments_deleted",
            "shed_closed",
            "shed_full",
            "written_seq"
        ],
        "{s}"
    );
    assert_eq!(
        keys(&s["recovery"]),
        ["corrupt", "last_seq", "segment", "truncated_bytes"],
        "{s}"
    );
    let log = dir.join("audit");

    // By transaction id: exactly that decision, every documented part of it.
    let found = query(&log, Some(r#"{"txn": 1}"#));
    assert_eq!(found.len(), 1, "{found:?}");
    let rec = &found[0];
    let d = &decisions[0];
    assert_eq!(rec["kind"], "decision", "{rec}");
    assert_eq!(rec["seq"], 2, "{rec}");
    assert_eq!(rec["txn_id"], 1);
    assert_eq!(rec["entity"], 7);
    assert_eq!(rec["event_time_ms"], 1767571200000i64);
    assert!(rec["decided_at_ms"].as_i64().unwrap() > 0, "{rec}");
    assert_eq!(rec["action"], "approve");
    assert_eq!(d.action, RISK_ACTION_APPROVE);
    assert_eq!(rec["tier"], "fast");
    assert!(rec["fallback"].is_null(), "{rec}");
    assert_eq!(rec["hard_rule"], false);
    assert_eq!(rec["score"].as_f64().unwrap() as f32, d.score);
    assert_eq!(rec["rule_score"].as_f64().unwrap() as f32, d.rule_score);
    assert_eq!(rec["model_score"].as_f64().unwrap() as f32, d.model_score);
    assert_eq!(
        rec["rules_fired"],
        serde_json::json!(["BIG_AMOUNT", "NIGHT"])
    );
    assert_eq!(rec["rules_fired_total"], 2);
    let codes: Vec<&str> = rec["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"BIG") && codes.contains(&"NIGHT"), "{rec}");
    assert_eq!(
        rec["thresholds"]["approve_below"].as_f64().unwrap() as f32,
        0.3
    );
    assert_eq!(
        rec["thresholds"]["decline_at"].as_f64().unwrap() as f32,
        0.7
    );
    assert_eq!(
        rec["thresholds"]["shift"].as_f64().unwrap() as f32,
        d.threshold_shift
    );
    let v = &rec["versions"];
    assert_eq!(v["rules"]["version"], "audit-test-1", "{v}");
    assert!(
        v["rules"]["name"]
            .as_str()
            .unwrap()
            .ends_with("audit.rules"),
        "{v}"
    );
    assert_eq!(v["rules"]["hash"].as_str().unwrap().len(), 16, "{v}");
    assert_eq!(v["fast"]["name"], "constant", "{v}");
    assert!(v["deep"].is_null(), "{v}");
    for fp in ["config", "schema"] {
        let h = v[fp].as_str().unwrap();
        assert!(
            h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()),
            "{v}"
        );
    }
    let t = &rec["timings_ns"];
    assert!(
        t["total"].as_u64().unwrap() >= t["rules"].as_u64().unwrap(),
        "{t}"
    );
    assert!(t.get("fast").is_some() && t.get("combine").is_some(), "{t}");
    assert_eq!(rec["escalation"], "none");
    assert!(
        rec.get("ticket").is_none(),
        "no ticket when not enqueued: {rec}"
    );
    assert_eq!(rec["amount"], 1000.0);
    assert_eq!(rec["currency"], "USD");
    assert_eq!(
        rec["features"],
        serde_json::json!({"amount": 1000.0, "hour": 3.0, "segment": "b"})
    );

    // Missing features are null.
    let two = query(&log, Some(r#"{"txn": 2}"#));
    assert_eq!(two.len(), 1);
    assert_eq!(
        two[0]["features"],
        serde_json::json!({"amount": 10.0, "hour": null, "segment": null})
    );
    assert_eq!(two[0]["rules_fired"], serde_json::json!([]));

    // By rule, entity, kinds, limit; NULL, empty and `{}` are everything (decisions).
    let blocked = query(&log, Some(r#"{"rule": "BLOCK"}"#));
    assert_eq!(txn_ids(&blocked), [3]);
    assert_eq!(blocked[0]["action"], "decline");
    assert_eq!(blocked[0]["hard_rule"], true);
    assert_eq!(decisions[2].action, RISK_ACTION_DECLINE);
    assert_eq!(
        txn_ids(&query(&log, Some(r#"{"rule": "BIG_AMOUNT"}"#))),
        [1, 3]
    );
    assert!(query(&log, Some(r#"{"rule": "NO_SUCH_RULE"}"#)).is_empty());
    assert_eq!(txn_ids(&query(&log, Some(r#"{"entity": 7}"#))), [1, 3]);
    assert!(query(&log, Some(r#"{"txn": 99}"#)).is_empty());
    for everything in [
        None,
        Some(""),
        Some("{}"),
        Some(r#"{"kinds": ["decision"]}"#),
    ] {
        assert_eq!(
            txn_ids(&query(&log, everything)),
            [1, 2, 3],
            "{everything:?}"
        );
    }
    assert_eq!(txn_ids(&query(&log, Some(r#"{"limit": 2}"#))), [1, 2]);
    assert!(query(&log, Some(r#"{"kinds": ["verdict"]}"#)).is_empty());
    let schema = query(&log, Some(r#"{"kinds": ["schema"]}"#));
    assert_eq!(schema.len(), 1, "{schema:?}");
    assert_eq!(schema[0]["kind"], "schema");
    assert_eq!(schema[0]["seq"], 1);
    assert_eq!(schema[0]["fingerprint"], v["schema"]);
    assert_eq!(
        schema[0]["fields"],
        serde_json::json!(["amount", "hour", "segment"])
    );
    let all = query(
        &log,
        Some(r#"{"kinds": ["schema", "decision", "verdict"]}"#),
    );
    let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    // Decision time is `[from_ms, to_ms)`.
    let at = rec["decided_at_ms"].as_i64().unwrap();
    let q = format!(r#"{{"txn": 1, "from_ms": {at}, "to_ms": {}}}"#, at + 1);
    assert_eq!(txn_ids(&query(&log, Some(&q))), [1]);
    let q = format!(r#"{{"txn": 1, "to_ms": {at}}}"#);
    assert!(query(&log, Some(&q)).is_empty());

    // The engine's own decisions are still readable once it is gone.
    free_engine(e);
    assert_eq!(txn_ids(&query(&log, None)), [1, 2, 3]);
}

#[test]
fn a_buffer_too_small_reports_the_length_needed() {
    let (dir, e) = audit_engine("audit_buffer");
    decide_all(e);
    assert_eq!(flush(e, FLUSH_MS).0, RISK_OK, "{}", last_error());
    let log = CString::new(dir.join("audit").to_str().unwrap()).unwrap();
    let q = CString::new(r#"{"txn": 1}"#).unwrap();
    let call = |buf: *mut std::ffi::c_char, cap: usize, len: &mut usize| {
        // SAFETY: `buf` is NULL or has `cap` writable bytes; `len` is writable.
        unsafe { risk_audit_query_json(log.as_ptr(), q.as_ptr(), buf, cap, len) }
    };
    let mut len = 0;
    assert_eq!(
        call(std::ptr::null_mut(), 0, &mut len),
        RISK_ERR_BUFFER_TOO_SMALL
    );
    assert!(len > 2, "{len}");
    assert!(last_error().contains(&len.to_string()), "{}", last_error());
    // Room for the text but not its NUL: still too small, nothing written, same length.
    let mut buf = vec![0xAAu8; len];
    let mut again = 0;
    assert_eq!(
        call(buf.as_mut_ptr().cast(), buf.len(), &mut again),
        RISK_ERR_BUFFER_TOO_SMALL
    );
    assert_eq!(again, len);
    assert!(
        buf.iter().all(|&b| b == 0xAA),
        "a refused buffer is not written"
    );
    let mut buf = vec![0xAAu8; len + 1];
    let mut got = 0;
    assert_eq!(
        call(buf.as_mut_ptr().cast(), buf.len(), &mut got),
        RISK_OK,
        "{}",
        last_error()
    );
    assert_eq!(got, len);
    assert_eq!(buf[len], 0);
    let v: Value = serde_json::from_slice(&buf[..len]).unwrap();
    assert_eq!(v[0]["txn_id"], 1);
    // A NULL `len` is refused.
    // SAFETY: NULL `len` is what is checked; the buffer is valid.
    let r = unsafe {
        risk_audit_query_json(
            log.as_ptr(),
            q.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, RISK_ERR_NULL);
    // The stats follow the same protocol.
    let mut len = 0;
    // SAFETY: a NULL buffer asks for the size; `len` is writable.
    let r = unsafe { risk_engine_audit_stats_json(e, std::ptr::null_mut(), 0, &mut len) };
    assert_eq!(r, RISK_ERR_BUFFER_TOO_SMALL);
    assert!(len > 0);
    free_engine(e);
}

#[test]
fn bad_queries_are_refused_with_their_codes() {
    let (dir, e) = audit_engine("audit_bad_queries");
    decide_all(e);
    assert_eq!(flush(e, FLUSH_MS).0, RISK_OK, "{}", last_error());
    free_engine(e);
    let log = dir.join("audit");
    for bad in [
        "{",
        "[]",
        "null",
        r#"{"txn": "1"}"#,
        r#"{"txn": -1}"#,
        r#"{"kinds": "decision"}"#,
        r#"{"limit": 1.5}"#,
        r#"{"bogus": 1}"#,
    ] {
        assert_eq!(query_text(&log, Some(bad)), Err(RISK_ERR_JSON), "{bad}");
        assert!(
            last_error().starts_with("query: "),
            "{bad}: {}",
            last_error()
        );
    }
    assert_eq!(
        query_text(&log, Some(r#"{"kinds": ["decision", "decisions"]}"#)),
        Err(RISK_ERR_INVALID)
    );
    assert!(last_error().contains("decisions"), "{}", last_error());
    // A directory that does not exist is named.
    let missing = dir.join("no-such-log");
    assert_eq!(query_text(&missing, None), Err(RISK_ERR_INVALID));
    assert!(last_error().contains("no-such-log"), "{}", last_error());
    // A directory without segments is an empty log.
    assert_eq!(query_text(&dir, None).unwrap(), "[]");
    // NULL directory; invalid UTF-8 in the query.
    let mut len = 0;
    // SAFETY: NULL `dir` is what is checked; `len` is writable.
    let r = unsafe {
        risk_audit_query_json(
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null_mut(),
            0,
            &mut len,
        )
    };
    assert_eq!(r, RISK_ERR_NULL);
    let d = CString::new(log.to_str().unwrap()).unwrap();
    let q = CString::new(b"{\"rule\": \"\xff\"}".to_vec()).unwrap();
    // SAFETY: both strings are NUL-terminated; `len` is writable.
    let r =
        unsafe { risk_audit_query_json(d.as_ptr(), q.as_ptr(), std::ptr::null_mut(), 0, &mut len) };
    assert_eq!(r, RISK_ERR_UTF8);
}

#[test]
fn flush_and_stats_need_an_audit_log_and_a_live_engine() {
    let e = engine(&minimal(), Path::new(".")).unwrap();
    assert_eq!(
        decide_json(e, r#"{"amount": 1, "currency": "USD"}"#).0,
        RISK_OK
    );
    let (r, seq) = flush(e, FLUSH_MS);
    assert_eq!(r, RISK_ERR_INVALID);
    assert_eq!(seq, u64::MAX, "not written on failure");
    assert!(last_error().contains("[audit]"), "{}", last_error());
    assert_eq!(stats(e).unwrap_err(), RISK_ERR_INVALID);
    assert!(last_error().contains("[audit]"), "{}", last_error());
    free_engine(e);
    assert_eq!(flush(e, 0).0, RISK_ERR_HANDLE);
    assert_eq!(stats(e).unwrap_err(), RISK_ERR_HANDLE);
    // A NULL `durable_seq` is allowed.
    let (_dir, e) = audit_engine("audit_null_seq");
    // SAFETY: `durable_seq` may be NULL.
    let r = unsafe { risk_engine_audit_flush(e, FLUSH_MS, std::ptr::null_mut()) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    free_engine(e);
}

#[test]
fn flush_after_shutdown_is_an_audit_error() {
    let (dir, e) = audit_engine("audit_closed");
    decide_all(e);
    // Draining shutdown closes the log after making what it accepted durable.
    // SAFETY: `e` is live; the counters may be NULL.
    let r =
        unsafe { risk_engine_shutdown(e, FLUSH_MS, std::ptr::null_mut(), std::ptr::null_mut()) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    let (r, _) = flush(e, FLUSH_MS);
    assert_eq!(r, RISK_ERR_AUDIT);
    assert!(last_error().contains("closed"), "{}", last_error());
    let s = stats(e).unwrap();
    assert_eq!(s["durable_seq"], 4, "{s}");
    free_engine(e);
    assert_eq!(txn_ids(&query(&dir.join("audit"), None)), [1, 2, 3]);
}

/// The frames of a segment: `(offset of the frame, payload length)`.
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    assert_eq!(&bytes[..8], b"RISKAUD1");
    let mut at = 16;
    let mut out = Vec::new();
    while at + 8 <= bytes.len() {
        let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push((at, n));
        at += 8 + n;
    }
    assert_eq!(at, bytes.len(), "whole frames");
    out
}

#[test]
fn a_damaged_segment_is_an_element_of_kind_damaged() {
    let (dir, e) = audit_engine("audit_damaged");
    decide_all(e);
    assert_eq!(flush(e, FLUSH_MS).0, RISK_OK, "{}", last_error());
    free_engine(e);
    let log = dir.join("audit");
    let segs: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("seg-") && n.ends_with(".log")
        })
        .collect();
    assert_eq!(segs.len(), 1, "{segs:?}");
    let mut bytes = std::fs::read(&segs[0]).unwrap();
    // The byte in the middle of the file, moved into its frame's payload when it falls on
    // a frame header (a damaged length could read as a write in progress at the tail).
    let mid = bytes.len() / 2;
    let &(at, n) = frames(&bytes)
        .iter()
        .find(|(at, n)| mid < at + 8 + n)
        .unwrap();
    let flip = if mid < at + 8 { at + 8 + n / 2 } else { mid };
    bytes[flip] ^= 0x5A;
    std::fs::write(&segs[0], &bytes).unwrap();

    let all = query(
        &log,
        Some(r#"{"kinds": ["schema", "decision", "verdict"]}"#),
    );
    let damaged: Vec<&Value> = all.iter().filter(|r| r["kind"] == "damaged").collect();
    assert_eq!(damaged.len(), 1, "{all:?}");
    let err = damaged[0]["error"].as_str().unwrap();
    assert!(err.contains("seg-") && err.contains("corrupt"), "{err}");
    // Records before the damage read as before.
    let (frame_index, _) = frames(&bytes)
        .iter()
        .enumerate()
        .find(|(_, (a, _))| *a == at)
        .unwrap();
    let before: Vec<u64> = all
        .iter()
        .take_while(|r| r["kind"] != "damaged")
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        before,
        (1..=frame_index as u64).collect::<Vec<_>>(),
        "{all:?}"
    );
    // A query by transaction still reports the damage rather than skipping it.
    let one = query(&log, Some(r#"{"txn": 3}"#));
    assert!(one.iter().any(|r| r["kind"] == "damaged"), "{one:?}");
}

/// `risk_audit_verify_json(dir, key_spec)` parsed, or the failing code.
fn verify(dir: &Path, key_spec: Option<&str>) -> Result<Value, risk_result> {
    let d = CString::new(dir.to_str().unwrap()).unwrap();
    let k = key_spec.map(|k| CString::new(k).unwrap());
    let kp = k.as_ref().map_or(std::ptr::null(), |k| k.as_ptr());
    // SAFETY: `d` and `k` are NUL-terminated (or NULL); buffer and length come from
    // `read_text`.
    read_text(|buf, cap, len| unsafe { risk_audit_verify_json(d.as_ptr(), kp, buf, cap, len) })
        .map(|t| serde_json::from_str(&t).unwrap())
}

#[test]
fn verify_names_the_first_broken_link_of_a_tampered_log() {
    let (dir, e) = audit_engine("audit_verify");
    decide_all(e);
    assert_eq!(flush(e, FLUSH_MS).0, RISK_OK, "{}", last_error());
    free_engine(e);
    let log = dir.join("audit");
    let v = verify(&log, None).unwrap_or_else(|r| panic!("{r:?}: {}", last_error()));
    assert_eq!(v["intact"], true, "{v}");
    assert_eq!(v["records"], 4, "{v}");
    assert_eq!(v["anchored_at_start"], true, "{v}");
    assert_eq!(v["keyed"], false, "{v}");
    // A bad key reference is refused by name, never echoed.
    assert_eq!(
        verify(&log, Some("env:RISK_NO_SUCH_KEY_VAR")).unwrap_err(),
        RISK_ERR_INVALID
    );
    assert!(
        last_error().contains("RISK_NO_SUCH_KEY_VAR"),
        "{}",
        last_error()
    );

    // Drop record 2 (whole frame: every checksum still good).
    let seg = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let f = frames(&bytes);
    let (at, n) = f[1];
    let mut cut = bytes[..at].to_vec();
    cut.extend_from_slice(&bytes[at + 8 + n..]);
    std::fs::write(&seg, &cut).unwrap();
    let v = verify(&log, None).unwrap();
    assert_eq!(v["intact"], false, "{v}");
    assert_eq!(v["seq"], 3, "{v}");
    assert_eq!(v["offset"], at as u64, "{v}");
    assert_eq!(v["segment"], seg.display().to_string(), "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("where 2 was due"),
        "{v}"
    );
}
