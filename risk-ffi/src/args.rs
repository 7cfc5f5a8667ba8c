//! Arguments from C: NUL-terminated strings, `(pointer, length)` text, and the caller-owned
//! `(buf, cap, *len)` output buffers.

use crate::error::fail;
use crate::error::risk_result::{self, *};
use std::ffi::{c_char, CStr};

/// Largest input accepted by the JSON and config functions (bytes).
pub const RISK_MAX_INPUT: usize = 1 << 24;

/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, risk_result> {
    // SAFETY: forwarded caller guarantee.
    unsafe { str_arg_at(p, what, usize::MAX) }
}

/// [`str_arg`] for element `index` of an array argument (`usize::MAX`: not an array); the
/// name is only formatted on failure, so the success path allocates nothing.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn str_arg_at<'a>(
    p: *const c_char,
    what: &str,
    index: usize,
) -> Result<&'a str, risk_result> {
    let name = || {
        if index == usize::MAX {
            what.to_owned()
        } else {
            format!("features[{index}].{what}")
        }
    };
    if p.is_null() {
        return Err(fail(RISK_ERR_NULL, format!("{} is NULL", name())));
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(p) };
    if c.to_bytes().len() > RISK_MAX_INPUT {
        return Err(fail(
            RISK_ERR_INVALID,
            format!("{} is longer than {RISK_MAX_INPUT} bytes", name()),
        ));
    }
    c.to_str()
        .map_err(|e| fail(RISK_ERR_UTF8, format!("{} is not UTF-8: {e}", name())))
}

/// # Safety
/// `p` is NULL (then `len` must be 0) or points to `len` readable bytes.
pub(crate) unsafe fn bytes_arg<'a>(
    p: *const u8,
    len: usize,
    what: &str,
) -> Result<&'a str, risk_result> {
    if p.is_null() && len == 0 {
        return Ok("");
    }
    if p.is_null() {
        return Err(fail(RISK_ERR_NULL, format!("{what} is NULL")));
    }
    if len > RISK_MAX_INPUT {
        return Err(fail(
            RISK_ERR_INVALID,
            format!("{what}: {len} bytes, more than {RISK_MAX_INPUT}"),
        ));
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p`.
    let b = unsafe { std::slice::from_raw_parts(p, len) };
    std::str::from_utf8(b).map_err(|e| fail(RISK_ERR_UTF8, format!("{what} is not UTF-8: {e}")))
}

/// Writes `text` and a NUL to the caller's `(buf, cap)`, always setting `*len` to the text's
/// size; `RISK_ERR_BUFFER_TOO_SMALL` without writing when it does not fit.
pub(crate) fn write_text(text: &str, buf: *mut c_char, cap: usize, len: *mut usize) -> risk_result {
    if len.is_null() {
        return fail(RISK_ERR_NULL, "len is NULL");
    }
    // SAFETY: `len` is non-NULL and writable per the caller.
    unsafe { *len = text.len() };
    if buf.is_null() || cap < text.len() + 1 {
        return fail(
            RISK_ERR_BUFFER_TOO_SMALL,
            format!("needs {} bytes plus a NUL, buffer holds {cap}", text.len()),
        );
    }
    // SAFETY: `buf` holds at least `cap >= text.len() + 1` writable bytes per the caller.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    RISK_OK
}
