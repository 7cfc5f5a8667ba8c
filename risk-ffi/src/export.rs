//! Text out to the caller: the body every `(buf, cap, *len)` function shares (the panic
//! boundary, the handle lookup, then [`write_text`]), so each of them states only what it
//! writes.

use crate::args::write_text;
use crate::error::guard;
use crate::error::risk_result;
use crate::handle::{lookup, Handle};
use std::ffi::c_char;

/// Runs `f` inside the panic boundary and writes the text it returns to `(buf, cap, *len)`
/// (see [`write_text`]); an error code from `f` is returned as it is, with nothing written.
pub(crate) fn export<T: AsRef<str>>(
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    f: impl FnOnce() -> Result<T, risk_result>,
) -> risk_result {
    guard(|| match f() {
        Ok(text) => write_text(text.as_ref(), buf, cap, len),
        Err(r) => r,
    })
}

/// [`export`] of the text `f` makes from the object behind the live handle `p` (an engine,
/// in practice): `RISK_ERR_NULL` or `RISK_ERR_HANDLE` first when `p` is not one.
pub(crate) fn export_handle<H: Handle, T: AsRef<str>>(
    p: *const H,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    f: impl FnOnce(&H) -> Result<T, risk_result>,
) -> risk_result {
    export(buf, cap, len, || f(&*lookup(p)?))
}
