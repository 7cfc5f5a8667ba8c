//! The engine handle: construction from `risk.toml`, decisions (one, a batch), rule
//! reload, shutdown and release.

use crate::args::{bytes_arg, str_arg};
use crate::decision::{risk_decision, risk_reason, to_c, RISK_MAX_REASONS};
use crate::error::risk_result::{self, *};
use crate::error::{config_err, decide_err, fail, guard};
use crate::handle::{register_handle, unregister_handle, with_handle, Handle};
use crate::txn::{build_txn, risk_txn};
use risk_core::{ConfigError, Engine, ScorerRegistry, Shutdown, Transaction};
use risk_rules::RuleScorer;
use std::ffi::c_char;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most transactions in one `risk_engine_decide_batch` call.
pub const RISK_MAX_BATCH: usize = 65_536;

/// An engine (opaque). A `risk_engine *` is a handle id, not an address: never dereference it.
#[derive(Debug)]
pub struct risk_engine {
    pub(crate) engine: Engine,
    pub(crate) rules: Option<Arc<RuleScorer>>,
    /// The last drill's report (JSON), read by `risk_engine_drill_report_json`.
    pub(crate) last_drill: std::sync::Mutex<Option<String>>,
}

impl Handle for risk_engine {
    const NAME: &'static str = "engine";
}

/// Every scorer kind, with the rule tier's scorer kept in `rules` for
/// `risk_engine_reload_rules` (see [`risk_rules::register_keeping`]).
fn registry(rules: &risk_rules::RuleSlot) -> ScorerRegistry {
    let mut reg = ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    risk_rules::register_keeping(&mut reg, rules);
    reg
}

fn new_engine(
    build: impl FnOnce(&ScorerRegistry) -> Result<Engine, ConfigError>,
    out: *mut *mut risk_engine,
) -> risk_result {
    let rules = Arc::new(Mutex::new(None));
    let engine = match build(&registry(&rules)) {
        Ok(e) => e,
        Err(e) => return config_err(e),
    };
    let rules = rules.lock().unwrap_or_else(|e| e.into_inner()).take();
    let p = register_handle(risk_engine {
        engine,
        rules,
        last_drill: std::sync::Mutex::new(None),
    });
    // SAFETY: `out` was checked non-NULL by the caller of this function.
    unsafe { *out = p };
    RISK_OK
}

/// Builds an engine from a `risk.toml` file (relative paths inside resolve against its
/// directory). Kinds: `rules`, `xgboost`, `onnx`, `llm`, `constant`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_new_from_path(
    path: *const c_char,
    out: *mut *mut risk_engine,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let path = match unsafe { str_arg(path, "path") } {
            Ok(p) => p.to_owned(),
            Err(e) => return e,
        };
        new_engine(|reg| Engine::from_config_with(&path, reg), out)
    })
}

/// Builds an engine from `risk.toml` text; relative paths resolve against `base_dir`
/// (NULL: the current directory).
///
/// # Safety
/// `toml` points to `len` bytes; `base_dir` is NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_new_from_toml(
    toml: *const u8,
    len: usize,
    base_dir: *const c_char,
    out: *mut *mut risk_engine,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let text = match unsafe { bytes_arg(toml, len, "toml") } {
            Ok(t) => t.to_owned(),
            Err(e) => return e,
        };
        let dir = if base_dir.is_null() {
            ".".to_owned()
        } else {
            // SAFETY: forwarded caller guarantee.
            match unsafe { str_arg(base_dir, "base_dir") } {
                Ok(d) => d.to_owned(),
                Err(e) => return e,
            }
        };
        new_engine(
            |reg| Engine::from_toml_str(&text, Path::new(&dir), Path::new("<risk.toml text>"), reg),
            out,
        )
    })
}

/// Releases an engine (shutting it down, abandoning queued deep work). NULL, or a handle
/// already freed, is ignored. Does not wait for calls in flight on other threads: they
/// hold their own reference and finish (a decision not yet started gets
/// `RISK_ERR_SHUT_DOWN`); calls made after this returns get `RISK_ERR_HANDLE`.
///
/// # Safety
/// `e` is NULL or a pointer returned by `risk_engine_new_*`.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_free(e: *mut risk_engine) {
    let _ = guard(|| {
        if let Some(h) = unregister_handle(e) {
            // Calls in flight keep their own reference and get `RISK_ERR_SHUT_DOWN` for
            // new decisions; the engine is dropped with the last reference.
            h.engine.shutdown(Shutdown::Abandon);
        }
        RISK_OK
    });
}

pub(crate) fn decide_one(e: &Engine, t: &Transaction, out: *mut risk_decision) -> risk_result {
    match e.decide(t) {
        Ok(d) => {
            // SAFETY: `out` was checked non-NULL by the exported function.
            unsafe { *out = to_c(&d) };
            RISK_OK
        }
        Err(err) => decide_err(err),
    }
}

/// Decides one transaction.
///
/// # Safety
/// `e` is a live engine; `txn` points to a valid `risk_txn`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide(
    e: *const risk_engine,
    txn: *const risk_txn,
    out: *mut risk_decision,
) -> risk_result {
    guard(|| {
        if txn.is_null() || out.is_null() {
            return fail(RISK_ERR_NULL, "txn or out is NULL");
        }
        with_handle(e, |h| {
            // SAFETY: `txn` is non-NULL and valid per the caller's guarantee.
            let t = match unsafe { build_txn(&h.engine, &*txn) } {
                Ok(t) => t,
                Err(r) => return r,
            };
            decide_one(&h.engine, &t, out)
        })
    })
}

