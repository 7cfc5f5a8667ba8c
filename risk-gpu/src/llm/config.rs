//! [`LlamaConfig`], the model's hyper-parameters, as a GGUF file's metadata or a Hugging
//! Face `config.json` states them. Sizes are bounded afterwards by [`super::limits`],
//! before anything is allocated from them.

use super::error::LlmError;
use candle_core::quantized::gguf_file;

/// Hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// MLP inner size.
    pub intermediate: usize,
    /// Blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// RoPE base.
    pub rope_theta: f32,
    /// Llama-3 rotary frequency scaling, if the model uses it.
    pub rope_scaling: Option<Llama3Rope>,
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// Context length.
    pub max_positions: usize,
}

/// Llama 3.x rotary frequency scaling (`rope_scaling.rope_type = "llama3"`): wavelengths
/// shorter than `original_max_positions / high_freq_factor` keep their frequency, longer
/// than `original_max_positions / low_freq_factor` are divided by `factor`, and those in
/// between are interpolated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    /// Frequency divisor for long wavelengths.
    pub factor: f32,
    /// Low-frequency boundary factor.
    pub low_freq_factor: f32,
    /// High-frequency boundary factor.
    pub high_freq_factor: f32,
    /// Context length of pre-training.
    pub original_max_positions: usize,
}

impl LlamaConfig {
    /// Reads the hyper-parameters of a GGUF file (llama architecture) from its metadata
    /// and the shape of `token_embd.weight`.
    pub(crate) fn from_gguf(c: &gguf_file::Content) -> Result<Self, LlmError> {
        let arch = md(c, "general.architecture")?
            .to_string()
            .map_err(|e| LlmError::Format(e.to_string()))?
            .clone();
        if arch != "llama" {
            return Err(LlmError::Format(format!(
                "architecture {arch:?} (supported: llama)"
            )));
        }
        let heads = md_u(c, "llama.attention.head_count")?;
        let kv_heads = md_u(c, "llama.attention.head_count_kv")?;
        let hidden = md_u(c, "llama.embedding_length")?;
        if heads == 0 || kv_heads == 0 || hidden % heads != 0 || heads % kv_heads != 0 {
            return Err(LlmError::Format(format!(
                "inconsistent heads: hidden {hidden}, heads {heads}, kv heads {kv_heads}"
            )));
        }
        // Every size is read and bounded, and every tensor's shape checked against them,
        // before any tensor is read.
        let vocab = match c.tensor_infos.get("token_embd.weight") {
            Some(t) => t.shape.dims().first().copied().unwrap_or(0),
            None => return Err(LlmError::Format("tensor token_embd.weight missing".into())),
        };
        if let Some(v) = c.metadata.get("llama.vocab_size") {
            let stated = v.to_u64().map_err(|e| LlmError::Format(e.to_string()))?;
            if stated != vocab as u64 {
                return Err(LlmError::Format(format!(
                    "llama.vocab_size is {stated}, token_embd.weight has {vocab} rows"
                )));
            }
        }
        let layers = md_u(c, "llama.block_count")?;
        let rope_theta = md(c, "llama.rope.freq_base")
            .and_then(|v| v.to_f32().map_err(|e| LlmError::Format(e.to_string())))
            .unwrap_or(10_000.0);
        let rms_eps = md(c, "llama.attention.layer_norm_rms_epsilon")?
            .to_f32()
            .map_err(|e| LlmError::Format(e.to_string()))? as f64;
        let max_positions = md_u(c, "llama.context_length").unwrap_or(2048);
        let intermediate = md_u(c, "llama.feed_forward_length")?;
        Ok(LlamaConfig {
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim: hidden / heads,
            rope_theta,
            rope_scaling: None,
            rms_eps,
            max_positions,
        })
    }

