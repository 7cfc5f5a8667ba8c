//! One transaction from a Python mapping: the transaction fields by name, every other
//! key a schema feature (a number numeric, a string categorical, `None` or NaN missing),
//! and `text`, a mapping of free-text fields.

use crate::errors::{decide, input, type_err};
use crate::fields::Field;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use risk_core::schema::{FieldKind, Slot};
use risk_core::{Channel, DecideError, EntityKey, FeatureSchema, Transaction};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, TryLockError};

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

/// `key` names the value in messages (built only for one).
fn int<T: for<'a, 'py> FromPyObject<'a, 'py>>(
    v: &Bound<'_, PyAny>,
    key: impl Fn() -> String,
) -> PyResult<T> {
    let type_name = || {
        v.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    };
    if v.is_instance_of::<PyBool>() || v.is_instance_of::<PyFloat>() {
        return Err(type_err(format!(
            "{:?} must be an int, not {}",
            key(),
            type_name()
        )));
    }
    // An int, or an integer type with `__index__` (numpy's).
    v.extract::<T>().map_err(|_| {
        if v.is_instance_of::<PyInt>() || v.hasattr("__index__").unwrap_or(false) {
            input(format!("{:?}: {v} is out of range", key()))
        } else {
            type_err(format!("{:?} must be an int, not {}", key(), type_name()))
        }
    })
}

fn text(v: &Bound<'_, PyAny>, key: impl Fn() -> String + Copy) -> PyResult<String> {
    text_ref(v, key).map(str::to_owned)
}

