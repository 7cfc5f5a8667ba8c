//! Reference vectors and locations.

use std::path::{Path, PathBuf};

pub fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models")
}

pub fn f32s(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(models().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub struct Reference {
    pub features: usize,
    pub rows: usize,
    pub x: Vec<f32>,
    pub probs: Vec<f32>,
    pub margins: Vec<f32>,
    pub contribs: Vec<f32>,
    pub contrib_rows: usize,
}

pub fn reference() -> Reference {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(models().join("xgb_ref.manifest.json")).unwrap())
            .unwrap();
    let features = m["features"].as_array().unwrap().len();
    let rows = m["test_rows"].as_u64().unwrap() as usize;
    let r = Reference {
        features,
        rows,
        x: f32s("xgb_ref_features.f32"),
        probs: f32s("xgb_ref_probs.f32"),
        margins: f32s("xgb_ref_margins.f32"),
        contribs: f32s("xgb_ref_contribs.f32"),
        contrib_rows: m["contrib_rows"].as_u64().unwrap() as usize,
    };
    assert_eq!(r.x.len(), rows * features);
    assert_eq!(r.probs.len(), rows);
    assert_eq!(r.contribs.len(), r.contrib_rows * (features + 1));
    r
}

/// The ONNX Runtime library: ORT_DYLIB_PATH, else `.ort/` (tools/fetch_onnxruntime.sh).
/// Missing is a failure, not a skip.
pub fn onnxruntime() -> PathBuf {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ort/libonnxruntime.so.1.31.1");
    assert!(
        p.exists(),
        "ONNX Runtime not found: set ORT_DYLIB_PATH or run tools/fetch_onnxruntime.sh ({} missing)",
        p.display()
    );
    p
}

/// Whether the scoring kernel `name` (`risk_gpu::trees::KERNELS`) can run on this CPU,
/// announced on stderr either way. `RISK_REQUIRE_KERNELS` (comma-separated kernel names;
/// CI sets it from the CPU's flags) makes a kernel mandatory: a required kernel that
/// cannot run here, or an unknown name in the list, fails the test instead of letting it
/// pass on the scalar path alone.
pub fn kernel_runs(name: &str, test: &str) -> bool {
    use risk_gpu::trees::{kernel_available, KERNELS};
    let list = std::env::var("RISK_REQUIRE_KERNELS").unwrap_or_default();
    let required: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    for r in &required {
        assert!(
            kernel_available(r).is_some(),
            "RISK_REQUIRE_KERNELS={list:?} names {r:?}, not a kernel (known: {KERNELS:?})"
        );
    }
    let runs = kernel_available(name).unwrap_or_else(|| panic!("{name:?} is not a kernel"));
    if runs {
        eprintln!("{test}: kernel {name} runs on this CPU");
    } else {
        assert!(
            !required.contains(&name),
            "{test}: RISK_REQUIRE_KERNELS={list:?} requires {name}, which this CPU cannot run"
        );
        eprintln!(
            "{test}: kernel {name} could NOT run here (CPU lacks it; not in RISK_REQUIRE_KERNELS={list:?}): only the scalar path was checked"
        );
    }
    runs
}

/// A transaction of the synthetic schema whose features are reference row `i`.
pub fn ref_txn(r: &Reference, i: usize) -> risk_core::Transaction {
    let s = risk_core::synth::schema();
    let mut t = risk_core::Transaction::builder(&s)
        .amount(1.0, "USD")
        .build()
        .unwrap();
    t.features
        .values_mut()
        .copy_from_slice(&r.x[i * r.features..(i + 1) * r.features]);
    t
}

/// Rows written by the `tools/` reference scripts as JSON: numbers, and `"nan"`, `"inf"`,
/// `"-inf"` for what JSON cannot hold.
pub fn json_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    let num = |x: &serde_json::Value| match x.as_str() {
        Some("nan") => f32::NAN,
        Some("inf") => f32::INFINITY,
        Some("-inf") => f32::NEG_INFINITY,
        Some(o) => panic!("{o} is not a number"),
        None => x.as_f64().unwrap() as f32,
    };
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(num).collect())
        .collect()
}

/// A JSON array of numbers.
pub fn json_f64s(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}
