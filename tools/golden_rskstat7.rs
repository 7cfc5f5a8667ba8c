//! Writes `testdata/state/rskstat7.snap` and the features that follow it, at the version
//! that wrote format 7 (run by `tools/golden_rskstat7.sh`, which places this file and
//! `risk-core/tests/state/golden_def.rs` in that version's examples).
use risk_core::state::*;
use risk_core::*;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
include!("golden_def.rs");

fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let (st, s) = golden_engine();
    for i in 0..3_000u64 {
        golden_step(&st, &s, i, 40);
    }
    let info = st.snapshot(out.join("rskstat7.snap")).unwrap();
    eprintln!("{} keys, {} bytes", info.keys, info.bytes);
    let mut text = String::new();
    for i in 3_000..3_400u64 {
        writeln!(text, "{}", golden_step(&st, &s, i, 3_040)).unwrap();
    }
    std::fs::write(out.join("rskstat7_features.txt"), text).unwrap();
    eprintln!(
        "exact windows read from their rings: {}",
        st.stats().exact_fallback
    );
}
