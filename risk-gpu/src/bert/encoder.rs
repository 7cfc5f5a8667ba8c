//! The BERT encoder forward on candle-core (post-LayerNorm, absolute positions, exact
//! GELU), written here rather than taken from candle-transformers so that (a) every
//! linear layer is a [`QLinear`] and can be stored INT8 (the quant module of [5]),
//! (b) query, key and value are one fused matrix (one GEMM instead of three), and
//! (c) the caller can stop between layers when its deadline passes.

use super::config::BertConfig;
use super::BertError;
use crate::qlinear::linear::QLinear;
use crate::qlinear::plan::Precision;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

fn terr(e: candle_core::Error) -> BertError {
    BertError::Tensor(e.to_string())
}

#[derive(Debug)]
struct Norm {
    w: Tensor,
    b: Tensor,
}

#[derive(Debug)]
struct Dense {
    w: QLinear,
    b: Tensor,
}

impl Dense {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.w.forward(x)?.broadcast_add(&self.b)
    }
}

#[derive(Debug)]
struct Layer {
    qkv: Dense,
    out: Dense,
    norm1: Norm,
    inter: Dense,
    down: Dense,
    norm2: Norm,
}

/// A loaded BERT encoder.
#[derive(Debug)]
pub struct BertEncoder {
    config: BertConfig,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    emb_norm: Norm,
    layers: Vec<Layer>,
    precision: Precision,
    device: Device,
}

/// Returned by the between-layers check to stop a forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop;

struct Weights {
    map: HashMap<String, Tensor>,
    prefix: &'static str,
    path: std::path::PathBuf,
}

impl Weights {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor, BertError> {
        let key = format!("{}{name}", self.prefix);
        let t = self
            .map
            .get(&key)
            .or_else(|| {
                // Old checkpoints call LayerNorm parameters gamma / beta.
                let alt = key
                    .strip_suffix(".weight")
                    .map(|k| format!("{k}.gamma"))
                    .or_else(|| key.strip_suffix(".bias").map(|k| format!("{k}.beta")))?;
                self.map.get(&alt)
            })
            .ok_or_else(|| BertError::Weights {
                path: self.path.clone(),
                message: format!("tensor {key} missing"),
            })?;
        if t.dims() != shape {
            return Err(BertError::Weights {
                path: self.path.clone(),
                message: format!("tensor {key} has shape {:?}, expected {shape:?}", t.dims()),
            });
        }
        t.to_dtype(DType::F32).map_err(terr)
    }

    fn norm(&self, name: &str, h: usize) -> Result<Norm, BertError> {
        Ok(Norm {
            w: self.get(&format!("{name}.weight"), &[h])?,
            b: self.get(&format!("{name}.bias"), &[h])?,
        })
    }

    fn dense(&self, name: &str, out: usize, inp: usize, p: Precision) -> Result<Dense, BertError> {
        let w = self.get(&format!("{name}.weight"), &[out, inp])?;
        Ok(Dense {
            w: QLinear::quantize(name, &w, p)?.with_dynamic_int8(),
            b: self.get(&format!("{name}.bias"), &[out])?,
        })
    }
}

