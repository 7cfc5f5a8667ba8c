//! Columnar input: an Arrow schema mapped once onto the engine's transaction fields and
//! feature slots ([`Plan`]), then each record batch's columns cast once to the few
//! array types the rows are read from ([`Columns`]), then one [`Transaction`] per row.
//!
//! Columns named like a transaction field (`id`, `entity`, `timestamp_ms` or `time`,
//! `amount`, `currency`, `mcc`, `country`, `channel`, `device`, `merchant`, `ip`,
//! `email`) fill that field; a column named like a schema feature fills its slot
//! (numbers numeric, strings categorical, null missing); `text.<name>` fills a free-text
//! field. Other columns (a label, a key the engine does not read) are ignored (listed by
//! [`Plan::ignored`]; `strict=True` refuses them). A required feature with no column, unless entity state computes
//! it, is refused before any row is decided.

use crate::errors::{input, type_err};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use arrow_schema::{DataType, Schema, TimeUnit};
use pyo3::PyResult;
use risk_core::schema::{FieldKind, Slot};
use risk_core::{Channel, DecideError, EntityKey, FeatureSchema, Transaction};
use std::collections::HashSet;
use std::sync::Arc;

use crate::fields::Field;
pub use crate::fields::TXN_FIELDS;

/// How a column's values are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Unsigned 64-bit integers (ids, devices, entities given as numbers).
    U64,
    /// Milliseconds since the epoch (a timestamp of any unit, or integers).
    Millis,
    /// Numbers as f64.
    F64,
    /// Text.
    Str,
    /// An entity: integers as they are, text hashed.
    Entity,
}

/// Where a column goes.
#[derive(Debug, Clone)]
enum Target {
    F(Field),
    Numeric(Slot),
    Categorical(Slot),
    Text(String),
}

/// A column cast for reading, downcast once per batch (not once per value).
#[derive(Debug)]
enum Col {
    U64(UInt64Array),
    I64(Int64Array),
    F64(Float64Array),
    Str(StringArray),
}

/// The mapping of one Arrow schema onto an engine's transactions.
#[derive(Debug)]
pub struct Plan {
    schema: Arc<FeatureSchema>,
    cols: Vec<(usize, Target, Want)>,
    ignored: Vec<String>,
}

fn want_of(name: &str, target: &Target, dt: &DataType) -> PyResult<Want> {
    let numeric = dt.is_numeric() || matches!(dt, DataType::Boolean | DataType::Null);
    let text = matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    ) || matches!(dt, DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View));
    let integer = dt.is_integer() || matches!(dt, DataType::Null);
    let (want, ok, expect) = match target {
        Target::F(Field::Id) | Target::F(Field::Device) | Target::F(Field::Mcc) => {
            (Want::U64, integer, "integers")
        }
        Target::F(Field::Entity) => (Want::Entity, integer || text, "integers or strings"),
        Target::F(Field::Time) => (
            Want::Millis,
            integer
                || matches!(
                    dt,
                    DataType::Timestamp(..) | DataType::Date64 | DataType::Date32
                ),
            "a timestamp or integer milliseconds since the epoch",
        ),
        Target::F(Field::Amount) | Target::Numeric(_) => (Want::F64, numeric, "numbers"),
        Target::F(Field::Currency)
        | Target::F(Field::Country)
        | Target::F(Field::Channel)
        | Target::F(Field::Merchant)
        | Target::F(Field::Ip)
        | Target::F(Field::Email)
        | Target::Categorical(_)
        | Target::Text(_) => (Want::Str, text, "strings"),
    };
    if ok {
        Ok(want)
    } else {
        Err(type_err(format!(
            "column {name:?} has type {dt}, but it needs {expect}"
        )))
    }
}

