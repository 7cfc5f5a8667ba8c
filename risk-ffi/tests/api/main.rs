//! The C ABI called from Rust, one module per concern: handle lifetimes, subscriptions,
//! rule reload, metrics JSON, transaction JSON and the audit trail. `c_abi.rs` drives the
//! same functions from C under sanitizers; these tests check what C cannot see easily
//! (timing between threads, the registry, the metrics document against the header).

mod audit;
mod deploy;
mod fuzz_seeds;
mod handles;
mod json;
mod metrics;
mod observe;
mod reload;
mod rules;
mod state;
mod subscription;

use risk_ffi::*;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// Hang detector for waits on another thread: never reached by a passing run.
const HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// The engine configurations shared with the Go, Java and Python tests.
const CONFIGS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/configs");

/// `testdata/configs/<name>` with each `{{KEY}}` replaced by its value in `vars`. Panics
/// (failing the test) when the file is missing, a value names no placeholder or a
/// placeholder is left without a value.
fn config(name: &str, vars: &[(&str, &str)]) -> String {
    let path = Path::new(CONFIGS).join(name);
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("engine config {}: {e}", path.display()));
    for (key, value) in vars {
        let mark = format!("{{{{{key}}}}}");
        assert!(text.contains(&mark), "{name} has no placeholder {mark}");
        text = text.replace(&mark, value);
    }
    assert!(
        !text.contains("{{"),
        "{name}: a placeholder is left: {text}"
    );
    text
}

/// A minimal engine: one numeric field, a constant rule tier (`rules_only.toml`).
fn minimal() -> String {
    config("rules_only.toml", &[])
}

/// The calling thread's last error message.
fn last_error() -> String {
    // SAFETY: `risk_last_error` returns a NUL-terminated string valid until this thread's
    // next call into the library; it is copied at once.
    unsafe { CStr::from_ptr(risk_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// An engine built from `toml` (relative paths against `base_dir`), or the failing code
/// and message.
fn engine(toml: &str, base_dir: &Path) -> Result<*mut risk_engine, (risk_result, String)> {
    let dir = CString::new(base_dir.to_str().unwrap()).unwrap();
    let mut e = std::ptr::null_mut();
    // SAFETY: `toml` is `len` readable bytes, `dir` is NUL-terminated, `e` is writable.
    let r = unsafe { risk_engine_new_from_toml(toml.as_ptr(), toml.len(), dir.as_ptr(), &mut e) };
    if r == risk_result::RISK_OK {
        Ok(e)
    } else {
        Err((r, last_error()))
    }
}

/// Decides `json`: the code and, on `RISK_OK`, the decision.
fn decide_json(e: *const risk_engine, json: &str) -> (risk_result, risk_decision) {
    let mut d = risk_decision::default();
    // SAFETY: `json` is `len` readable bytes and `d` is writable; `e` is any handle value
    // (the registry refuses one that is not live).
    let r = unsafe { risk_engine_decide_json(e, json.as_ptr(), json.len(), &mut d) };
    (r, d)
}

/// A subscription to `e`'s deep verdicts.
fn subscribe(e: *const risk_engine) -> Result<*mut risk_subscription, risk_result> {
    let mut s = std::ptr::null_mut();
    // SAFETY: `s` is writable; `e` is any handle value.
    match unsafe { risk_engine_subscribe(e, &mut s) } {
        risk_result::RISK_OK => Ok(s),
        r => Err(r),
    }
}

/// Polls `s` for up to `timeout_ms`.
fn poll(s: *const risk_subscription, timeout_ms: u32) -> risk_result {
    let mut v = risk_verdict::default();
    // SAFETY: `v` is writable; `s` is any handle value.
    unsafe { risk_subscription_poll(s, timeout_ms, &mut v) }
}

/// Releases an engine handle.
fn free_engine(e: *mut risk_engine) {
    // SAFETY: `risk_engine_free` accepts any handle value (freed or foreign ones are ignored).
    unsafe { risk_engine_free(e) }
}

/// Releases a subscription handle.
fn free_subscription(s: *mut risk_subscription) {
    // SAFETY: `risk_subscription_free` accepts any handle value.
    unsafe { risk_subscription_free(s) }
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("api")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