impl BertEncoder {
    /// Loads `model.safetensors` for `config`, storing every linear layer at
    /// `precision` (`F32` or `Int8`; embeddings and norms stay f32). INT8 layers on the
    /// CPU are dynamic: activations are quantized per token and multiplied in integers
    /// ([`crate::quant::int8_gemm`]). The file's size is checked against the
    /// configuration before it is read.
    pub fn load(
        config: BertConfig,
        weights: &Path,
        precision: Precision,
        device: &Device,
    ) -> Result<Self, BertError> {
        let werr = |m: String| BertError::Weights {
            path: weights.to_path_buf(),
            message: m,
        };
        if !matches!(precision, Precision::F32 | Precision::Int8) {
            return Err(werr(format!(
                "precision {precision} is not offered for BERT (f32, int8)"
            )));
        }
        let len = std::fs::metadata(weights)
            .map_err(|e| werr(e.to_string()))?
            .len();
        // f32 parameters plus a pooler and the header; f16 files are half of it.
        let max =
            (config.parameters() as u64 + 2 * (config.hidden_size as u64).pow(2)) * 4 + (16 << 20);
        if len > max {
            return Err(werr(format!(
                "{len} bytes is more than the configuration's {} parameters can take",
                config.parameters()
            )));
        }
        let map =
            candle_core::safetensors::load(weights, device).map_err(|e| werr(e.to_string()))?;
        let prefix = if map.contains_key("embeddings.word_embeddings.weight") {
            ""
        } else {
            "bert."
        };
        let w = Weights {
            map,
            prefix,
            path: weights.to_path_buf(),
        };
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let att = format!("{p}.attention.self");
            let q = w.get(&format!("{att}.query.weight"), &[h, h])?;
            let k = w.get(&format!("{att}.key.weight"), &[h, h])?;
            let v = w.get(&format!("{att}.value.weight"), &[h, h])?;
            let qkv = Tensor::cat(&[&q, &k, &v], 0).map_err(terr)?;
            let qb = w.get(&format!("{att}.query.bias"), &[h])?;
            let kb = w.get(&format!("{att}.key.bias"), &[h])?;
            let vb = w.get(&format!("{att}.value.bias"), &[h])?;
            let qkv_b = Tensor::cat(&[&qb, &kb, &vb], 0).map_err(terr)?;
            layers.push(Layer {
                qkv: Dense {
                    w: QLinear::quantize(&format!("{att}.qkv"), &qkv, precision)?
                        .with_dynamic_int8(),
                    b: qkv_b,
                },
                out: w.dense(&format!("{p}.attention.output.dense"), h, h, precision)?,
                norm1: w.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                inter: w.dense(&format!("{p}.intermediate.dense"), i, h, precision)?,
                down: w.dense(&format!("{p}.output.dense"), h, i, precision)?,
                norm2: w.norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        Ok(Self {
            word: w.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position: w.get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type: w.get(
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?,
            emb_norm: w.norm("embeddings.LayerNorm", h)?,
            layers,
            config,
            precision,
            device: device.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Precision of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The last hidden states `[batch, seq, hidden]` for token ids `[batch, seq]`
    /// (`u32`), attention mask `[batch, seq]` (`f32`, 1 = token, 0 = padding) and token
    /// types (`None`: all 0). `check(layer)` runs before each layer; `Err(Stop)` ends
    /// the forward with [`BertError::Stopped`].
    pub fn forward(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        token_types: Option<&Tensor>,
        check: &mut dyn FnMut(usize) -> Result<(), Stop>,
    ) -> Result<Tensor, BertError> {
        let (b, t) = ids.dims2().map_err(terr)?;
        let c = &self.config;
        if t == 0 || t > c.max_position_embeddings {
            return Err(BertError::Input(format!(
                "sequence of {t} tokens (1..={})",
                c.max_position_embeddings
            )));
        }
        self.forward_inner(ids, mask, token_types, b, t, check)
    }

    fn forward_inner(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        token_types: Option<&Tensor>,
        b: usize,
        t: usize,
        check: &mut dyn FnMut(usize) -> Result<(), Stop>,
    ) -> Result<Tensor, BertError> {
        let c = &self.config;
        let (h, heads, hd) = (c.hidden_size, c.num_attention_heads, c.head_dim());
        let eps = c.layer_norm_eps as f32;
        let flat = ids.flatten_all().map_err(terr)?;
        let max_id = flat
            .max(0)
            .and_then(|m| m.to_scalar::<u32>())
            .map_err(terr)?;
        if max_id as usize >= c.vocab_size {
            return Err(BertError::Input(format!(
                "token id {max_id} outside the vocabulary of {}",
                c.vocab_size
            )));
        }
        let mut run = || -> candle_core::Result<Result<Tensor, usize>> {
            let words = self.word.index_select(&flat, 0)?.reshape((b, t, h))?;
            let pos = self.position.narrow(0, 0, t)?;
            let types = match token_types {
                Some(tt) => self
                    .token_type
                    .index_select(&tt.flatten_all()?, 0)?
                    .reshape((b, t, h))?,
                None => self.token_type.narrow(0, 0, 1)?.broadcast_as((b, t, h))?,
            };
            let x = words.broadcast_add(&pos)?.add(&types)?;
            let mut x = candle_nn::ops::layer_norm(&x, &self.emb_norm.w, &self.emb_norm.b, eps)?
                .reshape((b * t, h))?;
            // Additive mask [b, 1, 1, t]: 0 for tokens, -10000 for padding (exp
            // underflows to 0 in f32, and a row always has its [CLS] token).
            let add_mask =
                ((mask.to_dtype(DType::F32)? - 1.0)? * 10_000.0)?.reshape((b, 1, 1, t))?;
            let scale = 1.0 / (hd as f64).sqrt();
            for (i, l) in self.layers.iter().enumerate() {
                if check(i).is_err() {
                    return Ok(Err(i));
                }
                let qkv = l.qkv.forward(&x)?.reshape((b, t, 3, heads, hd))?;
                let part = |j: usize| -> candle_core::Result<Tensor> {
                    qkv.narrow(2, j, 1)?
                        .squeeze(2)?
                        .transpose(1, 2)?
                        .contiguous()
                };
                let (q, k, v) = (part(0)?, part(1)?, part(2)?);
                let att = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&add_mask)?;
                let att = candle_nn::ops::softmax_last_dim(&att)?;
                let ctx = att
                    .matmul(&v)?
                    .transpose(1, 2)?
                    .contiguous()?
                    .reshape((b * t, h))?;
                let a = l.out.forward(&ctx)?.add(&x)?;
                let a = candle_nn::ops::layer_norm(&a, &l.norm1.w, &l.norm1.b, eps)?;
                let f = l.inter.forward(&a)?.gelu_erf()?;
                let f = l.down.forward(&f)?.add(&a)?;
                x = candle_nn::ops::layer_norm(&f, &l.norm2.w, &l.norm2.b, eps)?;
            }
            Ok(Ok(x.reshape((b, t, h))?))
        };
        match run().map_err(terr)? {
            Ok(x) => Ok(x),
            Err(layer) => Err(BertError::Stopped { layer }),
        }
    }
}
