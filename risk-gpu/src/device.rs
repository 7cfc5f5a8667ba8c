//! Where a model runs: [`Device`], and [`DeviceError`] when this build or machine cannot
//! use it. The one place that knows whether CUDA is compiled in.

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
