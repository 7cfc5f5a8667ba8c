//! [`Llama::from_safetensors`]: a Hugging Face Llama checkpoint directory, AutoAWQ INT4
//! projections included.

use super::assemble::{expect_dims, Parts};
use super::awq::{risk_record, take_awq};
use crate::llm::config::LlamaConfig;
use crate::llm::error::LlmError;
use crate::llm::file_hash::file_hash;
use crate::llm::limits;
use crate::llm::model::{Block, Llama};
use crate::qlinear::linear::QLinear;
use crate::qlinear::plan::Precision;
use candle_core::{DType, Device, Tensor};
use std::path::Path;

impl Llama {
    /// Loads a Hugging Face Llama checkpoint directory: `config.json` and every
    /// `*.safetensors` in it (one file or shards), any float dtype converted to `f32`.
    /// Q and K rows are reordered for the interleaved rotary layout (see
    /// [`hf_to_interleaved`]); `rope_scaling` of type `llama3` is applied.
    pub fn from_safetensors(dir: impl AsRef<Path>, device: &Device) -> Result<Self, LlmError> {
        let dir = dir.as_ref();
        let io = |p: &Path, e: std::io::Error| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        };
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| io(&cfg_path, e))?;
        let j: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| LlmError::Format(format!("{}: {e}", cfg_path.display())))?;
        let cfg = LlamaConfig::from_hf_json(&j)?;
        let (hidden, heads, kv_heads, head_dim) =
            (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim);
        limits::check_config(&cfg, &limits::HF_KEYS)?;
        let tied = j
            .get("tie_word_embeddings")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(LlmError::Format(format!(
                "no *.safetensors in {}",
                dir.display()
            )));
        }
        let mut all = std::collections::HashMap::new();
        let mut h: u64 = 0;
        for f in &files {
            let t = candle_core::safetensors::load(f, device)
                .map_err(|e| LlmError::Format(format!("{}: {e}", f.display())))?;
            all.extend(t);
            h = (h ^ file_hash(f).map_err(|e| io(f, e))?).rotate_left(17);
        }
        // AutoAWQ checkpoints: `quantization_config.group_size`, and `qweight` / `qzeros`
        // / `scales` instead of `weight` for quantized projections.
        let qc = j.get("quantization_config");
        if let Some(q) = qc {
            let field = |k: &str| {
                q.get(k)
                    .and_then(|v| v.as_str())
                    .map(str::to_ascii_lowercase)
            };
            let method = field("quant_method");
            let version = field("version");
            let zero_point = q
                .get("zero_point")
                .and_then(|v| v.as_bool())
                .unwrap_or(true);
            let bits = q
                .get("bits")
                .or_else(|| q.get("w_bit"))
                .and_then(|v| v.as_u64());
            if method.as_deref().is_some_and(|m| m != "awq")
                || version.as_deref().is_some_and(|v| v != "gemm")
                || !zero_point
                || bits.is_some_and(|b| b != 4)
            {
                return Err(LlmError::Format(format!(
                    "config.json: quantization_config {q} (supported: AutoAWQ, 4 bits, zero point, GEMM layout)"
                )));
            }
        }
        let group_hint = qc
            .and_then(|q| q.get("group_size").or_else(|| q.get("q_group_size")))
            .and_then(|v| v.as_u64())
            .map(|g| g as usize);
        let take = |all: &mut std::collections::HashMap<String, Tensor>,
                    name: &str|
         -> Result<Tensor, LlmError> {
            all.remove(name)
                .ok_or_else(|| LlmError::Format(format!("tensor {name} missing")))?
                .to_dtype(DType::F32)
                .map_err(LlmError::from)
        };
        // A projection (`rope`: Q/K heads whose rows go to the interleaved layout).
        let proj = |all: &mut std::collections::HashMap<String, Tensor>,
                    name: &str,
                    rope: Option<usize>|
         -> Result<QLinear, LlmError> {
            if let Some(w) = take_awq(all, name, group_hint)? {
                let w = match rope {
                    Some(h) => {
                        // The permutation indexes rows: the shape first.
                        if [w.out, w.inp] != [h * head_dim, hidden] {
                            return Err(LlmError::Format(format!(
                                "tensor {name}.qweight holds a [{}, {}] matrix, the config implies {:?}",
                                w.out,
                                w.inp,
                                [h * head_dim, hidden]
                            )));
                        }
                        w.permute_rows(&interleave_perm(h, head_dim))
                    }
                    None => w,
                };
                let p = Precision::AwqInt4 { group: w.group };
                return Ok(QLinear::int4(w, p, device)?);
            }
            let n = format!("{name}.weight");
            // Half-precision weights stay half precision (dequantized tile by tile).
            let stored = match all.get(&n).map(|t| t.dtype()) {
                Some(DType::F16) => Precision::F16,
                Some(DType::BF16) => Precision::Bf16,
                _ => Precision::F32,
            };
            let t = take(all, &n)?;
            let t = match rope {
                Some(h) => {
                    expect_dims(&n, &t, &[h * head_dim, hidden])?;
                    hf_to_interleaved(&t, h, head_dim)?
                }
                None => t,
            };
            Ok(QLinear::quantize(&n, &t, stored)?)
        };
        let embed = take(&mut all, "model.embed_tokens.weight")?;
        let mut blocks = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let n = |x: &str| format!("model.layers.{i}.{x}");
            let a = &mut all;
            blocks.push(Block {
                attn_norm: take(a, &n("input_layernorm.weight"))?,
                q: proj(a, &n("self_attn.q_proj"), Some(heads))?,
                k: proj(a, &n("self_attn.k_proj"), Some(kv_heads))?,
                v: proj(a, &n("self_attn.v_proj"), None)?,
                o: proj(a, &n("self_attn.o_proj"), None)?,
                ffn_norm: take(a, &n("post_attention_layernorm.weight"))?,
                gate: proj(a, &n("mlp.gate_proj"), None)?,
                up: proj(a, &n("mlp.up_proj"), None)?,
                down: proj(a, &n("mlp.down_proj"), None)?,
                awq: [None; 7],
            });
        }
        let norm = take(&mut all, "model.norm.weight")?;
        let head = if !tied
            && (all.contains_key("lm_head.weight") || all.contains_key("lm_head.qweight"))
        {
            Some(proj(&mut all, "lm_head", None)?)
        } else {
            None
        };
        let name = j
            .get("_name_or_path")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                dir.file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let parts = Parts {
            embed,
            blocks,
            norm,
            head,
            rope_freq_factors: None,
        };
        let mut m = Self::assemble(cfg, parts, format!("{name} safetensors:{h:016x}"), device)?;
        if let Some((base, plan)) = risk_record(&j) {
            m.base_identity = base;
            m.plan = plan;
        }
        Ok(m)
    }
}

/// Reorders the rows of a Hugging Face Q or K projection (rotate-half RoPE: dimension
/// `i` pairs with `i + d/2`) into the interleaved layout this forward rotates (pairs
/// `(2i, 2i+1)`), per head. Attention scores are unchanged: Q and K get the same order.
/// The same reordering as a row permutation: row `i` of the interleaved matrix is row
/// `perm[i]` of the Hugging Face one.
pub(crate) fn interleave_perm(heads: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..heads * head_dim)
        .map(|r| {
            let (h, w) = (r / head_dim, r % head_dim);
            h * head_dim + (w % 2) * half + w / 2
        })
        .collect()
}

fn hf_to_interleaved(w: &Tensor, heads: usize, head_dim: usize) -> candle_core::Result<Tensor> {
    let (_, cols) = w.dims2()?;
    w.reshape((heads, 2, head_dim / 2, cols))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((heads * head_dim, cols))
}
