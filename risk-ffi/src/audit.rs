//! The audit trail over the C ABI: `risk_audit_query_json` and `risk_audit_verify_json`
//! (any log directory, no engine needed), `risk_engine_audit_flush` and
//! `risk_engine_audit_stats_json`. The log itself
//! is configured in `risk.toml` (`[audit]`, `[audit.kafka]`), as every engine option is.

use crate::args::str_arg;
use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::export::{export, export_handle};
use crate::handle::with_handle;
use risk_core::audit::{AuditError, AuditReader, Query};
use serde::Deserialize;
use serde_json::{json, Value};
use std::ffi::c_char;
use std::time::Duration;

/// A query as JSON; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryJson {
    txn: Option<u64>,
    entity: Option<u64>,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    rule: Option<String>,
    /// `"decision"`, `"verdict"`, `"schema"`, `"alert"`; default: decisions and verdicts.
    kinds: Option<Vec<String>>,
    /// Most records returned (default and cap: 1,000,000).
    limit: Option<u64>,
}

const MAX_RECORDS: u64 = 1_000_000;

fn query(text: &str) -> Result<(Query, u64), risk_result> {
    let q: QueryJson = if text.trim().is_empty() {
        QueryJson::default()
    } else {
        serde_json::from_str(text).map_err(|e| fail(RISK_ERR_JSON, format!("query: {e}")))?
    };
    let mut out = Query {
        txn: q.txn,
        entity: q.entity,
        from_ms: q.from_ms,
        to_ms: q.to_ms,
        rule: q.rule,
        ..Query::default()
    };
    if let Some(kinds) = q.kinds {
        out.only_kinds(kinds.iter().map(String::as_str))
            .map_err(|e| fail(RISK_ERR_INVALID, format!("query kinds: {e}")))?;
    }
    Ok((out, q.limit.unwrap_or(MAX_RECORDS).min(MAX_RECORDS)))
}

/// Reads the audit log in directory `dir` and writes the records matching `query_json`
/// as a JSON array of their JSON views (`(buf, cap, *len)`: call with `buf` NULL to learn
/// the size). `query_json` (NULL or empty: everything) has the optional keys `txn`,
/// `entity`, `from_ms`, `to_ms` (decision time, `[from, to)`), `rule` (decisions on which
/// it fired), `kinds` (`["decision", "verdict", "schema", "alert"]`) and `limit`. A damaged record
/// is an element `{"kind": "damaged", "error": "..."}`: never skipped silently.
///
/// # Safety
/// `dir` is a NUL-terminated string; `query_json` is NULL or one; `buf` has `cap`
/// writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_audit_query_json(
    dir: *const c_char,
    query_json: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export(buf, cap, len, || {
        // SAFETY: forwarded caller guarantees.
        let dir = unsafe { str_arg(dir, "dir") }?;
        let text = if query_json.is_null() {
            ""
        } else {
            // SAFETY: forwarded caller guarantee.
            unsafe { str_arg(query_json, "query_json") }?
        };
        let (q, limit) = query(text)?;
        let entries = AuditReader::new(dir)
            .query(q)
            .map_err(|e| fail(RISK_ERR_INVALID, e.to_string()))?;
        let items: Vec<Value> = entries
            .take(limit as usize)
            .map(|e| match e {
                Ok(e) => e.to_json(),
                Err(err) => json!({"kind": "damaged", "error": err.to_string()}),
            })
            .collect();
        Ok(Value::Array(items).to_string())
    })
}

