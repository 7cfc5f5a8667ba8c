//! The crate's floors, kept by a test: each module imports only from its own floor and the
//! floors below, never through the crate root's re-exports, and no two files import each
//! other (directly or around a loop). `risk_layers` parses `src/` and names file and line.
//!
//! Lowest floor first. A new module goes on the lowest floor whose modules it needs; an
//! entry such as `scorer/registry` places one file apart from its folder.

use std::path::Path;

const FLOORS: &[&[&str]] = &[
    // vocabulary with no dependencies inside the crate
    &[
        "clock",
        "hash",
        "action",
        "reason",
        "calibrate",
        "secret",
        "files",
        "pseudo",
        "stripe",
    ],
    // what transactions are made of, errors, the breaker, config value helpers
    &[
        "schema", "version", "error", "text", "seq", "circuit", "setting",
    ],
    &["txn"],
    // what tiers answer
    &["scorer", "decision", "monitor"],
    // per-decision subsystems (the registry builds ensembles)
    &["state", "policy", "metrics", "ensemble", "scorer/registry"],
    // around decisions: the audit trail, deploys, synthetic data, metrics as JSON
    &["audit", "deploy", "synth", "metrics_json"],
    // risk.toml, which calls each subsystem's Raw*::to_config
    &["config"],
    // the engine: decide path, pools, control plane, replay
    &["engine"],
];

#[test]
fn risk_core_imports_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    if let Err(report) = risk_layers::check(&src, FLOORS) {
        panic!("{report}");
    }
}
