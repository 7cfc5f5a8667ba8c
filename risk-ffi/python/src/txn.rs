//! One transaction from a Python mapping: the transaction fields by name, every other
//! key a schema feature (a number numeric, a string categorical, `None` or NaN missing),
//! and `text`, a mapping of free-text fields.

use crate::errors::{decide, input, type_err};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use risk_core::schema::{FieldKind, Slot};
use risk_core::{Channel, DecideError, EntityKey, FeatureSchema, Transaction};
use std::sync::Arc;

/// `v` as the `f32` features are stored in; a finite value outside its range is refused.
pub fn to_f32(name: &str, v: f64) -> Result<f32, DecideError> {
    let f = v as f32;
    if v.is_finite() && !f.is_finite() {
        return Err(DecideError::InvalidField {
            field: "features",
            reason: format!("{name:?}: {v} is outside the f32 range features are stored in"),
        });
    }
    Ok(f)
}

fn int<T: for<'a, 'py> FromPyObject<'a, 'py>>(v: &Bound<'_, PyAny>, key: &str) -> PyResult<T> {
    let type_name = || {
        v.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    };
    if v.is_instance_of::<PyBool>() || v.is_instance_of::<PyFloat>() {
        return Err(type_err(format!(
            "{key:?} must be an int, not {}",
            type_name()
        )));
    }
    // An int, or an integer type with `__index__` (numpy's).
    v.extract::<T>().map_err(|_| {
        if v.is_instance_of::<PyInt>() || v.hasattr("__index__").unwrap_or(false) {
            input(format!("{key:?}: {v} is out of range"))
        } else {
            type_err(format!("{key:?} must be an int, not {}", type_name()))
        }
    })
}

fn text(v: &Bound<'_, PyAny>, key: &str) -> PyResult<String> {
    v.cast::<PyString>()
        .map_err(|_| {
            type_err(format!(
                "{key:?} must be a str, not {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
        .and_then(|s| utf8(s, key).map(str::to_owned))
}

/// `s` as UTF-8; a lone surrogate (text that is not Unicode) is an input error naming
/// `key`.
fn utf8<'a>(s: &'a Bound<'_, PyString>, key: &str) -> PyResult<&'a str> {
    s.to_str().map_err(|_| {
        input(format!(
            "{key:?}: the text is not valid Unicode (a lone surrogate)"
        ))
    })
}

/// The transaction a mapping describes, over `schema`. Typed fields go through the
/// builder's setters; features are resolved to slots here and set in one call, so a
/// mapping of twenty keys moves the builder a dozen times, not forty.
pub fn from_mapping(schema: &Arc<FeatureSchema>, m: &Bound<'_, PyDict>) -> PyResult<Transaction> {
    let mut b = Transaction::builder(schema);
    let mut amount: Option<f64> = None;
    let mut currency: Option<String> = None;
    let mut feats: Vec<(Slot, f32)> = Vec::with_capacity(m.len());
    for (k, v) in m.iter() {
        let k = k
            .cast_into::<PyString>()
            .map_err(|_| type_err("transaction keys must be str"))?;
        let key = utf8(&k, "a transaction key")?;
        let none = v.is_none();
        b = match key {
            "id" | "entity" | "timestamp_ms" | "time" | "amount" | "currency" | "mcc"
            | "country" | "channel" | "device" | "merchant" | "ip" | "email" | "text"
                if none =>
            {
                b
            }
            "id" => b.id(int(&v, key)?),
            "entity" => match v.cast::<PyString>() {
                Ok(s) => b.entity(EntityKey::from_str_hash(utf8(s, key)?).0),
                Err(_) => b.entity(int(&v, key)?),
            },
            "timestamp_ms" | "time" => b.timestamp_ms(int(&v, key)?),
            "amount" => {
                amount = Some(number(&v, key)?);
                b
            }
            "currency" => {
                currency = Some(text(&v, key)?);
                b
            }
            "mcc" => b.mcc(int(&v, key)?),
            "country" => b.country(&text(&v, key)?),
            "channel" => b.channel(Channel::parse(&text(&v, key)?).map_err(|e| decide(&e, None))?),
            "device" => b.device(int(&v, key)?),
            "merchant" => b.merchant(&text(&v, key)?),
            "ip" => b.ip(&text(&v, key)?),
            "email" => b.email(&text(&v, key)?),
            "text" => {
                let d = v
                    .cast::<PyDict>()
                    .map_err(|_| type_err("\"text\" must be a dict of str to str"))?;
                for (tk, tv) in d.iter() {
                    let name = text(&tk, "text")?;
                    let value = text(&tv, &format!("text.{name}"))?;
                    b = b.text(&name, &value);
                }
                b
            }
            _ => {
                let slot = schema
                    .require(key)
                    .map_err(|e| decide(&DecideError::Features(e), None))?;
                let field = schema.field(slot);
                let x = if none {
                    f32::NAN
                } else if let Ok(s) = v.cast::<PyString>() {
                    if field.kind != FieldKind::Categorical {
                        return Err(type_err(format!(
                            "{key:?} is a numeric feature: give a number, not a str"
                        )));
                    }
                    field.intern(utf8(s, key)?) as f32
                } else {
                    let x = number(&v, key)?;
                    if field.kind != FieldKind::Numeric {
                        return Err(type_err(format!(
                            "{key:?} is a categorical feature: give a str, not a number"
                        )));
                    }
                    if x.is_nan() {
                        f32::NAN
                    } else {
                        to_f32(key, x).map_err(|e| decide(&e, None))?
                    }
                };
                feats.push((slot, x));
                b
            }
        };
    }
    let amount = amount.ok_or_else(|| input("the transaction has no \"amount\""))?;
    b.amount(amount, currency.as_deref().unwrap_or("USD"))
        .slot_values(feats)
        .build()
        .map_err(|e| decide(&e, None))
}

fn number(v: &Bound<'_, PyAny>, key: &str) -> PyResult<f64> {
    if v.is_instance_of::<PyFloat>()
        || (v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>())
    {
        return v.extract::<f64>();
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(if v.is_truthy()? { 1.0 } else { 0.0 });
    }
    // numpy scalars and other numbers: through `__float__`.
    v.call_method0("__float__")
        .and_then(|f| f.extract::<f64>())
        .map_err(|_| {
            type_err(format!(
                "{key:?} must be a number, not {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
}
