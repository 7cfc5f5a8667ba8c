//! Replays the `gguf_header` fuzz seeds (`fuzz/seeds/gguf_header/`, first byte = path as
//! in `fuzz/fuzz_targets/gguf_header.rs`): each loads or fails with a typed error, never a
//! panic; the one whole model among them (`tiny_llama_f32.gguf`) loads.

use risk_gpu::llm::{limits, Llama};
use std::path::Path;

#[test]
fn gguf_header_fuzz_seeds_load_or_fail_typed() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/gguf_header");
    let dir = std::env::temp_dir().join(format!("risk-gguf-seeds-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("st")).unwrap();
    let dev = risk_gpu::Device::Cpu.candle().unwrap();
    let (mut n, mut loaded) = (0, Vec::new());
    for e in std::fs::read_dir(&seeds).unwrap() {
        let p = e.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        let Some((&mode, file)) = data.split_first() else {
            continue;
        };
        n += 1;
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if mode % 2 == 0 {
            let _ = limits::check_gguf_header(file, file.len() as u64);
            let m = dir.join("m.gguf");
            std::fs::write(&m, file).unwrap();
            if Llama::from_gguf(&m, &dev).is_ok() {
                loaded.push(name);
            }
        } else {
            std::fs::write(dir.join("st/config.json"), file).unwrap();
            // No *.safetensors beside it: a typed error after the config is checked.
            assert!(
                Llama::from_safetensors(dir.join("st"), &dev).is_err(),
                "{name}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(n >= 5, "seed corpus missing in {}", seeds.display());
    assert_eq!(loaded, vec!["tiny_llama_f32.gguf".to_string()]);
}
