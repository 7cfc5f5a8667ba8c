//! Decisions as Arrow columns: one record batch per chunk of rows, with the schema of
//! [`schema`]. Low-cardinality text (action, tier, versions, ...) is dictionary-encoded,
//! so pandas reads it as a category and polars as a categorical.

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Float32Builder, Int64Builder, StringBuilder, UInt64Builder,
};
use arrow_array::types::Int16Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int16Array, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use risk_core::{DecideError, Decision, Escalation};
use std::sync::{Arc, OnceLock};

fn dict() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int16), Box::new(DataType::Utf8))
}

fn reason_fields() -> Fields {
    Fields::from(vec![
        Field::new("code", DataType::Utf8, false),
        Field::new("weight", DataType::Float32, false),
    ])
}

/// The columns of `decide_batch`'s result; `error` (nullable text) last when `with_error`.
pub fn schema(with_error: bool) -> SchemaRef {
    static PLAIN: OnceLock<SchemaRef> = OnceLock::new();
    static WITH_ERROR: OnceLock<SchemaRef> = OnceLock::new();
    let make = |with_error: bool| {
        let mut f = vec![
            Field::new("txn", DataType::UInt64, with_error),
            Field::new("entity", DataType::UInt64, with_error),
            Field::new("action", dict(), true),
            Field::new("score", DataType::Float32, true),
            Field::new("tier", dict(), true),
            Field::new("fallback", dict(), true),
            Field::new("hard_rule", DataType::Boolean, true),
            Field::new("rule_score", DataType::Float32, true),
            Field::new("model_score", DataType::Float32, true),
            Field::new("threshold_shift", DataType::Float32, true),
            Field::new("escalation", dict(), true),
            Field::new(
                "reasons",
                DataType::List(Arc::new(Field::new(
                    "item",
                    DataType::Struct(reason_fields()),
                    false,
                ))),
                true,
            ),
            Field::new(
                "rules_fired",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))),
                true,
            ),
            Field::new(
                "rules_shadow",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))),
                true,
            ),
            Field::new("rules_version", dict(), true),
            Field::new("fast_version", dict(), true),
            Field::new("deep_version", dict(), true),
            Field::new("state", dict(), true),
            Field::new("lists_stale", DataType::Boolean, true),
            Field::new("rules_ns", DataType::UInt64, true),
            Field::new("fast_ns", DataType::UInt64, true),
            Field::new("total_ns", DataType::UInt64, true),
            Field::new("decided_at_ms", DataType::Int64, true),
        ];
        if with_error {
            f.push(Field::new("error", DataType::Utf8, true));
        }
        Arc::new(Schema::new(f))
    };
    if with_error {
        Arc::clone(WITH_ERROR.get_or_init(|| make(true)))
    } else {
        Arc::clone(PLAIN.get_or_init(|| make(false)))
    }
}

/// `escalation` as text: `none`, `enqueued` or `shed`.
pub fn escalation_str(e: Escalation) -> &'static str {
    match e {
        Escalation::None => "none",
        Escalation::Enqueued(_) => "enqueued",
        Escalation::Shed(_) => "shed",
    }
}

/// A list column of text, built from its values and offsets.
struct TextLists {
    values: StringBuilder,
    offsets: Vec<i32>,
    valid: Vec<bool>,
}

impl TextLists {
    fn new(rows: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        TextLists {
            values: StringBuilder::new(),
            offsets,
            valid: Vec::with_capacity(rows),
        }
    }
    fn push<'a>(&mut self, items: Option<impl Iterator<Item = &'a str>>) {
        if let Some(items) = items {
            for s in items {
                self.values.append_value(s);
            }
        }
        self.valid.push(true);
        self.offsets.push(self.values.len() as i32);
    }
    fn push_null(&mut self) {
        self.valid.push(false);
        self.offsets.push(self.values.len() as i32);
    }
    fn finish(mut self) -> ArrayRef {
        let item = Arc::new(Field::new("item", DataType::Utf8, false));
        let nulls = self.valid.iter().any(|v| !v).then(|| self.valid.into());
        Arc::new(ListArray::new(
            item,
            OffsetBuffer::new(self.offsets.into()),
            Arc::new(self.values.finish()),
            nulls,
        ))
    }
}

