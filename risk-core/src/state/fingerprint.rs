//! The definitions' fingerprint: what a snapshot's header and a Redis key prefix carry,
//! so that state kept under some feature definitions is never read as another's.
//!
//! It covers everything a record's words mean: the key sources, and per group its
//! source, spec (kind, bucket width, buckets, label delay, distinct limit, columns,
//! exact bound), outcome filter, **the field it aggregates and its filters** (by name,
//! filter values sorted), and the sequences' shapes. Versions before `RSKSTATB` snapshots left out the field and the
//! filters ([`legacy`]): definitions that changed only `of` (a sum of `amount` made a sum
//! of `hour`) or a filter (`amount < 20` made `amount < 50`) fingerprinted alike, so a
//! snapshot was restored into them, and on Redis hosts of both shared the same keys,
//! each adding its own events to the other's rings.

use super::plan::Plan;
use super::seq_plan::SeqPlans;
use crate::hash::Fnv;

/// The fingerprint of `plan`'s definitions (snapshots `RSKSTATB` / `RSKSTATC`, Redis
/// key prefixes).
pub(super) fn of(plan: &Plan, seqs: &SeqPlans) -> u64 {
    let mut text = format!("{:016x}|fields and filters:", legacy(plan, seqs));
    for m in &plan.meanings {
        text.push_str(m);
        text.push(';');
    }
    Fnv::hash(text.as_bytes())
}

/// The fingerprints a snapshot of the versions before this one (`RSKSTAT3` to
/// `RSKSTATA`) may carry for these definitions: [`legacy`], and the one before exact
/// windows' rings were kept from the first drop. They cannot tell definitions apart
/// that differ only in a group's field or filters: such a snapshot is restored on the
/// word of whoever restores it (the definitions that wrote it).
pub(super) fn before_fields(plan: &Plan, seqs: &SeqPlans) -> [u64; 2] {
    [legacy(plan, seqs), kept_rings(plan, seqs)]
}

/// The fingerprint of versions before `RSKSTATB`: sources, and per group its source,
/// spec and outcome filter (not its field or filters), and the sequences' shapes.
pub(super) fn legacy(plan: &Plan, seqs: &SeqPlans) -> u64 {
    let legacy = kept_rings(plan, seqs);
    if plan.groups.iter().any(|g| g.spec.max_events > 0) {
        // Exact windows' rings are kept from a key's first dropped event on (2026-12-07):
        // a version that kept them all along must not read them as its own. This
        // version reads that version's snapshots (its rings were kept all along; one
        // built later from such a key's log lacks what that version had pruned from
        // it, at most the oldest bucket's events older than every window).
        return Fnv::hash(format!("{legacy:016x}|exact ring: from the first drop").as_bytes());
    }
    legacy
}

