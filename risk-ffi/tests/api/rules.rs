//! The rule tier's versions, rollback, shadow hits and explain through the C ABI, with
//! the history configured in risk.toml (`rules.scorer.history_dir`).

use crate::*;
use risk_ffi::risk_result::*;
use std::ffi::CString;

/// One numeric field and the rule file `r.rules`; history keys may follow.
fn engine_toml() -> String {
    config("rules_file.toml", &[("RULES_FILE", "r.rules")])
}

const TXN: &str = r#"{"amount": 500, "currency": "USD"}"#;

fn rules(version: &str, k: f32) -> String {
    format!(
        "version \"{version}\"\nrule BIG {{ when amount > {k} score 0.5 }}\n\
         rule WATCH {{ when amount > 100 decline hard shadow }}\n"
    )
}

fn rules_json(e: *const risk_engine) -> serde_json::Value {
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0;
    // SAFETY: `buf` has its length in writable bytes; `len` is writable.
    let r = unsafe { risk_engine_rules_json(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    serde_json::from_slice(&buf[..len]).unwrap()
}

fn rollback(e: *const risk_engine, to: &str) -> risk_result {
    let to = CString::new(to).unwrap();
    // SAFETY: `to` is NUL-terminated; `e` is any handle value.
    unsafe { risk_engine_rules_rollback(e, to.as_ptr()) }
}

#[test]
fn rollback_shadow_hits_and_explain_through_the_c_abi() {
    let dir = scratch("rules_rollback");
    std::fs::write(dir.join("r.rules"), rules("v1", 100.0)).unwrap();
    let toml = format!(
        "{}history_dir = \"rules-history\"\nhistory_keep = 5\n",
        engine_toml()
    );
    let e = engine(&toml, &dir).unwrap();
    let (r, d) = decide_json(e, TXN);
    assert_eq!(r, RISK_OK, "{}", last_error());
    // The shadow rule would decline: it does not, and is counted.
    assert_eq!(d.rule_score, 0.5);
    assert_ne!(d.action, risk_ffi::RISK_ACTION_DECLINE);
    let j = rules_json(e);
    assert_eq!(j["version"], "v1");
    assert_eq!(j["shadow"][0]["id"], "WATCH");
    assert_eq!(j["shadow"][0]["hits"], 1);
    assert_eq!(j["versions"].as_array().unwrap().len(), 1);

    // v2 no longer fires on 500; rolling back to v1 restores it.
    std::fs::write(dir.join("r.rules"), rules("v2", 1000.0)).unwrap();
    // SAFETY: `e` is live.
    assert_eq!(
        unsafe { risk_engine_reload_rules(e) },
        RISK_OK,
        "{}",
        last_error()
    );
    assert_eq!(decide_json(e, TXN).1.rule_score, 0.0);
    assert_eq!(rules_json(e)["versions"].as_array().unwrap().len(), 2);
    assert_eq!(rollback(e, "v1"), RISK_OK, "{}", last_error());
    assert_eq!(decide_json(e, TXN).1.rule_score, 0.5);
    assert_eq!(rules_json(e)["version"], "v1");
    assert_eq!(rollback(e, "nope"), RISK_ERR_RELOAD);
    assert!(last_error().contains("nope"), "{}", last_error());
    assert_eq!(rules_json(e)["version"], "v1");
    assert!(dir.join("rules-history").join("index.json").exists());

    // Explain on a C transaction.
    let usd = CString::new("USD").unwrap();
    let null = std::ptr::null();
    let t = risk_txn {
        id: 1,
        entity: 0,
        timestamp_ms: 0,
        amount: 50.0,
        currency: usd.as_ptr(),
        mcc: 0,
        country: null,
        channel: null,
        device: 0,
        features: std::ptr::null(),
        n_features: 0,
        merchant: null,
        ip: null,
        email: null,
    };
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0;
    // SAFETY: `t` is valid; `buf` has its length in writable bytes; `len` is writable.
    let r =
        unsafe { risk_engine_rules_explain(e, &t, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    let x: serde_json::Value = serde_json::from_slice(&buf[..len]).unwrap();
    assert_eq!(x["version"], "v1");
    assert_eq!(x["rules"][0]["id"], "BIG");
    assert_eq!(x["rules"][0]["fired"], false);
    assert_eq!(x["rules"][0]["decided_by"]["condition"], "amount > 100");
    assert_eq!(x["rules"][0]["decided_by"]["values"][0][0], "amount");
    // SAFETY: NULL txn is refused.
    let r = unsafe {
        risk_engine_rules_explain(
            e,
            std::ptr::null(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut len,
        )
    };
    assert_eq!(r, RISK_ERR_NULL);
    free_engine(e);
}

#[test]
fn rollback_without_a_history_or_rule_file_is_refused() {
    let dir = scratch("rules_no_history");
    std::fs::write(dir.join("r.rules"), rules("v1", 100.0)).unwrap();
    let e = engine(&engine_toml(), &dir).unwrap();
    assert_eq!(rollback(e, "v1"), RISK_ERR_RELOAD);
    assert!(last_error().contains("history"), "{}", last_error());
    free_engine(e);
    let bad = format!("{}history_dir = \"h\"\nhistory_keep = 0\n", engine_toml());
    let err = engine(&bad, &dir).unwrap_err();
    assert!(err.1.contains("history_keep"), "{}", err.1);
}
