//! Transactions from C: [`risk_txn`] and [`risk_feature`], converted to a
//! [`Transaction`] checked against the engine's schema.

use crate::args::{str_arg, str_arg_at};
use crate::error::risk_result::{self, *};
use crate::error::{decide_err, fail};
use risk_core::{Channel, Engine, Transaction};
use std::ffi::c_char;

/// One extra feature by schema name: numeric `value`, or a categorical `category`
/// (non-NULL; `value` ignored). A NaN value means missing.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct risk_feature {
    /// Field name (NUL-terminated).
    pub name: *const c_char,
    /// Numeric value (NaN = missing).
    pub value: f64,
    /// Categorical value, or NULL for a numeric field.
    pub category: *const c_char,
}

/// A transaction. `currency` is required; `country` and `channel` may be NULL (unset);
/// `mcc` 0 and `device` 0 mean unset.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct risk_txn {
    /// Transaction id.
    pub id: u64,
    /// Card or account the transaction belongs to.
    pub entity: u64,
    /// Event time, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Amount in `currency`.
    pub amount: f64,
    /// ISO 4217 code, e.g. "USD".
    pub currency: *const c_char,
    /// Merchant category code (0 = unset).
    pub mcc: u16,
    /// ISO 3166-1 alpha-2 code, or NULL.
    pub country: *const c_char,
    /// "pos", "ecom", "atm", "moto" or "app", or NULL.
    pub channel: *const c_char,
    /// Device id (0 = unset).
    pub device: u64,
    /// Extra features.
    pub features: *const risk_feature,
    /// Number of `features` (at most 4096). Values are stored as `f32`.
    pub n_features: usize,
    /// Merchant / terminal id, or NULL (entity-state key; hashed).
    pub merchant: *const c_char,
    /// IP address, or NULL (entity-state key; hashed as text).
    pub ip: *const c_char,
    /// E-mail address, or NULL (entity-state key; trimmed, lower-cased, hashed).
    pub email: *const c_char,
}

/// Most features in one `risk_txn`.
pub const RISK_MAX_FEATURES: usize = 4096;

/// Features are stored as `f32`: a finite value outside its range is an error, not an
/// infinity.
pub(crate) fn to_f32(name: &str, v: f64) -> Result<f32, risk_result> {
    let f = v as f32;
    if v.is_finite() && !f.is_finite() {
        return Err(fail(
            RISK_ERR_TRANSACTION,
            format!("feature {name:?}: {v} is outside the f32 range features are stored in"),
        ));
    }
    Ok(f)
}

/// # Safety
/// `t` points to a valid `risk_txn` whose pointers follow its documentation.
pub(crate) unsafe fn build_txn(e: &Engine, t: &risk_txn) -> Result<Transaction, risk_result> {
    // SAFETY: `currency` comes from the caller's `risk_txn`: NULL or NUL-terminated.
    let currency = unsafe { str_arg(t.currency, "currency") }?;
    let mut b = Transaction::builder(e.schema())
        .id(t.id)
        .entity(t.entity)
        .timestamp_ms(t.timestamp_ms)
        .amount(t.amount, currency);
    if t.mcc != 0 {
        b = b.mcc(t.mcc);
    }
    if !t.country.is_null() {
        // SAFETY: `country` is non-NULL and, per `risk_txn`, NUL-terminated.
        b = b.country(unsafe { str_arg(t.country, "country") }?);
    }
    if !t.channel.is_null() {
        // SAFETY: `channel` is non-NULL and, per `risk_txn`, NUL-terminated.
        let c = unsafe { str_arg(t.channel, "channel") }?;
        let ch = Channel::parse(c).map_err(|err| fail(RISK_ERR_TRANSACTION, err.to_string()))?;
        b = b.channel(ch);
    }
    if t.device != 0 {
        b = b.device(t.device);
    }
    for (p, what) in [(t.merchant, "merchant"), (t.ip, "ip"), (t.email, "email")] {
        if !p.is_null() {
            // SAFETY: non-NULL and, per `risk_txn`, NUL-terminated.
            let v = unsafe { str_arg(p, what) }?;
            b = match what {
                "merchant" => b.merchant(v),
                "ip" => b.ip(v),
                _ => b.email(v),
            };
        }
    }
    if t.n_features > 0 {
        if t.features.is_null() {
            return Err(fail(RISK_ERR_NULL, "features is NULL with n_features > 0"));
        }
        if t.n_features > RISK_MAX_FEATURES {
            return Err(fail(
                RISK_ERR_INVALID,
                format!(
                    "n_features {} is more than {RISK_MAX_FEATURES}",
                    t.n_features
                ),
            ));
        }
        // SAFETY: the caller guarantees `n_features` readable `risk_feature`s.
        let fs = unsafe { std::slice::from_raw_parts(t.features, t.n_features) };
        for (i, f) in fs.iter().enumerate() {
            // SAFETY: a `risk_feature`'s `name` is NULL or NUL-terminated.
            let name = unsafe { str_arg_at(f.name, "name", i) }?;
            b = if f.category.is_null() {
                if f.value.is_nan() {
                    b.missing(name)
                } else {
                    b.numeric(name, to_f32(name, f.value)?)
                }
            } else {
                // SAFETY: `category` is non-NULL and, per `risk_feature`, NUL-terminated.
                b.categorical(name, unsafe { str_arg_at(f.category, "category", i) }?)
            };
        }
    }
    b.build().map_err(decide_err)
}
