//! Redis keys carried across a change of definitions (`state.redis.carry_keys`): an
//! engine of new definitions (a feature added, one removed, a filter changed, a window
//! widened, a source gone, a sequence resized) meeting a card it has no key for builds
//! it from the old definitions' key of that card. Its features then equal, bit for bit,
//! those of an in-process engine that restored a snapshot of the old definitions (the
//! alike windows and sequences carried, the rest empty), event after event.
//!
//! Needs `tools/servers.sh start redis` (`RISK_REDIS_URL`).

use super::redis::{own_cluster, prefix, same_features, url};
use super::snapshot_carry::{below, card, h};
use super::*;
use risk_core::state::{
    Agg, Current, FeatureDef, KeySource, RedisConfig, SequenceDef, StateEngine,
};
use std::time::Duration;

fn merchant_cards() -> FeatureDef {
    let mut m = FeatureDef::new("m_cards", KeySource::Merchant, Agg::Distinct)
        .of("card")
        .window(h(24), 24);
    // Past its exact limit: the sketch's registers carried too.
    m.exact_limit = 4;
    m
}

fn countries() -> FeatureDef {
    card("countries", Agg::Distinct)
        .of("country")
        .window(h(24), 24)
        .current(Current::Include)
}

fn sequences(card_rows: u32) -> Vec<SequenceDef> {
    vec![
        SequenceDef::new("m_seq", KeySource::Merchant, 4, &["dt", "amount"]),
        SequenceDef::new("c_seq", KeySource::Entity, card_rows, &["amount", "dt"]),
    ]
}

fn before(redis: Option<RedisConfig>) -> StateConfig {
    StateConfig {
        features: vec![
            card("n_1h", Agg::Count).window(h(1), 12),
            card("s_24h", Agg::Sum).window(h(24), 24),
            countries(),
            merchant_cards(),
            card("small_1h", Agg::Count)
                .window(h(1), 12)
                .filter(below(20.0)),
            card("s_7d", Agg::Sum).window(h(168), 7),
            card("gap", Agg::SinceLast),
            FeatureDef::new("d_n", KeySource::Device, Agg::Count).window(h(24), 24),
        ],
        sequences: sequences(6),
        redis,
        ..StateConfig::default()
    }
}

fn after(redis: Option<RedisConfig>, snapshot: Option<std::path::PathBuf>) -> StateConfig {
    StateConfig {
        features: vec![
            // Reordered, the device source gone, one filter changed, two added, a
            // 7-day window widened to every column.
            card("s_24h", Agg::Sum).window(h(24), 24),
            card("max_6h", Agg::Max).window(h(6), 12),
            merchant_cards(),
            card("gap", Agg::SinceLast),
            card("n_1h", Agg::Count).window(h(1), 12),
            card("small_1h", Agg::Count)
                .window(h(1), 12)
                .filter(below(50.0)),
            countries(),
            card("sd_7d", Agg::Stddev).window(h(168), 7),
        ],
        // The card's sequence resized (not carried), the merchant's kept.
        sequences: sequences(8),
        redis,
        snapshot,
        ..StateConfig::default()
    }
}

/// One schema that holds both definitions' fields.
fn both_schema() -> Arc<FeatureSchema> {
    let mut features = before(None).features;
    for f in after(None, None).features {
        if !features.iter().any(|g| g.name == f.name) {
            features.push(f);
        }
    }
    schema(&StateConfig {
        features,
        ..StateConfig::default()
    })
}

fn redis(prefix: &str, carry_keys: bool) -> Option<RedisConfig> {
    Some(RedisConfig {
        url: url(),
        // Generous: these tests are about equality, not deadlines.
        timeout: Duration::from_secs(2),
        prefix: prefix.to_owned(),
        retry: Duration::ZERO,
        carry_keys,
        ..RedisConfig::default()
    })
}

fn engine(cfg: StateConfig, s: &Arc<FeatureSchema>) -> StateEngine {
    StateEngine::new(cfg, Arc::clone(s), clock(T0 + 400 * DAY))
        .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis at {})", url()))
}

fn fresh2(s: &Arc<FeatureSchema>) -> StateEngine {
    engine(after(None, None), s)
}

fn bits(q: Option<&risk_core::Sequence>) -> (usize, Vec<u32>) {
    let q = q.expect("the sequence");
    let v = (0..q.rows()).flat_map(|r| q.row(r).to_vec());
    (q.len(), v.map(f32::to_bits).collect())
}

