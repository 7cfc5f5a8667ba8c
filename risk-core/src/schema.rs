//! Feature schema and feature vectors.
//!
//! A [`FeatureSchema`] names the `f32` slots every tier reads. It is built once, frozen and
//! shared (`Arc`): rule compilers and model loaders resolve names to [`Slot`]s at load time
//! and then index by position on the hot path. Categorical fields carry a fixed vocabulary,
//! interned to small integer ids stored exactly in the `f32` slot (`0` is reserved for
//! values outside the vocabulary, see [`OTHER`]).
//!
//! Missing values are explicit: `NaN` in a slot means missing. Whether a field may be
//! missing is part of the schema; [`Features::validate`] rejects a missing value in a
//! required field and any non-finite value other than the missing marker.

pub use crate::hash::Fnv;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// The interned id of a categorical value outside the field's vocabulary.
pub const OTHER: u32 = 0;

/// The standard fields a transaction's typed fields mirror into, in the order of
/// [`FeatureSchema::standard`] (`txn::fields` names each).
pub const STANDARD_FIELDS: [&str; 5] = ["amount", "currency", "mcc", "country", "channel"];

/// Largest vocabulary a categorical field may have (ids must be exact in `f32`).
pub const MAX_VOCAB: usize = 1 << 20;

/// Index of a field in a [`FeatureSchema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub u32);

impl Slot {
    /// The slot as a `usize` index.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The kind of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A real-valued feature.
    Numeric,
    /// A categorical feature with a fixed vocabulary; the slot holds the interned id.
    Categorical,
}

/// One field of a schema.
#[derive(Debug, Clone)]
pub struct Field {
    /// Unique name.
    pub name: String,
    /// Numeric or categorical.
    pub kind: FieldKind,
    /// Whether `NaN` (missing) is allowed in this slot.
    pub nullable: bool,
    vocab: Vec<String>,
    ids: HashMap<String, u32, foldhash::fast::RandomState>,
}

impl Field {
    /// The vocabulary of a categorical field, in id order starting at id 1 (empty for numeric).
    pub fn vocab(&self) -> &[String] {
        &self.vocab
    }

    /// The interned id of `value`, or [`OTHER`] when it is outside the vocabulary.
    pub fn intern(&self, value: &str) -> u32 {
        self.ids.get(value).copied().unwrap_or(OTHER)
    }

    /// The id of `value` if it is in the vocabulary.
    pub fn lookup(&self, value: &str) -> Option<u32> {
        self.ids.get(value).copied()
    }

    /// The value of an interned id (`None` for [`OTHER`] or an unknown id).
    pub fn value_of(&self, id: u32) -> Option<&str> {
        if id == OTHER {
            return None;
        }
        self.vocab.get(id as usize - 1).map(String::as_str)
    }
}

/// Named `f32` slots shared by every tier. Build with [`FeatureSchema::builder`].
pub struct FeatureSchema {
    fields: Vec<Field>,
    by_name: HashMap<String, Slot, foldhash::fast::RandomState>,
    fingerprint: u64,
    /// Slots that must not be missing.
    required: Vec<usize>,
    /// Categorical slots and their vocabulary sizes.
    categorical: Vec<(usize, usize)>,
    /// The slots of the standard fields a transaction's typed fields mirror into
    /// (amount, currency, mcc, country, channel; see [`FeatureSchema::standard`]).
    standard: [Option<Slot>; 5],
}

impl fmt::Debug for FeatureSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeatureSchema")
            .field(
                "fields",
                &self.fields.iter().map(|x| &x.name).collect::<Vec<_>>(),
            )
            .field("fingerprint", &format_args!("{:016x}", self.fingerprint))
            .finish()
    }
}

