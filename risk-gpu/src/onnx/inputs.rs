//! What each named input of an ONNX model is fed: flat schema features (`[B, K]`), a
//! sequence's tensor (`[B, N, F]`), its mask (`[B, N]`) or its length (`[B]`), from the
//! transaction's features and [`risk_core::Sequences`] (filled by `[[state.sequences]]`).
//!
//! Every model input must be fed and every mapping must name a model input; ranks and
//! element types are checked at load, and fixed dimensions (a model exported with
//! `N = 32`) against each batch (a sequence of another length is a typed failure, never
//! a run on a wrong shape).

use super::watchdog::Inputs;
use super::OnnxError;
use ort::value::{TensorElementType, TensorRef, ValueType};
use risk_core::{FeatureSchema, ScoreError, Sequence, Slot, Transaction};
use std::borrow::Cow;

/// Where a model input's values come from (`[fast.scorer.inputs]` in risk.toml).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// Schema fields in order, `[B, K]` float32 (`None`: every schema field).
    Features(Option<Vec<String>>),
    /// The named sequence's rows, `[B, N, F]` float32.
    Sequence(String),
    /// The named sequence's mask, `[B, N]`: 1 for a row holding an event, 0 for padding
    /// (float32, int64, int32 or bool, as the model declares).
    Mask(String),
    /// The named sequence's rows holding events, `[B]` (int64, int32 or float32).
    Length(String),
}

/// One model input and what feeds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputMap {
    /// The model's input name.
    pub name: String,
    /// What feeds it.
    pub source: InputSource,
}

#[derive(Debug, Clone)]
enum Feed {
    Features(Vec<Slot>),
    Sequence(String),
    Mask(String),
    Length(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    F32,
    I64,
    I32,
    Bool,
}

/// One input's values for a batch, and its shape.
pub(crate) enum Buf {
    F32(Vec<usize>, Vec<f32>),
    I64(Vec<usize>, Vec<i64>),
    I32(Vec<usize>, Vec<i32>),
    Bool(Vec<usize>, Vec<bool>),
}

/// A model input resolved at load.
#[derive(Debug, Clone)]
pub(crate) struct ModelInput {
    pub name: String,
    feed: Feed,
    elem: Elem,
    /// The model's declared shape (-1: dynamic).
    dims: Vec<i64>,
}

fn elem(t: TensorElementType) -> Option<Elem> {
    Some(match t {
        TensorElementType::Float32 => Elem::F32,
        TensorElementType::Int64 => Elem::I64,
        TensorElementType::Int32 => Elem::I32,
        TensorElementType::Bool => Elem::Bool,
        _ => return None,
    })
}

/// Resolves `maps` against the session's inputs (`maps` empty: the model's only input,
/// or `input`, fed `features`).
pub(crate) fn resolve(
    session: &ort::session::Session,
    maps: &[InputMap],
    input: Option<&str>,
    features: Option<&[String]>,
    schema: &FeatureSchema,
) -> Result<Vec<ModelInput>, OnnxError> {
    let model = session.inputs();
    let maps: Vec<InputMap> = if maps.is_empty() {
        let name = match input {
            Some(n) => n.to_owned(),
            None if model.len() == 1 => model[0].name().to_owned(),
            None => {
                return Err(OnnxError::Model(format!(
                    "{} inputs; name the feature input, or map every input (inputs)",
                    model.len()
                )))
            }
        };
        vec![InputMap {
            name,
            source: InputSource::Features(features.map(<[String]>::to_vec)),
        }]
    } else if input.is_some() || features.is_some() {
        return Err(OnnxError::Model(
            "`input` and `features` name a model's only input: with `inputs`, map the features there"
                .into(),
        ));
    } else {
        maps.to_vec()
    };
    if let Some(m) = model
        .iter()
        .find(|m| !maps.iter().any(|x| x.name == m.name()))
    {
        return Err(OnnxError::Model(format!(
            "model input {:?} is not fed (map it under inputs)",
            m.name()
        )));
    }
    let mut out = Vec::with_capacity(maps.len());
    for m in &maps {
        let Some(o) = model.iter().find(|o| o.name() == m.name) else {
            return Err(OnnxError::Model(format!("no input named {:?}", m.name)));
        };
        let (ty, dims) = match o.dtype() {
            ValueType::Tensor { ty, shape, .. } => {
                (*ty, shape.iter().copied().collect::<Vec<i64>>())
            }
            other => {
                return Err(OnnxError::Model(format!(
                    "input {:?} is {other:?}, not a tensor",
                    m.name
                )))
            }
        };
        let e = elem(ty);
        let (feed, ok, want) = match &m.source {
            InputSource::Features(f) => {
                let slots =
                    crate::slots::feature_slots(schema, f.as_deref()).map_err(OnnxError::Model)?;
                if dims.len() == 2 && dims[1] >= 0 && dims[1] as usize != slots.len() {
                    return Err(OnnxError::Model(format!(
                        "model input {:?} has {} features, {} are mapped from the schema",
                        m.name,
                        dims[1],
                        slots.len()
                    )));
                }
                let ok = e == Some(Elem::F32) && dims.len() == 2;
                (Feed::Features(slots), ok, "float32 [N, features]")
            }
            InputSource::Sequence(s) => (
                Feed::Sequence(s.clone()),
                e == Some(Elem::F32) && dims.len() == 3,
                "float32 [N, rows, fields]",
            ),
            InputSource::Mask(s) => (
                Feed::Mask(s.clone()),
                e.is_some() && dims.len() == 2,
                "[N, rows] of float32, int64, int32 or bool",
            ),
            InputSource::Length(s) => (
                Feed::Length(s.clone()),
                matches!(e, Some(Elem::I64 | Elem::I32 | Elem::F32)) && dims.len() == 1,
                "[N] of int64, int32 or float32",
            ),
        };
        if !ok {
            return Err(OnnxError::Model(format!(
                "input {:?} is {ty:?} {dims:?}, expected {want}",
                m.name
            )));
        }
        out.push(ModelInput {
            name: m.name.clone(),
            feed,
            elem: e.unwrap_or(Elem::F32),
            dims,
        });
    }
    Ok(out)
}

fn sequence<'t>(t: &'t Transaction, name: &str) -> Result<&'t Sequence, ScoreError> {
    t.sequences.get(name).ok_or_else(|| {
        ScoreError::Failed(format!(
            "the transaction has no sequence {name:?} (state off or degraded, or no [[state.sequences]] of that name)"
        ))
    })
}

