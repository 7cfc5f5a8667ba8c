//! Weights by role, checked against the config, become a [`Llama`].

use crate::llm::config::LlamaConfig;
use crate::llm::error::LlmError;
use crate::llm::model::{rope_tables, Block, Llama};
use crate::qlinear::linear::QLinear;
use candle_core::{Device, Tensor};

/// Weights by role, before checks (`head: None` = tied to the embeddings).
pub(super) struct Parts {
    pub(super) embed: Tensor,
    pub(super) blocks: Vec<Block>,
    pub(super) norm: Tensor,
    pub(super) head: Option<QLinear>,
    /// Per-frequency divisors of the rotary base frequencies (GGUF `rope_freqs.weight`).
    pub(super) rope_freq_factors: Option<Vec<f32>>,
}

fn expect_lin(name: &str, w: &QLinear, want: [usize; 2]) -> Result<(), LlmError> {
    let (o, i) = w.dims();
    if [o, i] != want {
        return Err(LlmError::Format(format!(
            "tensor {name} has shape {:?}, the config implies {want:?}",
            [o, i]
        )));
    }
    Ok(())
}

pub(super) fn expect_dims(name: &str, t: &Tensor, want: &[usize]) -> Result<(), LlmError> {
    if t.dims() != want {
        return Err(LlmError::Format(format!(
            "tensor {name} has shape {:?}, the config implies {want:?}",
            t.dims()
        )));
    }
    Ok(())
}

pub(super) fn lin(w: Tensor) -> Result<QLinear, LlmError> {
    Ok(QLinear::f32(w)?)
}

impl Llama {
    /// Checks every tensor against the config and builds the model.
    pub(super) fn assemble(
        cfg: LlamaConfig,
        parts: Parts,
        identity: String,
        device: &Device,
    ) -> Result<Self, LlmError> {
        let c = &cfg;
        if c.heads == 0
            || c.kv_heads == 0
            || !c.heads.is_multiple_of(c.kv_heads)
            || c.head_dim == 0
            || !c.head_dim.is_multiple_of(2)
            || c.layers == 0
            || c.vocab == 0
        {
            return Err(LlmError::Format(format!(
                "inconsistent config: hidden {}, heads {}, kv heads {}, head dim {}, layers {}, vocab {}",
                c.hidden, c.heads, c.kv_heads, c.head_dim, c.layers, c.vocab
            )));
        }
        if parts.blocks.len() != c.layers {
            return Err(LlmError::Format(format!(
                "{} blocks of weights, the config says {} layers",
                parts.blocks.len(),
                c.layers
            )));
        }
        expect_dims("embeddings", &parts.embed, &[c.vocab, c.hidden])?;
        expect_dims("final norm", &parts.norm, &[c.hidden])?;
        if let Some(h) = &parts.head {
            expect_lin("output head", h, [c.vocab, c.hidden])?;
        }
        let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        for (i, b) in parts.blocks.iter().enumerate() {
            let n = |x: &str| format!("layer {i} {x}");
            expect_dims(&n("attention norm"), &b.attn_norm, &[c.hidden])?;
            expect_lin(&n("q"), &b.q, [q, c.hidden])?;
            expect_lin(&n("k"), &b.k, [kv, c.hidden])?;
            expect_lin(&n("v"), &b.v, [kv, c.hidden])?;
            expect_lin(&n("o"), &b.o, [c.hidden, q])?;
            expect_dims(&n("ffn norm"), &b.ffn_norm, &[c.hidden])?;
            expect_lin(&n("gate"), &b.gate, [c.intermediate, c.hidden])?;
            expect_lin(&n("up"), &b.up, [c.intermediate, c.hidden])?;
            expect_lin(&n("down"), &b.down, [c.hidden, c.intermediate])?;
        }
        if let Some(f) = &parts.rope_freq_factors {
            if f.len() != c.head_dim / 2 || f.iter().any(|x| !x.is_finite() || *x <= 0.0) {
                return Err(LlmError::Format(format!(
                    "rope frequency factors: {} values (need {} positive)",
                    f.len(),
                    c.head_dim / 2
                )));
            }
        }
        let (cos, sin) = rope_tables(c, parts.rope_freq_factors.as_deref(), device)?;
        let tied = parts.head.is_none();
        let rope_factors = parts.rope_freq_factors.is_some();
        let embed = lin(parts.embed)?;
        let head = parts.head.unwrap_or_else(|| embed.clone());
        Ok(Self {
            cfg,
            embed,
            blocks: parts.blocks,
            norm: parts.norm,
            head,
            tied,
            cos,
            sin,
            device: device.clone(),
            base_identity: identity.clone(),
            identity,
            plan: "f32".into(),
            rope_factors,
        })
    }
}
