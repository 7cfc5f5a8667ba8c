//! Transactions as JSON: `risk_engine_decide_json`.
//!
//! [`TxnJson`] is the one list of the keys: derived, with unknown and repeated keys refused.
//! Each key is read by a helper that knows its name, so a wrong type is reported as, e.g.,
//! "invalid type: string \"x\", expected a number for `amount`" (serde's derive alone does not
//! say which key), and a present key must hold its type: `null` does not mean "unset"
//! (only a feature may be `null`: missing). Strings borrow from the input where they can.
//!
//! Codes: a document that is not JSON, or does not fit these keys and types, is
//! `RISK_ERR_JSON`; values the transaction rejects (a negative amount, an unknown currency,
//! channel or feature, an `mcc` over 65535, a feature outside the `f32` range) are
//! `RISK_ERR_TRANSACTION`.

use crate::args::bytes_arg;
use crate::decision::risk_decision;
use crate::engine::{decide_one, risk_engine};
use crate::error::risk_result::{self, *};
use crate::error::{decide_err, fail, guard};
use crate::handle::with_handle;
use crate::txn::to_f32;
use risk_core::{Channel, Engine, Transaction};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

// ===== the document =====

/// A transaction as JSON (only `amount` and `currency` are required).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxnJson<'a> {
    #[serde(default, deserialize_with = "key::id")]
    id: u64,
    #[serde(default, deserialize_with = "key::entity")]
    entity: u64,
    #[serde(default, deserialize_with = "key::timestamp_ms")]
    timestamp_ms: Option<i64>,
    #[serde(deserialize_with = "key::amount")]
    amount: f64,
    #[serde(borrow, deserialize_with = "key::currency")]
    currency: Cow<'a, str>,
    #[serde(default, deserialize_with = "key::mcc")]
    mcc: Option<u64>,
    #[serde(default, borrow, deserialize_with = "key::country")]
    country: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "key::channel")]
    channel: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "key::device")]
    device: Option<u64>,
    #[serde(default, borrow, deserialize_with = "key::merchant")]
    merchant: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "key::ip")]
    ip: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "key::email")]
    email: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "key::features")]
    features: Features<'a>,
    #[serde(default, borrow, deserialize_with = "key::text")]
    text: Texts<'a>,
}

/// `text`: free-text field name to string, in document order.
#[derive(Debug, Default)]
struct Texts<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

/// `features`: name to value, in document order.
#[derive(Debug, Default)]
struct Features<'a>(Vec<(Cow<'a, str>, Feature<'a>)>);

/// A feature's value.
#[derive(Debug)]
enum Feature<'a> {
    Number(f64),
    Category(Cow<'a, str>),
    Missing,
}

/// The `deserialize_with` helper of each key of [`TxnJson`]: reads the key's type (into
/// the field, or `Some` of it) with the key's name in the error.
mod key {
    use super::{Cow, Deserializer, Features, Texts, Typed};

    macro_rules! keys {
        ($($key:ident: $ty:ty,)*) => {$(
            pub(super) fn $key<'de, D, T>(d: D) -> Result<T, D::Error>
            where
                D: Deserializer<'de>,
                T: From<$ty>,
            {
                <$ty as Typed<'de>>::read(d, stringify!($key)).map(T::from)
            }
        )*};
    }

    keys! {
        id: u64,
        entity: u64,
        timestamp_ms: i64,
        amount: f64,
        currency: Cow<'de, str>,
        mcc: u64,
        country: Cow<'de, str>,
        channel: Cow<'de, str>,
        device: u64,
        merchant: Cow<'de, str>,
        ip: Cow<'de, str>,
        email: Cow<'de, str>,
        features: Features<'de>,
        text: Texts<'de>,
    }
}

// ===== reading a key's type =====

/// A type read strictly for a named key.
trait Typed<'de>: Sized {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error>;
}

/// Visits a `T` for the key `key` (the name is in "expected ... for `key`").
struct Expect<T> {
    key: &'static str,
    ty: PhantomData<T>,
}

fn expect<T>(key: &'static str) -> Expect<T> {
    Expect {
        key,
        ty: PhantomData,
    }
}

impl<'de> Typed<'de> for u64 {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error> {
        d.deserialize_u64(expect::<u64>(key))
    }
}

impl<'de> Visitor<'de> for Expect<u64> {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a non-negative integer for `{}`", self.key)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
}

impl<'de> Typed<'de> for i64 {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error> {
        d.deserialize_i64(expect::<i64>(key))
    }
}

impl<'de> Visitor<'de> for Expect<i64> {
    type Value = i64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer for `{}`", self.key)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }
}

impl<'de> Typed<'de> for f64 {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error> {
        d.deserialize_f64(expect::<f64>(key))
    }
}

impl<'de> Visitor<'de> for Expect<f64> {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a number for `{}`", self.key)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
}

impl<'de> Typed<'de> for Cow<'de, str> {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error> {
        d.deserialize_str(expect::<Cow<'de, str>>(key))
    }
}

impl<'de> Visitor<'de> for Expect<Cow<'de, str>> {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string for `{}`", self.key)
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

impl<'de> Typed<'de> for Features<'de> {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error> {
        d.deserialize_map(expect::<Features<'de>>(key))
    }
}

