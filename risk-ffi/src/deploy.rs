//! Model lifecycle over the C ABI: `risk_engine_deploy`, `risk_engine_deploy_status_json`,
//! `risk_engine_promote`, `risk_engine_rollback` and `risk_engine_deploy_tick`. Targets are
//! named `"rules"`, `"fast"`, `"deep"`, `"policy"`; candidates and plans are TOML, in the
//! forms `Candidate::from_toml` and `RolloutPlan::from_toml` document.

use crate::args::str_arg;
use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::export::export;
use crate::handle::{lookup, with_handle};
use risk_core::deploy::{Candidate, DeployError, RolloutPlan, Target};
use std::ffi::c_char;
use std::path::Path;

fn target(p: *const c_char) -> Result<Target, risk_result> {
    // SAFETY: forwarded caller guarantee (NULL or NUL-terminated).
    let s = unsafe { str_arg(p, "target") }?;
    Target::parse(s).ok_or_else(|| {
        fail(
            RISK_ERR_INVALID,
            format!("target {s:?} is not rules, fast, deep or policy"),
        )
    })
}

/// Optional string argument: NULL is `None`.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, risk_result> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded caller guarantee.
    unsafe { str_arg(p, what) }.map(Some)
}

fn deploy_fail(e: DeployError) -> risk_result {
    let code = match e {
        DeployError::ShutDown => RISK_ERR_SHUT_DOWN,
        DeployError::Plan(_) => RISK_ERR_INVALID,
        _ => RISK_ERR_DEPLOY,
    };
    fail(code, e.to_string())
}

/// Deploys a candidate to `target` and writes the deploy id to `*out_id` (may be NULL).
/// `candidate_toml`: a `[scorer]` table as in `risk.toml` (with an optional
/// `[calibration]`), a `[policy]` table, or `stored = "<key>"` (a version in the model
/// directory). `plan_toml`: `[gate]`, `[shadow]`, `[[canary]]`, `[guards]`, `by`; NULL is
/// the standard plan (shadow, then canary 1% → 10% → 50% → 100%, a minute each). Relative
/// paths in the candidate resolve against `base_dir` (NULL: the working directory).
/// Returns once the candidate passed its gate and shadows, is in canary, or serves;
/// `RISK_ERR_DEPLOY` with the reason (gate check, load, warm-up, schema, a deploy in
/// progress) otherwise: a refused candidate never serves.
///
/// # Safety
/// `e` is a live engine handle; `target` and `candidate_toml` are NUL-terminated;
/// `plan_toml` and `base_dir` are NULL or NUL-terminated; `out_id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_deploy(
    e: *const risk_engine,
    target_name: *const c_char,
    candidate_toml: *const c_char,
    plan_toml: *const c_char,
    base_dir: *const c_char,
    out_id: *mut u64,
) -> risk_result {
    guard(|| {
        let t = match target(target_name) {
            Ok(t) => t,
            Err(r) => return r,
        };
        // SAFETY: forwarded caller guarantees.
        let args = unsafe {
            (
                str_arg(candidate_toml, "candidate_toml"),
                opt_str(plan_toml, "plan_toml"),
                opt_str(base_dir, "base_dir"),
            )
        };
        let (cand, plan, dir) = match args {
            (Ok(c), Ok(p), Ok(d)) => (c, p, d),
            (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
        };
        let candidate = match Candidate::from_toml(cand, Path::new(dir.unwrap_or("."))) {
            Ok(c) => c,
            Err(err) => return deploy_fail(err),
        };
        let plan = match plan.map(RolloutPlan::from_toml) {
            None => RolloutPlan::standard(),
            Some(Ok(p)) => p,
            Some(Err(err)) => return deploy_fail(err),
        };
        with_handle(e, |h| match h.engine.deploy(t, candidate, plan) {
            Ok(id) => {
                if !out_id.is_null() {
                    // SAFETY: non-NULL and writable per the caller.
                    unsafe { *out_id = id };
                }
                RISK_OK
            }
            Err(err) => deploy_fail(err),
        })
    })
}

/// `target`'s deploy status as JSON: `serving`, `previous`, `active` (phase, stage,
/// share, gate report, candidate and serving counters), `history` (events), `epoch`.
///
/// # Safety
/// `e` is live; `target` is NUL-terminated; `buf` has `cap` writable bytes (or is NULL);
/// `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_deploy_status_json(
    e: *const risk_engine,
    target_name: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export(buf, cap, len, || {
        let t = target(target_name)?;
        Ok(lookup(e)?.engine.deploy_status(t).to_json())
    })
}

/// Promotes the candidate of `target`'s deploy in progress now (skipping its remaining
/// stages). `RISK_ERR_DEPLOY` when none is in progress.
///
/// # Safety
/// `e` is live; `target` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_promote(
    e: *const risk_engine,
    target_name: *const c_char,
) -> risk_result {
    guard(|| {
        let t = match target(target_name) {
            Ok(t) => t,
            Err(r) => return r,
        };
        with_handle(e, |h| match h.engine.promote(t) {
            Ok(()) => RISK_OK,
            Err(err) => deploy_fail(err),
        })
    })
}

/// Ends `target`'s deploy in progress, or (with none) restores the version that served
/// before the current one. `reason` (NULL: none given) is recorded. `RISK_ERR_DEPLOY`
/// when there is nothing to roll back to.
///
/// # Safety
/// `e` is live; `target` is NUL-terminated; `reason` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_rollback(
    e: *const risk_engine,
    target_name: *const c_char,
    reason: *const c_char,
) -> risk_result {
    guard(|| {
        let t = match target(target_name) {
            Ok(t) => t,
            Err(r) => return r,
        };
        // SAFETY: forwarded caller guarantee.
        let reason = match unsafe { opt_str(reason, "reason") } {
            Ok(r) => r.unwrap_or("rollback requested"),
            Err(r) => return r,
        };
        with_handle(e, |h| match h.engine.rollback(t, reason) {
            Ok(()) => RISK_OK,
            Err(err) => deploy_fail(err),
        })
    })
}

/// Judges every deploy's guards and stages now (the engine's supervisor also does, on
/// `deploy.check_interval_ms`).
///
/// # Safety
/// `e` is a live engine handle.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_deploy_tick(e: *const risk_engine) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            h.engine.deploy_tick();
            RISK_OK
        })
    })
}
