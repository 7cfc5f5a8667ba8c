//! Layer-wise weight quantization for the deep tier (issue [5]).
//!
//! - [`plan`]: [`QuantPlan`], the precision of each layer / projection
//!   (`"layers.8-27" = "awq_int4"`), with errors naming the entry;
//! - [`format`]: INT4 (asymmetric, grouped) and INT8 (per-channel symmetric) weights, and
//!   AutoAWQ's GEMM layout (`qweight` / `qzeros` / `scales`);
//! - [`linear`]: [`QLinear`], a weight at any precision with its CPU kernel (tiled
//!   dequantize + GEMM) and the device path used for CUDA;
//! - [`awq`]: activation-aware weight quantization (Lin et al., 2023,
//!   <https://arxiv.org/abs/2306.00978>) calibrated in Rust;
//! - [`checkpoint`]: save and load quantized models in AutoAWQ's safetensors layout;
//! - [`eval`]: perplexity and KL divergence against the unquantized model;
//! - [`Llama::quantize`](crate::llm::Llama::quantize) applies a plan to a model.

mod apply;
pub mod awq;
pub mod checkpoint;
pub mod eval;
pub mod format;
pub mod int8_gemm;
pub mod linear;
pub mod plan;

pub use awq::{calibrate, AwqOptions, AwqReport};
pub use format::{AwqGemm, Int4Weight, Int8Weight};
pub use linear::QLinear;
pub use plan::{Precision, Proj, QuantPlan, ResolvedPlan};

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
