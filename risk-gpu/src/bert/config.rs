//! A BERT encoder's Hugging Face `config.json`, checked before any weight is read, and
//! the encoder's identity (what a classification head was trained on).

use super::BertError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Bounds on what a `config.json` may state (a file is refused above them, so a hostile
/// file cannot make the loader allocate without limit).
pub mod limits {
    /// Largest vocabulary.
    pub const VOCAB: usize = 1 << 20;
    /// Largest hidden size.
    pub const HIDDEN: usize = 4096;
    /// Most layers.
    pub const LAYERS: usize = 48;
    /// Most attention heads.
    pub const HEADS: usize = 64;
    /// Largest feed-forward size.
    pub const INTERMEDIATE: usize = 16384;
    /// Most positions.
    pub const POSITIONS: usize = 8192;
    /// Most token types.
    pub const TOKEN_TYPES: usize = 16;
    /// Largest `config.json`, bytes.
    pub const CONFIG_BYTES: u64 = 1 << 20;
}

/// The fields of a BERT `config.json` the forward uses (others are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct BertConfig {
    /// Must be `bert`.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Must be `gelu` (the exact, erf form).
    pub hidden_act: String,
    /// Position embeddings: the longest input.
    pub max_position_embeddings: usize,
    /// Token type (segment) embeddings.
    #[serde(default = "two")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    /// Must be `absolute` when present.
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
}

fn two() -> usize {
    2
}
fn eps() -> f64 {
    1e-12
}
fn absolute() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Reads and checks `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, BertError> {
        let file = |m: String| BertError::Config {
            path: path.to_path_buf(),
            message: m,
        };
        let len = std::fs::metadata(path)
            .map_err(|e| file(e.to_string()))?
            .len();
        if len > limits::CONFIG_BYTES {
            return Err(file(format!("{len} bytes is not a config.json")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
        let c: BertConfig = serde_json::from_str(&text).map_err(|e| file(e.to_string()))?;
        c.check().map_err(file)?;
        Ok(c)
    }

    /// Checks the architecture and the bounds in [`limits`].
    pub fn check(&self) -> Result<(), String> {
        if self.model_type != "bert" {
            return Err(format!(
                "model_type {:?} is not supported (bert)",
                self.model_type
            ));
        }
        if self.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act {:?} is not supported (gelu)",
                self.hidden_act
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type {:?} is not supported (absolute)",
                self.position_embedding_type
            ));
        }
        let bounds = [
            ("vocab_size", self.vocab_size, limits::VOCAB),
            ("hidden_size", self.hidden_size, limits::HIDDEN),
            ("num_hidden_layers", self.num_hidden_layers, limits::LAYERS),
            (
                "num_attention_heads",
                self.num_attention_heads,
                limits::HEADS,
            ),
            (
                "intermediate_size",
                self.intermediate_size,
                limits::INTERMEDIATE,
            ),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                limits::POSITIONS,
            ),
            ("type_vocab_size", self.type_vocab_size, limits::TOKEN_TYPES),
        ];
        for (name, v, max) in bounds {
            if v == 0 || v > max {
                return Err(format!("{name} = {v} is outside 1..={max}"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !(self.layer_norm_eps > 0.0 && self.layer_norm_eps < 1.0) {
            return Err(format!(
                "layer_norm_eps {} is not in (0, 1)",
                self.layer_norm_eps
            ));
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Number of f32 parameters the encoder has (embeddings and layers, no pooler).
    pub fn parameters(&self) -> usize {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let emb =
            (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h;
        let layer = 4 * (h * h + h) + 2 * (h * i) + i + h + 4 * h;
        emb + self.num_hidden_layers * layer
    }
}

/// What a classification head was trained on: a head is only served over the same
/// encoder (same architecture and the same weights file, by content hash).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EncoderId {
    /// A readable name (the model directory's name, e.g. `all-MiniLM-L6-v2`).
    pub name: String,
    /// Hidden size (the embedding width the head reads).
    pub hidden_size: usize,
    /// Layers.
    pub layers: usize,
    /// FNV-1a 64 of `model.safetensors`, as 16 hex digits.
    pub weights_fnv64: String,
}

impl EncoderId {
    /// Whether `other` is the same encoder (the name is only a label).
    pub fn same_encoder(&self, other: &EncoderId) -> bool {
        self.hidden_size == other.hidden_size
            && self.layers == other.layers
            && self.weights_fnv64 == other.weights_fnv64
    }
}

impl std::fmt::Display for EncoderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (hidden {}, {} layers, weights {})",
            self.name, self.hidden_size, self.layers, self.weights_fnv64
        )
    }
}
