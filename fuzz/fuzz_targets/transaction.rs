//! Arbitrary feature values and amounts through validation and a decision: typed errors,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_core::{ConstantScorer, Engine, FeatureSchema, Transaction};
use std::sync::{Arc, OnceLock};

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let s = FeatureSchema::builder()
            .numeric_required("amount")
            .categorical("country", &["US", "GB"])
            .numeric("a")
            .numeric("b")
            .build()
            .unwrap();
        Engine::builder(s)
            .rules(Arc::new(ConstantScorer::new(0.2)))
            .fast(Arc::new(ConstantScorer::new(0.5)))
            .build()
            .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let e = engine();
    let mut t = Transaction::builder(e.schema()).amount(1.0, "USD").build().unwrap();
    let mut chunks = data.chunks_exact(4);
    if let Some(c) = chunks.next() {
        t.amount = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64;
    }
    for (v, c) in t.features.values_mut().iter_mut().zip(chunks) {
        *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    let _ = e.decide(&t);
});