/// `v`'s text, borrowed (no copy: the field setters take `&str`).
fn text_ref<'a>(v: &'a Bound<'_, PyAny>, key: impl Fn() -> String + Copy) -> PyResult<&'a str> {
    v.cast::<PyString>()
        .map_err(|_| {
            type_err(format!(
                "{:?} must be a str, not {}",
                key(),
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
        .and_then(|s| utf8(s, key))
}

/// `s` as UTF-8; a lone surrogate (text that is not Unicode) is an input error naming
/// `key`.
fn utf8<'a>(s: &'a Bound<'_, PyString>, key: impl Fn() -> String) -> PyResult<&'a str> {
    s.to_str().map_err(|_| {
        input(format!(
            "{:?}: the text is not valid Unicode (a lone surrogate)",
            key()
        ))
    })
}

/// What a mapping key names: a transaction field, the free-text dict, or a schema
/// feature's slot and kind.
#[derive(Debug, Clone, Copy)]
enum Key {
    F(Field),
    Text,
    Feature(Slot, FieldKind),
}

impl Key {
    fn resolve(schema: &FeatureSchema, key: &str) -> PyResult<Key> {
        if let Some(f) = Field::parse(key) {
            return Ok(Key::F(f));
        }
        if key == "text" {
            return Ok(Key::Text);
        }
        let slot = schema
            .require(key)
            .map_err(|e| decide(&DecideError::Features(e), None))?;
        Ok(Key::Feature(slot, schema.field(slot).kind))
    }
}

/// Most key objects a [`KeyCache`] remembers (full, it is emptied and fills again).
const KEY_CACHE_MAX: usize = 1_024;

/// Mapping keys resolved once per key object, for one engine's schema. A dict literal's
/// keys (and most keys code builds its mappings from) are the same interned `str`
/// objects call after call, so the key's address finds what it names without reading
/// its text or hashing it (with one builder run, the parse of the example's 23-key mapping: 3.2 -> 2.35 us,
/// BENCHMARKS [19]). Each entry holds its key object, so no other string takes its
/// address while it is cached. Taken once per mapping (`try_lock`: never waited on).
#[derive(Debug, Default)]
pub struct KeyCache {
    map: Mutex<HashMap<usize, (Py<PyString>, Key), foldhash::fast::RandomState>>,
}

/// The transaction a mapping describes, over `schema`. Typed fields go through the
/// builder's setters; features are resolved to slots here and set in one call, so a
/// mapping of twenty keys moves the builder a dozen times, not forty.
pub fn from_mapping(
    schema: &Arc<FeatureSchema>,
    cache: &KeyCache,
    m: &Bound<'_, PyDict>,
) -> PyResult<Transaction> {
    // Values first, the builder once at the end: a by-value builder moved in a loop is
    // copied at every setter (`perf`: 3% of a Python `decide` in memcpy).
    let mut id: Option<u64> = None;
    let mut entity: Option<u64> = None;
    let mut time: Option<i64> = None;
    let mut mcc: Option<u16> = None;
    let mut device: Option<u64> = None;
    let mut amount: Option<f64> = None;
    let mut texts: [Option<(Key, Bound<'_, PyAny>)>; 6] = Default::default();
    let mut free_text: Option<Bound<'_, PyAny>> = None;
    let mut feats: Vec<(Slot, f32)> = Vec::with_capacity(m.len());
    // `try_lock`: a value's `__float__` or `__index__` may run Python code that decides on
    // this engine (from this thread, or another one the GIL switches to) while the cache
    // is held: that parse goes without the cache instead of waiting on it forever.
    let mut keys = match cache.map.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    for (k, v) in m.iter() {
        let k = k
            .cast_into::<PyString>()
            .map_err(|_| type_err("transaction keys must be str"))?;
        let addr = k.as_ptr() as usize;
        let what = match keys.as_ref().and_then(|m| m.get(&addr)) {
            Some((_, what)) => *what,
            None => {
                let what = Key::resolve(schema, utf8(&k, || "a transaction key".to_owned())?)?;
                // Exact `str` only: a subclass instance could carry a reference cycle the
                // cache would keep alive. Full (keys made afresh per call, e.g. by
                // `json.loads`): start again, so the keys used now are cached.
                if let Some(m) = keys
                    .as_mut()
                    .filter(|_| k.is_exact_instance_of::<PyString>())
                {
                    if m.len() >= KEY_CACHE_MAX {
                        m.clear();
                    }
                    m.insert(addr, (k.clone().unbind(), what));
                }
                what
            }
        };
        if v.is_none() && !matches!(what, Key::Feature(..)) {
            continue;
        }
        // The key's text only for messages (cached keys are not read).
        let key = || k.to_str().map(str::to_owned).unwrap_or_default();
        let key = &key;
        match what {
            Key::F(Field::Id) => id = Some(int(&v, key)?),
            Key::F(Field::Entity) => {
                entity = Some(match v.cast::<PyString>() {
                    Ok(s) => EntityKey::from_str_hash(utf8(s, key)?).0,
                    Err(_) => key_bits(&v, key)?,
                })
            }
            Key::F(Field::Time) => time = Some(int(&v, key)?),
            Key::F(Field::Amount) => amount = Some(number(&v, key)?),
            Key::F(Field::Mcc) => mcc = Some(int(&v, key)?),
            Key::F(Field::Device) => device = Some(key_bits(&v, key)?),
            Key::F(Field::Currency) => texts[0] = Some((what, v)),
            Key::F(Field::Country) => texts[1] = Some((what, v)),
            Key::F(Field::Channel) => texts[2] = Some((what, v)),
            Key::F(Field::Merchant) => texts[3] = Some((what, v)),
            Key::F(Field::Ip) => texts[4] = Some((what, v)),
            Key::F(Field::Email) => texts[5] = Some((what, v)),
            Key::Text => free_text = Some(v),
            Key::Feature(slot, kind) => {
                let x = if v.is_none() {
                    f32::NAN
                } else if let Ok(s) = v.cast::<PyString>() {
                    if kind != FieldKind::Categorical {
                        return Err(type_err(format!(
                            "{:?} is a numeric feature: give a number, not a str",
                            key()
                        )));
                    }
                    schema.field(slot).intern(utf8(s, key)?) as f32
                } else {
                    let x = number(&v, key)?;
                    if kind != FieldKind::Numeric {
                        return Err(type_err(format!(
                            "{:?} is a categorical feature: give a str, not a number",
                            key()
                        )));
                    }
                    if x.is_nan() {
                        f32::NAN
                    } else {
                        to_f32("", x)
                            .or_else(|_| to_f32(&key(), x))
                            .map_err(|e| decide(&e, None))?
                    }
                };
                feats.push((slot, x));
            }
        }
    }
    drop(keys);
    let amount = amount.ok_or_else(|| input("the transaction has no \"amount\""))?;
    let name = |k: Key| -> &'static str {
        match k {
            Key::F(Field::Currency) => "currency",
            Key::F(Field::Country) => "country",
            Key::F(Field::Channel) => "channel",
            Key::F(Field::Merchant) => "merchant",
            Key::F(Field::Ip) => "ip",
            Key::F(Field::Email) => "email",
            _ => "",
        }
    };
    let mut text_of = [None::<&str>; 6];
    for (slot, t) in text_of.iter_mut().zip(&texts) {
        if let Some((k, v)) = t {
            *slot = Some(text_ref(v, || name(*k).to_owned())?);
        }
    }
    let [currency, country, channel, merchant, ip, email] = text_of;
    let mut b = Transaction::builder(schema).amount(amount, currency.unwrap_or("USD"));
    if let Some(x) = id {
        b = b.id(x);
    }
    if let Some(x) = entity {
        b = b.entity(x);
    }
    if let Some(x) = time {
        b = b.timestamp_ms(x);
    }
    if let Some(x) = mcc {
        b = b.mcc(x);
    }
    if let Some(x) = device {
        b = b.device(x);
    }
    if let Some(x) = country {
        b = b.country(x);
    }
    if let Some(x) = channel {
        b = b.channel(Channel::parse(x).map_err(|e| decide(&e, None))?);
    }
    if let Some(x) = merchant {
        b = b.merchant(x);
    }
    if let Some(x) = ip {
        b = b.ip(x);
    }
    if let Some(x) = email {
        b = b.email(x);
    }
    if let Some(v) = free_text {
        let d = v
            .cast::<PyDict>()
            .map_err(|_| type_err("\"text\" must be a dict of str to str"))?;
        for (tk, tv) in d.iter() {
            let name = text(&tk, || "text".to_owned())?;
            let value = text(&tv, || format!("text.{name}"))?;
            b = b.text(&name, &value);
        }
    }
    b.slot_values(feats).build().map_err(|e| decide(&e, None))
}

/// A key (`entity`, `device`): an unsigned 64-bit int, or a negative one read as its
/// 64-bit two's complement bits (Spark's and the JVM's longs carry uint64 hashes so; the
/// columns of `decide_batch` read the same way).
fn key_bits(v: &Bound<'_, PyAny>, key: impl Fn() -> String) -> PyResult<u64> {
    match int::<u64>(v, &key) {
        Ok(x) => Ok(x),
        Err(e) => v.extract::<i64>().map(|i| i as u64).map_err(|_| e),
    }
}

fn number(v: &Bound<'_, PyAny>, key: impl Fn() -> String) -> PyResult<f64> {
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
                "{:?} must be a number, not {}",
                key(),
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
}
