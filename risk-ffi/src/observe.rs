//! Monitors and drills over the C ABI: `risk_engine_monitor_json`,
//! `risk_engine_monitor_tick`, `risk_engine_drill` and `risk_engine_drill_report_json`.

use crate::args::str_arg;
use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::export::export_handle;
use crate::handle::with_handle;
use crate::json::json_txn;
use risk_core::{DrillPlan, Fault};
use std::ffi::c_char;

/// The monitors' latest values as JSON: `windows`, `agreement` ([share, samples] or
/// null), `drift` ([{`subject`, `ks`, `psi`, `n`}]), `deep_fallback_share`, `firing`
/// (["kind:subject"], e.g. "agreement:agreement"), `baseline`, `recent` (the latest alerts: {`kind`, `subject`,
/// `value`, `threshold`, `firing`, `at_ms`, `detail`}). `RISK_ERR_INVALID` when the engine
/// has no `[monitor]`.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_monitor_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| match h.engine.monitor_report() {
        Some(r) => Ok(r.to_json()),
        None => Err(fail(RISK_ERR_INVALID, "the engine has no [monitor]")),
    })
}

/// Judges every monitor now (the engine's monitor thread does so every
/// `monitor.interval_ms`); the alerts raised appear in `risk_engine_monitor_json`'s
/// `recent`, and `*raised` (may be NULL) receives how many. On an engine without
/// `[monitor]` it does nothing: `RISK_OK` with 0 raised.
///
/// # Safety
/// `e` is live; `raised` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_monitor_tick(
    e: *const risk_engine,
    raised: *mut u32,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            let n = h.engine.monitor_tick().len();
            if !raised.is_null() {
                // SAFETY: non-NULL and writable per the caller.
                unsafe { *raised = u32::try_from(n).unwrap_or(u32::MAX) };
            }
            RISK_OK
        })
    })
}

/// Runs a fallback drill: `fault` is `"fast_down"`, `"fast_nan"`, `"deep_down"` or
/// `"fast_slow:<ms>"`; `txns_json` a JSON array of transactions (the objects
/// `risk_engine_decide_json` takes) replayed under it; `labels_json` NULL or a JSON array
/// of booleans (fraud), one per transaction, for the quality comparison. The report is
/// kept and read with `risk_engine_drill_report_json` (one report per engine: run drills
/// on an engine one at a time). Live traffic on the engine is affected while the drill
/// runs. With labels the transactions are first decided without the fault (the model's
/// quality), so metrics and entity state see each one twice.
///
/// # Safety
/// `e` is live; `fault` and `txns_json` are NUL-terminated; `labels_json` is NULL or
/// NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_drill(
    e: *const risk_engine,
    fault: *const c_char,
    txns_json: *const c_char,
    labels_json: *const c_char,
) -> risk_result {
    guard(|| {
        // SAFETY: forwarded caller guarantees.
        let (f, t) = match unsafe { (str_arg(fault, "fault"), str_arg(txns_json, "txns_json")) } {
            (Ok(f), Ok(t)) => (f, t),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        let fault = match Fault::parse(f) {
            Ok(fault) => fault,
            Err(msg) => return fail(RISK_ERR_INVALID, msg),
        };
        let labels: Vec<bool> = if labels_json.is_null() {
            Vec::new()
        } else {
            // SAFETY: forwarded caller guarantee.
            let l = match unsafe { str_arg(labels_json, "labels_json") } {
                Ok(l) => l,
                Err(r) => return r,
            };
            match serde_json::from_str(l) {
                Ok(v) => v,
                Err(err) => return fail(RISK_ERR_JSON, format!("labels_json: {err}")),
            }
        };
        let items: Vec<serde_json::Value> = match serde_json::from_str(t) {
            Ok(v) => v,
            Err(err) => {
                return fail(
                    RISK_ERR_JSON,
                    format!("txns_json: an array of transactions: {err}"),
                )
            }
        };
        with_handle(e, |h| {
            let mut transactions = Vec::with_capacity(items.len());
            for (k, v) in items.iter().enumerate() {
                match json_txn(&h.engine, &v.to_string()) {
                    Ok(x) => transactions.push(x),
                    Err(r) => {
                        return fail(
                            r,
                            format!("txns_json[{k}]: {}", crate::error::last_message()),
                        )
                    }
                }
            }
            if !labels.is_empty() && labels.len() != transactions.len() {
                return fail(
                    RISK_ERR_INVALID,
                    format!(
                        "{} labels for {} transactions",
                        labels.len(),
                        transactions.len()
                    ),
                );
            }
            let report = h.engine.drill(DrillPlan {
                fault,
                transactions,
                labels,
            });
            *h.last_drill.lock().unwrap_or_else(|p| p.into_inner()) = Some(report.to_json());
            RISK_OK
        })
    })
}

/// The last drill's report as JSON (`fault`, `decisions`, `by_tier`, `fallbacks`,
/// `errors`, `switch_time` {`p50_us`, `p99_us`, `max_us`}, `circuit_after`,
/// `model_quality`/`drill_quality` {`recall`, `precision`, `auprc`} or null,
/// `deep_verdicts`, `duration_ms`). `RISK_ERR_EMPTY` before any drill.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_drill_report_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| {
        let report = h
            .last_drill
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        report.ok_or_else(|| fail(RISK_ERR_EMPTY, "no drill has run on this engine"))
    })
}