/// A dictionary-encoded text column of few distinct values, built without hashing each
/// row's text (an `arrow` `StringDictionaryBuilder` hashes every value it appends): the
/// values are compared by key, a linear search over the handful seen so far.
struct SmallDict<K: PartialEq + Copy> {
    seen: Vec<(K, String)>,
    keys: Vec<Option<i16>>,
}

impl<K: PartialEq + Copy> SmallDict<K> {
    fn new(rows: usize) -> Self {
        SmallDict {
            seen: Vec::new(),
            keys: Vec::with_capacity(rows),
        }
    }
    /// Appends the value of `key`, made by `text` the first time it is seen.
    fn append(&mut self, key: K, text: impl FnOnce() -> String) {
        let i = match self.seen.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.seen.push((key, text()));
                self.seen.len() - 1
            }
        };
        // A column's distinct values are a few enum names or version ids.
        self.keys.push(Some(i16::try_from(i).unwrap_or(i16::MAX)));
    }
    fn append_null(&mut self) {
        self.keys.push(None);
    }
    fn finish(self) -> ArrayRef {
        let values = StringArray::from_iter_values(self.seen.iter().map(|(_, v)| v.as_str()));
        let keys = Int16Array::from(self.keys);
        Arc::new(
            DictionaryArray::<Int16Type>::try_new(keys, Arc::new(values))
                .expect("every key indexes a value"),
        )
    }
}

/// A [`SmallDict`] of static names (enum variants' `as_str`).
type NameDict = SmallDict<&'static str>;

impl NameDict {
    fn push(&mut self, s: &'static str) {
        self.append(s, || s.to_owned());
    }
    fn push_opt(&mut self, s: Option<&'static str>) {
        match s {
            Some(s) => self.push(s),
            None => self.append_null(),
        }
    }
}

