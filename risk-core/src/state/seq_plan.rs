//! `[[state.sequences]]` compiled against a schema: each sequence's key source (shared
//! with the features of the same key, so one record holds both), the values a row
//! stores and how a row is read. The record arithmetic is in [`super::record_seq`].

use super::def::MAX_SEQUENCE_LEN;
use super::def::{Current, SeqField, SequenceDef, StateConfig, MAX_SEQUENCE_FIELDS};
use super::plan::{compile_filter, CFilter, CKey, Plan};
use crate::error::ConfigError;
use crate::schema::{FeatureSchema, Slot};
use crate::seq::Sequence;
use crate::txn::Transaction;
use std::sync::Arc;

/// Sequences one configuration may define.
pub(crate) const MAX_SEQUENCES: usize = 8;

/// Where a stored value of a row comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SeqValue {
    /// A schema slot (numeric value or category id), as filled by state.
    Slot(Slot),
    /// The typed amount (no `amount` slot in the schema).
    Amount,
}

/// One column of a row as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SeqCol {
    /// Stored value `i` of the event.
    Stored(usize),
    /// Seconds since the previous event of the sequence.
    Dt,
    /// Seconds from the event to the read.
    Age,
}

/// One compiled sequence.
#[derive(Debug, Clone)]
pub(crate) struct SeqPlan {
    pub name: Arc<str>,
    pub source: usize,
    /// `N`.
    pub rows: usize,
    pub stored: Vec<SeqValue>,
    pub cols: Vec<SeqCol>,
    pub include: bool,
    pub missing: f32,
    /// Neither a stored value nor a filter reads a slot state fills (features, lists): a
    /// row is known before the store answers (the Redis store enters it in the
    /// decision's one call).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub early: bool,
    filters: Vec<CFilter>,
}

impl SeqPlan {
    /// Whether `txn` enters the sequence.
    #[inline]
    pub fn passes(&self, txn: &Transaction) -> bool {
        self.filters.iter().all(|f| f.pass(txn))
    }

    /// The values `txn` stores (NaN: missing), after state filled its features.
    #[inline]
    pub fn values(&self, txn: &Transaction, out: &mut [f32]) {
        for (o, v) in out.iter_mut().zip(&self.stored) {
            *o = match *v {
                SeqValue::Slot(s) => txn.features.get(s),
                SeqValue::Amount => txn.amount as f32,
            };
        }
    }

    /// An empty tensor of this sequence's shape.
    pub fn empty(&self) -> Sequence {
        Sequence::empty(Arc::clone(&self.name), self.rows, self.cols.len())
    }

    /// The part of the definitions' fingerprint this sequence contributes (snapshots).
    pub fn shape(&self) -> String {
        format!(
            "{}|{}|{:?}|{:?}|{}|{:?}",
            self.source, self.rows, self.stored, self.cols, self.include, self.filters
        )
    }
}

