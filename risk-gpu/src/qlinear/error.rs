//! [`QuantError`]: what went wrong quantizing, loading or saving weights.

/// What went wrong quantizing, loading or saving weights.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// A plan entry is invalid (named).
    #[error("quantization plan entry {entry:?}: {reason}")]
    Plan {
        /// The entry's key as written.
        entry: String,
        /// Why it was refused.
        reason: String,
    },
    /// A group size that does not split a matrix's input dimension.
    #[error("{tensor}: group size {group} does not divide the input dimension {inp} (use a group that does: 32 or 64 for 576)")]
    Group {
        /// The weight.
        tensor: String,
        /// Its input dimension.
        inp: usize,
        /// The group size asked for.
        group: usize,
    },
    /// Quantized tensors whose shapes or values are inconsistent.
    #[error("{tensor}: {reason}")]
    Shape {
        /// The tensor (e.g. `model.layers.3.mlp.up_proj.qzeros`).
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint file problem.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor operation failed.
    #[error("tensor operation: {0}")]
    Tensor(String),
}
