//! Replay: re-run recorded decisions through a candidate engine (new rules, new model,
//! new thresholds) and report what would change, per rule and per model. The
//! whole-engine counterpart of `risk_rules::impact`.
//!
//! Each decision record is rebuilt into a [`Transaction`] from its stored features,
//! mapped by field name onto the candidate's schema (a categorical value by its text;
//! amount and currency from the record's own fields), and decided by the candidate. A
//! record that lacks a feature the candidate reads (`features = "none"`, a subset, or a
//! field the candidate adds) is not replayed on a guess: it is counted as skipped, with
//! the reason. The candidate runs as configured:
//! build it without a deep tier and without an audit sink for a clean comparison
//! (its entity feedback would otherwise shift later decisions).

use super::Engine;
use crate::action::Action;
use crate::audit::pb::{self, FieldKind};
use crate::audit::{AuditEntry, AuditError};
use crate::txn::Transaction;
use std::collections::BTreeMap;

/// Fired counts of one rule, recorded vs. candidate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleChange {
    /// Rule name.
    pub rule: String,
    /// Decisions on which it fired as recorded.
    pub recorded: u64,
    /// Decisions on which it fires under the candidate.
    pub candidate: u64,
    /// Fires now, did not then.
    pub started: u64,
    /// Fired then, does not now.
    pub stopped: u64,
}

/// Fast-model scores, recorded vs. candidate, for one pair of versions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelChange {
    /// Recorded fast model (`name@version#hash`, or `none`).
    pub recorded: String,
    /// The candidate's fast model.
    pub candidate: String,
    /// Decisions where both scored.
    pub scored_both: u64,
    /// Mean |candidate - recorded| score.
    pub mean_abs_delta: f64,
    /// Largest |candidate - recorded| score.
    pub max_abs_delta: f32,
    /// Of those, decisions whose action changes.
    pub action_changed: u64,
}

/// One decision whose action would change.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayExample {
    /// Transaction id.
    pub txn: u64,
    /// Recorded action and score.
    pub recorded: (Action, f32),
    /// Candidate action and score.
    pub candidate: (Action, f32),
}

/// What the candidate would change over the replayed records.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayReport {
    /// Decision records read.
    pub records: u64,
    /// Decided by the candidate.
    pub replayed: u64,
    /// Not replayable, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Damaged records met while reading (each also returned by the reader).
    pub corrupt: u64,
    /// Replayed decisions whose action changes.
    pub changed: u64,
    /// Count per (recorded, candidate) action pair, changed ones only.
    pub transitions: BTreeMap<(Action, Action), u64>,
    /// Count per (recorded, candidate) deciding tier, changed ones only.
    pub tier_transitions: BTreeMap<(String, String), u64>,
    /// Per rule, largest change first.
    pub rules: Vec<RuleChange>,
    /// Per pair of fast-model versions.
    pub models: Vec<ModelChange>,
    /// Up to `max_examples` changed decisions.
    pub examples: Vec<ReplayExample>,
}

fn action(a: i32) -> Option<Action> {
    match pb::Action::try_from(a).ok()? {
        pb::Action::Approve => Some(Action::Approve),
        pb::Action::Review => Some(Action::Review),
        pb::Action::Decline => Some(Action::Decline),
        pb::Action::Unspecified => None,
    }
}

fn vid(v: &Option<pb::VersionId>) -> String {
    v.as_ref().map_or_else(
        || "none".to_owned(),
        |v| format!("{}@{}#{:016x}", v.name, v.version, v.hash),
    )
}

/// Rebuilds the transaction of a decision record on `engine`'s schema (an `Err` names
/// why it cannot be).
pub fn rebuild(e: &AuditEntry, engine: &Engine) -> Result<Transaction, String> {
    let d = e.decision().ok_or("not a decision")?;
    let layout = e
        .layout
        .as_ref()
        .ok_or("no schema record for its features")?;
    if d.features.len() != layout.fields.len() {
        return Err("features do not match their schema record".into());
    }
    let schema = engine.schema();
    let lacking: Vec<&str> = schema
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .filter(|n| !matches!(*n, "amount" | "currency"))
        .filter(|n| !layout.fields.iter().any(|f| f.name == *n))
        .collect();
    if !lacking.is_empty() {
        return Err(format!(
            "record lacks features the candidate reads ({} of them, e.g. {})",
            lacking.len(),
            lacking[..lacking.len().min(3)].join(", ")
        ));
    }
    let mut t = Transaction::builder(schema)
        .id(d.txn_id)
        .entity(d.entity)
        .timestamp_ms(d.event_time_ms)
        .amount(d.amount, &d.currency)
        .build()
        .map_err(|e| e.to_string())?;
    // The builder mirrored amount and currency; every other field comes from the record
    // (missing when the record lacks it).
    let mirrored: Vec<(usize, f32)> = ["amount", "currency"]
        .iter()
        .filter_map(|n| schema.slot(n))
        .map(|s| (s.index(), t.features.values()[s.index()]))
        .collect();
    let values = t.features.values_mut();
    values.fill(f32::NAN);
    for &(i, v) in &mirrored {
        values[i] = v;
    }
    for (f, &x) in layout.fields.iter().zip(&d.features) {
        let Some(slot) = schema.slot(&f.name) else {
            continue;
        };
        let field = schema.field(slot);
        values[slot.index()] = match (f.kind(), x.is_nan()) {
            (_, true) => f32::NAN,
            (FieldKind::Categorical, false) => {
                let text = (x as usize)
                    .checked_sub(1)
                    .and_then(|i| f.vocabulary.get(i));
                text.map_or(0.0, |s| field.intern(s) as f32)
            }
            _ => x,
        };
    }
    t.validate().map_err(|e| e.to_string())?;
    Ok(t)
}

