//! Builds `tests/c/test_ffi.c` with gcc under AddressSanitizer and UBSan against the
//! freshly built `librisk_ffi.so` and runs it: NULL everywhere, wrong lengths, NaN,
//! invalid UTF-8, oversized input, wrong handle types, double free, many threads.
//! A missing gcc fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    // target/<profile>/deps/c_abi-* → the cdylib is in deps/ or its parent.
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    for d in [deps.clone(), deps.parent().unwrap().to_path_buf()] {
        if d.join("librisk_ffi.so").exists() {
            return d;
        }
    }
    panic!("librisk_ffi.so not found next to {}", exe.display());
}

#[test]
fn c_caller_under_address_and_undefined_behaviour_sanitizers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The library this test binary was built with (deps/ holds the fresh one; a stale
    // copy may sit in target/<profile>/), copied to a private directory, linked by path
    // and run without cargo's LD_LIBRARY_PATH so no other copy can be loaded.
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_abi");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(lib_dir().join("librisk_ffi.so"), tmp.join("librisk_ffi.so")).unwrap();
    let lib = tmp.clone();
    let out = tmp.join("test_ffi");
    let status = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .args(["-fsanitize=address,undefined", "-fno-omit-frame-pointer"])
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join("tests/c/test_ffi.c"))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .args(["-lrisk_ffi", "-lpthread", "-lm"])
        .status()
        .expect("gcc runs (install gcc)");
    assert!(status.success(), "gcc failed");
    let toml = dir.join("../examples/risk.toml");
    let run = Command::new(&out)
        .arg(&toml)
        .env_remove("LD_LIBRARY_PATH")
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "C test failed:\n{text}");
    assert!(text.contains("all checks passed"), "{text}");
}