/// Builds the record batch of one chunk's results; `with_error`: failed rows are null
/// decisions with their error's text (otherwise there are none: the caller raised).
pub fn batch(
    results: &[Result<Decision, DecideError>],
    first_row: usize,
    with_error: bool,
) -> RecordBatch {
    let n = results.len();
    let mut txn = UInt64Builder::with_capacity(n);
    let mut entity = UInt64Builder::with_capacity(n);
    let mut action = NameDict::new(n);
    let mut score = Float32Builder::with_capacity(n);
    let mut tier = NameDict::new(n);
    let mut fallback = NameDict::new(n);
    let mut hard = BooleanBuilder::with_capacity(n);
    let mut rule_score = Float32Builder::with_capacity(n);
    let mut model_score = Float32Builder::with_capacity(n);
    let mut shift = Float32Builder::with_capacity(n);
    let mut esc = NameDict::new(n);
    let mut r_code = StringBuilder::new();
    let mut r_weight = Float32Builder::new();
    let mut r_offsets: Vec<i32> = Vec::with_capacity(n + 1);
    r_offsets.push(0);
    let mut r_valid = Vec::with_capacity(n);
    let mut fired = TextLists::new(n);
    let mut shadow = TextLists::new(n);
    let mut v_rules: SmallDict<risk_core::VersionId> = SmallDict::new(n);
    let mut v_fast: SmallDict<risk_core::VersionId> = SmallDict::new(n);
    let mut v_deep: SmallDict<risk_core::VersionId> = SmallDict::new(n);
    let mut state = NameDict::new(n);
    let mut stale = BooleanBuilder::with_capacity(n);
    let mut rules_ns = UInt64Builder::with_capacity(n);
    let mut fast_ns = UInt64Builder::with_capacity(n);
    let mut total_ns = UInt64Builder::with_capacity(n);
    let mut at = Int64Builder::with_capacity(n);
    let mut error = StringBuilder::new();
    for (k, r) in results.iter().enumerate() {
        match r {
            Ok(d) => {
                txn.append_value(d.txn.0);
                entity.append_value(d.entity.0);
                action.push(d.action.as_str());
                score.append_value(d.score);
                tier.push(d.tier.as_str());
                fallback.push_opt(d.fallback.map(|f| f.as_str()));
                hard.append_value(d.hard_rule);
                rule_score.append_value(d.rule_score);
                model_score.append_option(d.model_score);
                shift.append_value(d.threshold_shift);
                esc.push(escalation_str(d.escalation));
                for reason in d.reasons.iter() {
                    r_code.append_value(reason.code.name());
                    r_weight.append_value(reason.weight);
                }
                r_offsets.push(r_code.len() as i32);
                r_valid.push(true);
                fired.push(Some(d.rules_fired.iter()));
                shadow.push(Some(d.rules_shadow.iter()));
                let v = d.versions;
                v_rules.append(v.rules, || v.rules.to_string());
                match v.fast {
                    Some(f) => v_fast.append(f, || f.to_string()),
                    None => v_fast.append_null(),
                }
                match v.deep {
                    Some(x) => v_deep.append(x, || x.to_string()),
                    None => v_deep.append_null(),
                }
                state.push(d.state.as_str());
                stale.append_value(d.lists_stale);
                rules_ns.append_value(d.timings.rules_ns);
                fast_ns.append_value(d.timings.fast_ns);
                total_ns.append_value(d.timings.total_ns);
                at.append_value(d.decided_at_ms);
                if with_error {
                    error.append_null();
                }
            }
            Err(e) => {
                txn.append_null();
                entity.append_null();
                action.append_null();
                score.append_null();
                tier.append_null();
                fallback.append_null();
                hard.append_null();
                rule_score.append_null();
                model_score.append_null();
                shift.append_null();
                esc.append_null();
                r_offsets.push(r_code.len() as i32);
                r_valid.push(false);
                fired.push_null();
                shadow.push_null();
                v_rules.append_null();
                v_fast.append_null();
                v_deep.append_null();
                state.append_null();
                stale.append_null();
                rules_ns.append_null();
                fast_ns.append_null();
                total_ns.append_null();
                at.append_null();
                error.append_value(format!("row {}: {e}", first_row + k));
            }
        }
    }
    let reasons = StructArray::new(
        reason_fields(),
        vec![Arc::new(r_code.finish()), Arc::new(r_weight.finish())],
        None,
    );
    let r_nulls = r_valid.iter().any(|v| !v).then(|| r_valid.into());
    let reasons = ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(reason_fields()), false)),
        OffsetBuffer::new(r_offsets.into()),
        Arc::new(reasons),
        r_nulls,
    );
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(txn.finish()),
        Arc::new(entity.finish()),
        action.finish(),
        Arc::new(score.finish()),
        tier.finish(),
        fallback.finish(),
        Arc::new(hard.finish()),
        Arc::new(rule_score.finish()),
        Arc::new(model_score.finish()),
        Arc::new(shift.finish()),
        esc.finish(),
        Arc::new(reasons),
        fired.finish(),
        shadow.finish(),
        v_rules.finish(),
        v_fast.finish(),
        v_deep.finish(),
        state.finish(),
        Arc::new(stale.finish()),
        Arc::new(rules_ns.finish()),
        Arc::new(fast_ns.finish()),
        Arc::new(total_ns.finish()),
        Arc::new(at.finish()),
    ];
    if with_error {
        cols.push(Arc::new(error.finish()));
    }
    RecordBatch::try_new(schema(with_error), cols).expect("columns built to the schema")
}
