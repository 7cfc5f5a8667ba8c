//! `risk_engine_decide_json`: the keys it takes, and for each way a document can be wrong,
//! the code (`RISK_ERR_JSON` for a document that does not fit the schema of keys and types,
//! `RISK_ERR_TRANSACTION` for values the transaction rejects) and a message naming the key.

use crate::*;
use risk_ffi::risk_result::*;
use std::path::Path;

/// Three typed fields and a constant rule tier (`typed_fields.toml`).
fn schema() -> String {
    config("typed_fields.toml", &[])
}

/// `json` fails with `code` and a message containing `names`.
fn check(e: *const risk_engine, json: &str, code: risk_result, names: &str) {
    let (r, _) = decide_json(e, json);
    let msg = last_error();
    assert_eq!(r, code, "{json}: {msg}");
    assert!(
        msg.contains(names),
        "{json}: the message does not name {names:?}: {msg}"
    );
}

/// `json` is refused as `RISK_ERR_JSON` by a message naming `key` in backticks
/// (`RISK_SHOW_MESSAGES=1` prints them).
fn check_key(e: *const risk_engine, json: &str, key: &str) {
    check(e, json, RISK_ERR_JSON, &format!("`{key}`"));
    if std::env::var_os("RISK_SHOW_MESSAGES").is_some() {
        eprintln!("{json}\n  -> {}", last_error());
    }
}

#[test]
fn every_key_is_read() {
    let e = engine(&schema(), Path::new(".")).unwrap();
    let json = r#"{"id": 9, "entity": 5, "timestamp_ms": 1767571200000, "amount": 12.5,
        "currency": "GBP", "mcc": 5411, "country": "GB", "channel": "ecom", "device": 7,
        "features": {"hour": 3, "segment": "b"}}"#;
    let (r, d) = decide_json(e, json);
    assert_eq!(r, RISK_OK, "{}", last_error());
    assert_eq!((d.txn, d.entity), (9, 5));
    // Only `amount` and `currency` are required; a feature may be null (missing), and
    // escaped strings are read like any other.
    for ok in [
        r#"{"amount": 0, "currency": "USD"}"#,
        r#"{"amount": 1, "currency": "U\u0053D", "features": {}}"#,
        r#"{"amount": 1, "currency": "USD", "features": {"hour": null, "segment": "\u0061"}}"#,
        r#"{"amount": 1, "currency": "USD", "features": {"hour": -3, "segment": null}}"#,
        r#"{"amount": 1, "currency": "USD", "text": {"merchant_descriptor": "SQ *JOES PIZZA", "memo": ""}}"#,
        r#"{"amount": 1, "currency": "USD", "text": {}}"#,
        " \n{\"amount\": 1.5e1, \"currency\": \"USD\"}\t",
    ] {
        let (r, _) = decide_json(e, ok);
        assert_eq!(r, RISK_OK, "{ok}: {}", last_error());
    }
    free_engine(e);
}