impl<'de> Visitor<'de> for Expect<Features<'de>> {
    type Value = Features<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object of feature names for `{}`", self.key)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(name) = map.next_key_seed(expect::<Cow<'de, str>>("features"))? {
            let value = map.next_value_seed(FeatureSeed { name: &name })?;
            v.push((name, value));
        }
        Ok(Features(v))
    }
}

impl<'de> Typed<'de> for Texts<'de> {
    fn read<D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Self, D::Error> {
        d.deserialize_map(expect::<Texts<'de>>(key))
    }
}

impl<'de> Visitor<'de> for Expect<Texts<'de>> {
    type Value = Texts<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an object of text field names to strings for `{}`",
            self.key
        )
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::with_capacity(map.size_hint().unwrap_or(0).min(16));
        while let Some(name) = map.next_key_seed(expect::<Cow<'de, str>>("text"))? {
            let value = map.next_value_seed(expect::<Cow<'de, str>>("text"))?;
            v.push((name, value));
        }
        Ok(Texts(v))
    }
}

/// Reads the value of feature `name`: a number, a string (categorical) or null (missing).
struct FeatureSeed<'n> {
    name: &'n str,
}

impl<'de> DeserializeSeed<'de> for Expect<Cow<'de, str>> {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> DeserializeSeed<'de> for FeatureSeed<'_> {
    type Value = Feature<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FeatureSeed<'_> {
    type Value = Feature<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a number, a string or null for `features.{}`", self.name)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Feature::Number(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Feature::Number(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Feature::Number(v as f64))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Feature::Category(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Feature::Category(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Feature::Category(Cow::Owned(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Feature::Missing)
    }
}

/// The document itself must be an object (a derived struct would also take an array of
/// the values in field order).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a transaction object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(V(PhantomData)).map(Object)
    }
}

// ===== to a transaction =====

pub(crate) fn json_txn(e: &Engine, text: &str) -> Result<Transaction, risk_result> {
    let Object(t) = serde_json::from_str::<Object<TxnJson<'_>>>(text)
        .map_err(|err| fail(RISK_ERR_JSON, format!("transaction JSON: {err}")))?;
    let TxnJson {
        id,
        entity,
        timestamp_ms,
        amount,
        currency,
        mcc,
        country,
        channel,
        device,
        merchant,
        ip,
        email,
        features,
        text: texts,
    } = t;
    let mut names: Vec<&str> = features.0.iter().map(|(k, _)| &**k).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(fail(
            RISK_ERR_JSON,
            format!("transaction JSON: `features.{}` is given twice", w[0]),
        ));
    }
    let mut b = Transaction::builder(e.schema())
        .id(id)
        .entity(entity)
        .amount(amount, &currency);
    if let Some(t) = timestamp_ms {
        b = b.timestamp_ms(t);
    }
    if let Some(m) = mcc {
        let m = u16::try_from(m)
            .map_err(|_| fail(RISK_ERR_TRANSACTION, format!("invalid mcc: {m}")))?;
        b = b.mcc(m);
    }
    if let Some(c) = country {
        b = b.country(&c);
    }
    if let Some(c) = channel {
        b = b.channel(
            Channel::parse(&c).map_err(|err| fail(RISK_ERR_TRANSACTION, err.to_string()))?,
        );
    }
    if let Some(d) = device {
        b = b.device(d);
    }
    if let Some(m) = merchant {
        b = b.merchant(&m);
    }
    if let Some(x) = ip {
        b = b.ip(&x);
    }
    if let Some(x) = email {
        b = b.email(&x);
    }
    let mut text_names: Vec<&str> = texts.0.iter().map(|(k, _)| &**k).collect();
    text_names.sort_unstable();
    if let Some(w) = text_names.windows(2).find(|w| w[0] == w[1]) {
        return Err(fail(
            RISK_ERR_JSON,
            format!("transaction JSON: `text.{}` is given twice", w[0]),
        ));
    }
    for (k, v) in &texts.0 {
        b = b.text(k, v);
    }
    for (k, v) in &features.0 {
        b = match v {
            Feature::Number(x) => b.numeric(k, to_f32(k, *x)?),
            Feature::Category(c) => b.categorical(k, c),
            Feature::Missing => b.missing(k),
        };
    }
    b.build().map_err(decide_err)
}

/// Decides a transaction given as JSON: `{"id", "entity", "timestamp_ms", "amount",
/// "currency", "mcc", "country", "channel", "device", "merchant", "ip", "email", "features": {name: number | string |
/// null}, "text": {name: string}}` (`amount` and `currency` required; unknown or repeated keys rejected; `null`
/// only as a feature value, meaning missing). `RISK_ERR_JSON` when the text is not such an
/// object (the message names the key), `RISK_ERR_TRANSACTION` when the transaction rejects
/// a value.
///
/// # Safety
/// `e` is live; `json` points to `len` bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide_json(
    e: *const risk_engine,
    json: *const u8,
    len: usize,
    out: *mut risk_decision,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let text = match unsafe { bytes_arg(json, len, "json") } {
            Ok(t) => t,
            Err(r) => return r,
        };
        with_handle(e, |h| match json_txn(&h.engine, text) {
            Ok(t) => decide_one(&h.engine, &t, out),
            Err(r) => r,
        })
    })
}
