//! The committed `include/risk.h` is exactly what the pinned cbindgen generates from the
//! sources: a header that drifts from the library is a silent memory bug in every caller.

use std::path::Path;

#[test]
fn committed_header_matches_the_sources() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen generates")
        .write(&mut out);
    let path = dir.join("include/risk.h");
    if std::env::var_os("RISK_BLESS_HEADER").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == out,
        "include/risk.h differs from the sources: regenerate with RISK_BLESS_HEADER=1 cargo test -p risk-ffi --test header and commit it"
    );
}
