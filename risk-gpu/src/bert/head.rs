//! The classification head over a pooled text embedding: logistic (`w·e + b`) or a
//! small MLP (`w2·relu(W1·e + b1) + b2`), then a sigmoid. Stored as safetensors
//! (`head.w`, `head.b` or `head.w1`, `head.b1`, `head.w2`, `head.b2`) with a JSON sidecar
//! (same path, `.json`) naming the encoder it was trained on, its pooling and its token
//! budget; a head is refused over any other encoder.
//!
//! The head is a few hundred multiply-adds, so it runs in plain Rust after the encoder.

use super::config::EncoderId;
use super::{BertError, Pooling};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The sidecar's `format` value.
pub const HEAD_FORMAT: &str = "risk-text-head/1";

/// What the sidecar says about a head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadMeta {
    /// Always [`HEAD_FORMAT`].
    pub format: String,
    /// The encoder the head was trained on.
    pub encoder: EncoderId,
    /// Pooling of the last hidden states.
    pub pooling: Pooling,
    /// Whether the pooled vector is L2-normalised before the head.
    pub normalize: bool,
    /// Token budget the training texts were truncated to.
    pub max_tokens: usize,
    /// Free-form note on how it was trained (data, metric).
    #[serde(default)]
    pub trained: String,
}

/// The weights.
#[derive(Debug, Clone, PartialEq)]
pub enum HeadWeights {
    /// `sigmoid(w·e + b)`.
    Logistic {
        /// `[hidden]`.
        w: Vec<f32>,
        /// Bias.
        b: f32,
    },
    /// `sigmoid(w2·relu(W1·e + b1) + b2)`.
    Mlp {
        /// `[units, hidden]`, row-major.
        w1: Vec<f32>,
        /// `[units]`.
        b1: Vec<f32>,
        /// `[units]`.
        w2: Vec<f32>,
        /// Bias.
        b2: f32,
    },
}

/// A head with its sidecar.
#[derive(Debug, Clone, PartialEq)]
pub struct TextHead {
    /// The sidecar.
    pub meta: HeadMeta,
    /// The weights.
    pub weights: HeadWeights,
}

/// Largest MLP hidden layer a head file may have.
pub const MAX_UNITS: usize = 4096;

fn sidecar(path: &Path) -> PathBuf {
    path.with_extension("json")
}

impl TextHead {
    /// Width of the embedding the head reads.
    pub fn input_dim(&self) -> usize {
        match &self.weights {
            HeadWeights::Logistic { w, .. } => w.len(),
            HeadWeights::Mlp { w1, b1, .. } => w1.len() / b1.len().max(1),
        }
    }

    /// Probability for one embedding (`input_dim` values).
    pub fn probability(&self, e: &[f32]) -> f32 {
        let logit = match &self.weights {
            HeadWeights::Logistic { w, b } => dot(w, e) + b,
            HeadWeights::Mlp { w1, b1, w2, b2 } => {
                let h = e.len();
                let mut z = *b2;
                for (u, (row, bias)) in w1.chunks_exact(h).zip(b1).enumerate() {
                    z += w2[u] * (dot(row, e) + bias).max(0.0);
                }
                z
            }
        };
        sigmoid(logit)
    }

