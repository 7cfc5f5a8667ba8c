//! Per-call cost of the C ABI against the Rust API, same engine (`examples/risk.toml`:
//! default rules + native XGBoost) and the same transaction, same run.
//! - `rust_decide_prebuilt`: `Engine::decide` on a transaction built once;
//! - `rust_build_and_decide`: the builder (typed fields + 3 features by name) and decide;
//! - `c_abi_decide`: `risk_engine_decide` with a `risk_txn` (handle check, struct → builder,
//!   decide, decision → `risk_decision`), called through the C ABI symbol;
//! - `c_abi_decide_json`: `risk_engine_decide_json` with the same transaction as JSON.

use criterion::{black_box, Criterion};
use risk_core::{Channel, Engine, ScorerRegistry, Transaction};
use risk_ffi::*;
use std::ffi::CString;
use std::path::Path;

fn toml() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/risk.toml")
}

fn build(e: &Engine) -> Transaction {
    Transaction::builder(e.schema())
        .id(7)
        .entity(42)
        .timestamp_ms(1_767_571_200_000)
        .amount(42.5, "USD")
        .mcc(5411)
        .country("US")
        .channel(Channel::Pos)
        .device(9)
        .numeric("txn_count_1h", 3.0)
        .numeric("hour", 14.0)
        .numeric("device_new", 0.0)
        .build()
        .unwrap()
}

pub fn overhead(c: &mut Criterion) {
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let engine = Engine::from_config_with(toml(), &reg).unwrap();
    let prebuilt = build(&engine);

    let path = CString::new(toml().to_str().unwrap()).unwrap();
    let mut h: *mut risk_engine = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated path and a writable out pointer.
    assert_eq!(
        unsafe { risk_engine_new_from_path(path.as_ptr(), &mut h) },
        risk_result::RISK_OK
    );
    let names = [c"txn_count_1h", c"hour", c"device_new"];
    let values = [3.0, 14.0, 0.0];
    let feats: Vec<risk_feature> = names
        .iter()
        .zip(values)
        .map(|(n, v)| risk_feature {
            name: n.as_ptr(),
            value: v,
            category: std::ptr::null(),
        })
        .collect();
    let txn = risk_txn {
        id: 7,
        entity: 42,
        timestamp_ms: 1_767_571_200_000,
        amount: 42.5,
        currency: c"USD".as_ptr(),
        mcc: 5411,
        country: c"US".as_ptr(),
        channel: c"pos".as_ptr(),
        device: 9,
        features: feats.as_ptr(),
        n_features: feats.len(),
        merchant: std::ptr::null(),
        ip: std::ptr::null(),
        email: std::ptr::null(),
    };
    let json = br#"{"id": 7, "entity": 42, "timestamp_ms": 1767571200000, "amount": 42.5, "currency": "USD", "mcc": 5411, "country": "US", "channel": "pos", "device": 9, "features": {"txn_count_1h": 3, "hour": 14, "device_new": 0}}"#;

    let mut g = c.benchmark_group("ffi");
    g.bench_function("rust_decide_prebuilt", |b| {
        b.iter(|| black_box(engine.decide(black_box(&prebuilt)).unwrap()))
    });
    g.bench_function("rust_build_and_decide", |b| {
        b.iter(|| black_box(engine.decide(&build(&engine)).unwrap()))
    });
    let mut out = risk_decision::default();
    g.bench_function("c_abi_decide", |b| {
        b.iter(|| {
            // SAFETY: live handle, valid transaction, writable output.
            let r = unsafe { risk_engine_decide(h, black_box(&txn), &mut out) };
            assert_eq!(r, risk_result::RISK_OK);
            black_box(out.score)
        })
    });
    g.bench_function("c_abi_decide_json", |b| {
        b.iter(|| {
            // SAFETY: live handle, `json.len()` readable bytes, writable output.
            let r = unsafe { risk_engine_decide_json(h, json.as_ptr(), json.len(), &mut out) };
            assert_eq!(r, risk_result::RISK_OK);
            black_box(out.score)
        })
    });
    g.finish();
    // SAFETY: `h` came from risk_engine_new_from_path and is freed once.
    unsafe { risk_engine_free(h) };
}
