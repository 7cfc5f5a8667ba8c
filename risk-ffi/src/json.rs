//! Transactions as JSON: `risk_engine_decide_json`.

use crate::args::bytes_arg;
use crate::decision::risk_decision;
use crate::engine::{decide_one, risk_engine};
use crate::error::risk_result::{self, *};
use crate::error::{decide_err, fail, guard};
use crate::handle::with_handle;
use crate::txn::to_f32;
use risk_core::{Channel, Engine, Transaction};

fn json_txn(e: &Engine, text: &str) -> Result<Transaction, risk_result> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|err| fail(RISK_ERR_JSON, format!("transaction JSON: {err}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| fail(RISK_ERR_JSON, "transaction JSON: not an object"))?;
    let known = [
        "id",
        "entity",
        "timestamp_ms",
        "amount",
        "currency",
        "mcc",
        "country",
        "channel",
        "device",
        "features",
    ];
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(fail(
            RISK_ERR_JSON,
            format!("transaction JSON: unknown key {k:?}"),
        ));
    }
    let u = |k: &str| -> Result<Option<u64>, risk_result> {
        match o.get(k) {
            None => Ok(None),
            Some(x) => x.as_u64().map(Some).ok_or_else(|| {
                fail(
                    RISK_ERR_JSON,
                    format!("transaction JSON: {k} must be a non-negative integer"),
                )
            }),
        }
    };
    let s = |k: &str| -> Result<Option<&str>, risk_result> {
        match o.get(k) {
            None => Ok(None),
            Some(x) => x.as_str().map(Some).ok_or_else(|| {
                fail(
                    RISK_ERR_JSON,
                    format!("transaction JSON: {k} must be a string"),
                )
            }),
        }
    };
    let amount = o
        .get("amount")
        .and_then(|x| x.as_f64())
        .ok_or_else(|| fail(RISK_ERR_JSON, "transaction JSON: amount (number) missing"))?;
    let currency =
        s("currency")?.ok_or_else(|| fail(RISK_ERR_JSON, "transaction JSON: currency missing"))?;
    let mut b = Transaction::builder(e.schema())
        .id(u("id")?.unwrap_or(0))
        .entity(u("entity")?.unwrap_or(0))
        .amount(amount, currency);
    if let Some(t) = o.get("timestamp_ms") {
        b = b.timestamp_ms(t.as_i64().ok_or_else(|| {
            fail(
                RISK_ERR_JSON,
                "transaction JSON: timestamp_ms must be an integer",
            )
        })?);
    }
    if let Some(m) = u("mcc")? {
        let m = u16::try_from(m)
            .map_err(|_| fail(RISK_ERR_TRANSACTION, format!("invalid mcc: {m}")))?;
        b = b.mcc(m);
    }
    if let Some(c) = s("country")? {
        b = b.country(c);
    }
    if let Some(c) = s("channel")? {
        b = b
            .channel(Channel::parse(c).map_err(|err| fail(RISK_ERR_TRANSACTION, err.to_string()))?);
    }
    if let Some(d) = u("device")? {
        b = b.device(d);
    }
    if let Some(f) = o.get("features") {
        let f = f.as_object().ok_or_else(|| {
            fail(
                RISK_ERR_JSON,
                "transaction JSON: features must be an object",
            )
        })?;
        for (k, v) in f {
            b = match v {
                serde_json::Value::Number(n) => {
                    b.numeric(k, to_f32(k, n.as_f64().unwrap_or(f64::NAN))?)
                }
                serde_json::Value::String(c) => b.categorical(k, c),
                serde_json::Value::Null => b.missing(k),
                _ => {
                    return Err(fail(
                        RISK_ERR_JSON,
                        format!(
                            "transaction JSON: features.{k} must be a number, a string or null"
                        ),
                    ))
                }
            };
        }
    }
    b.build().map_err(decide_err)
}

/// Decides a transaction given as JSON: `{"id", "entity", "timestamp_ms", "amount",
/// "currency", "mcc", "country", "channel", "device", "features": {name: number | string |
/// null}}` (`amount` and `currency` required; unknown keys rejected).
///
/// # Safety
/// `e` is live; `json` points to `len` bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide_json(
    e: *const risk_engine,
    json: *const u8,
    len: usize,
    out: *mut risk_decision,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let text = match unsafe { bytes_arg(json, len, "json") } {
            Ok(t) => t,
            Err(r) => return r,
        };
        with_handle(e, |h| match json_txn(&h.engine, text) {
            Ok(t) => decide_one(&h.engine, &t, out),
            Err(r) => r,
        })
    })
}
