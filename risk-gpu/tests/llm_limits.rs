//! Hostile model files for the LLM tier: sizes stated in a GGUF header or metadata, or in
//! `config.json`, are bounded before anything is allocated from them (typed
//! `LlmError::TooLarge` naming the key), inconsistent counts are `LlmError::Format`, and
//! nothing panics. The files are small and written here, into a temporary directory.

use crate::llm::safetensors::{config, write, HEADS, HIDDEN};
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use risk_gpu::llm::limits::{MAX_ARRAY, MAX_CONTEXT, MAX_HIDDEN, MAX_LAYERS, MAX_TENSORS};
use risk_gpu::llm::{Llama, LlmError, LlmTokenizer};
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("risk-limits-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Asserts a `TooLarge` error for `key` stating `value`.
#[track_caller]
fn too_large(r: Result<impl std::fmt::Debug, LlmError>, key: &str, value: u64) -> u64 {
    match r {
        Err(LlmError::TooLarge {
            key: k,
            value: v,
            max,
        }) => {
            assert!(k.contains(key), "key {k:?}, want {key:?}");
            assert_eq!(v, value, "{k}");
            assert!(v > max);
            max
        }
        other => panic!("want TooLarge for {key}, got {other:?}"),
    }
}

/// Asserts a `Format` error whose message names `what`.
#[track_caller]
fn format(r: Result<impl std::fmt::Debug, LlmError>, what: &str) {
    match r {
        Err(LlmError::Format(m)) => assert!(m.contains(what), "{m} (want {what:?})"),
        other => panic!("want Format naming {what:?}, got {other:?}"),
    }
}

// ===== a tiny llama GGUF =====

const VOCAB: usize = 120;
const KV: usize = 2;
const INTER: usize = 96;

type Meta = Vec<(String, gguf_file::Value)>;

fn meta() -> Meta {
    use gguf_file::Value::*;
    vec![
        ("general.architecture".into(), String("llama".into())),
        ("llama.attention.head_count".into(), U32(HEADS as u32)),
        ("llama.attention.head_count_kv".into(), U32(KV as u32)),
        ("llama.embedding_length".into(), U32(HIDDEN as u32)),
        ("llama.block_count".into(), U32(2)),
        ("llama.feed_forward_length".into(), U32(INTER as u32)),
        ("llama.context_length".into(), U32(256)),
        ("llama.attention.layer_norm_rms_epsilon".into(), F32(1e-5)),
    ]
}

fn set(m: &mut Meta, key: &str, v: gguf_file::Value) {
    match m.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = v,
        None => m.push((key.into(), v)),
    }
}

fn tensors(layers: usize) -> Vec<(String, QTensor)> {
    let dev = Device::Cpu;
    let t = |shape: &[usize]| {
        let x = (Tensor::randn(0f32, 1.0, shape, &dev).unwrap() * 0.1).unwrap();
        QTensor::quantize(&x, GgmlDType::F32).unwrap()
    };
    let hd = HIDDEN / HEADS;
    let mut v = vec![
        ("token_embd.weight".to_owned(), t(&[VOCAB, HIDDEN])),
        ("output_norm.weight".to_owned(), t(&[HIDDEN])),
    ];
    for i in 0..layers {
        for (n, s) in [
            ("attn_norm", vec![HIDDEN]),
            ("attn_q", vec![HEADS * hd, HIDDEN]),
            ("attn_k", vec![KV * hd, HIDDEN]),
            ("attn_v", vec![KV * hd, HIDDEN]),
            ("attn_output", vec![HIDDEN, HEADS * hd]),
            ("ffn_norm", vec![HIDDEN]),
            ("ffn_gate", vec![INTER, HIDDEN]),
            ("ffn_up", vec![INTER, HIDDEN]),
            ("ffn_down", vec![HIDDEN, INTER]),
        ] {
            v.push((format!("blk.{i}.{n}.weight"), t(&s)));
        }
    }
    v
}

fn write_gguf(path: &Path, m: &Meta, t: &[(String, QTensor)]) {
    let mut f = std::fs::File::create(path).unwrap();
    let m: Vec<(&str, &gguf_file::Value)> = m.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t: Vec<(&str, &QTensor)> = t.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &m, &t).unwrap();
}

