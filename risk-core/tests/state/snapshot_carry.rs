//! A snapshot of other feature definitions (a feature added, one removed, a filter
//! changed, a window widened to more columns) restores the windows both define alike:
//! their features equal the engine that wrote the snapshot, bit for bit, event after
//! event; the windows the new definitions add or change start empty, equal to an
//! engine that never saw the snapshot's events.

use super::*;
use risk_core::state::{Agg, Current, FeatureDef, Filter, KeySource, StateEngine};
use std::time::Duration;

pub(super) fn h(n: u64) -> Duration {
    Duration::from_secs(n * 3_600)
}

pub(super) fn card(name: &str, agg: Agg) -> FeatureDef {
    FeatureDef::new(name, KeySource::Entity, agg)
}

pub(super) fn below(lt: f64) -> Filter {
    Filter::Range {
        field: "amount".into(),
        gt: None,
        ge: None,
        lt: Some(lt),
        le: None,
    }
}

/// Features both definitions keep alike (windows, fields, filters, columns).
const KEPT: [&str; 5] = ["n_1h", "s_24h", "countries", "x_n", "m_cards"];
/// Features the new definitions add or change.
const NEW: [&str; 3] = ["small_1h", "max_6h", "n_7d"];

fn before(snapshot: Option<std::path::PathBuf>) -> StateConfig {
    StateConfig {
        features: vec![
            card("n_1h", Agg::Count).window(h(1), 12),
            card("s_24h", Agg::Sum).window(h(24), 24),
            card("countries", Agg::Distinct)
                .of("country")
                .window(h(24), 24)
                .current(Current::Include),
            card("x_n", Agg::Count).window(h(24), 24).exact(4),
            FeatureDef::new("m_cards", KeySource::Merchant, Agg::Distinct)
                .of("card")
                .window(h(24), 24),
            card("small_1h", Agg::Count)
                .window(h(1), 12)
                .filter(below(20.0)),
            // Its group (7 days of count + sum) widens to every column below.
            card("s_7d", Agg::Sum).window(h(168), 7),
            FeatureDef::new("d_n", KeySource::Device, Agg::Count).window(h(24), 24),
        ],
        snapshot,
        ..StateConfig::default()
    }
}

fn after(snapshot: Option<std::path::PathBuf>) -> StateConfig {
    StateConfig {
        features: vec![
            // Reordered, one source (devices) gone, one feature changed and two added.
            card("s_24h", Agg::Sum).window(h(24), 24),
            card("max_6h", Agg::Max).window(h(6), 12),
            FeatureDef::new("m_cards", KeySource::Merchant, Agg::Distinct)
                .of("card")
                .window(h(24), 24),
            card("n_1h", Agg::Count).window(h(1), 12),
            card("x_n", Agg::Count).window(h(24), 24).exact(4),
            card("small_1h", Agg::Count)
                .window(h(1), 12)
                .filter(below(50.0)),
            card("countries", Agg::Distinct)
                .of("country")
                .window(h(24), 24)
                .current(Current::Include),
            card("n_7d", Agg::Count).window(h(168), 7),
            card("sd_7d", Agg::Stddev).window(h(168), 7),
        ],
        snapshot,
        ..StateConfig::default()
    }
}

/// One schema that holds both definitions' fields.
fn both_schema() -> Arc<FeatureSchema> {
    let mut features = before(None).features;
    for f in after(None).features {
        if !features.iter().any(|g| g.name == f.name) {
            features.push(f);
        }
    }
    features.push(card("n_2h", Agg::Count).window(h(2), 8));
    schema(&StateConfig {
        features,
        ..StateConfig::default()
    })
}

fn read(st: &StateEngine, s: &Arc<FeatureSchema>, e: &Ev, names: &[&str]) -> Vec<Option<u32>> {
    let mut t = e.txn(s);
    st.apply(&mut t);
    names
        .iter()
        .map(|n| t.features.by_name(n).map(f32::to_bits))
        .collect()
}

#[test]
fn a_snapshot_of_other_definitions_restores_the_windows_both_define_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let (b, a) = (before(None), after(Some(path.clone())));
    let s = both_schema();
    // In time order: a late event is read at its key's clock, which a restored key
    // has and the fresh peer's does not (the new windows would differ for that alone).
    let mut evs = stream(31, 5_000, 40, 8);
    evs.sort_by_key(|e| e.ts);
    let (first, rest) = evs.split_at(4_000);
    let c = || clock(T0 + 400 * DAY);
    let wrote = StateEngine::new(b, Arc::clone(&s), c()).unwrap();
    for e in first {
        wrote.apply(&mut e.txn(&s));
    }
    assert!(
        wrote.stats().exact_fallback > 0,
        "the 4-event window overflowed"
    );
    wrote.snapshot(&path).unwrap();
    // Restored at build (state.snapshot), and a peer that never saw the first part.
    let restored = StateEngine::new(a.clone(), Arc::clone(&s), c()).unwrap();
    let fresh = StateEngine::new(after(None), Arc::clone(&s), c()).unwrap();
    let mut differs = [0usize; KEPT.len()];
    let all = [KEPT.as_slice(), &NEW].concat();
    for (i, e) in rest.iter().enumerate() {
        let got = read(&restored, &s, e, &all);
        let (kept, new) = got.split_at(KEPT.len());
        assert_eq!(kept, read(&wrote, &s, e, &KEPT), "kept, event {i}");
        let peer = read(&fresh, &s, e, &all);
        assert_eq!(new, &peer[KEPT.len()..], "added or changed, event {i}");
        for (d, (k, p)) in differs.iter_mut().zip(kept.iter().zip(&peer)) {
            *d += (k != p) as usize;
        }
    }
    // The carried history shows: the kept windows of a day differ from the fresh
    // peer's (the hour's, `n_1h`, only within an hour of the restore: rarely here).
    assert!(differs[1..].iter().all(|&d| d > 5), "{differs:?}");
}

#[test]
fn a_snapshot_that_shares_no_window_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let b = before(None);
    let s = both_schema();
    let wrote = StateEngine::new(b, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    for e in &stream(5, 200, 10, 2) {
        wrote.apply(&mut e.txn(&s));
    }
    wrote.snapshot(&path).unwrap();
    let other = StateConfig {
        features: vec![card("n_2h", Agg::Count).window(h(2), 8)],
        snapshot: Some(path),
        ..StateConfig::default()
    };
    let e = StateEngine::new(other, s, clock(T0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("share no window"), "{e}");
}
