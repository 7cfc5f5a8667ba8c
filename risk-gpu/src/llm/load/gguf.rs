//! [`Llama::from_gguf`]: a llama.cpp GGUF file, every tensor dequantized to `f32`.

use super::assemble::{lin, Parts};
use crate::llm::config::{md, LlamaConfig};
use crate::llm::error::LlmError;
use crate::llm::file_hash::file_hash;
use crate::llm::limits;
use crate::llm::model::{Block, Llama};
use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use std::path::Path;

impl Llama {
    /// Loads a GGUF file (llama architecture), dequantizing every tensor to `f32`.
    pub fn from_gguf(path: impl AsRef<Path>, device: &Device) -> Result<Self, LlmError> {
        let p = path.as_ref();
        let io = |e: std::io::Error| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        };
        limits::check_gguf_file(p)?;
        let mut f = std::io::BufReader::new(std::fs::File::open(p).map_err(io)?);
        let c = gguf_file::Content::read(&mut f)
            .map_err(|e| LlmError::Format(format!("{}: {e}", p.display())))?;
        let cfg = LlamaConfig::from_gguf(&c)?;
        limits::check_config(&cfg, &limits::GGUF_KEYS)?;
        limits::check_gguf_shapes(&c, &cfg)?;
        let mut tensor = |name: &str| -> Result<Tensor, LlmError> {
            let q = c
                .tensor(&mut f, name, device)
                .map_err(|e| LlmError::Format(format!("tensor {name}: {e}")))?;
            Ok(q.dequantize(device)?.to_dtype(DType::F32)?)
        };
        let embed = tensor("token_embd.weight")?;
        let mut blocks = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let b = |n: &str| format!("blk.{i}.{n}.weight");
            blocks.push(Block {
                attn_norm: tensor(&b("attn_norm"))?,
                q: lin(tensor(&b("attn_q"))?)?,
                k: lin(tensor(&b("attn_k"))?)?,
                v: lin(tensor(&b("attn_v"))?)?,
                o: lin(tensor(&b("attn_output"))?)?,
                ffn_norm: tensor(&b("ffn_norm"))?,
                gate: lin(tensor(&b("ffn_gate"))?)?,
                up: lin(tensor(&b("ffn_up"))?)?,
                down: lin(tensor(&b("ffn_down"))?)?,
                awq: [None; 7],
            });
        }
        let norm = tensor("output_norm.weight")?;
        let head = if c.tensor_infos.contains_key("output.weight") {
            Some(lin(tensor("output.weight")?)?)
        } else {
            None
        };
        let rope_freq_factors = if c.tensor_infos.contains_key("rope_freqs.weight") {
            Some(
                tensor("rope_freqs.weight")?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            )
        } else {
            None
        };
        let name = md(&c, "general.name")
            .ok()
            .and_then(|v| v.to_string().ok().cloned())
            .unwrap_or_else(|| {
                p.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let identity = format!("{name} gguf:{:016x}", file_hash(p).map_err(io)?);
        let parts = Parts {
            embed,
            blocks,
            norm,
            head,
            rope_freq_factors,
        };
        Self::assemble(cfg, parts, identity, device)
    }
}