fn load_with(d: &Path, m: &Meta) -> Result<Llama, LlmError> {
    let p = d.join("m.gguf");
    write_gguf(&p, m, &tensors(2));
    Llama::from_gguf(&p, &Device::Cpu)
}

#[test]
fn gguf_hyper_parameters_are_bounded_before_allocation() {
    let d = dir("gguf-config");
    let m = load_with(&d, &meta()).unwrap();
    assert_eq!((m.config().layers, m.config().vocab), (2, VOCAB));
    use gguf_file::Value::*;
    // A block count of 10^12 used to size `Vec::with_capacity` (abort), a context of
    // 2^31 the rotary tables (64 GB).
    let mut m = meta();
    set(&mut m, "llama.block_count", U64(1_000_000_000_000));
    let max = too_large(load_with(&d, &m), "llama.block_count", 1_000_000_000_000);
    assert_eq!(max, MAX_LAYERS as u64);
    let mut m = meta();
    set(&mut m, "llama.context_length", U64(1 << 31));
    let max = too_large(load_with(&d, &m), "llama.context_length", 1 << 31);
    assert_eq!(max, MAX_CONTEXT as u64);
    let mut m = meta();
    set(&mut m, "llama.embedding_length", U64(1 << 40));
    let max = too_large(load_with(&d, &m), "llama.embedding_length", 1 << 40);
    assert_eq!(max, MAX_HIDDEN as u64);
    let mut m = meta();
    set(&mut m, "llama.feed_forward_length", U64(1 << 40));
    too_large(load_with(&d, &m), "llama.feed_forward_length", 1 << 40);
    // Counts against each other and against the tensors.
    let mut m = meta();
    set(&mut m, "llama.block_count", U32(1));
    format(
        load_with(&d, &m),
        "llama.block_count is 1, the tensors hold 2 blocks",
    );
    let mut m = meta();
    set(&mut m, "llama.block_count", U32(3));
    format(load_with(&d, &m), "blk.2.");
    let mut m = meta();
    set(&mut m, "llama.vocab_size", U32(VOCAB as u32 + 1));
    format(load_with(&d, &m), "llama.vocab_size is 121");
    let mut m = meta();
    set(&mut m, "llama.attention.head_count_kv", U32(3));
    format(load_with(&d, &m), "kv heads 3");
    let mut m = meta();
    set(&mut m, "llama.attention.layer_norm_rms_epsilon", F32(0.0));
    format(
        load_with(&d, &m),
        "llama.attention.layer_norm_rms_epsilon = 0",
    );
    let mut m = meta();
    set(&mut m, "llama.rope.freq_base", F32(f32::NAN));
    format(load_with(&d, &m), "llama.rope.freq_base");
    // A tensor whose shape disagrees is named before any tensor is read.
    let p = d.join("m.gguf");
    let mut t = tensors(2);
    t[5].1 = QTensor::quantize(
        &Tensor::zeros((HIDDEN, HIDDEN + 1), DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    let name = t[5].0.clone();
    write_gguf(&p, &meta(), &t);
    format(Llama::from_gguf(&p, &Device::Cpu), &name);
    std::fs::remove_dir_all(&d).ok();
}

// ===== raw GGUF headers =====

fn header(version: u32, tensors: u64, kvs: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend(tensors.to_le_bytes());
    b.extend(kvs.to_le_bytes());
    b
}

fn key(b: &mut Vec<u8>, k: &str) {
    b.extend((k.len() as u64).to_le_bytes());
    b.extend(k.as_bytes());
}

/// Both GGUF readers (model and tokenizer) on `bytes`.
fn both(d: &Path, bytes: &[u8]) -> [Result<(), LlmError>; 2] {
    let p = d.join("h.gguf");
    std::fs::write(&p, bytes).unwrap();
    [
        Llama::from_gguf(&p, &Device::Cpu).map(|_| ()),
        LlmTokenizer::from_gguf(&p).map(|_| ()),
    ]
}

#[test]
fn gguf_header_counts_and_lengths_are_bounded() {
    let d = dir("gguf-header");
    for r in both(&d, &header(3, 1 << 40, 0)) {
        let max = too_large(r, "tensor_count", 1 << 40);
        assert_eq!(max, MAX_TENSORS);
    }
    for r in both(&d, &header(3, 0, u64::MAX)) {
        too_large(r, "metadata_kv_count", u64::MAX);
    }
    // A key of 2^64 - 1 bytes.
    let mut b = header(3, 0, 1);
    b.extend(u64::MAX.to_le_bytes());
    for r in both(&d, &b) {
        too_large(r, "metadata key length", u64::MAX);
    }
    // A 2^30-element array in a 60-byte file; a string value longer than the file.
    let mut b = header(3, 0, 1);
    key(&mut b, "tokenizer.ggml.token_type");
    b.extend(9u32.to_le_bytes());
    b.extend(0u32.to_le_bytes());
    b.extend((1u64 << 30).to_le_bytes());
    b.extend([0u8; 16]);
    for r in both(&d, &b) {
        let max = too_large(r, "tokenizer.ggml.token_type array length", 1 << 30);
        assert_eq!(max, MAX_ARRAY);
    }
    let mut b = header(3, 0, 1);
    key(&mut b, "general.name");
    b.extend(8u32.to_le_bytes());
    b.extend(1000u64.to_le_bytes());
    b.extend(b"short");
    for r in both(&d, &b) {
        format(r, "truncated");
    }
    // Unknown magic, version and value type.
    let mut b = header(3, 0, 1);
    key(&mut b, "x");
    b.extend(77u32.to_le_bytes());
    for (bytes, what) in [
        (b"GGML\x03\0\0\0".to_vec(), "magic"),
        (header(9, 0, 0), "version 9"),
        (b, "unknown value type 77"),
    ] {
        for r in both(&d, &bytes) {
            format(r, what);
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn gguf_tensor_tables_and_alignment_are_checked() {
    let d = dir("gguf-tensors");
    // `general.alignment` 0: candle divides by it (a panic before this check).
    let p = d.join("a.gguf");
    let mut m = meta();
    set(&mut m, "general.alignment", gguf_file::Value::U32(0));
    write_gguf(&p, &m, &tensors(2));
    format(Llama::from_gguf(&p, &Device::Cpu), "general.alignment 0");
    format(
        LlmTokenizer::from_gguf(&p).map(|_| ()),
        "general.alignment 0",
    );
    // A tensor of 2^96 elements (its byte size overflows).
    let mut b = header(3, 1, 0);
    key(&mut b, "token_embd.weight");
    b.extend(3u32.to_le_bytes());
    for _ in 0..3 {
        b.extend((1u64 << 32).to_le_bytes());
    }
    b.extend(0u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend([0u8; 64]);
    for r in both(&d, &b) {
        too_large(r, "tensor token_embd.weight elements", u64::MAX);
    }
    // Five dimensions.
    let mut b = header(3, 1, 0);
    key(&mut b, "t");
    b.extend(5u32.to_le_bytes());
    b.extend([0u8; 64]);
    for r in both(&d, &b) {
        too_large(r, "tensor t dimensions", 5);
    }
    // Every cut of a valid file is refused, without a panic.
    let p = d.join("m.gguf");
    write_gguf(&p, &meta(), &tensors(2));
    let bytes = std::fs::read(&p).unwrap();
    let cut = d.join("cut.gguf");
    let step = (bytes.len() / 97).max(1);
    for n in (0..bytes.len())
        .step_by(step)
        .chain(0..1200.min(bytes.len()))
    {
        std::fs::write(&cut, &bytes[..n]).unwrap();
        let e = Llama::from_gguf(&cut, &Device::Cpu).unwrap_err();
        assert!(
            matches!(e, LlmError::Format(_) | LlmError::TooLarge { .. }),
            "cut at {n}: {e}"
        );
    }
    std::fs::remove_dir_all(&d).ok();
}

// ===== config.json =====

fn with_config(d: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> Result<Llama, LlmError> {
    let mut j: serde_json::Value = serde_json::from_str(&config(false, false)).unwrap();
    edit(&mut j);
    std::fs::write(d.join("config.json"), j.to_string()).unwrap();
    Llama::from_safetensors(d, &Device::Cpu)
}

#[test]
fn config_json_sizes_are_bounded_before_allocation() {
    let (d, _) = write("limits", false, false);
    with_config(&d, |_| {}).unwrap();
    // 10^12 layers used to size `Vec::with_capacity` (abort).
    let r = with_config(&d, |j| j["num_hidden_layers"] = 1_000_000_000_000u64.into());
    let max = too_large(r, "config.json: num_hidden_layers", 1_000_000_000_000);
    assert_eq!(max, MAX_LAYERS as u64);
    for (k, v) in [
        ("max_position_embeddings", 1u64 << 40),
        ("hidden_size", 1 << 40),
        ("vocab_size", u64::MAX),
        ("intermediate_size", 1 << 40),
        ("head_dim", 1 << 40),
        ("num_key_value_heads", 1 << 20),
    ] {
        let r = with_config(&d, |j| j[k] = v.into());
        too_large(r, &format!("config.json: {k}"), v);
    }
    // The rotary tables: context times head size.
    let r = with_config(&d, |j| {
        j["max_position_embeddings"] = (MAX_CONTEXT as u64).into();
        j["head_dim"] = 512.into();
    });
    too_large(
        r,
        "config.json: max_position_embeddings",
        MAX_CONTEXT as u64,
    );
    let r = with_config(&d, |j| {
        j["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1u64 << 40});
    });
    too_large(r, "original_max_position_embeddings", 1 << 40);
    // Counts against each other, and values.
    format(
        with_config(&d, |j| j["num_key_value_heads"] = 3.into()),
        "num_attention_heads = 4 is not a multiple of config.json: num_key_value_heads = 3",
    );
    format(
        with_config(&d, |j| j["head_dim"] = 15.into()),
        "head_dim = 15 is odd",
    );
    format(
        with_config(&d, |j| j["num_hidden_layers"] = 0.into()),
        "num_hidden_layers is 0",
    );
    format(
        with_config(&d, |j| j["rope_theta"] = (-1.0).into()),
        "rope_theta = -1",
    );
    format(
        with_config(&d, |j| j["num_hidden_layers"] = 1e12.into()),
        "num_hidden_layers is not a non-negative integer",
    );
    std::fs::remove_dir_all(&d).ok();
}

/// An AutoAWQ Q projection with fewer rows than the config's heads: the rotary row
/// permutation used to index past it (a panic); now the shape is checked first.
#[test]
fn awq_projection_rows_are_checked_before_the_rotary_permutation() {
    let (d, mut w) = write("awq-rows", false, false);
    let dev = Device::Cpu;
    let name = "model.layers.0.self_attn.q_proj";
    w.remove(&format!("{name}.weight"));
    let (inp, out, group) = (HIDDEN, HIDDEN - 16, 32);
    let int32 = |rows: usize, cols: usize| {
        Tensor::from_vec(vec![0i32; rows * cols], (rows, cols), &dev).unwrap()
    };
    w.insert(format!("{name}.qweight"), int32(inp, out / 8));
    w.insert(format!("{name}.qzeros"), int32(inp / group, out / 8));
    w.insert(
        format!("{name}.scales"),
        Tensor::ones((inp / group, out), DType::F16, &dev).unwrap(),
    );
    candle_core::safetensors::save(&w, d.join("model.safetensors")).unwrap();
    format(
        Llama::from_safetensors(&d, &Device::Cpu),
        &format!("tensor {name}.qweight holds a [{out}, {inp}] matrix"),
    );
    std::fs::remove_dir_all(&d).ok();
}

/// `token_type` shorter than the vocabulary used to be zipped away silently (the
/// special tokens past its end were never registered).
#[test]
fn gguf_tokenizer_arrays_must_agree() {
    use gguf_file::Value::*;
    let d = dir("gguf-tokenizer");
    let p = d.join("t.gguf");
    let tokens = |n: usize| Array((0..n).map(|i| String(format!("t{i}"))).collect());
    let mut m: Meta = vec![
        ("tokenizer.ggml.model".into(), String("gpt2".into())),
        ("tokenizer.ggml.tokens".into(), tokens(3)),
        ("tokenizer.ggml.merges".into(), Array(vec![])),
        ("tokenizer.ggml.token_type".into(), Array(vec![I32(1); 3])),
    ];
    write_gguf(&p, &m, &[]);
    LlmTokenizer::from_gguf(&p).unwrap();
    set(&mut m, "tokenizer.ggml.token_type", Array(vec![I32(1); 2]));
    write_gguf(&p, &m, &[]);
    format(
        LlmTokenizer::from_gguf(&p).map(|_| ()),
        "tokenizer.ggml.token_type has 2 entries for 3 tokens",
    );
    std::fs::remove_dir_all(&d).ok();
}
