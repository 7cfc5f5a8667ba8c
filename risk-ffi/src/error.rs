//! Result codes, the calling thread's last error message and the panic boundary every
//! exported function body runs in.

use risk_core::{ConfigError, DecideError};
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Result codes. Stable numbers: new codes are only ever appended.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum risk_result {
    /// Success.
    RISK_OK = 0,
    /// A required pointer was NULL.
    RISK_ERR_NULL = 1,
    /// A string was not valid UTF-8.
    RISK_ERR_UTF8 = 2,
    /// An argument was out of range (a length, a code, an option).
    RISK_ERR_INVALID = 3,
    /// The configuration could not build an engine (message names the key).
    RISK_ERR_CONFIG = 4,
    /// The transaction was rejected (message names the field).
    RISK_ERR_TRANSACTION = 5,
    /// The engine was shut down.
    RISK_ERR_SHUT_DOWN = 6,
    /// A Rust panic was caught (a bug: please report the message).
    RISK_ERR_PANIC = 7,
    /// The caller's buffer is too small; `*len` says how much is needed.
    RISK_ERR_BUFFER_TOO_SMALL = 8,
    /// Malformed JSON input.
    RISK_ERR_JSON = 9,
    /// A freed, never-created or foreign handle.
    RISK_ERR_HANDLE = 10,
    /// Nothing to return yet (a poll that timed out).
    RISK_ERR_EMPTY = 11,
    /// Rule reload failed or the engine has no rule file; the serving rules are unchanged.
    RISK_ERR_RELOAD = 12,
    /// No more items will ever come (a subscription whose engine has no deep tier or was
    /// shut down): stop polling.
    RISK_ERR_CLOSED = 13,
    /// The audit log failed: a flush timed out, the log is closed, or a write failed (the
    /// message says which).
    RISK_ERR_AUDIT = 14,
    /// A deploy, promote or rollback was refused (the message says why: the gate check,
    /// load, warm-up, schema, a deploy in progress, nothing to roll back); what serves is
    /// unchanged.
    RISK_ERR_DEPLOY = 15,
    /// Entity state refused the call (the message says why: an unknown or evicted
    /// transaction for a label, an unknown list, a bad entry or list file, a snapshot
    /// failure, or no `[state]` section).
    RISK_ERR_STATE = 16,
}

use risk_result::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: impl AsRef<str>) {
    let s = msg.as_ref().replace('\0', " ");
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(s).unwrap_or_default());
}

/// The calling thread's last error message (to prefix it with context).
pub(crate) fn last_message() -> String {
    LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned())
}

/// Records `msg` as the calling thread's last error and returns `code`.
pub(crate) fn fail(code: risk_result, msg: impl AsRef<str>) -> risk_result {
    set_error(msg);
    code
}

/// Runs `f` inside the panic boundary.
pub(crate) fn guard(f: impl FnOnce() -> risk_result) -> risk_result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(RISK_ERR_PANIC, format!("panic inside risk: {msg}"))
        }
    }
}

/// A configuration error: `RISK_ERR_CONFIG` (the message names the key).
pub(crate) fn config_err(e: ConfigError) -> risk_result {
    fail(RISK_ERR_CONFIG, e.to_string())
}

/// A decision error: `RISK_ERR_SHUT_DOWN` after shutdown, else `RISK_ERR_TRANSACTION`.
pub(crate) fn decide_err(e: DecideError) -> risk_result {
    match e {
        DecideError::ShutDown => fail(RISK_ERR_SHUT_DOWN, e.to_string()),
        _ => fail(RISK_ERR_TRANSACTION, e.to_string()),
    }
}

/// The library version, NUL-terminated, static.
#[no_mangle]
pub extern "C" fn risk_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The calling thread's last error message (empty if none). Valid until the thread's next
/// call into the library; copy it to keep it.
#[no_mangle]
pub extern "C" fn risk_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
