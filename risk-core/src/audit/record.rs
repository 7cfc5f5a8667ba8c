//! From engine types to Protobuf records ([`super::pb`]), and the JSON view for people.

use super::pb::{self, audit_record::Body};
use crate::decision::{
    Action, DeepFailure, DeepSource, DeepVerdict, Escalation, FallbackCause, ShedReason, Tier,
};
use crate::schema::{FeatureSchema, FieldKind};
use crate::version::VersionId;
use serde_json::{json, Map, Value};

/// Recorded feature values: inline up to [`Values::INLINE`] (no allocation on the
/// caller's thread, nothing freed across threads), boxed beyond.
#[derive(Debug, Clone)]
pub(crate) enum Values {
    Inline(u8, [f32; Values::INLINE]),
    Boxed(Box<[f32]>),
}

impl Values {
    pub const INLINE: usize = 32;

    pub(crate) fn from_iter(n: usize, it: impl Iterator<Item = f32>) -> Self {
        if n <= Self::INLINE {
            let mut a = [0f32; Self::INLINE];
            let mut k = 0;
            for (slot, v) in a.iter_mut().zip(it) {
                *slot = v;
                k += 1;
            }
            Values::Inline(k as u8, a)
        } else {
            Values::Boxed(it.collect())
        }
    }

    pub(crate) fn as_slice(&self) -> &[f32] {
        match self {
            Values::Inline(n, a) => &a[..*n as usize],
            Values::Boxed(b) => b,
        }
    }
}

/// What the log copies out of a decision on the caller's thread: plain data, no
/// allocation for schemas up to 32 recorded features, no shared reference count.
#[derive(Debug, Clone)]
pub(crate) struct DecisionItem {
    pub d: crate::decision::Decision,
    pub event_time_ms: i64,
    pub schema_fp: u64,
    pub amount: f64,
    pub currency: crate::txn::Currency,
    pub approve_below: f32,
    pub decline_at: f32,
    pub features: Values,
}

pub(crate) fn version(v: &VersionId) -> pb::VersionId {
    pb::VersionId {
        name: v.name().to_owned(),
        version: v.version().to_owned(),
        hash: v.hash(),
    }
}

fn action(a: Action) -> pb::Action {
    match a {
        Action::Approve => pb::Action::Approve,
        Action::Review => pb::Action::Review,
        Action::Decline => pb::Action::Decline,
    }
}

fn tier(t: Tier) -> pb::Tier {
    match t {
        Tier::Rules => pb::Tier::Rules,
        Tier::Fast => pb::Tier::Fast,
        Tier::Static => pb::Tier::Static,
    }
}

fn fallback(c: Option<FallbackCause>) -> pb::Fallback {
    match c {
        None => pb::Fallback::None,
        Some(FallbackCause::Timeout) => pb::Fallback::Timeout,
        Some(FallbackCause::Error) => pb::Fallback::Error,
        Some(FallbackCause::Panic) => pb::Fallback::Panic,
        Some(FallbackCause::InvalidScore) => pb::Fallback::InvalidScore,
        Some(FallbackCause::CircuitOpen) => pb::Fallback::CircuitOpen,
        Some(FallbackCause::Absent) => pb::Fallback::Absent,
        Some(FallbackCause::Saturated) => pb::Fallback::Saturated,
    }
}

/// The decision record for `it` (its `features` already selected by the log).
pub(crate) fn decision(it: &DecisionItem) -> pb::DecisionRecord {
    let d = &it.d;
    let (escalation, ticket) = match d.escalation {
        Escalation::None => (pb::Escalation::None, 0),
        Escalation::Enqueued(t) => (pb::Escalation::Enqueued, t.0),
        Escalation::Shed(ShedReason::QueueFull) => (pb::Escalation::ShedQueueFull, 0),
        Escalation::Shed(ShedReason::NoDeepTier) => (pb::Escalation::ShedNoDeepTier, 0),
        Escalation::Shed(_) => (pb::Escalation::ShedShuttingDown, 0),
    };
    let v = &d.versions;
    pb::DecisionRecord {
        txn_id: d.txn.0,
        entity: d.entity.0,
        event_time_ms: it.event_time_ms,
        decided_at_ms: d.decided_at_ms,
        action: action(d.action) as i32,
        score: d.score,
        tier: tier(d.tier) as i32,
        fallback: fallback(d.fallback) as i32,
        hard_rule: d.hard_rule,
        rule_score: d.rule_score,
        model_score: d.model_score,
        rules_fired: d.rules_fired.iter().map(str::to_owned).collect(),
        rules_fired_total: d.rules_fired.total(),
        rules_shadow: d.rules_shadow.iter().map(str::to_owned).collect(),
        rules_shadow_total: d.rules_shadow.total(),
        reasons: d
            .reasons
            .iter()
            .map(|r| pb::Reason {
                code: r.code.name().to_owned(),
                weight: r.weight,
            })
            .collect(),
        approve_below: it.approve_below,
        decline_at: it.decline_at,
        threshold_shift: d.threshold_shift,
        versions: Some(pb::Versions {
            rules: Some(version(&v.rules)),
            fast: v.fast.as_ref().map(version),
            deep: v.deep.as_ref().map(version),
            config: v.config,
            schema: v.schema,
        }),
        timings: Some(pb::Timings {
            rules_ns: d.timings.rules_ns,
            fast_ns: d.timings.fast_ns,
            combine_ns: d.timings.combine_ns,
            total_ns: d.timings.total_ns,
        }),
        escalation: escalation as i32,
        ticket,
        amount: it.amount,
        currency: it.currency.as_str().to_owned(),
        features: it.features.as_slice().to_vec(),
    }
}

