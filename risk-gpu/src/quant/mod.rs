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
//! - [`checkpoint`]: save quantized models in AutoAWQ's safetensors layout (loading
//!   them is [`Llama::from_safetensors`](crate::llm::Llama::from_safetensors));
//! - [`eval`]: perplexity and KL divergence against the unquantized model;
//! - [`Llama::quantize`](crate::llm::Llama::quantize) applies a plan to a model (it is
//!   on the model's floor, in `llm/quantize.rs`: the deep tier applies plans at load).
//!
//! Two floors: the kernels and formats the model runs on live below [`crate::llm`]
//! (in the private `qlinear` module, re-exported here: `plan`, `format`, `linear`,
//! `int8_gemm`, [`QuantError`]); the tools here take a whole model and sit above it.

pub mod awq;
pub mod checkpoint;
pub mod eval;

pub use crate::qlinear::error::QuantError;
pub use crate::qlinear::format::{AwqGemm, Int4Weight, Int8Weight};
pub use crate::qlinear::linear::QLinear;
pub use crate::qlinear::plan::{Precision, Proj, QuantPlan, ResolvedPlan};
pub use crate::qlinear::{format, int8_gemm, linear, plan};
pub use awq::{calibrate, AwqOptions, AwqReport};
