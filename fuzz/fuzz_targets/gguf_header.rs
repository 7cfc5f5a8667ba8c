//! Model-file loading on arbitrary bytes: a loaded model or a typed `LlmError`, never a
//! panic, an abort or an allocation sized by what the file claims.
//!
//! The first byte picks the path, the rest is the file:
//! - even: a GGUF file. `limits::check_gguf_header` on the bytes in memory, then
//!   `Llama::from_gguf` on them written to a file (header walk, candle's parser, the
//!   hyper-parameter and tensor-shape checks, dequantization).
//! - odd: a `config.json` in an otherwise empty directory, through
//!   `Llama::from_safetensors` (config parsing and `check_config`; it then fails for
//!   want of `*.safetensors`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_gpu::llm::{limits, Llama};
use std::path::PathBuf;
use std::sync::OnceLock;

fn dir() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("risk-fuzz-gguf-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else { return };
    let dev = risk_gpu::Device::Cpu.candle().unwrap();
    if mode % 2 == 0 {
        let _ = limits::check_gguf_header(file, file.len() as u64);
        let p = dir().join("m.gguf");
        std::fs::write(&p, file).unwrap();
        if let Ok(m) = Llama::from_gguf(&p, &dev) {
            let _ = m.config();
        }
    } else {
        let d = dir().join("st");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), file).unwrap();
        let _ = Llama::from_safetensors(&d, &dev);
    }
});