    /// Writes `path` (safetensors) and its sidecar.
    pub fn save(&self, path: &Path) -> Result<(), BertError> {
        let err = |m: String| BertError::Head {
            path: path.to_path_buf(),
            message: m,
        };
        let t = |v: &[f32], shape: &[usize]| {
            Tensor::from_slice(v, shape, &Device::Cpu).map_err(|e| err(e.to_string()))
        };
        let mut m: HashMap<String, Tensor> = HashMap::new();
        match &self.weights {
            HeadWeights::Logistic { w, b } => {
                m.insert("head.w".into(), t(w, &[w.len()])?);
                m.insert("head.b".into(), t(&[*b], &[1])?);
            }
            HeadWeights::Mlp { w1, b1, w2, b2 } => {
                let units = b1.len();
                m.insert("head.w1".into(), t(w1, &[units, w1.len() / units])?);
                m.insert("head.b1".into(), t(b1, &[units])?);
                m.insert("head.w2".into(), t(w2, &[units])?);
                m.insert("head.b2".into(), t(&[*b2], &[1])?);
            }
        }
        let mode = risk_core::files::FileMode::Private;
        let tmp = path.with_extension("safetensors.partial");
        let _ = std::fs::remove_file(&tmp);
        risk_core::files::create_new(&tmp, mode).map_err(|e| err(e.to_string()))?;
        candle_core::safetensors::save(&m, &tmp).map_err(|e| err(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))?;
        let json = serde_json::to_string_pretty(&self.meta).map_err(|e| err(e.to_string()))?;
        risk_core::files::write_atomic(&sidecar(path), (json + "\n").as_bytes(), mode)
            .map_err(|e| err(e.to_string()))
    }

    /// Reads `path` and its sidecar, checking shapes and values (finite).
    pub fn load(path: &Path) -> Result<Self, BertError> {
        let err = |m: String| BertError::Head {
            path: path.to_path_buf(),
            message: m,
        };
        let side = sidecar(path);
        let text = std::fs::read_to_string(&side)
            .map_err(|e| err(format!("sidecar {}: {e}", side.display())))?;
        let meta: HeadMeta = serde_json::from_str(&text)
            .map_err(|e| err(format!("sidecar {}: {e}", side.display())))?;
        if meta.format != HEAD_FORMAT {
            return Err(err(format!(
                "sidecar format {:?} (expected {HEAD_FORMAT:?})",
                meta.format
            )));
        }
        let len = std::fs::metadata(path)
            .map_err(|e| err(e.to_string()))?
            .len();
        let hidden = meta.encoder.hidden_size;
        if hidden == 0 || hidden > super::config::limits::HIDDEN {
            return Err(err(format!("hidden_size {hidden} out of range")));
        }
        if len > ((MAX_UNITS * (hidden + 2) + 2) * 4 + 4096) as u64 {
            return Err(err(format!("{len} bytes is too large for a head")));
        }
        let m =
            candle_core::safetensors::load(path, &Device::Cpu).map_err(|e| err(e.to_string()))?;
        let get = |name: &str| -> Result<(Vec<usize>, Vec<f32>), BertError> {
            let t = m
                .get(name)
                .ok_or_else(|| err(format!("tensor {name} missing")))?;
            let v = t
                .to_dtype(candle_core::DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .map_err(|e| err(format!("{name}: {e}")))?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(err(format!("{name} has a non-finite value")));
            }
            Ok((t.dims().to_vec(), v))
        };
        let weights = if m.contains_key("head.w") {
            let (sw, w) = get("head.w")?;
            let (_, b) = get("head.b")?;
            if sw != [hidden] || b.len() != 1 {
                return Err(err(format!(
                    "head.w has shape {sw:?}, expected [{hidden}] (the encoder's hidden size)"
                )));
            }
            HeadWeights::Logistic { w, b: b[0] }
        } else {
            let (s1, w1) = get("head.w1")?;
            let (_, b1) = get("head.b1")?;
            let (_, w2) = get("head.w2")?;
            let (_, b2) = get("head.b2")?;
            let units = b1.len();
            if units == 0
                || units > MAX_UNITS
                || s1 != [units, hidden]
                || w2.len() != units
                || b2.len() != 1
            {
                return Err(err(format!(
                    "MLP head shapes w1 {s1:?}, b1 [{units}], w2 [{}] do not fit hidden {hidden}",
                    w2.len()
                )));
            }
            HeadWeights::Mlp {
                w1,
                b1,
                w2,
                b2: b2[0],
            }
        };
        Ok(Self { meta, weights })
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The logistic function, stable for large `|z|`.
pub fn sigmoid(z: f32) -> f32 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}
