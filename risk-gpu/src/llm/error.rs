//! [`LlmError`]: what goes wrong loading or running the model.

use crate::qlinear::error::QuantError;

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
