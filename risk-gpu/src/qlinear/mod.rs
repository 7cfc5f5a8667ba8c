//! Quantized linear layers: the floor under the model (issue [5]).
//!
//! What the Llama forward and the BERT encoder run on, with nothing above it: the
//! tools that take a whole model (AWQ calibration, applying a plan, evaluation,
//! checkpoint writing) are in [`crate::quant`], above [`crate::llm`], which also
//! re-exports everything public here.
//!
//! - [`plan`]: `QuantPlan`, the precision of each layer / projection;
//! - [`format`]: INT4 and INT8 weights, and AutoAWQ's GEMM layout;
//! - [`linear`]: `QLinear`, a weight at any precision with its kernels;
//! - [`int8_gemm`]: the INT8 x INT8 CPU GEMM;
//! - [`error`]: `QuantError`, what went wrong quantizing, loading or saving weights.

pub mod error;
pub mod format;
pub mod int8_gemm;
pub mod linear;
pub mod plan;
