//! Score calibration: Platt scaling, isotonic regression and temperature scaling, fitted
//! from labelled scores, stored with a model version and applied to the fast tier's score
//! before the thresholds.
//!
//! A model trained on rebalanced data, or one that drifted, reports scores whose scale is
//! off: `0.7` may mean 20% fraud. Thresholds written in probabilities then mean nothing.
//! [`Calibration::fit`] learns a monotone map from labelled `(score, is_fraud)` pairs;
//! [`reliability`] and [`CalibrationReport`] show the reliability table and the expected
//! calibration error (ECE) before and after, on held-out rows.
//!
//! Hand-written: the three fits are a few dozen lines of textbook numerics (Newton steps on
//! a one- or two-parameter log loss, pool-adjacent-violators), and a numerics crate would be
//! the core's first ML dependency, which DESIGN.md rules out.

mod fit;
mod report;

pub use report::{reliability, Bin, CalibrationReport, ReliabilityTable};

use serde::{Deserialize, Serialize};

/// The most knots an isotonic map may have (bounds what a stored file can make us allocate).
pub const MAX_KNOTS: usize = 4096;

/// A fitted calibration map from a raw score in `[0, 1]` to a calibrated probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case", deny_unknown_fields)]
pub enum Calibration {
    /// Platt scaling: `sigmoid(a * logit(p) + b)`.
    Platt {
        /// Slope on the score's logit.
        a: f64,
        /// Intercept.
        b: f64,
    },
    /// Temperature scaling: `sigmoid(logit(p) / t)`; `t > 1` softens, `t < 1` sharpens.
    Temperature {
        /// The temperature, `> 0`.
        t: f64,
    },
    /// Isotonic regression: a non-decreasing piecewise-linear map through the knots
    /// `(x[i], y[i])` (`x` strictly increasing in `[0, 1]`, `y` non-decreasing in `[0, 1]`);
    /// constant outside them.
    Isotonic {
        /// Knot scores.
        x: Vec<f32>,
        /// Calibrated probability at each knot.
        y: Vec<f32>,
    },
}

/// The calibration methods [`Calibration::fit`] knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// [`Calibration::Platt`].
    Platt,
    /// [`Calibration::Isotonic`].
    Isotonic,
    /// [`Calibration::Temperature`].
    Temperature,
}

impl std::str::FromStr for Method {
    type Err = CalibrationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "platt" => Ok(Method::Platt),
            "isotonic" => Ok(Method::Isotonic),
            "temperature" => Ok(Method::Temperature),
            _ => Err(CalibrationError::Invalid(format!(
                "unknown method {s:?} (platt, isotonic, temperature)"
            ))),
        }
    }
}

/// Why a calibration could not be fitted or loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    /// Too few rows, or only one class.
    #[error("cannot fit: {0}")]
    Data(String),
    /// A stored or supplied map is malformed.
    #[error("invalid calibration: {0}")]
    Invalid(String),
}

const EPS: f64 = 1e-6;

#[inline]
fn logit(p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    (p / (1.0 - p)).ln()
}

#[inline]
fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

impl Calibration {
    /// Fits `method` to labelled scores (`labels[i]`: row `i` was fraud). Needs at least
    /// 10 rows of each class; scores must be finite numbers in `[0, 1]`.
    pub fn fit(method: Method, scores: &[f32], labels: &[bool]) -> Result<Self, CalibrationError> {
        fit::check_rows(scores, labels)?;
        let c = match method {
            Method::Platt => fit::platt(scores, labels),
            Method::Temperature => fit::temperature(scores, labels),
            Method::Isotonic => fit::isotonic(scores, labels),
        }?;
        c.validate()?;
        Ok(c)
    }

    /// The calibrated probability of raw score `p` (a NaN stays NaN, so an invalid
    /// model score still falls back to the rules).
    #[inline]
    pub fn apply(&self, p: f32) -> f32 {
        if p.is_nan() {
            return p;
        }
        match self {
            Calibration::Platt { a, b } => sigmoid(a * logit(p as f64) + b) as f32,
            Calibration::Temperature { t } => sigmoid(logit(p as f64) / t) as f32,
            Calibration::Isotonic { x, y } => interpolate(x, y, p),
        }
    }

    /// The method of this map.
    pub fn method(&self) -> Method {
        match self {
            Calibration::Platt { .. } => Method::Platt,
            Calibration::Temperature { .. } => Method::Temperature,
            Calibration::Isotonic { .. } => Method::Isotonic,
        }
    }