impl FeatureSchema {
    /// Starts a schema.
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder::default()
    }

    /// The slot of a field.
    pub fn slot(&self, name: &str) -> Option<Slot> {
        self.by_name.get(name).copied()
    }

    /// The slots of the standard fields, in the order amount, currency, mcc, country,
    /// channel (`None`: not in this schema), found once when the schema was built: a
    /// transaction's `build` mirrors its typed fields into them without a lookup by name.
    #[inline]
    pub fn standard(&self) -> &[Option<Slot>; 5] {
        &self.standard
    }

    /// The slot of a field, or an error naming it.
    pub fn require(&self, name: &str) -> Result<Slot, SchemaError> {
        self.slot(name)
            .ok_or_else(|| SchemaError::UnknownField(name.to_owned()))
    }

    /// The field at a slot.
    pub fn field(&self, slot: Slot) -> &Field {
        &self.fields[slot.index()]
    }

    /// All fields in slot order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the schema has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// A stable 64-bit hash of names, kinds, nullability and vocabularies. Two schemas
    /// with the same fingerprint lay out features identically.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The schema as the `[schema]` table of `risk.toml` (round-trips through
    /// [`Engine::from_config`](crate::Engine::from_config) to the same fingerprint).
    pub fn to_toml(&self) -> String {
        let quote = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
        let mut out = String::from("[schema]\nfields = [\n");
        for f in &self.fields {
            match f.kind {
                FieldKind::Numeric => {
                    out += &format!(
                        "  {{ name = {}, kind = \"numeric\", required = {} }},\n",
                        quote(&f.name),
                        !f.nullable
                    )
                }
                FieldKind::Categorical => {
                    let vocab: Vec<String> = f.vocab.iter().map(|v| quote(v)).collect();
                    out += &format!(
                        "  {{ name = {}, kind = \"categorical\", vocab = [{}] }},\n",
                        quote(&f.name),
                        vocab.join(", ")
                    );
                }
            }
        }
        out += "]\n";
        out
    }

    /// A new feature vector with every slot missing.
    pub fn features(self: &Arc<Self>) -> Features {
        Features {
            schema: Arc::clone(self),
            values: vec![f32::NAN; self.len()].into_boxed_slice(),
        }
    }
}

/// Builder for [`FeatureSchema`]; field order is slot order.
#[derive(Debug, Default)]
pub struct SchemaBuilder {
    fields: Vec<(String, FieldKind, bool, Vec<String>)>,
}

impl SchemaBuilder {
    /// Adds a numeric field that may be missing.
    pub fn numeric(mut self, name: &str) -> Self {
        self.fields
            .push((name.to_owned(), FieldKind::Numeric, true, Vec::new()));
        self
    }

    /// Adds a numeric field that must always be present.
    pub fn numeric_required(mut self, name: &str) -> Self {
        self.fields
            .push((name.to_owned(), FieldKind::Numeric, false, Vec::new()));
        self
    }

    /// Adds a categorical field with its vocabulary (ids 1..=n in the given order).
    pub fn categorical<S: AsRef<str>>(mut self, name: &str, vocab: &[S]) -> Self {
        self.fields.push((
            name.to_owned(),
            FieldKind::Categorical,
            true,
            vocab.iter().map(|s| s.as_ref().to_owned()).collect(),
        ));
        self
    }

    /// Freezes the schema.
    ///
    /// Errors: an empty or duplicate name, a name with characters other than
    /// `[A-Za-z0-9_.]`, a duplicate or empty vocabulary entry, an oversized vocabulary.
    pub fn build(self) -> Result<Arc<FeatureSchema>, SchemaError> {
        let mut fields = Vec::with_capacity(self.fields.len());
        let mut by_name = HashMap::with_hasher(foldhash::fast::RandomState::default());
        let mut h = Fnv::new();
        for (i, (name, kind, nullable, vocab)) in self.fields.into_iter().enumerate() {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                return Err(SchemaError::InvalidName(name));
            }
            if by_name.insert(name.clone(), Slot(i as u32)).is_some() {
                return Err(SchemaError::DuplicateField(name));
            }
            if vocab.len() > MAX_VOCAB {
                return Err(SchemaError::VocabTooLarge {
                    field: name,
                    len: vocab.len(),
                });
            }
            let mut ids = HashMap::with_capacity_and_hasher(
                vocab.len(),
                foldhash::fast::RandomState::default(),
            );
            for (j, v) in vocab.iter().enumerate() {
                if v.is_empty() || ids.insert(v.clone(), j as u32 + 1).is_some() {
                    return Err(SchemaError::BadVocab {
                        field: name,
                        value: v.clone(),
                    });
                }
            }
            h.write(name.as_bytes());
            h.write(&[matches!(kind, FieldKind::Categorical) as u8, nullable as u8]);
            for v in &vocab {
                h.write(v.as_bytes());
                h.write(&[0xff]);
            }
            fields.push(Field {
                name,
                kind,
                nullable,
                vocab,
                ids,
            });
        }
        let required = (0..fields.len()).filter(|&i| !fields[i].nullable).collect();
        let categorical = (0..fields.len())
            .filter(|&i| fields[i].kind == FieldKind::Categorical)
            .map(|i| (i, fields[i].vocab.len()))
            .collect();
        let standard = STANDARD_FIELDS.map(|n| by_name.get(n).copied());
        Ok(Arc::new(FeatureSchema {
            fields,
            by_name,
            fingerprint: h.finish(),
            required,
            categorical,
            standard,
        }))
    }
}

