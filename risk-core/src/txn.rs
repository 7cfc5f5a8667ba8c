//! Transactions.
//!
//! A [`Transaction`] carries the typed fields every payment has (id, entity, time, amount,
//! currency, merchant category, country, channel, device) and a [`Features`] vector with
//! everything else the tiers read. [`TransactionBuilder`] validates input and mirrors the
//! typed fields into the schema's standard slots ([`fields`]) when the schema has them, so
//! rules and models read `amount` or `country` like any other feature.

use crate::error::DecideError;
use crate::hash::{email_hash, key_hash, Fnv};
use crate::schema::{FeatureSchema, Features, FieldKind};
use crate::seq::Sequences;
use crate::text::TextFields;
use std::fmt;
use std::sync::Arc;

/// Names of the standard slots filled from a transaction's typed fields.
pub mod fields {
    /// Amount in major units (numeric).
    pub const AMOUNT: &str = crate::schema::STANDARD_FIELDS[0];
    /// ISO 4217 currency (categorical).
    pub const CURRENCY: &str = crate::schema::STANDARD_FIELDS[1];
    /// Merchant category code: categorical (4-digit strings) or numeric.
    pub const MCC: &str = crate::schema::STANDARD_FIELDS[2];
    /// ISO 3166 alpha-2 country of the transaction (categorical).
    pub const COUNTRY: &str = crate::schema::STANDARD_FIELDS[3];
    /// Channel name, see [`super::Channel::as_str`] (categorical).
    pub const CHANNEL: &str = crate::schema::STANDARD_FIELDS[4];
}

/// The caller's transaction id, echoed in the decision and the audit record.
/// String ids can be mapped with [`TxnId::from_str_hash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TxnId(pub u64);

impl TxnId {
    /// Stable 64-bit FNV-1a hash of a string id.
    pub fn from_str_hash(s: &str) -> Self {
        Self(Fnv::hash(s.as_bytes()))
    }
}

/// The card, account or user a transaction belongs to: keys entity state and feedback.
/// [`EntityKey::NONE`] (0, the default) means the transaction has no entity: it reads and
/// writes no entity state (unkeyed transactions never share one record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EntityKey(pub u64);

impl EntityKey {
    /// No entity (the default): no entity state is read or written.
    pub const NONE: EntityKey = EntityKey(0);

    /// Whether this is [`EntityKey::NONE`].
    pub fn is_none(self) -> bool {
        self == Self::NONE
    }

    /// Stable 64-bit FNV-1a hash of a string key (e.g. a card token).
    pub fn from_str_hash(s: &str) -> Self {
        Self(Fnv::hash(s.as_bytes()))
    }
}

/// A device fingerprint id (0 = unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceId(pub u64);

/// ISO 4217 alphabetic currency code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    /// Parses three ASCII uppercase letters.
    pub fn new(code: &str) -> Result<Self, DecideError> {
        let b = code.as_bytes();
        if b.len() != 3 || !b.iter().all(u8::is_ascii_uppercase) {
            return Err(DecideError::InvalidField {
                field: "currency",
                reason: format!("{code:?} is not a 3-letter uppercase ISO 4217 code"),
            });
        }
        Ok(Self([b[0], b[1], b[2]]))
    }
    /// The code as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl Default for Currency {
    fn default() -> Self {
        Self(*b"USD")
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// ISO 3166-1 alpha-2 country code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Country([u8; 2]);

impl Country {
    /// Parses two ASCII uppercase letters.
    pub fn new(code: &str) -> Result<Self, DecideError> {
        let b = code.as_bytes();
        if b.len() != 2 || !b.iter().all(u8::is_ascii_uppercase) {
            return Err(DecideError::InvalidField {
                field: "country",
                reason: format!("{code:?} is not a 2-letter uppercase ISO 3166 code"),
            });
        }
        Ok(Self([b[0], b[1]]))
    }
    /// The code as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("??")
    }
}

impl Default for Country {
    fn default() -> Self {
        Self(*b"US")
    }
}

impl fmt::Debug for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the payment was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Channel {
    /// Card present at a terminal.
    #[default]
    Pos,
    /// E-commerce, card not present.
    Ecom,
    /// Cash withdrawal.
    Atm,
    /// Mail or telephone order.
    Moto,
    /// In-app / wallet.
    App,
}

impl Channel {
    /// Every channel, in the order of their standard vocabulary.
    pub const ALL: [Channel; 5] = [
        Channel::Pos,
        Channel::Ecom,
        Channel::Atm,
        Channel::Moto,
        Channel::App,
    ];

