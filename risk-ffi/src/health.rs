//! Health and the kill switch over the C ABI: `risk_engine_health_json` and
//! `risk_engine_force_open`.

use crate::args::str_arg;
use crate::engine::risk_engine;
use crate::error::risk_result::{self, *};
use crate::error::{fail, guard};
use crate::export::export_handle;
use crate::handle::with_handle;
use risk_core::Switchable;
use std::ffi::c_char;

/// The engine's health as JSON: `status` (`ready`, `degraded`, `shut_down`), `reasons`
/// (why degraded), `fast` and `deep` {`present`, `state` (`closed`, `open`, `half_open`,
/// `forced_open`, `absent`), `serving` {`id`, `name`, `version`, `hash`} or null},
/// `deploying` (targets with a deploy in progress). Same `(buf, cap, *len)` protocol as
/// the other `*_json` functions.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_health_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| Ok(h.engine.health().to_json()))
}

/// Sets (`open` true) or clears the kill switch of `tier` (`"fast"` or `"deep"`): while
/// set, the fast tier is not called and the rules decide (fallback `circuit_open`), or the
/// deep tier is not called and gray-zone verdicts come from the fallback. Effective on the
/// next decision; `RISK_ERR_INVALID` for another tier name.
///
/// # Safety
/// `e` is live; `tier` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_force_open(
    e: *const risk_engine,
    tier: *const c_char,
    open: bool,
) -> risk_result {
    guard(|| {
        // SAFETY: forwarded caller guarantee.
        let t = match unsafe { str_arg(tier, "tier") } {
            Ok(t) => t,
            Err(r) => return r,
        };
        let Some(t) = Switchable::parse(t) else {
            return fail(RISK_ERR_INVALID, format!("tier {t:?} is not fast or deep"));
        };
        with_handle(e, |h| {
            h.engine.force_open(t, open);
            RISK_OK
        })
    })
}
