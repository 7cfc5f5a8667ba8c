//! [`LinearProbe`]: a logistic probe over the final hidden state, its file format and its
//! trainer ([`LinearProbe::fit`], Newton steps with an L2 penalty).

use crate::llm::error::LlmError;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A logistic probe over the model's final hidden state, stored as safetensors
/// (`weight`: `[hidden]` f32, `bias`: `[1]` f32) with an optional JSON sidecar
/// (`<file>.json`, `{"model": "<identity>", ...}`) naming the model it was fitted on; a
/// scorer refuses a probe fitted on other weights.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearProbe {
    /// One weight per hidden unit.
    pub weight: Vec<f32>,
    /// Intercept.
    pub bias: f32,
    /// [`Llama::identity`](crate::llm::model::Llama::identity) of the model the probe was fitted on, when known.
    pub model: Option<String>,
}

/// Options of [`LinearProbe::fit`].
#[derive(Debug, Clone, Copy)]
pub struct ProbeFit {
    /// L2 penalty on the standardised weights (the intercept is not penalised).
    pub l2: f64,
    /// Most Newton steps.
    pub max_iterations: usize,
}

impl Default for ProbeFit {
    fn default() -> Self {
        Self {
            l2: 1e-2,
            max_iterations: 50,
        }
    }
}

/// Solves `a x = b` for a symmetric positive-definite `a` (`k × k`, row-major) by
/// Cholesky; `None` if `a` is not positive definite.
fn cholesky_solve(a: &[f64], b: &[f64], k: usize) -> Option<Vec<f64>> {
    let mut l = vec![0f64; k * k];
    for i in 0..k {
        for j in 0..=i {
            let mut sum = a[i * k + j];
            for p in 0..j {
                sum -= l[i * k + p] * l[j * k + p];
            }
            if i == j {
                if sum <= 0.0 || !sum.is_finite() {
                    return None;
                }
                l[i * k + i] = sum.sqrt();
            } else {
                l[i * k + j] = sum / l[j * k + j];
            }
        }
    }
    let mut y = vec![0f64; k];
    for i in 0..k {
        let s: f64 = (0..i).map(|p| l[i * k + p] * y[p]).sum();
        y[i] = (b[i] - s) / l[i * k + i];
    }
    let mut x = vec![0f64; k];
    for i in (0..k).rev() {
        let s: f64 = (i + 1..k).map(|p| l[p * k + i] * x[p]).sum();
        x[i] = (y[i] - s) / l[i * k + i];
    }
    Some(x)
}

impl LinearProbe {
    /// Fits a logistic probe on hidden states (`rows`, each `[hidden]`) and labels by
    /// Newton's method (iteratively reweighted least squares) on standardised inputs with
    /// an L2 penalty; the standardisation is folded into the returned weights. Newton
    /// needs no step size, so strongly correlated hidden units cannot make it diverge.
    pub fn fit(rows: &[Vec<f32>], labels: &[bool], opts: ProbeFit) -> Result<Self, LlmError> {
        let n = rows.len();
        if n == 0 || n != labels.len() {
            return Err(LlmError::Request(format!(
                "{n} rows and {} labels",
                labels.len()
            )));
        }
        let k = rows[0].len();
        if rows.iter().any(|r| r.len() != k) {
            return Err(LlmError::Request("rows of different lengths".into()));
        }
        let pos = labels.iter().filter(|&&y| y).count();
        if pos == 0 || pos == n {
            return Err(LlmError::Request(
                "labels need both classes to fit a probe".into(),
            ));
        }
        if opts.l2.is_nan() || opts.l2 <= 0.0 {
            return Err(LlmError::Request("l2 must be positive".into()));
        }
        let mut mean = vec![0f64; k];
        for r in rows {
            for (m, &v) in mean.iter_mut().zip(r) {
                *m += v as f64 / n as f64;
            }
        }
        let mut sd = vec![0f64; k];
        for r in rows {
            for ((s, &v), m) in sd.iter_mut().zip(r).zip(&mean) {
                *s += (v as f64 - m).powi(2) / n as f64;
            }
        }
        sd.iter_mut().for_each(|s| *s = s.sqrt().max(1e-6));
        // Standardised rows with a trailing 1 for the intercept: `d = k + 1` columns.
        let d = k + 1;
        let x: Vec<f64> = rows
            .iter()
            .flat_map(|r| {
                r.iter()
                    .zip(&mean)
                    .zip(&sd)
                    .map(|((&v, m), s)| (v as f64 - m) / s)
                    .chain(std::iter::once(1.0))
            })
            .collect();
        let base = pos as f64 / n as f64;
        let mut beta = vec![0f64; d];
        beta[k] = (base / (1.0 - base)).ln();
        let mut h = vec![0f64; d * d];
        let mut g = vec![0f64; d];
        for _ in 0..opts.max_iterations.max(1) {
            h.iter_mut().for_each(|v| *v = 0.0);
            g.iter_mut().for_each(|v| *v = 0.0);
            for (row, &y) in x.chunks_exact(d).zip(labels) {
                let z: f64 = row.iter().zip(&beta).map(|(a, b)| a * b).sum();
                let p = 1.0 / (1.0 + (-z).exp());
                let wt = (p * (1.0 - p)).max(1e-10);
                let e = p - y as u8 as f64;
                for i in 0..d {
                    g[i] += e * row[i];
                    let wi = wt * row[i];
                    for j in 0..=i {
                        h[i * d + j] += wi * row[j];
                    }
                }
            }
            for i in 0..d {
                g[i] /= n as f64;
                for j in 0..=i {
                    h[i * d + j] /= n as f64;
                    h[j * d + i] = h[i * d + j];
                }
                if i < k {
                    g[i] += opts.l2 * beta[i];
                    h[i * d + i] += opts.l2;
                }
            }
            // The unpenalised intercept keeps H positive definite through its own
            // curvature; a tiny ridge guards against exact separation.
            h[k * d + k] += 1e-9;
            let step = cholesky_solve(&h, &g, d)
                .ok_or_else(|| LlmError::Request("probe fit: singular Hessian".into()))?;
            let mut change = 0f64;
            for (b, s) in beta.iter_mut().zip(&step) {
                *b -= s;
                change = change.max(s.abs());
            }
            if change < 1e-8 {
                break;
            }
        }
        let (w, b) = (&beta[..k], beta[k]);
        let weight: Vec<f32> = w.iter().zip(&sd).map(|(w, s)| (w / s) as f32).collect();
        let bias = b - w
            .iter()
            .zip(&mean)
            .zip(&sd)
            .map(|((w, m), s)| w * m / s)
            .sum::<f64>();
        if !bias.is_finite() || weight.iter().any(|v| !v.is_finite()) {
            return Err(LlmError::Request("probe fit diverged".into()));
        }
        Ok(Self {
            weight,
            bias: bias as f32,
            model: None,
        })
    }

