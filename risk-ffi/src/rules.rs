//! The rule tier's versions, rollback, shadow hits and explain over the C ABI (the
//! engine's `[rules.scorer] kind = "rules"`; a fast or deep tier of kind `rules` is not
//! the rule file).

use crate::args::str_arg;
use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::export::{export, export_handle};
use crate::handle::{lookup, with_handle};
use crate::txn::{build_txn, risk_txn};
use risk_rules::RuleScorer;
use std::ffi::c_char;

/// The engine's rule tier, or `RISK_ERR_RELOAD` when it has no rule file.
fn rules_of(h: &risk_engine) -> Result<&RuleScorer, risk_result> {
    h.rules.as_deref().ok_or_else(|| {
        fail(
            RISK_ERR_RELOAD,
            "the engine has no rule file (rules.scorer kind is not \"rules\")",
        )
    })
}

fn with_rules(e: *const risk_engine, f: impl FnOnce(&RuleScorer) -> risk_result) -> risk_result {
    with_handle(e, |h| match rules_of(h) {
        Ok(r) => f(r),
        Err(code) => code,
    })
}

/// Serves a recorded rule version again, atomically: `to` is a `version` name (the
/// newest with it), a 16-digit hex content hash, or `"previous"`. Needs
/// `rules.scorer.history_dir`. On any error (no history, unknown version, a damaged
/// history, a text that no longer compiles) the serving rules stay and `RISK_ERR_RELOAD`
/// is returned with the reason in `risk_last_error`.
///
/// # Safety
/// `e` is live; `to` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_rules_rollback(
    e: *const risk_engine,
    to: *const c_char,
) -> risk_result {
    guard(|| {
        // SAFETY: NUL-terminated per the caller.
        let to = match unsafe { str_arg(to, "to") } {
            Ok(s) => s,
            Err(r) => return r,
        };
        with_rules(e, |r| match r.rollback(to) {
            Ok(_) => RISK_OK,
            Err(err) => fail(RISK_ERR_RELOAD, err.to_string()),
        })
    })
}

/// The rule tier as JSON: the serving set (`file`, `version`, `hash`, `backend`
/// (`native` or `interpreter`), `rules`), `shadow` (each shadow rule's `id` and `hits`
/// since its set was loaded), `warnings` (the static checks', `file:line:col: warning:
/// ...`), `versions` (the recorded history, oldest first: `seq`,
/// `version`, `hash`, `file`, `loaded_at_ms`) and reload `stats`. Same `(buf, cap,
/// *len)` protocol as the other `*_json` functions.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_rules_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| Ok(rules_of(h)?.report_json()))
}

/// Explains the serving rules on `txn` as JSON: `version`, `hash` and per rule, in
/// evaluation order, `id`, `fired`, `counted`, `disabled`, `shadow`, `hard`,
/// `decided_by` (the sub-condition that decided it: `condition` text, `line`, `col`,
/// `holds`, `values` read as `[name, value]` pairs) and every `steps` evaluated. The
/// features are those of `txn` as given (entity state does not fill them here). Same
/// `(buf, cap, *len)` protocol as the other `*_json` functions.
///
/// # Safety
/// `e` is live; `txn` is valid; `buf` has `cap` writable bytes (or is NULL); `len` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_rules_explain(
    e: *const risk_engine,
    txn: *const risk_txn,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export(buf, cap, len, || {
        if txn.is_null() {
            return Err(fail(RISK_ERR_NULL, "txn is NULL"));
        }
        let h = lookup(e)?;
        let r = rules_of(&h)?;
        // SAFETY: `txn` is non-NULL and valid per the caller.
        let t = unsafe { build_txn(&h.engine, &*txn) }?;
        Ok(r.current().explain(&t.features).to_json())
    })
}