    /// Lowercase name, used as the categorical value of the `channel` slot.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Pos => "pos",
            Channel::Ecom => "ecom",
            Channel::Atm => "atm",
            Channel::Moto => "moto",
            Channel::App => "app",
        }
    }

    /// Parses a name produced by [`as_str`](Self::as_str).
    pub fn parse(s: &str) -> Result<Self, DecideError> {
        Channel::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| DecideError::InvalidField {
                field: "channel",
                reason: format!("unknown channel {s:?} (expected pos, ecom, atm, moto or app)"),
            })
    }
}

/// One payment to decide on.
#[derive(Debug, Clone)]
pub struct Transaction {
    /// Caller's id.
    pub id: TxnId,
    /// Card / account / user; [`EntityKey::NONE`] (the default): no entity state.
    pub entity: EntityKey,
    /// Event time, milliseconds since the Unix epoch; [`Transaction::NO_TIME`] (0, the
    /// default) means unknown: the transaction reads and writes no entity state (it would
    /// otherwise freeze every window at 1970). Negative times are refused. In entity state,
    /// time is monotone per entity (an earlier event counts at the entity's latest time)
    /// and bounded ahead of the clock (`feedback.max_future_ms`).
    pub timestamp_ms: i64,
    /// Amount in major units of `currency`; finite and non-negative.
    pub amount: f64,
    /// Currency of `amount`.
    pub currency: Currency,
    /// ISO 18245 merchant category code.
    pub mcc: u16,
    /// Country where the transaction takes place.
    pub country: Country,
    /// Payment channel.
    pub channel: Channel,
    /// Device fingerprint.
    pub device: DeviceId,
    /// Merchant / terminal key ([`key_hash`](crate::hash::key_hash) of its id;
    /// 0 = unknown).
    pub merchant: u64,
    /// IP address key ([`key_hash`](crate::hash::key_hash); 0 = unknown).
    pub ip: u64,
    /// E-mail key ([`state::email_hash`](crate::state::email_hash): trimmed, lower-case;
    /// 0 = unknown).
    pub email: u64,
    /// Every feature the tiers read, in schema order.
    pub features: Features,
    /// Free-text fields (merchant descriptor, user agent, ...), read by text tiers.
    pub text: TextFields,
    /// The key's last events as tensors, for sequence models (`[[state.sequences]]`):
    /// filled by entity state in the decision's stage 1; empty on a caller's transaction.
    pub sequences: Sequences,
}

impl Transaction {
    /// Starts a transaction over `schema`.
    pub fn builder(schema: &Arc<FeatureSchema>) -> TransactionBuilder {
        TransactionBuilder {
            txn: Transaction {
                id: TxnId(0),
                entity: EntityKey(0),
                timestamp_ms: 0,
                amount: 0.0,
                currency: Currency::default(),
                mcc: 0,
                country: Country::default(),
                channel: Channel::default(),
                device: DeviceId(0),
                merchant: 0,
                ip: 0,
                email: 0,
                features: schema.features(),
                text: TextFields::new(),
                sequences: Sequences::default(),
            },
            err: None,
            set: [false; 4],
        }
    }

    /// `timestamp_ms` of a transaction whose event time is unknown.
    pub const NO_TIME: i64 = 0;

    /// Whether entity state applies: the transaction has an entity and an event time.
    #[inline]
    pub fn has_entity_state(&self) -> bool {
        !self.entity.is_none() && self.timestamp_ms != Self::NO_TIME
    }

    /// Checks what the engine relies on: finite non-negative amount, a non-negative event
    /// time, valid features.
    pub fn validate(&self) -> Result<(), DecideError> {
        if self.timestamp_ms < 0 {
            return Err(DecideError::InvalidField {
                field: "timestamp_ms",
                reason: format!(
                    "{} is before the Unix epoch (0 means unknown)",
                    self.timestamp_ms
                ),
            });
        }
        if !self.amount.is_finite() {
            return Err(DecideError::InvalidField {
                field: "amount",
                reason: format!("{} is not finite", self.amount),
            });
        }
        if self.amount < 0.0 {
            return Err(DecideError::InvalidField {
                field: "amount",
                reason: format!("{} is negative", self.amount),
            });
        }
        self.features.validate().map_err(DecideError::Features)
    }

    /// Copies `other` into `self`, reusing the feature buffer.
    pub fn copy_from(&mut self, other: &Transaction) {
        // Destructured so that a field added to `Transaction` cannot be left out here
        // (the engine's reused buffers would hand a tier the previous decision's value).
        let Transaction {
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
            text,
            sequences,
        } = other;
        self.id = *id;
        self.entity = *entity;
        self.timestamp_ms = *timestamp_ms;
        self.amount = *amount;
        self.currency = *currency;
        self.mcc = *mcc;
        self.country = *country;
        self.channel = *channel;
        self.device = *device;
        self.merchant = *merchant;
        self.ip = *ip;
        self.email = *email;
        self.features.copy_from(features);
        self.text.copy_from(text);
        self.sequences.clone_from(sequences);
    }
}