    /// Loads a probe file; the hidden size is checked when the scorer is built.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let p = path.as_ref();
        let t = candle_core::safetensors::load(p, &Device::Cpu).map_err(|e| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })?;
        let get = |name: &str| -> Result<Vec<f32>, LlmError> {
            let v = t.get(name).ok_or_else(|| {
                LlmError::Format(format!("probe {}: tensor {name:?} missing", p.display()))
            })?;
            if v.rank() != 1 {
                return Err(LlmError::Format(format!(
                    "probe {}: tensor {name:?} has shape {:?}, expected a vector",
                    p.display(),
                    v.dims()
                )));
            }
            Ok(v.to_dtype(DType::F32)?.to_vec1()?)
        };
        let weight = get("weight")?;
        let bias = get("bias")?;
        if bias.len() != 1 {
            return Err(LlmError::Format(format!(
                "probe {}: bias has {} values, expected 1",
                p.display(),
                bias.len()
            )));
        }
        if weight.iter().chain(&bias).any(|v| !v.is_finite()) {
            return Err(LlmError::Format(format!(
                "probe {}: non-finite values",
                p.display()
            )));
        }
        let sidecar = sidecar(p);
        let model = match std::fs::read_to_string(&sidecar) {
            Err(_) => None,
            Ok(text) => {
                let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    LlmError::Format(format!("probe sidecar {}: {e}", sidecar.display()))
                })?;
                v.get("model").and_then(|m| m.as_str()).map(str::to_owned)
            }
        };
        Ok(Self {
            weight,
            bias: bias[0],
            model,
        })
    }

    /// Writes the probe as safetensors, and the sidecar `<file>.json` with the model
    /// identity (when known) and `extra` fields (fit metrics, data).
    pub fn save_with(
        &self,
        path: impl AsRef<Path>,
        extra: serde_json::Value,
    ) -> Result<(), LlmError> {
        self.save(&path)?;
        let mut v = match extra {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        if let Some(m) = &self.model {
            v.insert("model".into(), m.clone().into());
        }
        let p = sidecar(path.as_ref());
        risk_core::files::write_atomic(
            &p,
            (serde_json::to_string_pretty(&v).unwrap_or_default() + "\n").as_bytes(),
            risk_core::files::FileMode::Private,
        )
        .map_err(|e| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })
    }

    /// Writes the probe as safetensors (no sidecar).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), LlmError> {
        let p = path.as_ref();
        let w = Tensor::new(self.weight.as_slice(), &Device::Cpu)?;
        let b = Tensor::new(&[self.bias], &Device::Cpu)?;
        let fail = |e: String| LlmError::Io {
            path: p.display().to_string(),
            message: e,
        };
        // A fresh 0600 file under a temporary name, renamed over `p`.
        let tmp = p.with_extension("safetensors.partial");
        let _ = std::fs::remove_file(&tmp);
        risk_core::files::create_new(&tmp, risk_core::files::FileMode::Private)
            .map_err(|e| fail(e.to_string()))?;
        candle_core::safetensors::save(
            &HashMap::from([("weight".to_owned(), w), ("bias".to_owned(), b)]),
            &tmp,
        )
        .map_err(|e| fail(e.to_string()))?;
        std::fs::rename(&tmp, p).map_err(|e| fail(e.to_string()))
    }

    /// The probe's probability for one hidden state.
    pub fn apply(&self, h: &[f32]) -> f32 {
        let z: f64 = self
            .weight
            .iter()
            .zip(h)
            .map(|(&w, &x)| w as f64 * x as f64)
            .sum::<f64>()
            + self.bias as f64;
        (1.0 / (1.0 + (-z).exp())) as f32
    }
}

fn sidecar(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}
