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

/// Replays the `kserve_response` fuzz seeds (`fuzz/seeds/kserve_response/`, framed as in
/// `fuzz/fuzz_targets/kserve_response.rs`): probabilities or a typed error, never a panic.
#[test]
fn kserve_response_fuzz_seeds_parse_or_fail_typed() {
    use risk_gpu::remote::v2::parse_response;
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/kserve_response");
    let mut parsed = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(&seeds).unwrap() {
        let p = e.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        let [mode, rows, rest @ ..] = data.as_slice() else {
            panic!("{}: shorter than its frame", p.display())
        };
        let rows = (*rows as usize % 8) + 1;
        let (header_len, body) = if mode & 1 == 1 {
            let [a, b, body @ ..] = rest else {
                panic!("{}", p.display())
            };
            (Some(u16::from_le_bytes([*a, *b]) as usize), body)
        } else {
            (None, rest)
        };
        let output = if mode & 2 == 2 {
            None
        } else {
            Some("predict_proba")
        };
        let r = parse_response(body, header_len, output, rows, (mode >> 2) as usize % 3, 7);
        if let Ok(v) = &r {
            assert_eq!(v.len(), rows);
        }
        parsed.insert(p.file_name().unwrap().to_string_lossy().into_owned(), r);
    }
    assert!(
        parsed.len() >= 5,
        "seed corpus missing in {}",
        seeds.display()
    );
    assert_eq!(
        parsed["mlserver_one_row.json"],
        Ok(vec![0.045790430158376694f64 as f32])
    );
    assert_eq!(parsed["binary_one_row.bin"], Ok(vec![0.75]));
    let nested = parsed["nested_null.json"].as_ref().unwrap();
    assert_eq!(nested[0], 0.25);
    assert!(nested[1].is_nan());
    // Once overflowed `rows * cols` (4 x 2^62) and panicked on a slice index.
    let huge = parsed["huge_width_overflow.json"].as_ref().unwrap_err();
    assert!(
        huge.starts_with("shape") && huge.contains("overflow"),
        "{huge}"
    );
    assert!(parsed["error_body.json"]
        .as_ref()
        .unwrap_err()
        .starts_with("malformed"));
}
