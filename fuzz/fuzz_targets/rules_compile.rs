//! Lexer + parser + checker + compiler of the rule language on arbitrary text: a rule set
//! or a positioned `RuleError`, never a panic; a compiled set evaluates without panicking
//! and agrees with the reference interpreter.
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_rules::{Hits, RuleSet};
use std::sync::OnceLock;

fn schema() -> &'static std::sync::Arc<risk_core::FeatureSchema> {
    static S: OnceLock<std::sync::Arc<risk_core::FeatureSchema>> = OnceLock::new();
    S.get_or_init(risk_core::synth::schema)
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    let Ok(src) = std::str::from_utf8(data) else { return };
    match RuleSet::compile(src, "fuzz.rules", schema()) {
        Ok(set) => {
            let mut f = schema().features();
            let (mut a, mut b) = (Hits::new(), Hits::new());
            for fill in [f32::NAN, 0.0, 1.0, -1.0, 1e30] {
                f.values_mut().iter_mut().for_each(|v| *v = fill);
                let x = set.evaluate(&f, &mut a);
                let y = set.evaluate_reference(&f, &mut b);
                assert_eq!(x, y);
            }
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(e.line >= 1 && e.col >= 1);
        }
    }
});
