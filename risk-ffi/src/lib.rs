//! # risk-ffi
//!
//! The C ABI of **risk** (issue [6]): opaque engine handles created from a `risk.toml`,
//! decide from a C struct or JSON, batch decide, decision fields and reason codes, deep
//! verdicts, metrics as JSON, rule reload and shutdown; every exported function inside one
//! panic boundary returning a numbered result code; a committed, drift-checked
//! `include/risk.h`; Java (JNI), Go (cgo) and Python bindings tested in their own
//! languages.
//!
//! Until then it exports only the version, so the library, its linkage and the header
//! conventions can be checked from C.
#![deny(missing_docs)]

/// The library version as a NUL-terminated string with static lifetime.
#[no_mangle]
pub extern "C" fn risk_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_nul_terminated() {
        let p = super::risk_version();
        // SAFETY: risk_version returns a pointer to a static NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(s.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
