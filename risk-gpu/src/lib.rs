//! # risk-gpu
//!
//! Model backends of **risk**, each implementing [`risk_core::Scorer`]:
//! - [`trees`]: native XGBoost JSON scoring (branch-free padded layout) with exact TreeSHAP;
//! - [`onnx`]: any ONNX classifier through ONNX Runtime, with deadline cancellation;
//! - [`bert`]: the BERT-class text fast tier (candle f32/INT8 or ONNX Runtime), issue [13];
//! - [`llm`]: the Llama-family deep tier with a shared-prefix KV cache (issue [4]; the prefix
//!   cache store and prompt templates are here, the model follows);
//! - [`remote`] (feature `kserve`, default): any model on a KServe V2 / Open Inference
//!   Protocol server (MLServer, KServe, Triton), pooled, deadline-bound, hedged and
//!   breaker-guarded, issue [14];
//! - [`quant`]: per-layer FP16 / INT8 / AWQ-INT4 plans, AWQ calibrated in Rust, AutoAWQ
//!   checkpoints (issue [5]).
//!
//! CPU by default. `--features cuda` enables CUDA; without it, asking for a CUDA device
//! returns [`DeviceError::NotCompiled`] so `cfg` lives in this one place.
//! [`register`] adds the `xgboost` and `onnx` scorer kinds to a `risk.toml` registry.
#![deny(missing_docs)]
// `unsafe` only for intrinsics (`trees::{avx2, binner, bytes}`: AVX2/BMI2, `trees::avx512`: AVX-512, a
// prefetch in `trees::shap_table`), one SAFETY comment per block.
#![deny(unsafe_code)]

pub mod bert;
mod device;
pub mod llm;
pub mod onnx;
mod qlinear;
pub mod quant;
mod registry;
#[cfg(feature = "kserve")]
pub mod remote;
mod slots;
pub mod trees;

pub use device::{Device, DeviceError};
pub use registry::register;