#[test]
fn unknown_and_repeated_keys_are_refused() {
    let e = engine(&schema(), Path::new(".")).unwrap();
    check_key(
        e,
        r#"{"amount": 1, "currency": "USD", "bogus": 1}"#,
        "bogus",
    );
    check_key(
        e,
        r#"{"amount": 1, "currency": "USD", "Amount": 1}"#,
        "Amount",
    );
    check_key(
        e,
        r#"{"amount": 1, "currency": "USD", "amount": 2}"#,
        "amount",
    );
    check_key(
        e,
        r#"{"amount": 1, "currency": "USD", "features": {"hour": 1, "hour": 2}}"#,
        "features.hour",
    );
    check_key(
        e,
        r#"{"amount": 1, "currency": "USD", "text": {"memo": "a", "memo": "b"}}"#,
        "text.memo",
    );
    // Text fields the transaction rejects (bad name, control character, too long).
    for (bad, what) in [
        (r#""text": {"Memo": "a"}"#, "Memo"),
        (r#""text": {"memo": "a\nb"}"#, "control character"),
    ] {
        check(
            e,
            &format!(r#"{{"amount": 1, "currency": "USD", {bad}}}"#),
            RISK_ERR_TRANSACTION,
            what,
        );
    }
    let long = format!(
        r#"{{"amount": 1, "currency": "USD", "text": {{"memo": "{}"}}}}"#,
        "x".repeat(5000)
    );
    check(e, &long, RISK_ERR_TRANSACTION, "at most 4096");
    // A feature the schema does not have is the transaction's error, named.
    check(
        e,
        r#"{"amount": 1, "currency": "USD", "features": {"no_such_field": 1}}"#,
        RISK_ERR_TRANSACTION,
        "no_such_field",
    );
    free_engine(e);
}

#[test]
fn missing_amount_or_currency_is_refused() {
    let e = engine(&schema(), Path::new(".")).unwrap();
    check_key(e, r#"{"currency": "USD"}"#, "amount");
    check_key(e, r#"{"amount": 1}"#, "currency");
    check_key(e, r#"{}"#, "amount");
    free_engine(e);
}

#[test]
fn wrong_types_are_refused_naming_the_key() {
    let e = engine(&schema(), Path::new(".")).unwrap();
    let base = r#""amount": 1, "currency": "USD""#;
    for (extra, key) in [
        (r#""id": -1"#, "id"),
        (r#""id": "7""#, "id"),
        (r#""id": 1.5"#, "id"),
        (r#""entity": null"#, "entity"),
        (r#""timestamp_ms": "soon""#, "timestamp_ms"),
        (r#""timestamp_ms": 1e3"#, "timestamp_ms"),
        (r#""mcc": "5411""#, "mcc"),
        (r#""country": 1"#, "country"),
        (r#""country": null"#, "country"),
        (r#""channel": true"#, "channel"),
        (r#""device": -3"#, "device"),
        (r#""features": []"#, "features"),
        (r#""features": null"#, "features"),
        (r#""features": {"hour": [1]}"#, "features.hour"),
        (r#""features": {"hour": true}"#, "features.hour"),
        (r#""features": {"segment": {}}"#, "features.segment"),
        (r#""text": []"#, "text"),
        (r#""text": {"memo": 1}"#, "text"),
        (r#""text": {"memo": null}"#, "text"),
    ] {
        check_key(e, &format!("{{{base}, {extra}}}"), key);
    }
    check_key(e, r#"{"amount": "1", "currency": "USD"}"#, "amount");
    check_key(e, r#"{"amount": null, "currency": "USD"}"#, "amount");
    check_key(e, r#"{"amount": 1, "currency": 840}"#, "currency");
    free_engine(e);
}

#[test]
fn documents_that_are_not_objects_are_refused() {
    let e = engine(&schema(), Path::new(".")).unwrap();
    for bad in [
        "",
        "{",
        "[]",
        r#"[1, 2, 0, 12.5, "USD"]"#,
        "\"x\"",
        "null",
        "3",
        "{} {}",
    ] {
        let (r, _) = decide_json(e, bad);
        assert_eq!(r, RISK_ERR_JSON, "{bad:?}: {}", last_error());
        assert!(
            last_error().starts_with("transaction JSON: "),
            "{}",
            last_error()
        );
    }
    free_engine(e);
}

#[test]
fn values_the_transaction_rejects_are_its_errors() {
    let e = engine(&schema(), Path::new(".")).unwrap();
    check(
        e,
        r#"{"amount": -1, "currency": "USD"}"#,
        RISK_ERR_TRANSACTION,
        "amount",
    );
    check(
        e,
        r#"{"amount": 1, "currency": "ZZZZ"}"#,
        RISK_ERR_TRANSACTION,
        "ZZZZ",
    );
    check(
        e,
        r#"{"amount": 1, "currency": "USD", "mcc": 70000}"#,
        RISK_ERR_TRANSACTION,
        "mcc",
    );
    check(
        e,
        r#"{"amount": 1, "currency": "USD", "channel": "pigeon"}"#,
        RISK_ERR_TRANSACTION,
        "pigeon",
    );
    check(
        e,
        r#"{"amount": 1, "currency": "USD", "features": {"hour": 1e300}}"#,
        RISK_ERR_TRANSACTION,
        "f32 range",
    );
    free_engine(e);
}
