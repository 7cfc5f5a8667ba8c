//! A [`StateConfig`] compiled against a schema: key sources, shared groups, output slots.
//!
//! Features with the same key, window, buckets, filters and value share one group (one
//! bucket ring): `card count 1h`, `card sum 1h` and `card avg 1h` cost one ring. The plan
//! turns a transaction into a [`Request`] (keys, and for each group whether the event
//! passes and what it adds) and a store's [`GroupRead`]s back into feature values; the
//! stores only do bucket arithmetic, identically.

use super::def::{Agg, Current, FeatureDef, Filter, KeySource, ListDef, StateConfig};
use super::group::{Cols, GroupInput, GroupRead, GroupSpec, Kind};
use crate::decision::Action;
use crate::error::ConfigError;
use crate::hash::splitmix;
use crate::schema::{FeatureSchema, FieldKind, Slot};
use crate::txn::Transaction;
use std::collections::HashMap;

/// Key sources one plan may use.
pub(crate) const MAX_SOURCES: usize = 8;
/// Groups one plan may use.
pub(crate) const MAX_GROUPS: usize = 24;
/// Lists one plan may use.
pub const MAX_LISTS: usize = 64;
/// Buckets one window may have.
pub const MAX_BUCKETS: u32 = 1_440;

/// A key source resolved against the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CKey {
    Entity,
    Device,
    Merchant,
    Ip,
    Email,
    Country,
    Slot(Slot),
}

impl CKey {
    pub(super) fn resolve(
        k: &KeySource,
        schema: &FeatureSchema,
        at: &str,
    ) -> Result<Self, ConfigError> {
        Ok(match k {
            KeySource::Entity => CKey::Entity,
            KeySource::Device => CKey::Device,
            KeySource::Merchant => CKey::Merchant,
            KeySource::Ip => CKey::Ip,
            KeySource::Email => CKey::Email,
            KeySource::Country => CKey::Country,
            KeySource::Field(f) => {
                let slot = schema.slot(f).ok_or_else(|| {
                    ConfigError::invalid(at, format!("{f:?} is not entity, card, device, merchant, ip, email, country or a categorical field of the schema"))
                })?;
                if schema.field(slot).kind != FieldKind::Categorical {
                    return Err(ConfigError::invalid(
                        at,
                        format!("{f:?} is numeric: a key must be categorical"),
                    ));
                }
                CKey::Slot(slot)
            }
        })
    }