/// Validating builder for [`Transaction`]; the first error is reported by `build`.
#[derive(Debug)]
pub struct TransactionBuilder {
    txn: Transaction,
    err: Option<DecideError>,
    /// Which typed fields were set (currency, mcc, country, channel): only those are
    /// mirrored, so a feature set directly is not overwritten by a default.
    set: [bool; 4],
}

impl TransactionBuilder {
    fn keep(&mut self, r: Result<(), DecideError>) {
        if let (Err(e), None) = (r, &self.err) {
            self.err = Some(e);
        }
    }

    /// Transaction id.
    #[inline]
    pub fn id(mut self, id: u64) -> Self {
        self.txn.id = TxnId(id);
        self
    }
    /// Entity key.
    #[inline]
    pub fn entity(mut self, e: u64) -> Self {
        self.txn.entity = EntityKey(e);
        self
    }
    /// Event time in ms since the epoch.
    #[inline]
    pub fn timestamp_ms(mut self, t: i64) -> Self {
        self.txn.timestamp_ms = t;
        self
    }
    /// Amount and currency.
    #[inline]
    pub fn amount(mut self, amount: f64, currency: &str) -> Self {
        self.txn.amount = amount;
        self.set[0] = true;
        match Currency::new(currency) {
            Ok(c) => self.txn.currency = c,
            Err(e) => self.keep(Err(e)),
        }
        self
    }
    /// Merchant category code.
    #[inline]
    pub fn mcc(mut self, mcc: u16) -> Self {
        self.txn.mcc = mcc;
        self.set[1] = true;
        self
    }
    /// Country code.
    #[inline]
    pub fn country(mut self, c: &str) -> Self {
        self.set[2] = true;
        match Country::new(c) {
            Ok(c) => self.txn.country = c,
            Err(e) => self.keep(Err(e)),
        }
        self
    }
    /// Channel.
    #[inline]
    pub fn channel(mut self, c: Channel) -> Self {
        self.txn.channel = c;
        self.set[3] = true;
        self
    }
    /// Device id.
    #[inline]
    pub fn device(mut self, d: u64) -> Self {
        self.txn.device = DeviceId(d);
        self
    }
    /// Merchant / terminal id (hashed: [`crate::hash::key_hash`]).
    #[inline]
    pub fn merchant(mut self, id: &str) -> Self {
        self.txn.merchant = key_hash(id);
        self
    }
    /// IP address (hashed as text).
    #[inline]
    pub fn ip(mut self, ip: &str) -> Self {
        self.txn.ip = key_hash(ip);
        self
    }
    /// E-mail address (trimmed, lower-cased, hashed).
    #[inline]
    pub fn email(mut self, email: &str) -> Self {
        self.txn.email = email_hash(email);
        self
    }
    /// A named numeric attribute.
    #[inline]
    pub fn numeric(mut self, name: &str, v: f32) -> Self {
        let r = self
            .txn
            .features
            .set_numeric(name, v)
            .map_err(DecideError::Features);
        self.keep(r);
        self
    }
    /// A named attribute explicitly missing (an unknown name is an error at `build`).
    #[inline]
    pub fn missing(mut self, name: &str) -> Self {
        let r = self
            .txn
            .features
            .set_missing(name)
            .map_err(DecideError::Features);
        self.keep(r);
        self
    }
    /// A free-text field (see [`TextFields`] for the limits).
    #[inline]
    pub fn text(mut self, name: &str, value: &str) -> Self {
        let r = self.txn.text.set(name, value);
        self.keep(r);
        self
    }
    /// A feature by slot, its value already encoded (a number, a categorical id from
    /// [`Field::intern`](crate::schema::Field::intern), or `NaN` for missing): for callers
    /// that resolve names once per column (columnar input), not once per row. `build`
    /// validates it like any other value.
    #[inline]
    pub fn slot_value(mut self, slot: crate::schema::Slot, v: f32) -> Self {
        if let Some(x) = self.txn.features.values_mut().get_mut(slot.index()) {
            *x = v;
        }
        self
    }
    /// Several features by slot (see [`slot_value`](Self::slot_value)), in one call.
    #[inline]
    pub fn slot_values(
        mut self,
        values: impl IntoIterator<Item = (crate::schema::Slot, f32)>,
    ) -> Self {
        let vals = self.txn.features.values_mut();
        for (slot, v) in values {
            if let Some(x) = vals.get_mut(slot.index()) {
                *x = v;
            }
        }
        self
    }
    /// A named categorical attribute.
    #[inline]
    pub fn categorical(mut self, name: &str, v: &str) -> Self {
        let r = self
            .txn
            .features
            .set_categorical(name, v)
            .map_err(DecideError::Features);
        self.keep(r);
        self
    }

