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

use crate::quant::{Proj, QLinear, QuantError};
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
    /// Quantized weights or a precision plan were refused.
    #[error("quantization: {0}")]
    Quant(#[from] QuantError),
    /// The forward stopped between layers because its deadline passed.
    #[error("cancelled: the deadline passed after {layers} of the model's layers")]
    Cancelled {
        /// Layers run before stopping.
        layers: usize,
    },
    /// A size the file states is beyond this loader's bounds ([`super::limits`]);
    /// refused before anything is allocated from it.
    #[error("model file: {key} = {value} is more than the limit of {max}")]
    TooLarge {
        /// What the file states (its key).
        key: String,
        /// The value stated.
        value: u64,
        /// The bound.
        max: u64,
    },
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

/// One decoder block's weights.
#[derive(Clone)]
pub(crate) struct Block {
    pub(crate) attn_norm: Tensor,
    pub(crate) q: QLinear,
    pub(crate) k: QLinear,
    pub(crate) v: QLinear,
    pub(crate) o: QLinear,
    pub(crate) ffn_norm: Tensor,
    pub(crate) gate: QLinear,
    pub(crate) up: QLinear,
    pub(crate) down: QLinear,
    /// Per projection ([`Proj::ALL`] order): the INT4 group size AWQ scaled it for.
    pub(crate) awq: [Option<usize>; 7],
}

impl Block {
    /// The projection `p`.
    pub(crate) fn proj(&self, p: Proj) -> &QLinear {
        match p {
            Proj::Q => &self.q,
            Proj::K => &self.k,
            Proj::V => &self.v,
            Proj::O => &self.o,
            Proj::Gate => &self.gate,
            Proj::Up => &self.up,
            Proj::Down => &self.down,
        }
    }

    /// The projection `p`, mutably.
    pub(crate) fn proj_mut(&mut self, p: Proj) -> &mut QLinear {
        match p {
            Proj::Q => &mut self.q,
            Proj::K => &mut self.k,
            Proj::V => &mut self.v,
            Proj::O => &mut self.o,
            Proj::Gate => &mut self.gate,
            Proj::Up => &mut self.up,
            Proj::Down => &mut self.down,
        }
    }
}

/// Which positions [`Llama::run`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Positions {
    /// The last token of each sequence.
    Last,
    /// Every token.
    All,
}

/// Observer of the inputs of a block's linear layers during a forward (calibration):
/// called with `(layer, Q, h)` for the input of q/k/v, `(layer, O, y)` for o,
/// `(layer, Gate, h)` for gate/up and `(layer, Down, m)` for down.
pub(crate) type Taps<'a> = &'a mut dyn FnMut(usize, Proj, &Tensor) -> Result<(), LlmError>;