    /// Checks a map read from a file or an API: finite parameters, a positive temperature,
    /// a positive Platt slope (a calibration must keep the score's order), knots sorted,
    /// in range and at most [`MAX_KNOTS`].
    pub fn validate(&self) -> Result<(), CalibrationError> {
        let bad = |m: String| Err(CalibrationError::Invalid(m));
        match self {
            Calibration::Platt { a, b } => {
                if !a.is_finite() || !b.is_finite() || *a <= 0.0 {
                    return bad(format!(
                        "platt needs finite a > 0 and finite b (a={a}, b={b})"
                    ));
                }
            }
            Calibration::Temperature { t } => {
                if !t.is_finite() || *t <= 0.0 {
                    return bad(format!("temperature needs a finite t > 0 (t={t})"));
                }
            }
            Calibration::Isotonic { x, y } => {
                if x.is_empty() || x.len() != y.len() {
                    return bad(format!(
                        "isotonic needs as many x as y, at least one ({} x, {} y)",
                        x.len(),
                        y.len()
                    ));
                }
                if x.len() > MAX_KNOTS {
                    return bad(format!("{} knots, at most {MAX_KNOTS}", x.len()));
                }
                let unit = |v: &f32| (0.0..=1.0).contains(v);
                if !x.iter().all(unit) || !y.iter().all(unit) {
                    return bad("isotonic knots must lie in [0, 1]".into());
                }
                if x.windows(2).any(|w| w[0] >= w[1]) {
                    return bad("isotonic x must be strictly increasing".into());
                }
                if y.windows(2).any(|w| w[0] > w[1]) {
                    return bad("isotonic y must be non-decreasing".into());
                }
            }
        }
        Ok(())
    }

    /// Parses and validates a map from its JSON form (`{"method": "platt", "a": .., "b": ..}`).
    pub fn from_json(text: &str) -> Result<Self, CalibrationError> {
        let c: Calibration = serde_json::from_str(text)
            .map_err(|e| CalibrationError::Invalid(format!("JSON: {e}")))?;
        c.validate()?;
        Ok(c)
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn interpolate(x: &[f32], y: &[f32], p: f32) -> f32 {
    let i = x.partition_point(|&k| k <= p);
    if i == 0 {
        return y[0];
    }
    if i == x.len() {
        return y[x.len() - 1];
    }
    let (x0, x1, y0, y1) = (x[i - 1], x[i], y[i - 1], y[i]);
    y0 + (y1 - y0) * (p - x0) / (x1 - x0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_is_monotone_and_keeps_nan() {
        let maps = [
            Calibration::Platt { a: 0.5, b: -1.0 },
            Calibration::Temperature { t: 2.0 },
            Calibration::Isotonic {
                x: vec![0.1, 0.5, 0.9],
                y: vec![0.0, 0.2, 0.8],
            },
        ];
        for m in &maps {
            m.validate().unwrap();
            let mut last = -1.0;
            for i in 0..=100 {
                let v = m.apply(i as f32 / 100.0);
                assert!((0.0..=1.0).contains(&v) && v >= last, "{m:?} at {i}");
                last = v;
            }
            assert!(m.apply(f32::NAN).is_nan());
            assert_eq!(Calibration::from_json(&m.to_json()).unwrap(), *m);
        }
        let iso = &maps[2];
        assert!((iso.apply(0.3) - 0.1).abs() < 1e-6);
        assert_eq!(iso.apply(0.0), 0.0);
        assert_eq!(iso.apply(1.0), 0.8);
    }

    #[test]
    fn bad_maps_are_refused() {
        for bad in [
            r#"{"method":"platt","a":-1.0,"b":0.0}"#,
            r#"{"method":"temperature","t":0.0}"#,
            r#"{"method":"isotonic","x":[0.5,0.4],"y":[0.1,0.2]}"#,
            r#"{"method":"isotonic","x":[0.1,0.4],"y":[0.3,0.2]}"#,
            r#"{"method":"isotonic","x":[0.1],"y":[]}"#,
            r#"{"method":"isotonic","x":[0.1],"y":[1.5]}"#,
            r#"{"method":"cubic"}"#,
        ] {
            assert!(Calibration::from_json(bad).is_err(), "{bad}");
        }
    }
}