impl Plan {
    /// Maps `arrow` onto `schema`. `computed`: features entity state fills (a required one
    /// needs no column).
    pub fn new(
        schema: &Arc<FeatureSchema>,
        arrow: &Schema,
        computed: &HashSet<String>,
    ) -> PyResult<Plan> {
        let mut cols = Vec::new();
        let mut ignored = Vec::new();
        let mut seen = HashSet::new();
        let mut has_time = false;
        for (i, f) in arrow.fields().iter().enumerate() {
            let name = f.name().as_str();
            if !seen.insert(name) {
                return Err(input(format!("column {name:?} appears twice")));
            }
            let target = match name {
                _ if Field::parse(name).is_some() => {
                    let field = Field::parse(name).unwrap_or(Field::Id);
                    if field == Field::Time {
                        if has_time {
                            return Err(input(
                                "both \"time\" and \"timestamp_ms\" columns: give one event time",
                            ));
                        }
                        has_time = true;
                    }
                    Target::F(field)
                }
                _ => {
                    if let Some(t) = name.strip_prefix("text.") {
                        risk_core::TextFields::check_name(t)
                            .map_err(|e| input(format!("column {name:?}: {e}")))?;
                        Target::Text(t.to_owned())
                    } else if let Some(slot) = schema.slot(name) {
                        match schema.field(slot).kind {
                            FieldKind::Numeric => Target::Numeric(slot),
                            FieldKind::Categorical => Target::Categorical(slot),
                        }
                    } else {
                        ignored.push(name.to_owned());
                        continue;
                    }
                }
            };
            let want = want_of(name, &target, f.data_type())?;
            cols.push((i, target, want));
        }
        if !cols
            .iter()
            .any(|(_, t, _)| matches!(t, Target::F(Field::Amount)))
        {
            return Err(input(
                "missing column \"amount\" (every transaction has one)",
            ));
        }
        // Standard fields a typed column mirrors into the schema; amount and currency
        // always (a row without a currency is in USD, as for `decide`).
        let typed: HashSet<&str> = ["amount", "currency"]
            .into_iter()
            .chain(cols.iter().filter_map(|(i, t, _)| match t {
                Target::F(Field::Amount)
                | Target::F(Field::Currency)
                | Target::F(Field::Mcc)
                | Target::F(Field::Country)
                | Target::F(Field::Channel) => Some(arrow.field(*i).name().as_str()),
                _ => None,
            }))
            .collect();
        for f in schema.fields() {
            let n = f.name.as_str();
            if !f.nullable
                && !typed.contains(n)
                && !computed.contains(n)
                && arrow.field_with_name(n).is_err()
            {
                return Err(input(format!(
                    "missing column {n:?}: a required feature of the engine's schema"
                )));
            }
        }
        Ok(Plan {
            schema: Arc::clone(schema),
            cols,
            ignored,
        })
    }

    /// Columns no field or feature reads.
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// `batch`'s columns cast for reading rows.
    pub fn columns(&self, batch: &RecordBatch) -> PyResult<Columns<'_>> {
        let mut out = Vec::with_capacity(self.cols.len());
        for (i, target, want) in &self.cols {
            let a = batch.column(*i);
            let name = batch.schema_ref().field(*i).name().clone();
            let fail = |e: arrow_schema::ArrowError| input(format!("column {name:?}: {e}"));
            let u64s = |a: &ArrayRef| -> PyResult<Col> {
                // Keys and hashes only: a negative transaction id is a mistake, refused.
                let bits = matches!(target, Target::F(Field::Entity) | Target::F(Field::Device));
                if bits && a.data_type().is_signed_integer() {
                    // A signed column holds the key's 64-bit two's complement bits: Spark
                    // and the JVM have no unsigned type, so a uint64 hash travels as a
                    // long (as `decide` reads a negative int for these keys).
                    let c = cast_checked(a, &DataType::Int64).map_err(fail)?;
                    let i = c.as_primitive::<Int64Type>();
                    return Ok(Col::U64(i.unary::<_, UInt64Type>(|x| x as u64)));
                }
                let c = cast_checked(a, &DataType::UInt64).map_err(fail)?;
                Ok(Col::U64(c.as_primitive::<UInt64Type>().clone()))
            };
            let strs = |a: &ArrayRef| -> PyResult<Col> {
                let c = cast_checked(a, &DataType::Utf8).map_err(fail)?;
                Ok(Col::Str(c.as_string::<i32>().clone()))
            };
            let col = match want {
                Want::U64 => u64s(a)?,
                Want::F64 => {
                    let c = cast_checked(a, &DataType::Float64).map_err(fail)?;
                    Col::F64(c.as_primitive::<Float64Type>().clone())
                }
                Want::Str => strs(a)?,
                Want::Entity if a.data_type().is_integer() => u64s(a)?,
                Want::Entity => strs(a)?,
                Want::Millis => {
                    let ms = match a.data_type() {
                        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
                            cast_checked(a, &DataType::Timestamp(TimeUnit::Millisecond, None))
                                .and_then(|x| arrow_cast::cast(&x, &DataType::Int64))
                        }
                        _ => cast_checked(a, &DataType::Int64),
                    }
                    .map_err(fail)?;
                    Col::I64(ms.as_primitive::<Int64Type>().clone())
                }
            };
            out.push((target, col));
        }
        Ok(Columns {
            plan: self,
            cols: out,
        })
    }
}

