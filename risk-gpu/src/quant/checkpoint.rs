//! Quantized checkpoints in the Hugging Face / AutoAWQ layout: a directory with
//! `config.json` (with `quantization_config`), `model.safetensors` and `tokenizer.json`.
//! INT4 projections are stored as AutoAWQ GEMM tensors (`<name>.qweight` int32,
//! `<name>.qzeros` int32, `<name>.scales` f16); float ones as `<name>.weight` in their
//! precision. [`Llama::from_safetensors`] reads both (the INT4 tensors through
//! `llm::load::awq`), so published AutoAWQ checkpoints of Llama models load as well.
//!
//! INT8 has no AutoAWQ layout: saving a model with INT8 weights is refused (quantize INT8
//! at load with a plan instead).

use crate::llm::error::LlmError;
use crate::llm::load::interleave_perm;
use crate::llm::model::Llama;
use crate::llm::tokenizer::LlmTokenizer;
use crate::qlinear::error::QuantError;
use crate::qlinear::linear::QLinear;
use crate::qlinear::plan::{Precision, Proj};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Tensors of one projection under `name` (Q/K: `rope_heads` set, rows returned to the
/// Hugging Face rotate-half order).
fn put_proj(
    t: &mut HashMap<String, Tensor>,
    name: &str,
    w: &QLinear,
    rope_heads: Option<(usize, usize)>,
) -> Result<(), LlmError> {
    let inverse = rope_heads.map(|(h, d)| {
        let perm = interleave_perm(h, d);
        let mut inv = vec![0usize; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        inv
    });
    match w.precision() {
        Precision::RtnInt4 { .. } | Precision::AwqInt4 { .. } => {
            let q = w.as_int4().expect("int4 storage");
            let q = match &inverse {
                Some(inv) => q.permute_rows(inv),
                None => q.clone(),
            };
            let a = q.to_awq()?;
            let cpu = Device::Cpu;
            t.insert(
                format!("{name}.qweight"),
                Tensor::from_vec(a.qweight, (a.inp, a.out / 8), &cpu)?,
            );
            t.insert(
                format!("{name}.qzeros"),
                Tensor::from_vec(a.qzeros, (a.inp / a.group, a.out / 8), &cpu)?,
            );
            t.insert(
                format!("{name}.scales"),
                Tensor::from_vec(a.scales, (a.inp / a.group, a.out), &cpu)?,
            );
        }
        Precision::Int8 => {
            return Err(QuantError::Plan {
                entry: name.to_owned(),
                reason: "int8 weights have no AutoAWQ layout; quantize int8 at load with a plan"
                    .into(),
            }
            .into())
        }
        p => {
            let mut d = w.dequantize()?.to_device(&Device::Cpu)?;
            if let Some(inv) = &inverse {
                let idx: Vec<u32> = inv.iter().map(|&i| i as u32).collect();
                d = d.index_select(&Tensor::new(idx.as_slice(), &Device::Cpu)?, 0)?;
            }
            let dt = match p {
                Precision::F16 => DType::F16,
                Precision::Bf16 => DType::BF16,
                _ => DType::F32,
            };
            t.insert(format!("{name}.weight"), d.to_dtype(dt)?);
        }
    }
    Ok(())
}

/// Writes `model` (any plan without INT8) and its tokenizer (when given) as a checkpoint
/// directory that
/// [`Llama::from_safetensors`] and AutoAWQ-compatible loaders read. `config.json` records
/// the base model's identity and the plan under `"risk"`.
pub fn save(model: &Llama, tokenizer: Option<&LlmTokenizer>, dir: &Path) -> Result<(), LlmError> {
    let c = model.config();
    if model.rope_factors {
        return Err(LlmError::Format(
            "this model's rotary frequencies come from GGUF rope_freqs factors, which a Hugging Face config.json cannot express; save refused".into(),
        ));
    }
    let io = |p: &Path, e: std::io::Error| LlmError::Io {
        path: p.display().to_string(),
        message: e.to_string(),
    };
    risk_core::files::create_dir(dir, risk_core::files::FileMode::Private).map_err(|e| {
        LlmError::Io {
            path: dir.display().to_string(),
            message: e.to_string(),
        }
    })?;
    let mut t = HashMap::new();
    put_proj(&mut t, "model.embed_tokens", &model.embed, None)?;
    for (i, b) in model.blocks.iter().enumerate() {
        let n = |x: &str| format!("model.layers.{i}.{x}");
        t.insert(
            n("input_layernorm.weight"),
            b.attn_norm.to_device(&Device::Cpu)?,
        );
        t.insert(
            n("post_attention_layernorm.weight"),
            b.ffn_norm.to_device(&Device::Cpu)?,
        );
        for p in Proj::ALL {
            let rope = match p {
                Proj::Q => Some((c.heads, c.head_dim)),
                Proj::K => Some((c.kv_heads, c.head_dim)),
                _ => None,
            };
            put_proj(&mut t, &n(p.hf_name()), b.proj(p), rope)?;
        }
    }
    t.insert(
        "model.norm.weight".into(),
        model.norm.to_device(&Device::Cpu)?,
    );
    let tied = model.tied;
    if !tied {
        put_proj(&mut t, "lm_head", &model.head, None)?;
    }
    let groups: std::collections::BTreeSet<usize> = model
        .precisions()
        .iter()
        .flatten()
        .filter_map(|p| p.group())
        .collect();
    let mut cfg = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab,
        "hidden_size": c.hidden,
        "intermediate_size": c.intermediate,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_eps,
        "max_position_embeddings": c.max_positions,
        "tie_word_embeddings": tied,
        "torch_dtype": "float16",
        "risk": {"base_identity": model.base_identity(), "plan": model.plan(), "identity": model.identity()},
    });
    if let Some(r) = &c.rope_scaling {
        cfg["rope_scaling"] = serde_json::json!({
            "rope_type": "llama3",
            "factor": r.factor,
            "low_freq_factor": r.low_freq_factor,
            "high_freq_factor": r.high_freq_factor,
            "original_max_position_embeddings": r.original_max_positions,
        });
    }
    if !groups.is_empty() {
        let mut q = serde_json::json!({"quant_method": "awq", "bits": 4, "zero_point": true, "version": "gemm"});
        if groups.len() == 1 {
            q["group_size"] = serde_json::json!(groups.iter().next());
        }
        cfg["quantization_config"] = q;
    }
    let cfg_path = dir.join("config.json");
    let text = serde_json::to_string_pretty(&cfg).map_err(|e| LlmError::Format(e.to_string()))?;
    risk_core::files::write_atomic(
        &cfg_path,
        text.as_bytes(),
        risk_core::files::FileMode::Private,
    )
    .map_err(|e| LlmError::Io {
        path: cfg_path.display().to_string(),
        message: e.to_string(),
    })?;
    // Written under a temporary name (created exclusively, 0600) and renamed: a crash
    // never leaves a half file under the real name.
    let st = dir.join("model.safetensors");
    let tmp = dir.join("model.safetensors.partial");
    let _ = std::fs::remove_file(&tmp);
    risk_core::files::create_new(&tmp, risk_core::files::FileMode::Private)
        .map_err(|e| io(&tmp, e))?;
    candle_core::safetensors::save(&t, &tmp)?;
    std::fs::rename(&tmp, &st).map_err(|e| io(&st, e))?;
    if let Some(t) = tokenizer {
        t.save(&dir.join("tokenizer.json"))?;
    }
    Ok(())
}