    /// The key's value in `txn` (0: the transaction has none).
    #[inline]
    pub fn value(self, txn: &Transaction) -> u64 {
        match self {
            CKey::Entity => txn.entity.0,
            CKey::Device => txn.device.0,
            CKey::Merchant => txn.merchant,
            CKey::Ip => txn.ip,
            CKey::Email => txn.email,
            CKey::Country => {
                let b = txn.country.as_str().as_bytes();
                (u64::from(b[0]) << 8 | u64::from(b[1])) + 1
            }
            CKey::Slot(s) => {
                let v = txn.features.get(s);
                if v.is_nan() {
                    0
                } else {
                    v as u64 + 1
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum CFilter {
    In(Slot, Vec<f32>),
    Range(Slot, [Option<f64>; 4]),
}

impl CFilter {
    /// The slot the filter reads.
    pub(super) fn slot(&self) -> Slot {
        match self {
            CFilter::In(s, _) | CFilter::Range(s, _) => *s,
        }
    }

    #[inline]
    pub(super) fn pass(&self, txn: &Transaction) -> bool {
        match self {
            CFilter::In(s, ids) => ids.contains(&txn.features.get(*s)),
            CFilter::Range(s, [gt, ge, lt, le]) => {
                let v = txn.features.get(*s) as f64;
                !v.is_nan()
                    && gt.is_none_or(|b| v > b)
                    && ge.is_none_or(|b| v >= b)
                    && lt.is_none_or(|b| v < b)
                    && le.is_none_or(|b| v <= b)
            }
        }
    }
}

/// Where a group's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Value {
    /// The typed amount (no `amount` slot in the schema).
    Amount,
    Slot(Slot),
    /// The hashed key of another source (distinct groups).
    Key(CKey),
}

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub source: usize,
    pub spec: GroupSpec,
    filters: Vec<CFilter>,
    value: Value,
    /// Bit per [`Action`]: entered after the decision, only for those actions.
    pub outcome: u8,
}

/// A key source by name: a categorical field's with its vocabulary (the keys are its
/// ids, which another order of the vocabulary gives to other values).
fn key_text(k: &CKey, schema: &FeatureSchema) -> String {
    match k {
        CKey::Slot(s) => {
            let f = schema.field(*s);
            format!("field {:?} of {:?}", f.name, f.vocab())
        }
        k => format!("{k:?}"),
    }
}

/// What a group's words mean beyond its spec: its key, the field it aggregates and its
/// filters, by name (part of the definitions' fingerprint: a schema that moves a field
/// to another slot does not change it; filter values sorted, their order means
/// nothing). A categorical key's vocabulary is part of it: keys and distinct values
/// are its ids, which another order of the vocabulary gives to other values.
fn meaning(source: &CKey, value: &Value, filters: &[Filter], schema: &FeatureSchema) -> String {
    let key = |k: &CKey| key_text(k, schema);
    let of = match value {
        Value::Amount => "amount".to_owned(),
        Value::Slot(s) => format!("field {:?}", schema.field(*s).name),
        Value::Key(k) => key(k),
    };
    let mut wh: Vec<String> = filters
        .iter()
        .map(|f| match f {
            Filter::In { field, values } => {
                let mut v = values.clone();
                v.sort();
                v.dedup();
                format!("{field:?} in {v:?}")
            }
            r @ Filter::Range { .. } => format!("{r:?}"),
        })
        .collect();
    wh.sort();
    format!("by {} of {of} where {wh:?}", key(source))
}

#[derive(Debug, Clone, Copy)]
struct Out {
    slot: Slot,
    group: usize,
    agg: Agg,
    include: bool,
}

/// A list membership output.
#[derive(Debug, Clone)]
pub(crate) struct ListOut {
    pub slot: Slot,
    pub key: CKey,
}

/// One transaction's state request: its keys and each group's input.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Event time bounded ahead of the clock.
    pub ts: i64,
    pub keys: [u64; MAX_SOURCES],
    /// One per group of the plan.
    pub inputs: arrayvec::ArrayVec<GroupInput, MAX_GROUPS>,
}

impl Request {
    /// An empty request at bounded event time `ts`, for [`Plan::request`].
    #[inline]
    pub fn new(ts: i64) -> Self {
        Self {
            ts,
            keys: [0; MAX_SOURCES],
            inputs: arrayvec::ArrayVec::new(),
        }
    }
}

/// The compiled plan.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub sources: Vec<CKey>,
    /// Each source by name ([`key_text`]): what a snapshot's sources are matched by.
    pub source_texts: Vec<String>,
    /// Groups of each source, in group order.
    pub by_source: Vec<Vec<usize>>,
    pub groups: Vec<Group>,
    /// Per group, its key, field and filters by name ([`meaning`]): read when the
    /// definitions are fingerprinted or a snapshot's are matched, never per event, so
    /// kept out of [`Group`], which the apply path reads.
    pub meanings: Vec<String>,
    /// Sorted by group; `outs_of[g]` is group `g`'s range.
    outs: Vec<Out>,
    outs_of: Vec<std::ops::Range<usize>>,
    pub lists: Vec<ListOut>,
    /// Every slot the plan fills (features, then lists).
    pub slots: Vec<Slot>,
}

pub(super) fn numeric_slot(
    schema: &FeatureSchema,
    name: &str,
    at: &str,
) -> Result<Slot, ConfigError> {
    let slot = schema.slot(name).ok_or_else(|| {
        ConfigError::invalid(at, format!("the schema has no field {name:?} (risk.toml adds state fields itself; with the builder, use StateConfig::extend_schema)"))
    })?;
    if schema.field(slot).kind != FieldKind::Numeric {
        return Err(ConfigError::invalid(
            at,
            format!("{name:?} is categorical: it must be numeric"),
        ));
    }
    Ok(slot)
}

pub(super) fn compile_filter(
    f: &Filter,
    schema: &FeatureSchema,
    at: &str,
) -> Result<CFilter, ConfigError> {
    match f {
        Filter::In { field, values } => {
            let slot = schema.slot(field).ok_or_else(|| {
                ConfigError::invalid(at, format!("unknown filter field {field:?}"))
            })?;
            let fd = schema.field(slot);
            if fd.kind != FieldKind::Categorical {
                return Err(ConfigError::invalid(
                    at,
                    format!("{field:?} is numeric: filter it with bounds (lt, le, gt, ge)"),
                ));
            }
            let ids = values
                .iter()
                .map(|v| {
                    fd.lookup(v).map(|i| i as f32).ok_or_else(|| {
                        ConfigError::invalid(
                            at,
                            format!("{v:?} is not in the vocabulary of {field:?}"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            Ok(CFilter::In(slot, ids))
        }
        Filter::Range {
            field,
            gt,
            ge,
            lt,
            le,
        } => {
            let slot = numeric_slot(schema, field, at)?;
            Ok(CFilter::Range(slot, [*gt, *ge, *lt, *le]))
        }
    }
}

fn action_bit(a: Action) -> u8 {
    1 << (a as u8)
}

impl Plan {
    /// Compiles `cfg` against `schema`; every error names the feature or list at fault.
    pub fn compile(cfg: &StateConfig, schema: &FeatureSchema) -> Result<Self, ConfigError> {
        let mut p = Plan {
            sources: Vec::new(),
            source_texts: Vec::new(),
            by_source: Vec::new(),
            groups: Vec::new(),
            meanings: Vec::new(),
            outs: Vec::new(),
            outs_of: Vec::new(),
            lists: Vec::new(),
            slots: Vec::new(),
        };
        let mut seen: HashMap<String, ()> = HashMap::new();
        let mut dedup: HashMap<String, usize> = HashMap::new();
        for (i, f) in cfg.features.iter().enumerate() {
            let at = format!("state.features[{i}] ({})", f.name);
            if seen.insert(f.name.clone(), ()).is_some() {
                return Err(ConfigError::invalid(at, "a second feature with this name"));
            }
            let slot = numeric_slot(schema, &f.name, &at)?;
            let key = CKey::resolve(&f.key, schema, &format!("{at}.key"))?;
            let (group, include) = p.group_for(f, key, schema, &at, &mut dedup)?;
            p.outs.push(Out {
                slot,
                group,
                agg: f.agg,
                include,
            });
            p.slots.push(slot);
        }
        p.outs.sort_by_key(|o| o.group);
        p.outs_of = (0..p.groups.len())
            .map(|g| {
                let a = p.outs.partition_point(|o| o.group < g);
                a..p.outs.partition_point(|o| o.group <= g)
            })
            .collect();
        if cfg.lists.len() > MAX_LISTS {
            return Err(ConfigError::invalid(
                "state.lists",
                format!("more than {MAX_LISTS} lists"),
            ));
        }
        for l in &cfg.lists {
            let at = format!("state.lists.{}", l.name);
            valid_list(l, &at)?;
            let slot = numeric_slot(schema, &l.field_name(), &at)?;
            if seen.insert(l.field_name(), ()).is_some() {
                return Err(ConfigError::invalid(
                    at,
                    "a feature already fills this field",
                ));
            }
            p.lists.push(ListOut {
                slot,
                key: CKey::resolve(&l.key, schema, &format!("{at}.key"))?,
            });
            p.slots.push(slot);
        }
        Ok(p)
    }

    fn group_for(
        &mut self,
        f: &FeatureDef,
        key: CKey,
        schema: &FeatureSchema,
        at: &str,
        dedup: &mut HashMap<String, usize>,
    ) -> Result<(usize, bool), ConfigError> {
        let window_ms = i64::try_from(f.window.as_millis()).unwrap_or(i64::MAX);
        if f.buckets == 0 || f.buckets > MAX_BUCKETS {
            return Err(ConfigError::invalid(
                format!("{at}.buckets"),
                format!("{} is not in 1..={MAX_BUCKETS}", f.buckets),
            ));
        }
        if window_ms <= 0 || window_ms > 400 * 86_400_000 {
            return Err(ConfigError::invalid(
                format!("{at}.window"),
                "must be between 1 ms and 400 days",
            ));
        }
        if window_ms % f.buckets as i64 != 0 {
            return Err(ConfigError::invalid(
                format!("{at}.buckets"),
                format!("the window ({window_ms} ms) is not a whole number of ms per bucket with {} buckets", f.buckets),
            ));
        }
        let width_ms = window_ms / f.buckets as i64;
        let delay_ms = i64::try_from(f.delay.as_millis()).unwrap_or(i64::MAX);
        let include = f.current == Current::Include;
        let kind = match f.agg {
            Agg::Distinct => Kind::Distinct,
            Agg::SinceLast => Kind::Last,
            a if a.is_label() => Kind::Label,
            _ => Kind::Stats,
        };
        if !f.agg.is_label() && delay_ms != 0 {
            return Err(ConfigError::invalid(
                format!("{at}.delay"),
                "only fraud_count and fraud_rate take a delay",
            ));
        }
        if kind == Kind::Label {
            if delay_ms % width_ms != 0 || delay_ms > 400 * 86_400_000 {
                return Err(ConfigError::invalid(
                    format!("{at}.delay"),
                    format!("must be a whole number of buckets ({width_ms} ms), at most 400 days"),
                ));
            }
            if include || !f.outcome.is_empty() {
                return Err(ConfigError::invalid(
                    at,
                    "label features take neither current = \"include\" nor an outcome",
                ));
            }
        }
        if include && !f.outcome.is_empty() {
            return Err(ConfigError::invalid(format!("{at}.current"), "\"include\" with an outcome filter: the outcome is not known when the features are read"));
        }
        if include && matches!(f.agg, Agg::Ratio | Agg::SinceLast) {
            return Err(ConfigError::invalid(format!("{at}.current"), "ratio and since_last compare the current transaction with its history: \"include\" has no meaning"));
        }
        if f.exact && matches!(f.agg, Agg::Distinct | Agg::SinceLast) {
            return Err(ConfigError::invalid(
                format!("{at}.exact"),
                "distinct and since_last take no exact window (since_last is exact already; distinct keeps exact_limit values exactly)",
            ));
        }
        if f.exact && !(1..=super::MAX_EVENTS).contains(&f.max_events) {
            return Err(ConfigError::invalid(
                format!("{at}.max_events"),
                format!("must be in 1..={}", super::MAX_EVENTS),
            ));
        }
        if f.agg == Agg::Distinct && !(1..=4_096).contains(&f.exact_limit) {
            return Err(ConfigError::invalid(
                format!("{at}.exact_limit"),
                "must be in 1..=4096",
            ));
        }
        let value = match (f.agg, &f.of) {
            (Agg::Distinct, None) => {
                return Err(ConfigError::invalid(format!("{at}.of"), "distinct counts a key source: set `of` (device, country, merchant, ip, email or a categorical field)"))
            }
            (Agg::Distinct, Some(o)) => {
                let k = CKey::resolve(&KeySource::parse(o), schema, &format!("{at}.of"))?;
                if k == key {
                    return Err(ConfigError::invalid(format!("{at}.of"), "distinct values of the key itself are always 1"));
                }
                Value::Key(k)
            }
            (a, Some(o)) if a.needs_value() || a == Agg::Count => Value::Slot(numeric_slot(schema, o, &format!("{at}.of"))?),
            (a, Some(_)) => {
                return Err(ConfigError::invalid(format!("{at}.of"), format!("{a:?} takes no `of`")))
            }
            (_, None) => match schema.slot("amount") {
                Some(s) if schema.field(s).kind == FieldKind::Numeric => Value::Slot(s),
                _ => Value::Amount,
            },
        };
        let mut filters = Vec::with_capacity(f.filters.len());
        for flt in &f.filters {
            filters.push(compile_filter(flt, schema, &format!("{at}.filter"))?);
        }
        let outcome = f.outcome.iter().fold(0u8, |m, &a| m | action_bit(a));
        let spec = GroupSpec {
            kind,
            width_ms,
            window_b: if kind == Kind::Last {
                0
            } else {
                f.buckets as i64
            },
            delay_b: delay_ms / width_ms,
            exact_limit: if kind == Kind::Distinct {
                f.exact_limit as usize
            } else {
                0
            },
            // Set below to what every feature of the group needs.
            cols: Cols::Count,
            max_events: if f.exact { f.max_events } else { 0 },
        };
        let spec = if kind == Kind::Last {
            GroupSpec {
                width_ms: 1,
                ..spec
            }
        } else {
            spec
        };
        let source = self.source(key, schema, at)?;
        let id = format!("{source}|{spec:?}|{filters:?}|{value:?}|{outcome}");
        let need = match f.agg {
            Agg::Min | Agg::Max => Cols::MinMax,
            Agg::Stddev => Cols::Full,
            Agg::Sum | Agg::Avg | Agg::Ratio => Cols::Sum,
            _ => Cols::Count,
        };
        if let Some(&g) = dedup.get(&id) {
            let c = &mut self.groups[g].spec.cols;
            *c = c.join(need);
            return Ok((g, include));
        }
        let spec = GroupSpec { cols: need, ..spec };
        if self.groups.len() == MAX_GROUPS {
            return Err(ConfigError::invalid(
                at,
                format!("more than {MAX_GROUPS} distinct windows"),
            ));
        }
        let meaning = meaning(&self.sources[source], &value, &f.filters, schema);
        self.groups.push(Group {
            source,
            spec,
            filters,
            value,
            outcome,
        });
        self.meanings.push(meaning);
        let g = self.groups.len() - 1;
        self.by_source[source].push(g);
        dedup.insert(id, g);
        Ok((g, include))
    }

    /// The index of key source `key`, added when new (at most [`MAX_SOURCES`]).
    pub(super) fn source(
        &mut self,
        key: CKey,
        schema: &FeatureSchema,
        at: &str,
    ) -> Result<usize, ConfigError> {
        if let Some(i) = self.sources.iter().position(|&s| s == key) {
            return Ok(i);
        }
        if self.sources.len() == MAX_SOURCES {
            return Err(ConfigError::invalid(
                at,
                format!("more than {MAX_SOURCES} key sources"),
            ));
        }
        self.sources.push(key);
        self.source_texts.push(key_text(&key, schema));
        self.by_source.push(Vec::new());
        Ok(self.sources.len() - 1)
    }

    /// Whether any group is entered after the decision (an outcome filter).
    pub fn has_outcome_groups(&self) -> bool {
        self.groups.iter().any(|g| g.outcome != 0)
    }

    /// Fills `r` (empty, [`Request::new`]) with `txn`'s keys and inputs: in place, as a
    /// returned request measured a 648-byte copy per decision.
    #[inline]
    pub fn request(&self, txn: &Transaction, r: &mut Request) {
        for (i, k) in self.sources.iter().enumerate() {
            r.keys[i] = k.value(txn);
        }
        for g in &self.groups {
            let mut inp = GroupInput::default();
            if g.filters.iter().all(|f| f.pass(txn)) {
                match g.value {
                    Value::Amount => {
                        // Values are f32 like every feature (and identical in every store).
                        inp.value = txn.amount as f32 as f64;
                        inp.pass = true;
                    }
                    Value::Slot(s) => {
                        let v = txn.features.get(s);
                        inp.value = v as f64;
                        inp.pass = !v.is_nan();
                    }
                    Value::Key(k) => {
                        let v = k.value(txn);
                        // 52 bits: exact in a server-side script's doubles.
                        inp.hash = splitmix(v) >> 12;
                        inp.pass = v != 0;
                    }
                }
            }
            // At most MAX_GROUPS groups (more are refused when the plan compiles).
            let _ = r.inputs.try_push(inp);
        }
    }

    /// Writes the features from the groups' reads; `present[s]`: source `s` had a key.
    /// Writes the features of group `g` from what it held.
    #[inline]
    pub fn write_group(&self, g: usize, req: &Request, read: &GroupRead, out: &mut [f32]) {
        for o in &self.outs[self.outs_of[g].clone()] {
            let v = feature(o.agg, o.include, read, &req.inputs[g], req.ts);
            out[o.slot.index()] = v as f32;
        }
    }

    /// Writes the features of every group of a source without a key (or whose store
    /// failed): missing.
    pub fn write_missing(&self, source: usize, out: &mut [f32]) {
        for &g in &self.by_source[source] {
            for o in &self.outs[self.outs_of[g].clone()] {
                out[o.slot.index()] = f32::NAN;
            }
        }
    }

    /// Whether `action` enters outcome group `g`.
    pub fn outcome_passes(&self, g: usize, action: Action) -> bool {
        self.groups[g].outcome & action_bit(action) != 0
    }
}

/// Feature `agg` of a group's read, the current event included when `include` (and it
/// passes). Each arm computes only what its aggregate reads. Not inlined: inlined into
/// [`Plan::write_group`]'s loop over a group's outputs, the compiler hoisted every arm's
/// work (two divisions, the min / max folds) out of the loop and ran it for each group
/// (~130 instructions a group where most groups have one or two outputs).
#[inline(never)]
fn feature(agg: Agg, include: bool, r: &GroupRead, inp: &GroupInput, ts: i64) -> f64 {
    let inc = include && inp.pass;
    let x = inp.value;
    let n = || if inc { r.n + 1.0 } else { r.n };
    let sum = || if inc { r.sum + x } else { r.sum };
    let v32 = || x as f32 as f64;
    let nan = f64::NAN;
    match agg {
        Agg::Count => n(),
        Agg::Sum => sum(),
        Agg::Avg if n() > 0.0 => sum() / n(),
        Agg::Min if n() > 0.0 => match (inc, r.min.is_nan()) {
            (false, _) => r.min,
            (true, true) => v32(),
            (true, false) => r.min.min(v32()),
        },
        Agg::Max if n() > 0.0 => match (inc, r.max.is_nan()) {
            (false, _) => r.max,
            (true, true) => v32(),
            (true, false) => r.max.max(v32()),
        },
        Agg::Stddev if n() > 0.0 => {
            let (n, sum) = (n(), sum());
            let sumsq = if inc { r.sumsq + x * x } else { r.sumsq };
            let m = sum / n;
            (sumsq / n - m * m).max(0.0).sqrt()
        }
        Agg::Ratio if inp.pass && n() > 0.0 && sum() != 0.0 => x / (sum() / n()),
        Agg::Distinct => {
            if inc {
                r.distinct_after
            } else {
                r.distinct_before
            }
        }
        Agg::SinceLast => r
            .last_ms
            .map_or(nan, |l| ts.saturating_sub(l).max(0) as f64 / 1e3),
        Agg::FraudCount => r.frauds,
        Agg::FraudRate if r.txns > 0.0 => r.frauds / r.txns,
        _ => nan,
    }
}

fn valid_list(l: &ListDef, at: &str) -> Result<(), ConfigError> {
    if l.name.is_empty()
        || !l
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(ConfigError::invalid(at, "list names use a-z, 0-9 and _"));
    }
    Ok(())
}
