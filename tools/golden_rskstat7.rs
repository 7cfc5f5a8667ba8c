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
    let cfg = golden_config();
    let s = golden_schema(&cfg);
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(1_767_571_200_000 + 400 * 86_400_000);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock).unwrap();
    for i in 0..3_000u64 {
        let mut t = golden_txn(&s, i);
        st.apply(&mut t);
        if i % 7 == 0 && i >= 40 {
            st.report_label(TxnId(i - 39), true, t.timestamp_ms)
                .unwrap();
        }
    }
    let info = st.snapshot(out.join("rskstat7.snap")).unwrap();
    eprintln!(
        "{} keys, {} bytes; fallbacks {}",
        info.keys,
        info.bytes,
        st.stats().exact_fallback
    );
    let mut text = String::new();
    for i in 3_000..3_400u64 {
        let mut t = golden_txn(&s, i);
        st.apply(&mut t);
        if i % 7 == 0 && i >= 3_040 {
            st.report_label(TxnId(i - 39), true, t.timestamp_ms)
                .unwrap();
        }
        let bits: Vec<String> = t
            .features
            .values()
            .iter()
            .map(|v| format!("{:08x}", v.to_bits()))
            .collect();
        writeln!(text, "{}", bits.join(" ")).unwrap();
    }
    std::fs::write(out.join("rskstat7_features.txt"), text).unwrap();
    eprintln!("fallbacks {}", st.stats().exact_fallback);
}