/// Checks the audit log in directory `dir` end to end (every checksum, dense sequence
/// numbers, segments named for their first record, every hash-chain link) and writes the
/// result as JSON: `{"intact": true, "records", "segments", "first_seq", "last_seq",
/// "anchored_at_start", "keyed", "unlinked"}`, or `{"intact": false, "segment", "offset",
/// "seq", "error"}` naming the first broken link or damaged record. `key_spec` (NULL: an
/// unkeyed check) is the log's `[privacy] key` as a secret reference, `env:NAME` or
/// `file:PATH`; the key itself is never echoed. A broken log is `RISK_OK` with `"intact":
/// false`; an unreadable directory or a bad key spec is `RISK_ERR_INVALID`.
///
/// # Safety
/// `dir` is a NUL-terminated string; `key_spec` is NULL or one; `buf` has `cap` writable
/// bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_audit_verify_json(
    dir: *const c_char,
    key_spec: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export(buf, cap, len, || {
        // SAFETY: forwarded caller guarantees.
        let dir = unsafe { str_arg(dir, "dir") }?;
        let mut reader = AuditReader::new(dir);
        if !key_spec.is_null() {
            // SAFETY: forwarded caller guarantee.
            let spec = unsafe { str_arg(key_spec, "key_spec") }?;
            let secret = risk_core::secret::Secret::resolve("key_spec", spec)
                .map_err(|e| fail(RISK_ERR_INVALID, e.to_string()))?;
            let p = risk_core::pseudo::Pseudonymiser::new("key_spec", secret.expose().as_bytes())
                .map_err(|e| fail(RISK_ERR_INVALID, e.to_string()))?;
            reader = reader.with_pseudonymiser(p);
        }
        let broken = |segment: &std::path::Path, offset: u64, seq: Option<u64>, e: &AuditError| {
            json!({"intact": false, "segment": segment.display().to_string(), "offset": offset,
                   "seq": seq, "error": e.to_string()})
        };
        let v = match reader.verify_chain() {
            Ok(r) => json!({"intact": true, "records": r.records, "segments": r.segments,
                "first_seq": r.first_seq, "last_seq": r.last_seq,
                "anchored_at_start": r.anchored_at_start, "keyed": r.keyed, "unlinked": r.unlinked}),
            Err(e @ AuditError::Tampered { .. }) => {
                let AuditError::Tampered {
                    path, offset, seq, ..
                } = &e
                else {
                    unreachable!()
                };
                broken(path, *offset, Some(*seq), &e)
            }
            Err(e @ AuditError::Corrupt { .. }) => {
                let AuditError::Corrupt { path, offset, .. } = &e else {
                    unreachable!()
                };
                broken(path, *offset, None, &e)
            }
            Err(e) => return Err(fail(RISK_ERR_INVALID, e.to_string())),
        };
        Ok(v.to_string())
    })
}

/// Waits up to `timeout_ms` until every record the engine's audit log accepted is
/// durable, and writes the durable sequence number to `*durable_seq` (may be NULL).
/// `RISK_ERR_INVALID` when the engine has no `[audit]` log; `RISK_ERR_AUDIT` when the
/// wait timed out or the log failed (the message says which).
///
/// # Safety
/// `e` is a live engine handle; `durable_seq` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_audit_flush(
    e: *const risk_engine,
    timeout_ms: u32,
    durable_seq: *mut u64,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            let Some(log) = h.engine.audit_log() else {
                return fail(RISK_ERR_INVALID, "the engine has no [audit] log");
            };
            match log.flush(Duration::from_millis(u64::from(timeout_ms))) {
                Ok(seq) => {
                    if !durable_seq.is_null() {
                        // SAFETY: non-NULL and writable per the caller.
                        unsafe { *durable_seq = seq };
                    }
                    RISK_OK
                }
                Err(err) => fail(RISK_ERR_AUDIT, err.to_string()),
            }
        })
    })
}

/// The engine's audit log counters as JSON: `accepted`, `shed_full`, `shed_closed`,
/// `written_seq`, `durable_seq`, `batches`, `io_errors`, `last_error`,
/// `segments_deleted`, `recovery` {`segment`, `truncated_bytes`, `corrupt`, `last_seq`}.
/// `RISK_ERR_INVALID` when the engine has no `[audit]` log.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_audit_stats_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| match h.engine.audit_log() {
        None => Err(fail(RISK_ERR_INVALID, "the engine has no [audit] log")),
        Some(log) => Ok(log.stats().to_json()),
    })
}