/// Every sequence of a configuration; `of_source[s]`: the sequences keyed by source `s`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeqPlans {
    pub seqs: Vec<SeqPlan>,
    pub of_source: Vec<Vec<usize>>,
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl SeqPlans {
    /// Compiles `cfg.sequences`, adding their key sources to `plan` where no feature
    /// uses them; every error names the sequence.
    pub fn compile(
        cfg: &StateConfig,
        schema: &FeatureSchema,
        plan: &mut Plan,
    ) -> Result<Self, ConfigError> {
        if cfg.sequences.len() > MAX_SEQUENCES {
            return Err(ConfigError::invalid(
                "state.sequences",
                format!("more than {MAX_SEQUENCES} sequences"),
            ));
        }
        let mut seqs: Vec<SeqPlan> = Vec::with_capacity(cfg.sequences.len());
        for (i, d) in cfg.sequences.iter().enumerate() {
            let at = format!("state.sequences[{i}] ({})", d.name);
            if !valid_name(&d.name) {
                return Err(ConfigError::invalid(
                    at,
                    "sequence names use a-z, 0-9 and _",
                ));
            }
            if seqs.iter().any(|s| *s.name == *d.name) {
                return Err(ConfigError::invalid(at, "a second sequence with this name"));
            }
            seqs.push(compile_one(d, schema, plan, &at)?);
        }
        let mut of_source = vec![Vec::new(); plan.sources.len()];
        for (i, s) in seqs.iter().enumerate() {
            of_source[s.source].push(i);
        }
        Ok(Self { seqs, of_source })
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The sequences of source `s`.
    pub fn of(&self, s: usize) -> impl Iterator<Item = &SeqPlan> {
        self.of_source
            .get(s)
            .into_iter()
            .flatten()
            .map(|&i| &self.seqs[i])
    }
}

fn compile_one(
    d: &SequenceDef,
    schema: &FeatureSchema,
    plan: &mut Plan,
    at: &str,
) -> Result<SeqPlan, ConfigError> {
    if !(1..=MAX_SEQUENCE_LEN).contains(&d.length) {
        return Err(ConfigError::invalid(
            format!("{at}.length"),
            format!("{} is not in 1..={MAX_SEQUENCE_LEN}", d.length),
        ));
    }
    if d.fields.is_empty() || d.fields.len() > MAX_SEQUENCE_FIELDS {
        return Err(ConfigError::invalid(
            format!("{at}.fields"),
            format!("give 1 to {MAX_SEQUENCE_FIELDS} fields"),
        ));
    }
    if !d.missing.is_finite() {
        return Err(ConfigError::invalid(
            format!("{at}.missing"),
            "must be a finite number",
        ));
    }
    let key = CKey::resolve(&d.key, schema, &format!("{at}.key"))?;
    let mut stored = Vec::new();
    let mut cols = Vec::with_capacity(d.fields.len());
    for f in &d.fields {
        cols.push(match f {
            SeqField::Dt => SeqCol::Dt,
            SeqField::Age => SeqCol::Age,
            SeqField::Field(name) => {
                let v = match schema.slot(name) {
                    Some(s) => SeqValue::Slot(s),
                    None if name == "amount" => SeqValue::Amount,
                    None => {
                        return Err(ConfigError::invalid(
                            format!("{at}.fields"),
                            format!("{name:?} is not dt, age or a field of the schema"),
                        ))
                    }
                };
                let i = stored.iter().position(|x| *x == v).unwrap_or_else(|| {
                    stored.push(v);
                    stored.len() - 1
                });
                SeqCol::Stored(i)
            }
        });
    }
    let filters = d
        .filters
        .iter()
        .map(|f| compile_filter(f, schema, &format!("{at}.filter")))
        .collect::<Result<Vec<_>, _>>()?;
    let source = plan.source(key, schema, at)?;
    // The windows' output slots (the lists' come after them: their hits are written
    // before the store is called, so a row holding one is known early).
    let windows = &plan.slots[..plan.slots.len() - plan.lists.len()];
    let early = stored.iter().all(|v| match v {
        SeqValue::Slot(s) => !windows.contains(s),
        SeqValue::Amount => true,
    }) && filters.iter().all(|f| !windows.contains(&f.slot()));
    Ok(SeqPlan {
        name: d.name.as_str().into(),
        source,
        rows: d.length as usize,
        stored,
        cols,
        include: d.current == Current::Include,
        missing: d.missing,
        early,
        filters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Agg, FeatureDef, Filter, KeySource};
    use std::time::Duration;

    /// Which sequences' rows are known before the store answers (`early`): none of
    /// their values or filters reads a slot the windows fill (list hits come first).
    #[test]
    fn a_row_holding_or_filtered_by_a_state_feature_is_not_early() {
        let seq = |fields: &[&str], filter_on: Option<&str>| {
            let mut d = SequenceDef::new("q", KeySource::Entity, 4, fields);
            if let Some(f) = filter_on {
                d.filters.push(Filter::Range {
                    field: f.into(),
                    gt: Some(0.0),
                    ge: None,
                    lt: None,
                    le: None,
                });
            }
            let cfg = StateConfig {
                features: vec![FeatureDef::new("n_1h", KeySource::Entity, Agg::Count)
                    .window(Duration::from_secs(3_600), 12)],
                sequences: vec![d],
                lists: vec![crate::state::ListDef {
                    name: "blocked".into(),
                    key: KeySource::Device,
                    file: None,
                }],
                ..StateConfig::default()
            };
            let schema = cfg
                .extend_schema(FeatureSchema::builder().numeric("mcc"))
                .build()
                .unwrap();
            let mut plan = Plan::compile(&cfg, &schema).unwrap();
            SeqPlans::compile(&cfg, &schema, &mut plan).unwrap().seqs[0].early
        };
        assert!(seq(&["amount", "dt", "age", "mcc"], None));
        assert!(seq(&["amount"], Some("mcc")));
        assert!(!seq(&["amount", "n_1h"], None));
        assert!(!seq(&["amount"], Some("n_1h")));
        // A list hit is written before the store is called.
        assert!(seq(&["amount", "list.blocked.device"], None));
        assert!(seq(&["amount"], Some("list.blocked.device")));
    }
}