/// The model weights (immutable, shareable).
#[derive(Clone)]
pub struct Llama {
    pub(crate) cfg: LlamaConfig,
    pub(crate) embed: QLinear,
    pub(crate) blocks: Vec<Block>,
    pub(crate) norm: Tensor,
    pub(crate) head: QLinear,
    /// Whether the head is the embedding matrix.
    pub(crate) tied: bool,
    cos: Tensor,
    sin: Tensor,
    pub(crate) device: Device,
    pub(crate) identity: String,
    /// Identity of the unquantized weights this model derives from.
    pub(crate) base_identity: String,
    /// Canonical precision plan (`f32` when unquantized).
    pub(crate) plan: String,
    /// Whether rotary frequencies carry GGUF `rope_freqs` factors (not expressible in a
    /// Hugging Face config.json).
    pub(crate) rope_factors: bool,
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

/// Applies interleaved rotary embeddings (pairs `(2i, 2i+1)`) to `x` of shape
/// `(heads, T, head_dim)`; `cos`/`sin` have shape `(T, head_dim / 2)`. This is the
/// reference the fused kernel in the forward is tested against.
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

fn lin(w: Tensor) -> Result<QLinear, LlmError> {
    Ok(QLinear::f32(w)?)
}

/// Causal mask `(t, s)` for `t` queries at positions `s - t .. s`: `-inf` above the
/// diagonal.
fn causal_mask(t: usize, s: usize, device: &Device) -> candle_core::Result<Tensor> {
    let p0 = s - t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..s).map(move |j| if j <= p0 + i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Tensor::from_vec(mask, (t, s), device)
}

/// Weights by role, before checks (`head: None` = tied to the embeddings).
struct Parts {
    embed: Tensor,
    blocks: Vec<Block>,
    norm: Tensor,
    head: Option<QLinear>,
    /// Per-frequency divisors of the rotary base frequencies (GGUF `rope_freqs.weight`).
    rope_freq_factors: Option<Vec<f32>>,
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

fn expect_dims(name: &str, t: &Tensor, want: &[usize]) -> Result<(), LlmError> {
    if t.dims() != want {
        return Err(LlmError::Format(format!(
            "tensor {name} has shape {:?}, the config implies {want:?}",
            t.dims()
        )));
    }
    Ok(())
}

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

impl Llama {
    /// Checks every tensor against the config and builds the model.
    fn assemble(
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

    /// Loads a GGUF file (llama architecture), dequantizing every tensor to `f32`.
    pub fn from_gguf(path: impl AsRef<Path>, device: &Device) -> Result<Self, LlmError> {
        let p = path.as_ref();
        let io = |e: std::io::Error| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        };
        super::limits::check_gguf_file(p)?;
        let mut f = std::io::BufReader::new(std::fs::File::open(p).map_err(io)?);
        let c = gguf_file::Content::read(&mut f)
            .map_err(|e| LlmError::Format(format!("{}: {e}", p.display())))?;
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
        let layers = md_u(&c, "llama.block_count")?;
        let rope_theta = md(&c, "llama.rope.freq_base")
            .and_then(|v| v.to_f32().map_err(|e| LlmError::Format(e.to_string())))
            .unwrap_or(10_000.0);
        let rms_eps = md(&c, "llama.attention.layer_norm_rms_epsilon")?
            .to_f32()
            .map_err(|e| LlmError::Format(e.to_string()))? as f64;
        let max_positions = md_u(&c, "llama.context_length").unwrap_or(2048);
        let intermediate = md_u(&c, "llama.feed_forward_length")?;
        let cfg = LlamaConfig {
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
        };
        super::limits::check_config(&cfg, &super::limits::GGUF_KEYS)?;
        super::limits::check_gguf_shapes(&c, &cfg)?;
        let mut tensor = |name: &str| -> Result<Tensor, LlmError> {
            let q = c
                .tensor(&mut f, name, device)
                .map_err(|e| LlmError::Format(format!("tensor {name}: {e}")))?;
            Ok(q.dequantize(device)?.to_dtype(DType::F32)?)
        };
        let embed = tensor("token_embd.weight")?;
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
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
        if let Some(t) = j.get("model_type").and_then(|v| v.as_str()) {
            if t != "llama" {
                return Err(LlmError::Format(format!(
                    "config.json: model_type {t:?} (supported: llama)"
                )));
            }
        }
        let hidden = need(json_usize(&j, "hidden_size")?, "hidden_size")?;
        let heads = need(
            json_usize(&j, "num_attention_heads")?,
            "num_attention_heads",
        )?;
        let kv_heads = json_usize(&j, "num_key_value_heads")?.unwrap_or(heads);
        if heads == 0 || hidden % heads != 0 {
            return Err(LlmError::Format(format!(
                "config.json: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
            )));
        }
        let head_dim = json_usize(&j, "head_dim")?.unwrap_or(hidden / heads);
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
        let cfg = LlamaConfig {
            vocab: need(json_usize(&j, "vocab_size")?, "vocab_size")?,
            hidden,
            intermediate: need(json_usize(&j, "intermediate_size")?, "intermediate_size")?,
            layers: need(json_usize(&j, "num_hidden_layers")?, "num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim,
            rope_theta: json_f64(&j, "rope_theta")?.unwrap_or(10_000.0) as f32,
            rope_scaling,
            rms_eps: json_f64(&j, "rms_norm_eps")?.unwrap_or(1e-6),
            max_positions: need(
                json_usize(&j, "max_position_embeddings")?,
                "max_position_embeddings",
            )?,
        };
        super::limits::check_config(&cfg, &super::limits::HF_KEYS)?;
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
            if let Some(w) = crate::quant::checkpoint::take_awq(all, name, group_hint)? {
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
                let p = crate::quant::Precision::AwqInt4 { group: w.group };
                return Ok(QLinear::int4(w, p, device)?);
            }
            let n = format!("{name}.weight");
            // Half-precision weights stay half precision (dequantized tile by tile).
            let stored = match all.get(&n).map(|t| t.dtype()) {
                Some(DType::F16) => crate::quant::Precision::F16,
                Some(DType::BF16) => crate::quant::Precision::Bf16,
                _ => crate::quant::Precision::F32,
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
        if let Some((base, plan)) = crate::quant::checkpoint::risk_record(&j) {
            m.base_identity = base;
            m.plan = plan;
        }
        Ok(m)
    }

    /// Model name plus a 64-bit hash of the weights file's bytes: part of every prefix
    /// cache key, so changed weights never reuse a cached state.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Identity of the unquantized weights this model was derived from (equal to
    /// [`identity`](Self::identity) for a model loaded as is). A probe fitted on the
    /// base model is accepted by its quantized variants; their agreement is what the
    /// quantization report measures.
    pub fn base_identity(&self) -> &str {
        &self.base_identity
    }

    /// Canonical precision plan of the weights (`f32` when unquantized).
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// Bytes of the weight matrices: `(blocks, embeddings + head)` (a tied head counts
    /// once).
    pub fn weight_bytes(&self) -> (usize, usize) {
        let blocks = self
            .blocks
            .iter()
            .map(|b| Proj::ALL.iter().map(|&p| b.proj(p).bytes()).sum::<usize>())
            .sum();
        let head = if self.tied && self.head.precision() == self.embed.precision() {
            0
        } else {
            self.head.bytes()
        };
        (blocks, self.embed.bytes() + head)
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Runs `tokens` after what `cache` holds, extends the cache, and returns the logits
    /// of the last token (`[vocab]`).
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor, LlmError> {
        let h = self.forward_hidden(tokens, cache)?;
        Ok(self.head.forward(&h.unsqueeze(0)?)?.squeeze(0)?)
    }

    /// Like [`forward`](Self::forward) but returns the last token's final (normalised)
    /// hidden state (`[hidden]`) instead of the logits.
    pub fn forward_hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor, LlmError> {
        let mut layers = Vec::with_capacity(self.cfg.layers);
        let h = self.run(
            tokens,
            &[tokens.len()],
            cache,
            Some(&mut layers),
            Positions::Last,
            None,
        )?;
        cache.layers = layers.into_iter().map(Some).collect();
        cache.len += tokens.len();
        Ok(h.squeeze(0)?)
    }

    /// Scores several sequences, each continuing the shared `prefix`, in one packed
    /// forward: the linear layers run once over all their tokens (no padding), attention
    /// runs per sequence against the prefix's keys and its own, under a causal mask.
    /// `prefix` is not modified. Returns the final hidden state of each sequence's last
    /// token (`[seqs, hidden]`).
    pub fn forward_packed(&self, prefix: &KvCache, seqs: &[&[u32]]) -> Result<Tensor, LlmError> {
        if seqs.is_empty() {
            return Err(LlmError::Request("no sequences".into()));
        }
        self.forward_packed_until(prefix, seqs, None)
    }

    /// [`forward_packed`](Self::forward_packed) that stops with [`LlmError::Cancelled`]
    /// between layers once `until` has passed (the deep tier's budget), so a late batch
    /// frees its worker instead of running to the end unread.
    pub fn forward_packed_until(
        &self,
        prefix: &KvCache,
        seqs: &[&[u32]],
        until: Option<std::time::Instant>,
    ) -> Result<Tensor, LlmError> {
        if seqs.is_empty() {
            return Err(LlmError::Request("no sequences".into()));
        }
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let tokens: Vec<u32> = seqs.concat();
        self.run_until(&tokens, &lens, prefix, None, Positions::Last, None, until)
    }

    /// Logits at every position of `tokens` (`[tokens, vocab]`), from an empty cache:
    /// for perplexity and next-token distributions.
    pub fn forward_all_logits(&self, tokens: &[u32]) -> Result<Tensor, LlmError> {
        let h = self.run(
            tokens,
            &[tokens.len()],
            &KvCache::default(),
            None,
            Positions::All,
            None,
        )?;
        Ok(self.head.forward(&h)?)
    }

    /// A packed forward of several sequences from an empty cache that reports every
    /// block's linear-layer inputs to `taps` (AWQ calibration).
    pub(crate) fn forward_taps(&self, seqs: &[&[u32]], taps: Taps<'_>) -> Result<(), LlmError> {
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let tokens: Vec<u32> = seqs.concat();
        self.run(
            &tokens,
            &lens,
            &KvCache::default(),
            None,
            Positions::Last,
            Some(taps),
        )?;
        Ok(())
    }

    /// Logits of `ids` only (`[rows, ids]`) from final hidden states `[rows, hidden]`:
    /// the head's rows for those tokens, not the whole vocabulary.
    pub fn logits_of(&self, hidden: &Tensor, ids: &[u32]) -> Result<Tensor, LlmError> {
        if let Some(&bad) = ids.iter().find(|&&x| x as usize >= self.cfg.vocab) {
            return Err(LlmError::Request(format!(
                "token id {bad} outside the vocabulary"
            )));
        }
        let rows = self.head.rows(ids)?;
        Ok(hidden.matmul(&rows.t()?)?)
    }

    /// The forward core. `tokens` holds `lens.len()` sequences back to back, each
    /// continuing `prefix` at position `prefix.len()`. When `extend` is given (one
    /// sequence only), it receives each layer's keys and values for prefix + sequence.
    /// Returns the normalised final hidden state of each sequence's last token.
    fn run(
        &self,
        tokens: &[u32],
        lens: &[usize],
        prefix: &KvCache,
        extend: Option<&mut Vec<(Tensor, Tensor)>>,
        positions: Positions,
        taps: Option<Taps<'_>>,
    ) -> Result<Tensor, LlmError> {
        self.run_until(tokens, lens, prefix, extend, positions, taps, None)
    }

    /// [`run`](Self::run) with a deadline checked before each layer.
    #[allow(clippy::too_many_arguments)]
    fn run_until(
        &self,
        tokens: &[u32],
        lens: &[usize],
        prefix: &KvCache,
        mut extend: Option<&mut Vec<(Tensor, Tensor)>>,
        positions: Positions,
        mut taps: Option<Taps<'_>>,
        until: Option<std::time::Instant>,
    ) -> Result<Tensor, LlmError> {
        let c = &self.cfg;
        if lens.contains(&0) || tokens.is_empty() {
            return Err(LlmError::Request("no tokens".into()));
        }
        debug_assert_eq!(lens.iter().sum::<usize>(), tokens.len());
        debug_assert!(extend.is_none() || lens.len() == 1);
        let p0 = prefix.len;
        let longest = lens.iter().copied().max().unwrap_or(0);
        if p0 + longest > c.max_positions {
            return Err(LlmError::Request(format!(
                "{} positions exceed the context of {}",
                p0 + longest,
                c.max_positions
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= c.vocab) {
            return Err(LlmError::Request(format!(
                "token id {bad} outside the vocabulary"
            )));
        }
        if !prefix.layers.is_empty() && prefix.layers.len() != c.layers {
            return Err(LlmError::Request(format!(
                "cache has {} layers, the model {}",
                prefix.layers.len(),
                c.layers
            )));
        }
        let n = tokens.len();
        let dev = &self.device;
        let mut x = self.embed.rows(tokens)?; // (N, H)
        let pos: Vec<u32> = lens
            .iter()
            .flat_map(|&l| (p0..p0 + l).map(|p| p as u32))
            .collect();
        let pos = Tensor::new(pos.as_slice(), dev)?;
        let cos = self.cos.index_select(&pos, 0)?.contiguous()?;
        let sin = self.sin.index_select(&pos, 0)?.contiguous()?;
        let masks = lens
            .iter()
            .map(|&l| {
                if l == 1 {
                    Ok(None)
                } else {
                    causal_mask(l, p0 + l, dev).map(Some)
                }
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let eps = c.rms_eps as f32;
        let group = c.heads / c.kv_heads;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        for (li, b) in self.blocks.iter().enumerate() {
            if until.is_some_and(|u| std::time::Instant::now() >= u) {
                return Err(LlmError::Cancelled { layers: li });
            }
            let h = candle_nn::ops::rms_norm(&x, &b.attn_norm, eps)?;
            if let Some(t) = taps.as_deref_mut() {
                t(li, Proj::Q, &h)?;
            }
            let heads = |w: &QLinear, nh: usize| -> candle_core::Result<Tensor> {
                w.forward(&h)?
                    .reshape((n, nh, c.head_dim))?
                    .transpose(0, 1)?
                    .contiguous()?
                    .unsqueeze(0)
            };
            let q =
                candle_nn::rotary_emb::rope_i(&heads(&b.q, c.heads)?, &cos, &sin)?.squeeze(0)?;
            let k =
                candle_nn::rotary_emb::rope_i(&heads(&b.k, c.kv_heads)?, &cos, &sin)?.squeeze(0)?;
            let v = heads(&b.v, c.kv_heads)?.squeeze(0)?;
            let past = prefix.layers.get(li).and_then(|l| l.as_ref());
            let mut ys = Vec::with_capacity(lens.len());
            let mut off = 0;
            for (&l, mask) in lens.iter().zip(&masks) {
                let (q, k, v) = if lens.len() == 1 {
                    (q.clone(), k.clone(), v.clone())
                } else {
                    (
                        q.narrow(1, off, l)?,
                        k.narrow(1, off, l)?,
                        v.narrow(1, off, l)?,
                    )
                };
                let (k, v) = match past {
                    None => (k, v),
                    Some((pk, pv)) => (Tensor::cat(&[pk, &k], 1)?, Tensor::cat(&[pv, &v], 1)?),
                };
                let s = k.dim(1)?;
                // Grouped-query attention without copies: query head `h` uses KV head
                // `h / group`, so the `group` query heads of a KV head are one
                // `(group·l, d)` matrix.
                let qg = q
                    .contiguous()?
                    .reshape((c.kv_heads, group * l, c.head_dim))?;
                let mut att = (qg.matmul(&k.t()?)? * scale)?;
                if let Some(m) = mask {
                    att = att
                        .reshape((c.kv_heads, group, l, s))?
                        .broadcast_add(m)?
                        .reshape((c.kv_heads, group * l, s))?;
                }
                let att = candle_nn::ops::softmax_last_dim(&att)?;
                let y = att
                    .matmul(&v)?
                    .reshape((c.heads, l, c.head_dim))?
                    .transpose(0, 1)?
                    .reshape((l, c.heads * c.head_dim))?;
                ys.push(y);
                if let Some(e) = extend.as_deref_mut() {
                    e.push((k, v));
                }
                off += l;
            }
            let y = if ys.len() == 1 {
                ys.pop().expect("one")
            } else {
                Tensor::cat(&ys, 0)?
            };
            if let Some(t) = taps.as_deref_mut() {
                t(li, Proj::O, &y)?;
            }
            x = (x + b.o.forward(&y)?)?;
            let h = candle_nn::ops::rms_norm(&x, &b.ffn_norm, eps)?;
            if let Some(t) = taps.as_deref_mut() {
                t(li, Proj::Gate, &h)?;
            }
            let m = (b.gate.forward(&h)?.silu()? * b.up.forward(&h)?)?;
            if let Some(t) = taps.as_deref_mut() {
                t(li, Proj::Down, &m)?;
            }
            x = (x + b.down.forward(&m)?)?;
        }
        if positions == Positions::All {
            return Ok(candle_nn::ops::rms_norm(&x, &self.norm, eps)?);
        }
        let mut last = Vec::with_capacity(lens.len());
        let mut end = 0u32;
        for &l in lens {
            end += l as u32;
            last.push(end - 1);
        }
        let last = x.index_select(&Tensor::new(last.as_slice(), dev)?, 0)?;
        Ok(candle_nn::ops::rms_norm(&last, &self.norm, eps)?)
    }
}

/// A 64-bit hash of a file's bytes (multiply-rotate over 8-byte words; detects any
/// change, not meant to resist a forger).
pub fn file_hash(path: &Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut h: u64 = 0x243f_6a88_85a3_08d3;
    let mut total: u64 = 0;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        let mut words = buf[..n].chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        }
        for &b in words.remainder() {
            h = (h ^ b as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29);
        }
    }
    Ok(h ^ total.wrapping_mul(0xff51_afd7_ed55_8ccd))
}

fn rope_tables(
    c: &LlamaConfig,
    freq_factors: Option<&[f32]>,
    device: &Device,
) -> Result<(Tensor, Tensor), LlmError> {
    let half = c.head_dim / 2;
    let mut inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / c.rope_theta.powf(2.0 * i as f32 / c.head_dim as f32))
        .collect();
    if let Some(s) = &c.rope_scaling {
        let old = s.original_max_positions as f32;
        let (low_wl, high_wl) = (old / s.low_freq_factor, old / s.high_freq_factor);
        for f in &mut inv {
            let wl = 2.0 * std::f32::consts::PI / *f;
            *f = if wl < high_wl {
                *f
            } else if wl > low_wl {
                *f / s.factor
            } else {
                let smooth =
                    (old / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * *f / s.factor + smooth * *f
            };
        }
    }
    if let Some(ff) = freq_factors {
        for (f, d) in inv.iter_mut().zip(ff) {
            *f /= d;
        }
    }
    let n = c.max_positions;
    let inv = Tensor::from_vec(inv, (1, half), device)?;
    let pos = Tensor::arange(0u32, n as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((n, 1))?;
    let ang = pos.broadcast_mul(&inv)?;
    Ok((ang.cos()?, ang.sin()?))
}
