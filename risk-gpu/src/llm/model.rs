//! A Llama-family decoder on candle-core, written for prefill-only scoring.
//!
//! Llama (Touvron et al., 2023): token embeddings; per block RMSNorm → grouped-query
//! self-attention with rotary position embeddings → residual; RMSNorm → SwiGLU MLP →
//! residual; final RMSNorm; a linear head (tied to the embeddings when the file has no
//! separate output matrix). Weights ([`Llama`]) are separate from the per-request
//! [`KvCache`], so one model serves many requests, and a cache prefilled with a shared
//! prompt prefix can be cloned (cheaply: tensors are reference-counted) and extended with
//! each request's suffix.
//!
//! GGUF files written by llama.cpp store Q and K projections permuted for the
//! interleaved rotary convention (pairs `(2i, 2i+1)`), which is what [`rope`] applies.
//! Weights are dequantized to `f32` at load.

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor, D};
use std::path::Path;

/// Errors loading or running the model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// Reading the file failed.
    #[error("cannot read {path}: {message}")]
    Io {
        /// File.
        path: String,
        /// OS error.
        message: String,
    },
    /// A required metadata key or tensor is missing or malformed.
    #[error("model file: {0}")]
    Format(String),
    /// A tensor operation failed.
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A request the model cannot serve (empty input, past the context).
    #[error("request: {0}")]
    Request(String),
}

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
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// Context length.
    pub max_positions: usize,
}

struct Block {
    attn_norm: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    ffn_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

/// The model weights (immutable, shareable).
pub struct Llama {
    cfg: LlamaConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    norm: Tensor,
    head: Tensor,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama").field("cfg", &self.cfg).finish()
    }
}

/// Keys and values of every block for the positions seen so far (one request).
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes held (f32 keys and values).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * 4)
            .sum()
    }
}

fn md<'a>(c: &'a gguf_file::Content, k: &str) -> Result<&'a gguf_file::Value, LlmError> {
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

/// Applies interleaved rotary embeddings to `x` of shape `(heads, T, head_dim)`;
/// `cos`/`sin` have shape `(T, head_dim / 2)`.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let (h, t, d) = x.dims3()?;
    let x = x.reshape((h, t, d / 2, 2))?;
    let x0 = x.narrow(D::Minus1, 0, 1)?;
    let x1 = x.narrow(D::Minus1, 1, 1)?;
    let cos = cos.reshape((1, t, d / 2, 1))?;
    let sin = sin.reshape((1, t, d / 2, 1))?;
    let r0 = (x0.broadcast_mul(&cos)? - x1.broadcast_mul(&sin)?)?;
    let r1 = (x0.broadcast_mul(&sin)? + x1.broadcast_mul(&cos)?)?;
    Tensor::cat(&[r0, r1], D::Minus1)?.reshape((h, t, d))
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + eps)?.sqrt()?)?.broadcast_mul(w)
}

fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?;
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

fn linear(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.matmul(&w.t()?)
}

