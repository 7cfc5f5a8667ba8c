//! risk.toml parsing and validation must never panic: any input is a config or a
//! `ConfigError`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_core::{Engine, ScorerRegistry};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if data.len() > 16 * 1024 {
        return;
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(e) = Engine::from_toml_str(text, Path::new("."), Path::new("fuzz.toml"), &ScorerRegistry::default()) {
            e.shutdown(risk_core::Shutdown::Abandon);
        }
    }
});
