//! The snapshot's unit tests: earlier formats read and migrated, fingerprints.
use super::*;
use crate::state::layout::Layout;
use crate::state::{Agg, FeatureDef, KeySource, StateConfig};
use crate::txn::Transaction;
use std::sync::Arc;

/// The fingerprint of definitions without exact windows is the one earlier versions
/// computed: `GroupSpec`'s text is the derived `Debug` it replaced.
#[test]
fn specs_without_exact_windows_print_as_before() {
    let spec = crate::state::group::GroupSpec {
        kind: crate::state::group::Kind::Stats,
        width_ms: 300_000,
        window_b: 12,
        delay_b: 0,
        exact_limit: 0,
        cols: crate::state::group::Cols::Count,
        max_events: 0,
    };
    assert_eq!(
        format!("{spec:?}"),
        "GroupSpec { kind: Stats, width_ms: 300000, window_b: 12, delay_b: 0, exact_limit: 0, cols: Count }"
    );
    let exact = crate::state::group::GroupSpec {
        max_events: 9,
        ..spec
    };
    assert!(format!("{exact:?}").ends_with("cols: Count, max_events: 9 }"));
}

/// A snapshot of the version before exact windows (`RSKSTAT3`: a spill of distinct
/// sets only) restores every key, spilled distinct sets included.
#[test]
fn a_format_3_snapshot_is_migrated() {
    let cfg = StateConfig {
        features: vec![
            FeatureDef::new("n", KeySource::Entity, Agg::Count),
            FeatureDef::new("devices", KeySource::Entity, Agg::Distinct).of("device"),
        ],
        ..StateConfig::default()
    };
    let schema = cfg
        .extend_schema(crate::schema::FeatureSchema::builder().numeric("amount"))
        .build()
        .unwrap();
    let clock = crate::clock::ManualClock::new();
    clock.set_unix_origin_ms(1_767_571_200_000 + 86_400_000);
    let st = StateEngine::new(cfg.clone(), Arc::clone(&schema), clock.clone()).unwrap();
    for i in 0..200u64 {
        let mut t = Transaction::builder(&schema)
            .id(i + 1)
            .entity(1 + i % 3)
            .device(i % 11)
            .timestamp_ms(1_767_571_200_000 + i as i64 * 1_000)
            .amount(5.0, "USD")
            .build()
            .unwrap();
        st.apply(&mut t);
    }
    let now = st.mem().unwrap().dump();
    assert!(now
        .iter()
        .any(|k| k.2.as_ref().is_some_and(|s| !s.distinct.is_empty())));
    let old: Vec<SnapKey3> = with_last(&st, &now)
        .into_iter()
        .map(|(s, w, sp)| (s, w, sp.map(|x| x.distinct)))
        .collect();
    let payload = postcard::to_allocvec(&old).unwrap();
    let mut bytes = b"RSKSTAT3".to_vec();
    bytes.extend_from_slice(&fingerprint::legacy(&st.plan, &st.seqs).to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.snap");
    std::fs::write(&path, bytes).unwrap();
    let fresh = StateEngine::new(cfg, schema, clock).unwrap();
    assert_eq!(fresh.restore(&path).unwrap(), now.len());
    let mut a = fresh.mem().unwrap().dump();
    let mut b = now;
    a.sort_by_key(|k| k.1[0]);
    b.sort_by_key(|k| k.1[0]);
    assert_eq!(a, b);
}

/// `st`'s records in the layout of the snapshots before `RSKSTAT9` (a last event
/// time per stats group, left empty here).
fn with_last(st: &StateEngine, items: &[SnapKey]) -> Vec<SnapKey> {
    use crate::state::layout::Hot;
    items
        .iter()
        .map(|(s, w, sp)| {
            let new = Layout::of(&st.plan, &st.seqs, *s as usize);
            let old = Layout::of_hot(&st.plan, &st.seqs, *s as usize, Hot::WithLast);
            let mut o = vec![0; old.words];
            let runs = new.runs_from_with_last(&old).expect("the same definitions");
            for (f, t, n) in runs {
                o[f..f + n].copy_from_slice(&w[t..t + n]);
            }
            (*s, o, sp.clone())
        })
        .collect()
}

/// Applies transactions `range` (made by `txn`) to both engines: every feature
/// equal, bit for bit (`what`: the case, for the message).
fn same_features(
    a: &StateEngine,
    b: &StateEngine,
    range: std::ops::Range<u64>,
    txn: impl Fn(u64) -> Transaction,
    what: &str,
) {
    let bits =
        |t: &Transaction| -> Vec<u32> { t.features.values().iter().map(|v| v.to_bits()).collect() };
    for i in range {
        let (mut x, mut y) = (txn(i), txn(i));
        a.apply(&mut x);
        b.apply(&mut y);
        assert_eq!(bits(&x), bits(&y), "{what}: transaction {i}");
    }
}

/// `cfg`'s schema (with an amount) and a clock far after every event.
fn setup(
    cfg: &StateConfig,
) -> (
    Arc<crate::schema::FeatureSchema>,
    Arc<crate::clock::ManualClock>,
) {
    let schema = cfg
        .extend_schema(crate::schema::FeatureSchema::builder().numeric("amount"))
        .build()
        .unwrap();
    let clock = crate::clock::ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    (schema, clock)
}

/// Writes `items` as a plain snapshot of format `magic` (before `RSKSTATB`) for
/// `st`'s definitions, with the fingerprint of the versions that wrote it.
fn write_old(st: &StateEngine, magic: &[u8; 8], payload: &[u8], path: &Path) {
    write_as(
        fingerprint::legacy(&st.plan, &st.seqs),
        magic,
        payload,
        path,
    )
}

/// Writes `items` as a plain snapshot of format `magic` with fingerprint `fp`.
fn write_as(fp: u64, magic: &[u8; 8], payload: &[u8], path: &Path) {
    let mut bytes = magic.to_vec();
    bytes.extend_from_slice(&fp.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    std::fs::write(path, bytes).unwrap();
}

/// A snapshot of the versions before rings longer than 64 buckets kept occupancy
/// bits (`RSKSTAT5`: records without those words, and with a last event time per
/// stats group) restores, and so does one of the versions whose stats groups kept
/// that time (`RSKSTAT7`); the engine that restored either computes what the engine
/// that wrote it computes, bit for bit.
#[test]
fn format_5_and_7_snapshots_are_migrated() {
    use std::time::Duration;
    let day = Duration::from_secs(86_400);
    let cfg = StateConfig {
        features: vec![
            FeatureDef::new("n30", KeySource::Entity, Agg::Count).window(day * 30, 720),
            FeatureDef::new("s30", KeySource::Entity, Agg::Sum).window(day * 30, 720),
            FeatureDef::new("max7", KeySource::Entity, Agg::Max).window(day * 7, 168),
            FeatureDef::new("n1h", KeySource::Entity, Agg::Count)
                .window(Duration::from_secs(3_600), 12),
        ],
        ..StateConfig::default()
    };
    let (schema, clock) = setup(&cfg);
    let mk = || StateEngine::new(cfg.clone(), Arc::clone(&schema), clock.clone()).unwrap();
    let txn = |i: u64| {
        // Five cards, one every ~11 hours each, amounts that need every bit of a sum.
        Transaction::builder(&schema)
            .id(i + 1)
            .entity(1 + i % 5)
            .timestamp_ms(1_767_571_200_000 + (i * 7_919_000 + i % 7 * 3_600_000) as i64)
            .amount((i % 97) as f64 / 7.0 + 0.25, "USD")
            .build()
            .unwrap()
    };
    let legacy = |st: &StateEngine| {
        Layout::of_hot(&st.plan, &st.seqs, 0, crate::state::layout::Hot::WithLast)
    };
    let (at, n) = legacy(&mk()).long_occ;
    assert_eq!(n, 12 + 3, "720 buckets and 168: 12 and 3 words");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.snap");
    let mut old = Vec::new();
    for magic in [b"RSKSTAT5", b"RSKSTAT7"] {
        let wrote = mk();
        for i in 0..300 {
            wrote.apply(&mut txn(i));
        }
        let now = wrote.mem().unwrap().dump();
        old = with_last(&wrote, &now);
        if magic == b"RSKSTAT5" {
            old.iter_mut().for_each(|k| drop(k.1.drain(at..at + n)));
        }
        write_old(&wrote, magic, &postcard::to_allocvec(&old).unwrap(), &path);
        let restored = mk();
        assert_eq!(restored.restore(&path).unwrap(), now.len());
        same_features(&wrote, &restored, 300..700, txn, &format!("{magic:?}"));
    }
    let wrote = mk();
    // A record of neither length is refused.
    let torn: Vec<SnapKey> = old
        .iter()
        .map(|(s, w, sp)| (*s, w[..w.len() - 1].to_vec(), sp.clone()))
        .collect();
    write_old(
        &wrote,
        b"RSKSTAT5",
        &postcard::to_allocvec(&torn).unwrap(),
        &path,
    );
    let err = mk().restore(&path).unwrap_err().to_string();
    assert!(err.contains("words where the definitions lay out"), "{err}");
}

/// Definitions with exact windows fingerprint otherwise since their rings are kept
/// from a key's first dropped event on (the version that kept them all along
/// refuses this version's snapshots); this version reads that version's (its
/// fingerprint); definitions without exact windows fingerprint as before.
#[test]
fn snapshots_of_the_version_that_kept_every_exact_ring_are_read() {
    use std::time::Duration;
    let hour = Duration::from_secs(3_600);
    let def = |n: &str, agg| FeatureDef::new(n, KeySource::Entity, agg).window(hour, 12);
    let cfg = StateConfig {
        features: vec![def("n", Agg::Count).exact(4), def("s", Agg::Sum).exact(64)],
        ..StateConfig::default()
    };
    let (schema, clock) = setup(&cfg);
    let mk = |cfg: &StateConfig| {
        StateEngine::new(cfg.clone(), Arc::clone(&schema), clock.clone()).unwrap()
    };
    let txn = |i: u64| {
        Transaction::builder(&schema)
            .id(i + 1)
            .entity(1 + i % 3)
            .timestamp_ms(1_767_571_200_000 + i as i64 * 90_000)
            .amount((i % 13) as f64 + 0.5, "USD")
            .build()
            .unwrap()
    };
    let wrote = mk(&cfg);
    for i in 0..300 {
        wrote.apply(&mut txn(i));
    }
    let legacy = fingerprint::kept_rings(&wrote.plan, &wrote.seqs);
    assert_ne!(fingerprint::legacy(&wrote.plan, &wrote.seqs), legacy);
    let now = wrote.mem().unwrap().dump();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept.snap");
    write_as(
        legacy,
        FORMAT_9[0],
        &postcard::to_allocvec(&now).unwrap(),
        &path,
    );
    let restored = mk(&cfg);
    assert_eq!(restored.restore(&path).unwrap(), now.len());
    same_features(&wrote, &restored, 300..500, txn, "kept rings");
    assert!(
        wrote.stats().exact_fallback > 0,
        "the 4-event window overflows"
    );
    // Another fingerprint is still refused.
    write_as(
        legacy ^ 1,
        FORMAT_9[0],
        &postcard::to_allocvec(&now).unwrap(),
        &path,
    );
    let err = mk(&cfg).restore(&path).unwrap_err().to_string();
    assert!(err.contains("fingerprint differs"), "{err}");
    // The last version's fingerprint, under its format: read.
    let last = fingerprint::legacy(&wrote.plan, &wrote.seqs);
    let bytes = postcard::to_allocvec(&now).unwrap();
    write_as(last, FORMAT_9[0], &bytes, &path);
    assert_eq!(mk(&cfg).restore(&path).unwrap(), now.len());
    let plain = StateConfig {
        features: vec![def("n", Agg::Count), def("s", Agg::Sum)],
        ..StateConfig::default()
    };
    let st = mk(&plain);
    assert_eq!(
        fingerprint::legacy(&st.plan, &st.seqs),
        fingerprint::kept_rings(&st.plan, &st.seqs)
    );
}

/// A snapshot of other definitions whose sizes are out of a configuration's bounds (a
/// negative or huge window, a sequence too long) is refused by name before any layout
/// is computed from them.
#[test]
fn definitions_out_of_bounds_are_refused() {
    use crate::state::carry::Defs;
    use std::time::Duration;
    let cfg = StateConfig {
        features: vec![FeatureDef::new("n", KeySource::Entity, Agg::Count)
            .window(Duration::from_secs(3_600), 12)],
        ..StateConfig::default()
    };
    let (schema, clock) = setup(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&schema), clock).unwrap();
    for i in 0..20u64 {
        let mut t = Transaction::builder(&schema)
            .id(i + 1)
            .entity(1 + i % 3)
            .timestamp_ms(1_767_571_200_000 + i as i64 * 60_000)
            .amount(3.0, "USD")
            .build()
            .unwrap();
        st.apply(&mut t);
    }
    let items = st.mem().unwrap().dump();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bounds.snap");
    let other = fingerprint::of(&st.plan, &st.seqs) ^ 1;
    for (k, bad) in [-1i64, 1_441, i64::MAX].into_iter().enumerate() {
        let mut defs = Defs::of(&st.plan, &st.seqs);
        defs.sources[0].groups[0].spec.window_b = bad;
        let payload = postcard::to_allocvec(&(&defs, &items)).unwrap();
        write_as(other, MAGIC, &payload, &path);
        let err = st.restore(&path).unwrap_err().to_string();
        assert!(
            err.contains("out of bounds: a window's buckets"),
            "{k}: {err}"
        );
    }
    // In bounds, the same file is carried: every key restored.
    let payload = postcard::to_allocvec(&(&Defs::of(&st.plan, &st.seqs), &items)).unwrap();
    write_as(other, MAGIC, &payload, &path);
    assert_eq!(st.restore(&path).unwrap(), items.len());
}
