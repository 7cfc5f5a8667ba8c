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
// `unsafe` only for intrinsics (`trees::bytes`: AVX2/BMI2, `trees::avx512`: AVX-512, a
// prefetch in `trees::shap_table`), one SAFETY comment per block.
#![deny(unsafe_code)]

pub mod bert;
pub mod llm;
pub mod onnx;
pub mod quant;
mod registry;
#[cfg(feature = "kserve")]
pub mod remote;
pub mod trees;

pub use registry::register;

/// The schema slots of `features` in order (`None`: every schema field in order); `Err`
/// names the first feature the schema lacks. Shared by the backends that send a feature
/// vector (ONNX, remote).
pub(crate) fn feature_slots(
    schema: &risk_core::FeatureSchema,
    features: Option<&[String]>,
) -> Result<Vec<risk_core::Slot>, String> {
    let names: Vec<String> = match features {
        Some(f) => f.to_vec(),
        None => schema.fields().iter().map(|f| f.name.clone()).collect(),
    };
    names
        .iter()
        .map(|n| {
            schema
                .slot(n)
                .ok_or_else(|| format!("feature {n:?} is not in the schema"))
        })
        .collect()
}

/// Where a model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Host CPU.
    Cpu,
    /// CUDA device by ordinal.
    Cuda(usize),
}

/// A device that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The crate was built without the backend.
    #[error("risk-gpu was not compiled with `{0}` support (rebuild with --features {0})")]
    NotCompiled(&'static str),
    /// The backend is compiled in but the device could not be opened.
    #[error("device unavailable: {0}")]
    Unavailable(String),
}

impl Device {
    /// Checks that the device can be used by this build.
    pub fn check(self) -> Result<Self, DeviceError> {
        match self {
            Device::Cpu => Ok(self),
            Device::Cuda(_) if cfg!(feature = "cuda") => Ok(self),
            Device::Cuda(_) => Err(DeviceError::NotCompiled("cuda")),
        }
    }

    /// The candle device for the LLM tier and quantized layers (CUDA: weights and
    /// activations on the GPU, INT4/INT8 dequantized there to f16 before each GEMM).
    pub fn candle(self) -> Result<candle_core::Device, DeviceError> {
        match self.check()? {
            Device::Cpu => Ok(candle_core::Device::Cpu),
            Device::Cuda(i) => candle_core::Device::new_cuda(i)
                .map_err(|e| DeviceError::Unavailable(format!("cuda:{i}: {e}"))),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    /// `cpu`, `cuda` (device 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            t => t
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device {s:?} (cpu, cuda, cuda:N)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_without_feature_is_a_typed_error() {
        assert_eq!(Device::Cpu.check(), Ok(Device::Cpu));
        assert_eq!("cuda:1".parse::<Device>(), Ok(Device::Cuda(1)));
        assert!("gpu".parse::<Device>().is_err());
        assert!(Device::Cpu.candle().unwrap().is_cpu());
        if !cfg!(feature = "cuda") {
            assert_eq!(
                Device::Cuda(0).check(),
                Err(DeviceError::NotCompiled("cuda"))
            );
            assert_eq!(
                Device::Cuda(0).candle().unwrap_err(),
                DeviceError::NotCompiled("cuda")
            );
        }
    }
}