/// Writes the fast tier's reasons for `txn`, on request (a case tool, a dispute), into
/// `out` and their number into `*n`: the model version `txn` is routed to computes them
/// whatever its decisions carry (a tree model's exact SHAP contributions), most
/// important first. The features are used as given. `*n` is 0 when no model serves the
/// transaction or its explanation failed. Bad input fails as `risk_engine_decide` fails.
///
/// # Safety
/// `e` is a live engine; `txn` points to a valid `risk_txn`; `out` points to
/// `RISK_MAX_REASONS` writable `risk_reason`s; `n` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_explain(
    e: *const risk_engine,
    txn: *const risk_txn,
    out: *mut risk_reason,
    n: *mut u32,
) -> risk_result {
    guard(|| {
        if txn.is_null() || out.is_null() || n.is_null() {
            return fail(RISK_ERR_NULL, "txn, out or n is NULL");
        }
        with_handle(e, |h| {
            // SAFETY: `txn` is non-NULL and valid per the caller's guarantee.
            let t = match unsafe { build_txn(&h.engine, &*txn) } {
                Ok(t) => t,
                Err(r) => return r,
            };
            let reasons = match h.engine.explain(&t) {
                Ok(r) => r.unwrap_or_default(),
                Err(err) => return decide_err(err),
            };
            // SAFETY: `out` is non-NULL and points to `RISK_MAX_REASONS` elements, `n` is
            // non-NULL and writable, per the caller's guarantee.
            let (slots, count) = unsafe {
                (
                    std::slice::from_raw_parts_mut(out, RISK_MAX_REASONS),
                    &mut *n,
                )
            };
            *count = 0;
            for (slot, r) in slots.iter_mut().zip(reasons.iter()) {
                *slot = risk_reason {
                    code: r.code.id(),
                    weight: r.weight,
                };
                *count += 1;
            }
            RISK_OK
        })
    })
}

/// Decides `n` transactions (at most 65,536). `results[i]` gets each item's code and
/// `out[i]` its decision when `RISK_OK`. Returns `RISK_OK` when the batch was processed
/// (items may still have failed), or an error for the call itself.
///
/// # Safety
/// `e` is live; `txns`, `out` and `results` point to `n` elements each.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide_batch(
    e: *const risk_engine,
    txns: *const risk_txn,
    n: usize,
    out: *mut risk_decision,
    results: *mut risk_result,
) -> risk_result {
    guard(|| {
        if n == 0 {
            return with_handle(e, |_| RISK_OK);
        }
        if txns.is_null() || out.is_null() || results.is_null() {
            return fail(RISK_ERR_NULL, "txns, out or results is NULL");
        }
        if n > RISK_MAX_BATCH {
            return fail(
                RISK_ERR_INVALID,
                format!("batch of {n} is more than {RISK_MAX_BATCH}"),
            );
        }
        with_handle(e, |h| {
            // SAFETY: the caller guarantees `n` elements behind each pointer.
            let (ts, os, rs) = unsafe {
                (
                    std::slice::from_raw_parts(txns, n),
                    std::slice::from_raw_parts_mut(out, n),
                    std::slice::from_raw_parts_mut(results, n),
                )
            };
            let mut built = Vec::with_capacity(n);
            let mut idx = Vec::with_capacity(n);
            for (i, t) in ts.iter().enumerate() {
                // SAFETY: each element is a valid `risk_txn` per the caller.
                match unsafe { build_txn(&h.engine, t) } {
                    Ok(t) => {
                        built.push(t);
                        idx.push(i);
                    }
                    Err(r) => rs[i] = r,
                }
            }
            for (i, d) in idx.into_iter().zip(h.engine.decide_batch(&built)) {
                match d {
                    Ok(d) => {
                        os[i] = to_c(&d);
                        rs[i] = RISK_OK;
                    }
                    Err(err) => rs[i] = decide_err(err),
                }
            }
            RISK_OK
        })
    })
}

/// Reloads the rule tier's file (`[rules.scorer] kind = "rules"`; a fast or deep tier of
/// kind `rules` is not reloaded). A file that does not compile leaves the serving rules in
/// place and returns `RISK_ERR_RELOAD`, as does an engine whose rule tier has no file.
///
/// # Safety
/// `e` is live.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_reload_rules(e: *const risk_engine) -> risk_result {
    guard(|| {
        with_handle(e, |h| match &h.rules {
            None => fail(
                RISK_ERR_RELOAD,
                "the engine has no rule file (rules.scorer kind is not \"rules\")",
            ),
            Some(r) => match r.reload() {
                Ok(_) => RISK_OK,
                Err(err) => fail(RISK_ERR_RELOAD, err.to_string()),
            },
        })
    })
}

/// Shuts the engine down: later decides return `RISK_ERR_SHUT_DOWN`. `drain_ms` > 0 waits up
/// to that long for queued deep-tier work; 0 abandons it. Counts go to `drained` and
/// `abandoned` when non-NULL. The handle stays valid until `risk_engine_free`.
///
/// # Safety
/// `e` is live; `drained` and `abandoned` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_shutdown(
    e: *const risk_engine,
    drain_ms: u32,
    drained: *mut u64,
    abandoned: *mut u64,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            let mode = if drain_ms == 0 {
                Shutdown::Abandon
            } else {
                Shutdown::Drain {
                    timeout: Duration::from_millis(drain_ms as u64),
                }
            };
            let r = h.engine.shutdown(mode);
            // SAFETY: each pointer is NULL or writable per the caller.
            unsafe {
                if !drained.is_null() {
                    *drained = r.drained;
                }
                if !abandoned.is_null() {
                    *abandoned = r.abandoned;
                }
            }
            RISK_OK
        })
    })
}