/// Replays `entries` (from [`AuditReader::query`](crate::audit::AuditReader::query)) through
/// `candidate`; keeps up to `max_examples` changed decisions.
pub fn replay(
    entries: impl IntoIterator<Item = Result<AuditEntry, AuditError>>,
    candidate: &Engine,
    max_examples: usize,
) -> ReplayReport {
    let mut rep = ReplayReport::default();
    let mut rules: BTreeMap<String, RuleChange> = BTreeMap::new();
    let mut models: BTreeMap<(String, String), (ModelChange, f64)> = BTreeMap::new();
    let cand_fast = candidate
        .versions()
        .fast
        .map_or_else(|| "none".to_owned(), |v| v.to_string());
    for e in entries {
        let e = match e {
            Ok(e) => e,
            Err(_) => {
                rep.corrupt += 1;
                continue;
            }
        };
        let Some(d) = e.decision() else { continue };
        rep.records += 1;
        let txn = match rebuild(&e, candidate) {
            Ok(t) => t,
            Err(why) => {
                *rep.skipped.entry(why).or_default() += 1;
                continue;
            }
        };
        let now = match candidate.decide(&txn) {
            Ok(n) => n,
            Err(err) => {
                *rep.skipped.entry(err.to_string()).or_default() += 1;
                continue;
            }
        };
        rep.replayed += 1;
        let before = action(d.action).unwrap_or(Action::Review);
        let changed = before != now.action;
        for r in &d.rules_fired {
            let c = rules.entry(r.clone()).or_insert_with(|| RuleChange {
                rule: r.clone(),
                ..RuleChange::default()
            });
            c.recorded += 1;
            if !now.rules_fired.contains(r) {
                c.stopped += 1;
            }
        }
        for r in now.rules_fired.iter() {
            let c = rules.entry(r.to_owned()).or_insert_with(|| RuleChange {
                rule: r.to_owned(),
                ..RuleChange::default()
            });
            c.candidate += 1;
            if !d.rules_fired.iter().any(|x| x == r) {
                c.started += 1;
            }
        }
        let rec_fast = vid(&d.versions.as_ref().and_then(|v| v.fast.clone()));
        let (m, sum) = models
            .entry((rec_fast.clone(), cand_fast.clone()))
            .or_insert_with(|| {
                (
                    ModelChange {
                        recorded: rec_fast,
                        candidate: cand_fast.clone(),
                        ..ModelChange::default()
                    },
                    0.0,
                )
            });
        if let (Some(a), Some(b)) = (d.model_score, now.model_score) {
            let delta = (b - a).abs();
            m.scored_both += 1;
            *sum += f64::from(delta);
            m.max_abs_delta = m.max_abs_delta.max(delta);
            m.action_changed += u64::from(changed);
        }
        if changed {
            rep.changed += 1;
            *rep.transitions.entry((before, now.action)).or_default() += 1;
            let rec_tier = pb::Tier::try_from(d.tier)
                .map(|t| {
                    t.as_str_name()
                        .trim_start_matches("TIER_")
                        .to_ascii_lowercase()
                })
                .unwrap_or_else(|_| "unknown".into());
            *rep.tier_transitions
                .entry((rec_tier, now.tier.as_str().to_owned()))
                .or_default() += 1;
            if rep.examples.len() < max_examples {
                rep.examples.push(ReplayExample {
                    txn: d.txn_id,
                    recorded: (before, d.score),
                    candidate: (now.action, now.score),
                });
            }
        }
    }
    let mut rv: Vec<RuleChange> = rules.into_values().collect();
    rv.sort_by_key(|r| std::cmp::Reverse(r.started + r.stopped));
    rep.rules = rv;
    rep.models = models
        .into_values()
        .map(|(mut m, sum)| {
            if m.scored_both > 0 {
                m.mean_abs_delta = sum / m.scored_both as f64;
            }
            m
        })
        .collect();
    rep
}