impl Llama {
    /// Loads a GGUF file (llama architecture), dequantizing every tensor to `f32`.
    pub fn from_gguf(path: impl AsRef<Path>, device: &Device) -> Result<Self, LlmError> {
        let p = path.as_ref();
        let io = |e: std::io::Error| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        };
        let mut f = std::io::BufReader::new(std::fs::File::open(p).map_err(io)?);
        let c = gguf_file::Content::read(&mut f).map_err(|e| LlmError::Format(e.to_string()))?;
        let arch = md(&c, "general.architecture")?
            .to_string()
            .map_err(|e| LlmError::Format(e.to_string()))?
            .clone();
        if arch != "llama" {
            return Err(LlmError::Format(format!(
                "architecture {arch:?} (supported: llama)"
            )));
        }
        let heads = md_u(&c, "llama.attention.head_count")?;
        let kv_heads = md_u(&c, "llama.attention.head_count_kv")?;
        let hidden = md_u(&c, "llama.embedding_length")?;
        if heads == 0 || kv_heads == 0 || hidden % heads != 0 || heads % kv_heads != 0 {
            return Err(LlmError::Format(format!(
                "inconsistent heads: hidden {hidden}, heads {heads}, kv heads {kv_heads}"
            )));
        }
        let mut tensor = |name: &str| -> Result<Tensor, LlmError> {
            let q = c
                .tensor(&mut f, name, device)
                .map_err(|e| LlmError::Format(format!("tensor {name}: {e}")))?;
            Ok(q.dequantize(device)?.to_dtype(DType::F32)?)
        };
        let embed = tensor("token_embd.weight")?;
        let (vocab, h2) = embed.dims2()?;
        if h2 != hidden {
            return Err(LlmError::Format(format!(
                "token_embd is {vocab}x{h2}, hidden size is {hidden}"
            )));
        }
        let layers = md_u(&c, "llama.block_count")?;
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            let b = |n: &str| format!("blk.{i}.{n}.weight");
            blocks.push(Block {
                attn_norm: tensor(&b("attn_norm"))?,
                q: tensor(&b("attn_q"))?,
                k: tensor(&b("attn_k"))?,
                v: tensor(&b("attn_v"))?,
                o: tensor(&b("attn_output"))?,
                ffn_norm: tensor(&b("ffn_norm"))?,
                gate: tensor(&b("ffn_gate"))?,
                up: tensor(&b("ffn_up"))?,
                down: tensor(&b("ffn_down"))?,
            });
        }
        let norm = tensor("output_norm.weight")?;
        let head = if c.tensor_infos.contains_key("output.weight") {
            tensor("output.weight")?
        } else {
            embed.clone()
        };
        let head_dim = hidden / heads;
        let rope_theta = md(&c, "llama.rope.freq_base")
            .and_then(|v| v.to_f32().map_err(|e| LlmError::Format(e.to_string())))
            .unwrap_or(10_000.0);
        let rms_eps = md(&c, "llama.attention.layer_norm_rms_epsilon")?
            .to_f32()
            .map_err(|e| LlmError::Format(e.to_string()))? as f64;
        let max_positions = md_u(&c, "llama.context_length").unwrap_or(2048);
        let intermediate = blocks
            .first()
            .map(|b| b.gate.dims2().map(|d| d.0))
            .transpose()?
            .unwrap_or(0);
        let cfg = LlamaConfig {
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            rope_theta,
            rms_eps,
            max_positions,
        };
        let (cos, sin) = rope_tables(&cfg, device)?;
        Ok(Self {
            cfg,
            embed,
            blocks,
            norm,
            head,
            cos,
            sin,
            device: device.clone(),
        })
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Runs `tokens` after what `cache` holds, extends the cache, and returns the logits
    /// of the last token (`[vocab]`).
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor, LlmError> {
        let t = tokens.len();
        if t == 0 {
            return Err(LlmError::Request("no tokens".into()));
        }
        let p0 = cache.len;
        if p0 + t > self.cfg.max_positions {
            return Err(LlmError::Request(format!(
                "{} positions exceed the context of {}",
                p0 + t,
                self.cfg.max_positions
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= self.cfg.vocab) {
            return Err(LlmError::Request(format!(
                "token id {bad} outside the vocabulary"
            )));
        }
        if cache.layers.is_empty() {
            cache.layers = vec![None; self.cfg.layers];
        }
        let c = &self.cfg;
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?; // (T, H)
        let cos = self.cos.narrow(0, p0, t)?;
        let sin = self.sin.narrow(0, p0, t)?;
        let s = p0 + t;
        // Causal mask over (T, S): query i sees keys j <= p0 + i.
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| (0..s).map(move |j| if j <= p0 + i { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mask = Tensor::from_vec(mask, (1, t, s), &self.device)?;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let group = c.heads / c.kv_heads;
        for (b, slot) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            let h = rms_norm(&x, &b.attn_norm, c.rms_eps)?;
            let q = linear(&h, &b.q)?
                .reshape((t, c.heads, c.head_dim))?
                .transpose(0, 1)?;
            let k = linear(&h, &b.k)?
                .reshape((t, c.kv_heads, c.head_dim))?
                .transpose(0, 1)?;
            let v = linear(&h, &b.v)?
                .reshape((t, c.kv_heads, c.head_dim))?
                .transpose(0, 1)?;
            let q = rope(&q.contiguous()?, &cos, &sin)?;
            let k = rope(&k.contiguous()?, &cos, &sin)?;
            let v = v.contiguous()?;
            let (k, v) = match slot.take() {
                None => (k, v),
                Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 1)?, Tensor::cat(&[&pv, &v], 1)?),
            };
            *slot = Some((k.clone(), v.clone()));
            // Grouped-query attention: each KV head serves `group` query heads.
            let expand = |z: &Tensor| -> candle_core::Result<Tensor> {
                if group == 1 {
                    return Ok(z.clone());
                }
                let (kh, sl, d) = z.dims3()?;
                z.reshape((kh, 1, sl, d))?
                    .expand((kh, group, sl, d))?
                    .contiguous()?
                    .reshape((kh * group, sl, d))
            };
            let (k, v) = (expand(&k)?, expand(&v)?);
            let att = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(&mask)?;
            let att = softmax_last(&att)?;
            let y = att
                .matmul(&v)?
                .transpose(0, 1)?
                .reshape((t, c.heads * c.head_dim))?;
            x = (x + linear(&y, &b.o)?)?;
            let h = rms_norm(&x, &b.ffn_norm, c.rms_eps)?;
            let m = (linear(&h, &b.gate)?.silu()? * linear(&h, &b.up)?)?;
            x = (x + linear(&m, &b.down)?)?;
        }
        cache.len = s;
        let last = x.narrow(0, t - 1, 1)?;
        let last = rms_norm(&last, &self.norm, c.rms_eps)?;
        Ok(linear(&last, &self.head)?.squeeze(0)?)
    }
}

fn rope_tables(c: &LlamaConfig, device: &Device) -> Result<(Tensor, Tensor), LlmError> {
    let half = c.head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / c.rope_theta.powf(2.0 * i as f32 / c.head_dim as f32))
        .collect();
    let n = c.max_positions;
    let inv = Tensor::from_vec(inv, (1, half), device)?;
    let pos = Tensor::arange(0u32, n as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((n, 1))?;
    let ang = pos.broadcast_mul(&inv)?;
    Ok((ang.cos()?, ang.sin()?))
}