    /// Reads a Hugging Face Llama `config.json` (`rope_scaling` of type `llama3` included).
    pub(crate) fn from_hf_json(j: &serde_json::Value) -> Result<Self, LlmError> {
        if let Some(t) = j.get("model_type").and_then(|v| v.as_str()) {
            if t != "llama" {
                return Err(LlmError::Format(format!(
                    "config.json: model_type {t:?} (supported: llama)"
                )));
            }
        }
        let hidden = need(json_usize(j, "hidden_size")?, "hidden_size")?;
        let heads = need(json_usize(j, "num_attention_heads")?, "num_attention_heads")?;
        let kv_heads = json_usize(j, "num_key_value_heads")?.unwrap_or(heads);
        if heads == 0 || hidden % heads != 0 {
            return Err(LlmError::Format(format!(
                "config.json: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
            )));
        }
        let head_dim = json_usize(j, "head_dim")?.unwrap_or(hidden / heads);
        let rope_scaling = match j.get("rope_scaling") {
            None | Some(serde_json::Value::Null) => None,
            Some(r) => {
                let kind = r
                    .get("rope_type")
                    .or_else(|| r.get("type"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("default");
                match kind {
                    "default" => None,
                    "llama3" => {
                        let f = |k: &str| -> Result<f32, LlmError> {
                            Ok(need(json_f64(r, k)?, &format!("rope_scaling.{k}"))? as f32)
                        };
                        let s = Llama3Rope {
                            factor: f("factor")?,
                            low_freq_factor: f("low_freq_factor")?,
                            high_freq_factor: f("high_freq_factor")?,
                            original_max_positions: need(
                                json_usize(r, "original_max_position_embeddings")?,
                                "rope_scaling.original_max_position_embeddings",
                            )?,
                        };
                        if !(s.factor > 0.0
                            && s.high_freq_factor > s.low_freq_factor
                            && s.low_freq_factor > 0.0)
                        {
                            return Err(LlmError::Format(format!(
                                "config.json: rope_scaling {s:?} (need factor > 0 and high_freq_factor > low_freq_factor > 0)"
                            )));
                        }
                        Some(s)
                    }
                    other => {
                        return Err(LlmError::Format(format!(
                            "config.json: rope_scaling type {other:?} (supported: default, llama3)"
                        )))
                    }
                }
            }
        };
        Ok(LlamaConfig {
            vocab: need(json_usize(j, "vocab_size")?, "vocab_size")?,
            hidden,
            intermediate: need(json_usize(j, "intermediate_size")?, "intermediate_size")?,
            layers: need(json_usize(j, "num_hidden_layers")?, "num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim,
            rope_theta: json_f64(j, "rope_theta")?.unwrap_or(10_000.0) as f32,
            rope_scaling,
            rms_eps: json_f64(j, "rms_norm_eps")?.unwrap_or(1e-6),
            max_positions: need(
                json_usize(j, "max_position_embeddings")?,
                "max_position_embeddings",
            )?,
        })
    }
}

// ===== GGUF metadata =====

pub(crate) fn md<'a>(c: &'a gguf_file::Content, k: &str) -> Result<&'a gguf_file::Value, LlmError> {
    c.metadata
        .get(k)
        .ok_or_else(|| LlmError::Format(format!("metadata key {k:?} missing")))
}

fn md_u(c: &gguf_file::Content, k: &str) -> Result<usize, LlmError> {
    let v = md(c, k)?;
    v.to_u32()
        .map(|x| x as usize)
        .or_else(|_| v.to_u64().map(|x| x as usize))
        .map_err(|e| LlmError::Format(format!("{k}: {e}")))
}

// ===== config.json values =====

fn json_usize(v: &serde_json::Value, k: &str) -> Result<Option<usize>, LlmError> {
    match v.get(k) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            LlmError::Format(format!("config.json: {k} is not a non-negative integer"))
        }),
    }
}

fn json_f64(v: &serde_json::Value, k: &str) -> Result<Option<f64>, LlmError> {
    match v.get(k) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .ok_or_else(|| LlmError::Format(format!("config.json: {k} is not a number"))),
    }
}

fn need<T>(v: Option<T>, k: &str) -> Result<T, LlmError> {
    v.ok_or_else(|| LlmError::Format(format!("config.json: {k} missing")))
}
