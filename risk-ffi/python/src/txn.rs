//! One transaction from a Python mapping: the transaction fields by name, every other
//! key a schema feature (a number numeric, a string categorical, `None` or NaN missing),
//! and `text`, a mapping of free-text fields.

use crate::errors::{decide, input, type_err};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
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
        })?
        .to_str()
        .map(str::to_owned)
}

/// The transaction a mapping describes, over `schema`.
pub fn from_mapping(schema: &Arc<FeatureSchema>, m: &Bound<'_, PyDict>) -> PyResult<Transaction> {
    let mut b = Transaction::builder(schema);
    let mut amount: Option<f64> = None;
    let mut currency: Option<String> = None;
    for (k, v) in m.iter() {
        let key = k
            .cast::<PyString>()
            .map_err(|_| type_err("transaction keys must be str"))?
            .to_str()?
            .to_owned();
        if v.is_none() {
            if !matches!(
                key.as_str(),
                "id" | "entity"
                    | "timestamp_ms"
                    | "time"
                    | "amount"
                    | "currency"
                    | "mcc"
                    | "country"
                    | "channel"
                    | "device"
                    | "merchant"
                    | "ip"
                    | "email"
                    | "text"
            ) {
                b = b.missing(&key);
            }
            continue;
        }
        b = match key.as_str() {
            "id" => b.id(int(&v, &key)?),
            "entity" => match v.cast::<PyString>() {
                Ok(s) => b.entity(EntityKey::from_str_hash(s.to_str()?).0),
                Err(_) => b.entity(int(&v, &key)?),
            },
            "timestamp_ms" | "time" => b.timestamp_ms(int(&v, &key)?),
            "amount" => {
                amount = Some(number(&v, &key)?);
                b
            }
            "currency" => {
                currency = Some(text(&v, &key)?);
                b
            }
            "mcc" => b.mcc(int(&v, &key)?),
            "country" => b.country(&text(&v, &key)?),
            "channel" => b.channel(Channel::parse(&text(&v, &key)?).map_err(|e| decide(&e, None))?),
            "device" => b.device(int(&v, &key)?),
            "merchant" => b.merchant(&text(&v, &key)?),
            "ip" => b.ip(&text(&v, &key)?),
            "email" => b.email(&text(&v, &key)?),
            "text" => {
                let d = v
                    .cast::<PyDict>()
                    .map_err(|_| type_err("\"text\" must be a dict of str to str"))?;
                for (tk, tv) in d.iter() {
                    let name = text(&tk, "text")?;
                    let value = text(&tv, &name)?;
                    b = b.text(&name, &value);
                }
                b
            }
            _ => {
                if let Ok(s) = v.cast::<PyString>() {
                    b.categorical(&key, s.to_str()?)
                } else {
                    let x = number(&v, &key)?;
                    if x.is_nan() {
                        b.missing(&key)
                    } else {
                        b.numeric(&key, to_f32(&key, x).map_err(|e| decide(&e, None))?)
                    }
                }
            }
        };
    }
    let amount = amount.ok_or_else(|| input("the transaction has no \"amount\""))?;
    b = b.amount(amount, currency.as_deref().unwrap_or("USD"));
    b.build().map_err(|e| decide(&e, None))
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
                "{key:?} must be a number or a str, not {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
}
