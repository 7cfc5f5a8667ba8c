//! Entity state over the C ABI: labels (`risk_engine_report_label`), lists
//! (`risk_engine_list_add`, `_list_remove`, `_list_contains`, `_lists_reload`),
//! `risk_engine_state_snapshot` and `risk_engine_state_json`. Every state error is
//! `RISK_ERR_STATE` with the reason (an engine without `[state]` included).

use crate::args::str_arg;
use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::export::export_handle;
use crate::handle::with_handle;
use risk_core::state::{StateEngine, StateError};
use risk_core::TxnId;
use std::ffi::c_char;

fn state_fail(e: StateError) -> risk_result {
    fail(RISK_ERR_STATE, e.to_string())
}

fn no_state() -> risk_result {
    fail(RISK_ERR_STATE, "the engine has no [state] section")
}

/// The engine's state, or `RISK_ERR_STATE`.
fn state_of(h: &risk_engine) -> Result<&StateEngine, risk_result> {
    h.engine.state().map(|st| &**st).ok_or_else(no_state)
}

/// Runs `f` on the engine's state, or fails with `RISK_ERR_STATE`.
fn with_state(e: *const risk_engine, f: impl FnOnce(&StateEngine) -> risk_result) -> risk_result {
    with_handle(e, |h| match state_of(h) {
        Ok(st) => f(st),
        Err(r) => r,
    })
}

/// Reports transaction `txn_id`'s label: `fraud` true (a chargeback, a confirmed fraud)
/// or false (clears an earlier true), known at `at_ms` (ms since the epoch, not before
/// the transaction). Writes how many label windows it reached to `*out_reached` (may be
/// NULL). `RISK_ERR_STATE` for an unknown or evicted transaction, a label before its
/// transaction, or no label feature.
///
/// # Safety
/// `e` is a live engine handle; `out_reached` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_report_label(
    e: *const risk_engine,
    txn_id: u64,
    fraud: bool,
    at_ms: i64,
    out_reached: *mut usize,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            match h.engine.report_label(TxnId(txn_id), fraud, at_ms) {
                Ok(n) => {
                    if !out_reached.is_null() {
                        // SAFETY: non-NULL and writable per the caller.
                        unsafe { *out_reached = n };
                    }
                    RISK_OK
                }
                Err(err) => state_fail(err),
            }
        })
    })
}

/// # Safety
/// `list` and `value` are NULL or NUL-terminated.
unsafe fn list_args<'a>(
    list: *const c_char,
    value: *const c_char,
) -> Result<(&'a str, &'a str), risk_result> {
    // SAFETY: forwarded caller guarantees.
    unsafe { Ok((str_arg(list, "list")?, str_arg(value, "value")?)) }
}

/// Adds `value` to `list` (or re-dates it), live until `expires_at_ms` (ms since the
/// epoch; 0 or negative: never expires). Journalled and synced before it returns when
/// `[state] dir` is set. `RISK_ERR_STATE` for an unknown list or a value that cannot be
/// one of its keys.
///
/// # Safety
/// `e` is live; `list` and `value` are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_list_add(
    e: *const risk_engine,
    list: *const c_char,
    value: *const c_char,
    expires_at_ms: i64,
) -> risk_result {
    guard(|| {
        // SAFETY: forwarded caller guarantees.
        let (l, v) = match unsafe { list_args(list, value) } {
            Ok(a) => a,
            Err(r) => return r,
        };
        let exp = (expires_at_ms > 0).then_some(expires_at_ms);
        with_state(e, |st| match st.lists().add(l, v, exp) {
            Ok(()) => RISK_OK,
            Err(err) => state_fail(err),
        })
    })
}

/// Removes `value` from `list`; `*out_removed` (may be NULL) says whether it was there.
///
/// # Safety
/// `e` is live; `list` and `value` are NUL-terminated; `out_removed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_list_remove(
    e: *const risk_engine,
    list: *const c_char,
    value: *const c_char,
    out_removed: *mut bool,
) -> risk_result {
    guard(|| {
        // SAFETY: forwarded caller guarantees.
        let (l, v) = match unsafe { list_args(list, value) } {
            Ok(a) => a,
            Err(r) => return r,
        };
        with_state(e, |st| match st.lists().remove(l, v) {
            Ok(had) => {
                if !out_removed.is_null() {
                    // SAFETY: non-NULL and writable per the caller.
                    unsafe { *out_removed = had };
                }
                RISK_OK
            }
            Err(err) => state_fail(err),
        })
    })
}

/// Whether `value` is a live entry of `list` now (`*out`).
///
/// # Safety
/// `e` is live; `list` and `value` are NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_list_contains(
    e: *const risk_engine,
    list: *const c_char,
    value: *const c_char,
    out: *mut bool,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantees.
        let (l, v) = match unsafe { list_args(list, value) } {
            Ok(a) => a,
            Err(r) => return r,
        };
        with_state(e, |st| match st.lists().contains(l, v) {
            Ok(hit) => {
                // SAFETY: checked non-NULL; writable per the caller.
                unsafe { *out = hit };
                RISK_OK
            }
            Err(err) => state_fail(err),
        })
    })
}

/// Re-reads every list's file (and journal). A bad file is refused naming file:line
/// (`RISK_ERR_STATE`) and its list keeps serving what it had; the others are reloaded.
///
/// # Safety
/// `e` is live.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_lists_reload(e: *const risk_engine) -> risk_result {
    guard(|| {
        with_state(e, |st| match st.lists().reload() {
            Ok(()) => RISK_OK,
            Err(err) => state_fail(err),
        })
    })
}

/// Writes the entity state to `path` (NULL: the configured `state.snapshot`),
/// atomically; a later engine with the same `[state]` restores it at start.
///
/// # Safety
/// `e` is live; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_state_snapshot(
    e: *const risk_engine,
    path: *const c_char,
) -> risk_result {
    guard(|| {
        let p = if path.is_null() {
            None
        } else {
            // SAFETY: non-NULL; NUL-terminated per the caller.
            match unsafe { str_arg(path, "path") } {
                Ok(p) => Some(std::path::PathBuf::from(p)),
                Err(r) => return r,
            }
        };
        with_state(e, |st| {
            let Some(p) = p.or_else(|| st.config().snapshot.clone()) else {
                return fail(
                    RISK_ERR_STATE,
                    "no path given and no state.snapshot configured",
                );
            };
            match st.snapshot(&p) {
                Ok(_) => RISK_OK,
                Err(err) => state_fail(err),
            }
        })
    })
}

/// The entity state's counters (`stats`: updates, no_time, late, labels,
/// labels_unknown, list_hits, degraded (decisions whose features are missing because the
/// store failed), store_timeouts, store_errors, store_skipped, store_shed (the Redis
/// store; 0 in process)), `memory` per key source (keys, bytes_per_key; keys 0 on Redis),
/// `pending_labels` and live entries per list (`lists`), as JSON. Same `(buf, cap,
/// *len)` protocol as the other `*_json` functions.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_state_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| Ok(state_of(h)?.to_json()))
}