// ===== Errors =====

/// A bad schema or a value that does not fit it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A name used twice.
    #[error("duplicate feature name {0:?}")]
    DuplicateField(String),
    /// A name that is empty or has characters outside `[A-Za-z0-9_.]`.
    #[error(
        "invalid feature name {0:?} (use letters, digits, '_' and '.', not starting with a digit)"
    )]
    InvalidName(String),
    /// A field the schema does not have.
    #[error("unknown feature {0:?}")]
    UnknownField(String),
    /// A numeric operation on a categorical field or the reverse.
    #[error("feature {field:?} is not {expected}")]
    KindMismatch {
        /// The field.
        field: String,
        /// What the operation needed.
        expected: &'static str,
    },
    /// An infinite or NaN value given as a real value.
    #[error("feature {field:?} has a non-finite value")]
    NonFinite {
        /// The field.
        field: String,
    },
    /// A required field is missing.
    #[error("required feature {0:?} is missing")]
    MissingRequired(String),
    /// A categorical slot holds something that is not a vocabulary id.
    #[error("feature {field:?} holds {id}, which is not a category id")]
    BadCategoryId {
        /// The field.
        field: String,
        /// The offending value.
        id: f32,
    },
    /// An empty or repeated vocabulary value.
    #[error("categorical feature {field:?} has an empty or repeated value {value:?}")]
    BadVocab {
        /// The field.
        field: String,
        /// The value.
        value: String,
    },
    /// A vocabulary above [`crate::schema::MAX_VOCAB`].
    #[error(
        "categorical feature {field:?} has {len} values (max {})",
        crate::schema::MAX_VOCAB
    )]
    VocabTooLarge {
        /// The field.
        field: String,
        /// Its size.
        len: usize,
    },
}

impl SchemaError {
    /// Stable numeric code.
    pub fn code(&self) -> u32 {
        match self {
            SchemaError::DuplicateField(_) => 101,
            SchemaError::InvalidName(_) => 102,
            SchemaError::UnknownField(_) => 103,
            SchemaError::KindMismatch { .. } => 104,
            SchemaError::NonFinite { .. } => 105,
            SchemaError::MissingRequired(_) => 106,
            SchemaError::BadCategoryId { .. } => 107,
            SchemaError::BadVocab { .. } => 108,
            SchemaError::VocabTooLarge { .. } => 109,
        }
    }
}

// ===== Features =====

/// Feature values in schema order; `NaN` marks a missing value.
#[derive(Clone)]
pub struct Features {
    schema: Arc<FeatureSchema>,
    values: Box<[f32]>,
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (field, v) in self.schema.fields.iter().zip(self.values.iter()) {
            m.entry(&field.name, v);
        }
        m.finish()
    }
}

impl Features {
    /// The schema these values follow.
    pub fn schema(&self) -> &Arc<FeatureSchema> {
        &self.schema
    }

    /// All values in slot order.
    #[inline]
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Mutable values in slot order (NaN = missing).
    #[inline]
    pub fn values_mut(&mut self) -> &mut [f32] {
        &mut self.values
    }

    /// Value at a slot (`NaN` if missing).
    #[inline]
    pub fn get(&self, slot: Slot) -> f32 {
        self.values[slot.index()]
    }

    /// Value at a slot, `None` if missing.
    #[inline]
    pub fn value(&self, slot: Slot) -> Option<f32> {
        let v = self.values[slot.index()];
        (!v.is_nan()).then_some(v)
    }

    /// Value of a named field, `None` if missing or not in the schema.
    pub fn by_name(&self, name: &str) -> Option<f32> {
        self.schema.slot(name).and_then(|s| self.value(s))
    }

    /// Sets a numeric value by name.
    pub fn set_numeric(&mut self, name: &str, v: f32) -> Result<(), SchemaError> {
        let slot = self.schema.require(name)?;
        if self.schema.field(slot).kind != FieldKind::Numeric {
            return Err(SchemaError::KindMismatch {
                field: name.to_owned(),
                expected: "numeric",
            });
        }
        if !v.is_finite() {
            return Err(SchemaError::NonFinite {
                field: name.to_owned(),
            });
        }
        self.values[slot.index()] = v;
        Ok(())
    }

