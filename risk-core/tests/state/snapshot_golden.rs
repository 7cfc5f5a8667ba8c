//! A snapshot written by an earlier version restores here: `testdata/state/rskstat7.snap`
//! was written by the version at `366e4c7` (format 7: a last event time per stats group,
//! exact windows' rings kept all along, the fingerprint before that changed), and
//! `rskstat7_features.txt` holds the features that version computed for the 400
//! transactions after writing it (`tools/golden_rskstat7.sh` makes both).

use risk_core::state::{Agg, FeatureDef, Filter, KeySource, StateConfig, StateEngine};
use risk_core::*;
use std::sync::Arc;
use std::time::Duration;

include!("golden_def.rs");

#[test]
fn a_format_7_snapshot_computes_what_the_version_that_wrote_it_computed() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/state");
    let want = std::fs::read_to_string(data.join("rskstat7_features.txt")).unwrap();
    let bytes = std::fs::read(data.join("rskstat7.snap")).unwrap();
    assert_eq!(&bytes[..8], b"RSKSTAT7");
    let (st, s) = golden_engine();
    assert_eq!(st.restore(data.join("rskstat7.snap")).unwrap(), 55);
    let mut lines = want.lines();
    for i in 3_000..3_400u64 {
        let got = golden_step(&st, &s, i, 3_040);
        assert_eq!(got, lines.next().unwrap(), "transaction {i}");
    }
    assert!(lines.next().is_none());
    // The 3-event exact window overflowed for every card before the snapshot: its
    // reads come from the ring the snapshot carried.
    assert!(
        st.stats().exact_fallback >= 400,
        "{}",
        st.stats().exact_fallback
    );
}