    /// Mirrors the typed fields into standard slots, validates, and returns the
    /// transaction. `amount` is always mirrored; currency, mcc, country and channel only
    /// when their typed setter was called (then they win over a value set by name).
    pub fn build(mut self) -> Result<Transaction, DecideError> {
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        let t = &mut self.txn;
        if !t.amount.is_finite() || t.amount < 0.0 {
            return Err(DecideError::InvalidField {
                field: "amount",
                reason: format!("{} is not a finite non-negative amount", t.amount),
            });
        }
        let schema = Arc::clone(t.features.schema());
        // The mcc as its 4-digit text, without an allocation (a code is below 10,000
        // in practice; a larger one keeps its digits and matches no vocabulary entry).
        let mut mcc_buf = [0u8; 5];
        let mcc_text = {
            let mut v = t.mcc;
            for d in mcc_buf.iter_mut().rev() {
                *d = b'0' + (v % 10) as u8;
                v /= 10;
            }
            let digits = std::str::from_utf8(&mcc_buf).unwrap_or("");
            if t.mcc >= 10_000 {
                digits
            } else {
                &digits[1..]
            }
        };
        let mirror: [(&str, Mirror<'_>, bool); 5] = [
            (fields::AMOUNT, Mirror::Num(t.amount as f32), true),
            (
                fields::CURRENCY,
                Mirror::Cat(t.currency.as_str()),
                self.set[0],
            ),
            (
                fields::MCC,
                Mirror::Both(t.mcc as f32, mcc_text),
                self.set[1],
            ),
            (
                fields::COUNTRY,
                Mirror::Cat(t.country.as_str()),
                self.set[2],
            ),
            (
                fields::CHANNEL,
                Mirror::Cat(t.channel.as_str()),
                self.set[3],
            ),
        ];
        for ((name, m, wanted), slot) in mirror.into_iter().zip(*schema.standard()) {
            let Some(slot) = slot.filter(|_| wanted) else {
                continue;
            };
            let field = schema.field(slot);
            let v = match (&field.kind, m) {
                (FieldKind::Numeric, Mirror::Num(x) | Mirror::Both(x, _)) => x,
                (FieldKind::Categorical, Mirror::Cat(s) | Mirror::Both(_, s)) => {
                    field.intern(s) as f32
                }
                _ => {
                    return Err(DecideError::InvalidField {
                        field: "schema",
                        reason: format!("standard field {name:?} has the wrong kind"),
                    })
                }
            };
            t.features.values_mut()[slot.index()] = v;
        }
        t.validate()?;
        Ok(self.txn)
    }
}

enum Mirror<'a> {
    Num(f32),
    Cat(&'a str),
    Both(f32, &'a str),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Arc<FeatureSchema> {
        FeatureSchema::builder()
            .numeric_required("amount")
            .categorical("country", &["US", "GB"])
            .categorical("channel", &["pos", "ecom"])
            .numeric("mcc")
            .numeric("velocity_1h")
            .build()
            .unwrap()
    }

    #[test]
    fn builder_mirrors_standard_fields() {
        let s = schema();
        let t = Transaction::builder(&s)
            .id(7)
            .amount(12.5, "EUR")
            .country("GB")
            .channel(Channel::Ecom)
            .mcc(5411)
            .numeric("velocity_1h", 3.0)
            .build()
            .unwrap();
        assert_eq!(t.features.by_name("amount"), Some(12.5));
        assert_eq!(t.features.by_name("country"), Some(2.0));
        assert_eq!(t.features.by_name("channel"), Some(2.0));
        assert_eq!(t.features.by_name("mcc"), Some(5411.0));
        assert_eq!(t.currency.as_str(), "EUR");
    }

    #[test]
    fn builder_rejects_bad_input() {
        let s = schema();
        let e = Transaction::builder(&s).amount(f64::NAN, "USD").build();
        assert!(matches!(
            e,
            Err(DecideError::InvalidField {
                field: "amount",
                ..
            })
        ));
        let e = Transaction::builder(&s).amount(-1.0, "USD").build();
        assert!(matches!(
            e,
            Err(DecideError::InvalidField {
                field: "amount",
                ..
            })
        ));
        let e = Transaction::builder(&s).amount(1.0, "usd").build();
        assert!(matches!(
            e,
            Err(DecideError::InvalidField {
                field: "currency",
                ..
            })
        ));
        let e = Transaction::builder(&s).country("USA").build();
        assert!(matches!(
            e,
            Err(DecideError::InvalidField {
                field: "country",
                ..
            })
        ));
        let e = Transaction::builder(&s).numeric("nope", 1.0).build();
        assert!(e.unwrap_err().to_string().contains("nope"));
        assert!(Channel::parse("web").is_err());
    }
}