/// `after` on Redis and in process, event by event: every feature and sequence equal.
/// Returns the events whose 24-hour sum differs from `fresh`'s (an engine of the same
/// definitions that never saw the old ones).
fn same(
    red: &StateEngine,
    mem: &StateEngine,
    fresh: &StateEngine,
    s: &Arc<FeatureSchema>,
    evs: &[Ev],
) -> usize {
    let mut differs = 0;
    for (i, e) in evs.iter().enumerate() {
        let (mut a, mut b, mut c) = (e.txn(s), e.txn(s), e.txn(s));
        mem.apply(&mut a);
        fresh.apply(&mut c);
        assert_eq!(
            red.apply(&mut b).status,
            StateStatus::Fresh,
            "{:?}",
            red.stats()
        );
        // On a cluster, sequence rows go through the background writer.
        assert!(red.flush(Duration::from_secs(30)));
        same_features(s, &a, &b, i);
        for q in ["m_seq", "c_seq"] {
            let (x, y) = (bits(a.sequences.get(q)), bits(b.sequences.get(q)));
            assert_eq!(x, y, "event {i}: {q}");
        }
        differs += (a.features.by_name("s_24h") != c.features.by_name("s_24h")) as usize;
    }
    differs
}

#[test]
fn keys_of_other_definitions_are_carried_as_a_snapshot_is_restored() {
    carried_as_a_snapshot_is_restored(&|pre| redis(pre, true));
}

/// The same on a three-node Redis Cluster: a decision's keys on different nodes, and
/// each card's key of the old definitions in the slot of its new one (the card is
/// the hash tag), read by the script there.
#[test]
fn keys_of_other_definitions_are_carried_on_a_redis_cluster() {
    let (_dir, _nodes, addrs) = own_cluster();
    carried_as_a_snapshot_is_restored(&|pre| {
        redis(pre, true).map(|r| RedisConfig {
            cluster: addrs.iter().map(|a| format!("redis://{a}")).collect(),
            ..r
        })
    });
}

fn carried_as_a_snapshot_is_restored(redis: &dyn Fn(&str) -> Option<RedisConfig>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let pre = prefix("carry");
    let s = both_schema();
    let mut evs = stream(41, 3_000, 40, 8);
    evs.sort_by_key(|e| e.ts);
    let (first, rest) = evs.split_at(2_000);
    // The old definitions, on Redis and in process (snapshot written after).
    let (red_old, mem_old) = (engine(before(redis(&pre)), &s), engine(before(None), &s));
    for (i, e) in first.iter().enumerate() {
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        mem_old.apply(&mut a);
        assert_eq!(red_old.apply(&mut b).status, StateStatus::Fresh);
        same_features(&s, &a, &b, i);
    }
    mem_old.snapshot(&path).unwrap();
    assert_eq!(
        red_old.stats().store_keys_carried,
        0,
        "nothing to carry yet"
    );
    // The new definitions: on Redis under the same prefix, and in process restoring
    // the snapshot (the carry the in-process store proves against the reference).
    let red = engine(after(redis(&pre), None), &s);
    let mem = engine(after(None, Some(path)), &s);
    let fresh = engine(after(None, None), &s);
    let differs = same(&red, &mem, &fresh, &s, rest);
    // Every card and merchant met was carried once (40 cards, 8 merchants).
    let carried = red.stats().store_keys_carried;
    assert!((40..=48).contains(&carried), "{carried} keys carried");
    // The carried history shows: the day's sum differs from a fresh engine's.
    assert!(differs > 0, "the carried sums differ from a fresh engine's");
}

/// With `carry_keys = false`, the new definitions start every key empty: their features
/// equal an engine that never saw the old ones, and nothing is counted carried.
#[test]
fn without_carry_keys_other_definitions_keys_are_not_read() {
    let pre = prefix("nocarry");
    let s = both_schema();
    let mut evs = stream(43, 1_200, 20, 4);
    evs.sort_by_key(|e| e.ts);
    let (first, rest) = evs.split_at(800);
    let red_old = engine(before(redis(&pre, true)), &s);
    for e in first {
        red_old.apply(&mut e.txn(&s));
    }
    let red = engine(after(redis(&pre, false), None), &s);
    let fresh = engine(after(None, None), &s);
    assert_eq!(same(&red, &fresh, &fresh2(&s), &s, rest), 0);
    assert_eq!(red.stats().store_keys_carried, 0);
}

/// The registry of definitions stays bounded: 18 engines of distinct definitions under
/// one prefix leave the 16 newest entries (each start removes the oldest past the bound).
#[test]
fn the_registry_of_definitions_keeps_the_newest_sixteen() {
    let pre = prefix("registry");
    let s = both_schema();
    let _engines: Vec<StateEngine> = (1..=18u64)
        .map(|k| {
            let cfg = StateConfig {
                features: vec![card("n_1h", Agg::Count).window(h(k), 12)],
                ..StateConfig::default()
            };
            engine(
                StateConfig {
                    redis: redis(&pre, true),
                    ..cfg
                },
                &s,
            )
        })
        .collect();
    let mut con = ::redis::Client::open(url())
        .unwrap()
        .get_connection()
        .unwrap();
    let n: usize = ::redis::cmd("HLEN")
        .arg(format!("{pre}:defs"))
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 16);
}