/// Replaces the identifiers in `body` by their keyed pseudonyms (`[privacy] key`): the
/// entity of decisions and verdicts. Transaction ids stay (they identify a payment to its
/// processor, not a person, and reconciliation looks them up).
pub(crate) fn pseudonymise(body: &mut pb::audit_record::Body, p: &crate::pseudo::Pseudonymiser) {
    use crate::pseudo::Domain;
    use pb::audit_record::Body;
    match body {
        Body::Decision(d) => d.entity = p.u64(Domain::Entity, d.entity),
        Body::Verdict(v) => v.entity = p.u64(Domain::Entity, v.entity),
        Body::Schema(_) | Body::Alert(_) => {}
    }
}

/// The alert record for `a`.
pub(crate) fn alert(a: &crate::monitor::Alert) -> pb::AlertRecord {
    pb::AlertRecord {
        kind: a.kind.as_str().into(),
        subject: a.subject.clone(),
        value: a.value,
        threshold: a.threshold,
        firing: a.firing,
        at_ms: a.at_ms,
        detail: a.detail.clone(),
    }
}

pub(crate) fn verdict(v: &DeepVerdict) -> pb::VerdictRecord {
    pb::VerdictRecord {
        ticket: v.ticket.0,
        txn_id: v.txn.0,
        entity: v.entity.0,
        score: v.score,
        source: match v.source {
            DeepSource::Model => pb::DeepSource::Model,
            DeepSource::CachedAverage => pb::DeepSource::CachedAverage,
            DeepSource::GlobalPrior => pb::DeepSource::GlobalPrior,
        } as i32,
        failure: match v.failure {
            None => pb::DeepFailure::None,
            Some(DeepFailure::Timeout) => pb::DeepFailure::Timeout,
            Some(DeepFailure::Error) => pb::DeepFailure::Error,
            Some(DeepFailure::Saturated) => pb::DeepFailure::Saturated,
            Some(DeepFailure::CircuitOpen) => pb::DeepFailure::CircuitOpen,
        } as i32,
        fast_score: v.fast_score,
        latency_us: v.latency.as_micros().min(u64::MAX as u128) as u64,
        decided_at_ms: v.decided_at_ms,
        deep: Some(version(&v.deep)),
    }
}

/// The layout record for `schema` recording `slots` (all of them when `complete`).
pub(crate) fn schema(s: &FeatureSchema, slots: &[u32]) -> pb::SchemaRecord {
    pb::SchemaRecord {
        fingerprint: s.fingerprint(),
        fields: slots
            .iter()
            .map(|&i| {
                let f = &s.fields()[i as usize];
                pb::Field {
                    name: f.name.clone(),
                    kind: match f.kind {
                        FieldKind::Numeric => pb::FieldKind::Numeric,
                        FieldKind::Categorical => pb::FieldKind::Categorical,
                    } as i32,
                    vocabulary: f.vocab().to_vec(),
                    slot: i,
                }
            })
            .collect(),
        complete: slots.len() == s.len(),
    }
}

fn num(x: f32) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