impl ModelInput {
    /// Whether dimension `i` of the model's shape takes `n`.
    fn fits(&self, i: usize, n: usize) -> Result<(), ScoreError> {
        match self.dims.get(i) {
            Some(&d) if d >= 0 && d as usize != n => Err(ScoreError::Failed(format!(
                "input {:?} takes {d} at dimension {i}, the transaction gives {n}",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Width of a feature input.
    pub fn features(&self) -> Option<usize> {
        match &self.feed {
            Feed::Features(s) => Some(s.len()),
            _ => None,
        }
    }

    /// The input's values for `txns`.
    pub fn gather(&self, txns: &[&Transaction]) -> Result<Buf, ScoreError> {
        let b = txns.len();
        match &self.feed {
            Feed::Features(slots) => {
                let mut v = Vec::with_capacity(b * slots.len());
                for t in txns {
                    v.extend(slots.iter().map(|s| t.features.get(*s)));
                }
                Ok(Buf::F32(vec![b, slots.len()], v))
            }
            Feed::Sequence(name) => {
                let first = match txns.first() {
                    Some(t) => sequence(t, name)?,
                    None => return Ok(Buf::F32(vec![0, 0, 0], Vec::new())),
                };
                let (n, f) = (first.rows(), first.width());
                self.fits(1, n)?;
                self.fits(2, f)?;
                let mut v = Vec::with_capacity(b * n * f);
                for t in txns {
                    let s = sequence(t, name)?;
                    if (s.rows(), s.width()) != (n, f) {
                        return Err(ScoreError::Failed(format!(
                            "sequence {name:?} of shape [{}, {}] in a batch of [{n}, {f}]",
                            s.rows(),
                            s.width()
                        )));
                    }
                    v.extend_from_slice(s.values());
                }
                Ok(Buf::F32(vec![b, n, f], v))
            }
            Feed::Mask(name) => {
                let mut m: Vec<f32> = Vec::new();
                let mut n = 0;
                for t in txns {
                    let s = sequence(t, name)?;
                    if m.is_empty() {
                        n = s.rows();
                        self.fits(1, n)?;
                    } else if s.rows() != n {
                        return Err(ScoreError::Failed(format!(
                            "sequence {name:?} of {} rows in a batch of {n}",
                            s.rows()
                        )));
                    }
                    m.extend(s.mask());
                }
                let shape = vec![b, n];
                Ok(match self.elem {
                    Elem::F32 => Buf::F32(shape, m),
                    Elem::I64 => Buf::I64(shape, m.iter().map(|&x| x as i64).collect()),
                    Elem::I32 => Buf::I32(shape, m.iter().map(|&x| x as i32).collect()),
                    Elem::Bool => Buf::Bool(shape, m.iter().map(|&x| x != 0.0).collect()),
                })
            }
            Feed::Length(name) => {
                let lens = txns
                    .iter()
                    .map(|t| sequence(t, name).map(Sequence::len))
                    .collect::<Result<Vec<_>, _>>()?;
                let shape = vec![b];
                Ok(match self.elem {
                    Elem::I64 => Buf::I64(shape, lens.iter().map(|&x| x as i64).collect()),
                    Elem::I32 => Buf::I32(shape, lens.iter().map(|&x| x as i32).collect()),
                    _ => Buf::F32(shape, lens.iter().map(|&x| x as f32).collect()),
                })
            }
        }
    }

    /// Zeros of the model's shape for `rows` rows (warm-up; a dynamic dimension is 1, a
    /// sequence's mask marks its first row as an event).
    pub fn zeros(&self, rows: usize) -> Buf {
        let mut shape: Vec<usize> = self.dims.iter().map(|&d| d.max(1) as usize).collect();
        shape[0] = rows;
        if let Feed::Features(s) = &self.feed {
            shape[1] = s.len();
        }
        let n: usize = shape.iter().product();
        let first = |i: usize| {
            matches!(self.feed, Feed::Mask(_)) && i.is_multiple_of(shape[1])
                || matches!(self.feed, Feed::Length(_))
        };
        match self.elem {
            Elem::F32 => Buf::F32(
                shape.clone(),
                (0..n).map(|i| first(i) as u8 as f32).collect(),
            ),
            Elem::I64 => Buf::I64(shape.clone(), (0..n).map(|i| first(i) as i64).collect()),
            Elem::I32 => Buf::I32(shape.clone(), (0..n).map(|i| first(i) as i32).collect()),
            Elem::Bool => Buf::Bool(shape.clone(), (0..n).map(first).collect()),
        }
    }
}

/// The run's inputs: views of `bufs` under the inputs' names.
pub(crate) fn views<'a>(
    inputs: &'a [ModelInput],
    bufs: &'a [Buf],
) -> Result<Inputs<'a, 'a>, ScoreError> {
    let fail = |e: ort::Error| ScoreError::Failed(e.to_string());
    let mut v: Inputs<'a, 'a> = Vec::with_capacity(inputs.len());
    for (i, b) in inputs.iter().zip(bufs) {
        let value: ort::session::SessionInputValue<'a> = match b {
            Buf::F32(s, x) => TensorRef::from_array_view((s.clone(), x.as_slice()))
                .map_err(fail)?
                .into(),
            Buf::I64(s, x) => TensorRef::from_array_view((s.clone(), x.as_slice()))
                .map_err(fail)?
                .into(),
            Buf::I32(s, x) => TensorRef::from_array_view((s.clone(), x.as_slice()))
                .map_err(fail)?
                .into(),
            Buf::Bool(s, x) => TensorRef::from_array_view((s.clone(), x.as_slice()))
                .map_err(fail)?
                .into(),
        };
        v.push((Cow::Borrowed(i.name.as_str()), value));
    }
    Ok(v)
}