/// The fingerprint before exact windows' rings were kept from the first drop (for
/// definitions without exact windows, [`legacy`]).
pub(super) fn kept_rings(plan: &Plan, seqs: &SeqPlans) -> u64 {
    let specs: Vec<_> = plan
        .groups
        .iter()
        .map(|g| (g.source, g.spec, g.outcome))
        .collect();
    let mut text = format!("{:?}{specs:?}", plan.sources);
    // Without sequences the text (and every earlier fingerprint) is unchanged.
    for q in &seqs.seqs {
        text.push_str(&format!("|seq:{}", q.shape()));
    }
    Fnv::hash(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use crate::schema::FeatureSchema;
    use crate::state::{Agg, FeatureDef, Filter, KeySource, StateConfig, StateEngine};
    use std::time::Duration;

    /// The schema with a field more before `hour`.
    const MOVED: u8 = 1;
    /// The schema with `channel`'s vocabulary in another order.
    const REORDERED: u8 = 2;

    /// An engine of `features` over the schema changed as `how` says.
    fn engine(features: Vec<FeatureDef>, how: u8) -> StateEngine {
        let cfg = StateConfig {
            features,
            ..StateConfig::default()
        };
        let mut b = FeatureSchema::builder().numeric_required("amount");
        if how & MOVED != 0 {
            b = b.numeric("age");
        }
        let channels: &[&str] = if how & REORDERED != 0 {
            &["ecom", "pos"]
        } else {
            &["pos", "ecom"]
        };
        let b = b
            .numeric("hour")
            .categorical("channel", channels)
            .categorical("country", &["US", "GB"]);
        let schema = cfg.extend_schema(b).build().unwrap();
        StateEngine::new(cfg, schema, crate::clock::ManualClock::new()).unwrap()
    }

    fn fps_in(features: Vec<FeatureDef>, how: u8) -> (u64, u64) {
        let st = engine(features, how);
        let (plan, seqs) = (&st.plan, &st.seqs);
        (super::of(plan, seqs), super::legacy(plan, seqs))
    }

    fn fps(features: Vec<FeatureDef>) -> (u64, u64) {
        fps_in(features, 0)
    }

    fn below(lt: f64) -> Filter {
        Filter::Range {
            field: "amount".into(),
            gt: None,
            ge: None,
            lt: Some(lt),
            le: None,
        }
    }

    /// Definitions that differ only in the field a group aggregates or in its filters
    /// fingerprint apart (the versions before did not: the legacy fingerprints equal).
    #[test]
    fn a_changed_field_or_filter_changes_the_fingerprint() {
        let h = Duration::from_secs(3_600);
        let card = |agg| FeatureDef::new("f", KeySource::Entity, agg).window(h, 12);
        let pairs = [
            (card(Agg::Sum), card(Agg::Sum).of("hour")),
            (
                card(Agg::Count).filter(below(20.0)),
                card(Agg::Count).filter(below(50.0)),
            ),
            (card(Agg::Count), card(Agg::Count).filter(below(20.0))),
            (
                card(Agg::Distinct).of("country"),
                card(Agg::Distinct).of("channel"),
            ),
        ];
        for (a, b) in pairs {
            let what = format!("{a:?} / {b:?}");
            let (fa, la) = fps(vec![a.clone()]);
            let (fb, lb) = fps(vec![b]);
            assert_eq!(la, lb, "the legacy fingerprint could not tell {what}");
            assert_ne!(fa, fb, "{what}");
            assert_eq!(fa, fps(vec![a]).0, "stable: {what}");
        }
    }

    /// By name: a schema that moves the field or reorders a vocabulary, or a filter's
    /// values listed in another order, fingerprint alike; a categorical key's
    /// vocabulary in another order does not (its ids are the keys).
    #[test]
    fn fields_and_filters_are_fingerprinted_by_name() {
        let h = Duration::from_secs(3_600);
        let hour = || {
            FeatureDef::new("f", KeySource::Entity, Agg::Sum)
                .window(h, 12)
                .of("hour")
        };
        let ch = |v: &[&str]| Filter::In {
            field: "channel".into(),
            values: v.iter().map(|s| s.to_string()).collect(),
        };
        let a = vec![hour().filter(ch(&["pos", "ecom"]))];
        let b = vec![hour().filter(ch(&["ecom", "pos"]))];
        assert_eq!(fps(a.clone()).0, fps_in(a.clone(), MOVED | REORDERED).0);
        assert_eq!(fps(a.clone()).0, fps(b).0);
        assert_ne!(fps(a).0, fps(vec![hour().filter(ch(&["pos"]))]).0);
        let by_channel = || {
            vec![FeatureDef::new("n", KeySource::Field("channel".into()), Agg::Count).window(h, 12)]
        };
        let (f, l) = fps(by_channel());
        let (f2, l2) = fps_in(by_channel(), REORDERED);
        assert_eq!(l, l2, "the legacy fingerprint could not tell");
        assert_ne!(f, f2);
    }
}
