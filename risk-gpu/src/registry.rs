//! `risk.toml` scorer kinds of this crate.
//!
//! ```toml
//! [fast.scorer]
//! kind = "xgboost"
//! path = "models/xgb_fraud.json"   # relative to risk.toml
//! explain_above = 0.3              # SHAP reason codes for scores at or above (default 0.3)
//! top_k = 3                        # reasons per decision (default 3)
//!
//! [fast.scorer]
//! kind = "onnx"
//! path = "models/xgb_fraud.onnx"
//! input = "input"                  # optional
//! output = "probabilities"         # optional
//! positive_class = 1               # optional
//! sessions = 2                     # optional
//! intra_threads = 1                # optional
//! runtime = "/path/libonnxruntime.so"  # optional, else ORT_DYLIB_PATH
//! ```

use crate::onnx::{OnnxConfig, OnnxScorer};
use crate::trees::{XgbModel, XgbScorer};
use risk_core::{ConfigError, ScorerRegistry, ScorerSpec};
use std::sync::Arc;

fn scorer_err(spec: &ScorerSpec, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Scorer {
        key: spec.key.clone(),
        message: e.to_string(),
    }
}

fn count(spec: &ScorerSpec, name: &str, default: usize) -> Result<usize, ConfigError> {
    match spec.f64(name)? {
        None => Ok(default),
        Some(v) if v >= 0.0 && v.fract() == 0.0 && v <= 1e6 => Ok(v as usize),
        Some(v) => Err(ConfigError::invalid(
            format!("{}.{name}", spec.key),
            format!("{v} is not a non-negative integer"),
        )),
    }
}

/// Registers `xgboost` and `onnx`.
pub fn register(r: &mut ScorerRegistry) {
    r.register("xgboost", |spec| {
        let model = XgbModel::from_file(spec.path("path")?).map_err(|e| scorer_err(spec, e))?;
        let explain = spec.f64("explain_above")?.unwrap_or(0.3) as f32;
        let top_k = count(spec, "top_k", 3)?;
        let s = XgbScorer::new(Arc::new(model), &spec.schema, explain, top_k)
            .map_err(|e| scorer_err(spec, e))?;
        Ok(Arc::new(s))
    });
    r.register("onnx", |spec| {
        let mut cfg = OnnxConfig::new(spec.path("path")?);
        let s = |k: &str| {
            spec.table
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        cfg.input = s("input");
        cfg.output = s("output");
        cfg.positive_class = count(spec, "positive_class", 1)?;
        cfg.sessions = count(spec, "sessions", 2)?.max(1);
        cfg.intra_threads = count(spec, "intra_threads", 1)?.max(1);
        if spec.table.contains_key("runtime") {
            cfg.runtime = Some(spec.path("runtime")?);
        }
        let scorer = OnnxScorer::load(&cfg, &spec.schema).map_err(|e| scorer_err(spec, e))?;
        Ok(Arc::new(scorer))
    });
}