/// A cast that refuses values it cannot represent (a negative id, an overflow) instead
/// of turning them into nulls.
fn cast_checked(a: &ArrayRef, to: &DataType) -> Result<ArrayRef, arrow_schema::ArrowError> {
    if a.data_type() == to {
        return Ok(Arc::clone(a));
    }
    let opts = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow_cast::cast_with_options(a, to, &opts)
}

/// One record batch's columns, ready to read rows from.
#[derive(Debug)]
pub struct Columns<'a> {
    plan: &'a Plan,
    cols: Vec<(&'a Target, Col)>,
}

impl Columns<'_> {
    /// The transaction of row `r`.
    pub fn txn(&self, r: usize) -> Result<Transaction, DecideError> {
        let mut b = Transaction::builder(&self.plan.schema);
        let mut amount = None;
        let mut currency = None;
        let mut text: Vec<(&str, &str)> = Vec::new();
        for (target, col) in &self.cols {
            match (target, col) {
                (Target::F(Field::Id), Col::U64(a)) => {
                    if let Some(v) = u64_at(a, r) {
                        b = b.id(v);
                    }
                }
                (Target::F(Field::Entity), Col::U64(a)) => {
                    if let Some(v) = u64_at(a, r) {
                        b = b.entity(v);
                    }
                }
                (Target::F(Field::Entity), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        b = b.entity(EntityKey::from_str_hash(s).0);
                    }
                }
                (Target::F(Field::Time), Col::I64(a)) => {
                    if let Some(v) = i64_at(a, r) {
                        b = b.timestamp_ms(v);
                    }
                }
                (Target::F(Field::Amount), Col::F64(a)) => amount = f64_at(a, r),
                (Target::F(Field::Currency), Col::Str(a)) => currency = str_at(a, r),
                (Target::F(Field::Mcc), Col::U64(a)) => {
                    if let Some(v) = u64_at(a, r) {
                        let mcc = u16::try_from(v).map_err(|_| DecideError::InvalidField {
                            field: "mcc",
                            reason: format!("{v} is not a 4-digit merchant category code"),
                        })?;
                        b = b.mcc(mcc);
                    }
                }
                (Target::F(Field::Country), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        b = b.country(s);
                    }
                }
                (Target::F(Field::Channel), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        b = b.channel(Channel::parse(s)?);
                    }
                }
                (Target::F(Field::Device), Col::U64(a)) => {
                    if let Some(v) = u64_at(a, r) {
                        b = b.device(v);
                    }
                }
                (Target::F(Field::Merchant), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        b = b.merchant(s);
                    }
                }
                (Target::F(Field::Ip), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        b = b.ip(s);
                    }
                }
                (Target::F(Field::Email), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        b = b.email(s);
                    }
                }
                (Target::Numeric(_) | Target::Categorical(_), _) => {}
                (Target::Text(name), Col::Str(a)) => {
                    if let Some(s) = str_at(a, r) {
                        text.push((name.as_str(), s));
                    }
                }
                _ => unreachable!("a column is cast to the type its target reads"),
            }
        }
        let amount = amount.ok_or(DecideError::InvalidField {
            field: "amount",
            reason: "null".into(),
        })?;
        // Features in one call: a value outside f32's range becomes infinite, which
        // `build` refuses naming the feature.
        b = b
            .amount(amount, currency.unwrap_or(DEFAULT_CURRENCY))
            .slot_values(
                self.cols
                    .iter()
                    .filter_map(|(target, col)| match (target, col) {
                        (Target::Numeric(slot), Col::F64(a)) => {
                            Some((*slot, f64_at(a, r).map_or(f32::NAN, |v| v as f32)))
                        }
                        (Target::Categorical(slot), Col::Str(a)) => Some((
                            *slot,
                            str_at(a, r).map_or(f32::NAN, |s| {
                                self.plan.schema.field(*slot).intern(s) as f32
                            }),
                        )),
                        _ => None,
                    }),
            );
        for (name, value) in text {
            b = b.text(name, value);
        }
        b.build()
    }
}

/// The currency of a row whose `currency` is null or absent, as for `Transaction`'s
/// builder default.
const DEFAULT_CURRENCY: &str = "USD";

#[inline]
fn u64_at(a: &UInt64Array, r: usize) -> Option<u64> {
    a.is_valid(r).then(|| a.value(r))
}

#[inline]
fn i64_at(a: &Int64Array, r: usize) -> Option<i64> {
    a.is_valid(r).then(|| a.value(r))
}

#[inline]
fn f64_at(a: &Float64Array, r: usize) -> Option<f64> {
    a.is_valid(r).then(|| a.value(r)).filter(|v| !v.is_nan())
}

#[inline]
fn str_at(a: &StringArray, r: usize) -> Option<&str> {
    a.is_valid(r).then(|| a.value(r))
}