    /// Sets a categorical value by name (interned; values outside the vocabulary become [`OTHER`]).
    pub fn set_categorical(&mut self, name: &str, v: &str) -> Result<(), SchemaError> {
        let slot = self.schema.require(name)?;
        let field = self.schema.field(slot);
        if field.kind != FieldKind::Categorical {
            return Err(SchemaError::KindMismatch {
                field: name.to_owned(),
                expected: "categorical",
            });
        }
        self.values[slot.index()] = field.intern(v) as f32;
        Ok(())
    }

    /// Marks a field missing.
    pub fn set_missing(&mut self, name: &str) -> Result<(), SchemaError> {
        let slot = self.schema.require(name)?;
        self.values[slot.index()] = f32::NAN;
        Ok(())
    }

    /// Copies values from `other` without reallocating when the lengths match.
    pub fn copy_from(&mut self, other: &Features) {
        if !Arc::ptr_eq(&self.schema, &other.schema) {
            self.schema = Arc::clone(&other.schema);
        }
        if self.values.len() == other.values.len() {
            self.values.copy_from_slice(&other.values);
        } else {
            self.values = other.values.clone();
        }
    }

    /// Checks every slot: missing only where the field is nullable, no infinities, and
    /// categorical ids inside the vocabulary. Runs on every decision, so the common
    /// (valid) case is a few tight loops over precomputed slot lists.
    pub fn validate(&self) -> Result<(), SchemaError> {
        let s = &*self.schema;
        let v = &self.values;
        if v.iter().any(|x| x.is_infinite()) {
            let i = v.iter().position(|x| x.is_infinite()).unwrap_or(0);
            return Err(SchemaError::NonFinite {
                field: s.fields[i].name.clone(),
            });
        }
        for &i in &s.required {
            if v[i].is_nan() {
                return Err(SchemaError::MissingRequired(s.fields[i].name.clone()));
            }
        }
        for &(i, n) in &s.categorical {
            let x = v[i];
            // A whole number in 0..=n: `x as u32` truncates (saturating), so it equals
            // `x` exactly for whole numbers below 2^32; no `fract` (a libm `truncf` call
            // on baseline x86-64, on every decision).
            let k = x as u32;
            if !x.is_nan() && (x < 0.0 || k as f32 != x || k as usize > n) {
                return Err(SchemaError::BadCategoryId {
                    field: s.fields[i].name.clone(),
                    id: x,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_interns() {
        let s = FeatureSchema::builder()
            .numeric("amount")
            .categorical("country", &["US", "GB"])
            .build()
            .unwrap();
        assert_eq!(s.len(), 2);
        let c = s.field(s.slot("country").unwrap());
        assert_eq!(c.intern("GB"), 2);
        assert_eq!(c.intern("FR"), OTHER);
        assert_eq!(c.value_of(1), Some("US"));
        let mut f = s.features();
        f.set_categorical("country", "US").unwrap();
        assert_eq!(f.by_name("country"), Some(1.0));
        assert_eq!(f.by_name("amount"), None);
        f.validate().unwrap();
    }

    #[test]
    fn rejects_bad_schemas() {
        let dup = FeatureSchema::builder().numeric("a").numeric("a").build();
        assert!(matches!(dup, Err(SchemaError::DuplicateField(n)) if n == "a"));
        let bad = FeatureSchema::builder().numeric("a b").build();
        assert!(matches!(bad, Err(SchemaError::InvalidName(_))));
        let voc = FeatureSchema::builder()
            .categorical("c", &["x", "x"])
            .build();
        assert!(matches!(voc, Err(SchemaError::BadVocab { .. })));
    }

    #[test]
    fn validate_catches_bad_values() {
        let s = FeatureSchema::builder()
            .numeric_required("amount")
            .categorical("c", &["x"])
            .build()
            .unwrap();
        let mut f = s.features();
        assert!(matches!(f.validate(), Err(SchemaError::MissingRequired(_))));
        f.values_mut()[0] = f32::INFINITY;
        assert!(matches!(f.validate(), Err(SchemaError::NonFinite { .. })));
        f.values_mut()[0] = 1.0;
        f.values_mut()[1] = 7.0;
        assert!(matches!(
            f.validate(),
            Err(SchemaError::BadCategoryId { .. })
        ));
        assert!(f.set_numeric("amount", f32::NAN).is_err());
        assert!(f.set_numeric("nope", 1.0).is_err());
        assert!(f.set_categorical("amount", "x").is_err());
    }
}
