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
//!
//! The error type ([`LlmError`]) and the hyper-parameters ([`LlamaConfig`]) have files
//! of their own (`llm/error.rs`, `llm/config.rs`), and so has loading (GGUF, safetensors,
//! AutoAWQ: `llm/load/`).

pub use super::config::{Llama3Rope, LlamaConfig};
pub use super::error::LlmError;
pub use super::file_hash::file_hash;
use crate::qlinear::linear::QLinear;
use crate::qlinear::plan::Proj;
use candle_core::{DType, Device, Tensor, D};

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
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
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

/// Causal mask `(t, s)` for `t` queries at positions `s - t .. s`: `-inf` above the
/// diagonal.
fn causal_mask(t: usize, s: usize, device: &Device) -> candle_core::Result<Tensor> {
    let p0 = s - t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..s).map(move |j| if j <= p0 + i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Tensor::from_vec(mask, (t, s), device)
}

impl Llama {
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

pub(crate) fn rope_tables(
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