fn version_json(v: &Option<pb::VersionId>) -> Value {
    match v {
        None => Value::Null,
        Some(v) => {
            json!({"name": v.name, "version": v.version, "hash": format!("{:016x}", v.hash)})
        }
    }
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

/// The JSON view of a record: enums by name, features by name (categorical values by
/// their vocabulary text) when `layout` describes them, NaN as `null`.
pub(crate) fn to_json(r: &pb::AuditRecord, layout: Option<&pb::SchemaRecord>) -> Value {
    let mut m = Map::new();
    m.insert("seq".into(), json!(r.seq));
    match &r.body {
        Some(Body::Decision(d)) => {
            m.insert("kind".into(), json!("decision"));
            m.insert("txn_id".into(), json!(d.txn_id));
            m.insert("entity".into(), json!(d.entity));
            m.insert("event_time_ms".into(), json!(d.event_time_ms));
            m.insert("decided_at_ms".into(), json!(d.decided_at_ms));
            m.insert(
                "action".into(),
                json!(lower(
                    d.action().as_str_name().trim_start_matches("ACTION_")
                )),
            );
            m.insert("score".into(), num(d.score));
            m.insert(
                "tier".into(),
                json!(lower(d.tier().as_str_name().trim_start_matches("TIER_"))),
            );
            let fb = d.fallback();
            m.insert(
                "fallback".into(),
                if fb == pb::Fallback::None {
                    Value::Null
                } else {
                    json!(lower(fb.as_str_name().trim_start_matches("FALLBACK_")))
                },
            );
            m.insert("hard_rule".into(), json!(d.hard_rule));
            m.insert("rule_score".into(), num(d.rule_score));
            m.insert("model_score".into(), d.model_score.map_or(Value::Null, num));
            m.insert("rules_fired".into(), json!(d.rules_fired));
            m.insert("rules_fired_total".into(), json!(d.rules_fired_total));
            m.insert("rules_shadow".into(), json!(d.rules_shadow));
            m.insert("rules_shadow_total".into(), json!(d.rules_shadow_total));
            let reasons: Vec<Value> = d
                .reasons
                .iter()
                .map(|r| json!({"code": r.code, "weight": num(r.weight)}))
                .collect();
            m.insert("reasons".into(), json!(reasons));
            m.insert(
                "thresholds".into(),
                json!({"approve_below": num(d.approve_below), "decline_at": num(d.decline_at), "shift": num(d.threshold_shift)}),
            );
            if let Some(v) = &d.versions {
                m.insert(
                    "versions".into(),
                    json!({
                        "rules": version_json(&v.rules),
                        "fast": version_json(&v.fast),
                        "deep": version_json(&v.deep),
                        "config": format!("{:016x}", v.config),
                        "schema": format!("{:016x}", v.schema),
                    }),
                );
            }
            if let Some(t) = &d.timings {
                m.insert(
                    "timings_ns".into(),
                    json!({"rules": t.rules_ns, "fast": t.fast_ns, "combine": t.combine_ns, "total": t.total_ns}),
                );
            }
            m.insert(
                "escalation".into(),
                json!(lower(
                    d.escalation()
                        .as_str_name()
                        .trim_start_matches("ESCALATION_")
                )),
            );
            if d.ticket != 0 {
                m.insert("ticket".into(), json!(d.ticket));
            }
            m.insert("amount".into(), json!(d.amount));
            m.insert("currency".into(), json!(d.currency));
            let mut f = Map::new();
            match layout {
                Some(l) if l.fields.len() == d.features.len() => {
                    for (field, &x) in l.fields.iter().zip(&d.features) {
                        let v = if x.is_nan() {
                            Value::Null
                        } else if field.kind() == pb::FieldKind::Categorical {
                            let i = x as usize;
                            match i.checked_sub(1).and_then(|i| field.vocabulary.get(i)) {
                                Some(s) => json!(s),
                                None => json!("other"),
                            }
                        } else {
                            num(x)
                        };
                        f.insert(field.name.clone(), v);
                    }
                }
                _ => {
                    for (i, &x) in d.features.iter().enumerate() {
                        f.insert(format!("#{i}"), num(x));
                    }
                }
            }
            m.insert("features".into(), Value::Object(f));
        }
        Some(Body::Alert(a)) => {
            m.insert("kind".into(), json!("alert"));
            m.insert("alert".into(), json!(a.kind));
            m.insert("subject".into(), json!(a.subject));
            m.insert("value".into(), json!(a.value));
            m.insert("threshold".into(), json!(a.threshold));
            m.insert("firing".into(), json!(a.firing));
            m.insert("at_ms".into(), json!(a.at_ms));
            m.insert("detail".into(), json!(a.detail));
        }
        Some(Body::Verdict(v)) => {
            m.insert("kind".into(), json!("verdict"));
            m.insert("ticket".into(), json!(v.ticket));
            m.insert("txn_id".into(), json!(v.txn_id));
            m.insert("entity".into(), json!(v.entity));
            m.insert("score".into(), num(v.score));
            m.insert(
                "source".into(),
                json!(lower(
                    v.source().as_str_name().trim_start_matches("DEEP_SOURCE_")
                )),
            );
            let f = v.failure();
            m.insert(
                "failure".into(),
                if f == pb::DeepFailure::None {
                    Value::Null
                } else {
                    json!(lower(f.as_str_name().trim_start_matches("DEEP_FAILURE_")))
                },
            );
            m.insert("fast_score".into(), num(v.fast_score));
            m.insert("latency_us".into(), json!(v.latency_us));
            m.insert("decided_at_ms".into(), json!(v.decided_at_ms));
            m.insert("deep".into(), version_json(&v.deep));
        }
        Some(Body::Schema(s)) => {
            m.insert("kind".into(), json!("schema"));
            m.insert(
                "fingerprint".into(),
                json!(format!("{:016x}", s.fingerprint)),
            );
            let names: Vec<&str> = s.fields.iter().map(|f| f.name.as_str()).collect();
            m.insert("fields".into(), json!(names));
            m.insert("complete".into(), json!(s.complete));
        }
        None => {
            m.insert("kind".into(), json!("unknown"));
        }
    }
    Value::Object(m)
}
