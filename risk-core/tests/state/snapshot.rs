//! Snapshot → restore gives identical features; bad snapshots are refused.

use super::*;
use risk_core::state::{Agg, Current, FeatureDef, KeySource, StateEngine, StateError};
use std::time::Duration;

fn cfg(snapshot: Option<std::path::PathBuf>) -> StateConfig {
    let h = |n: u64| Duration::from_secs(n * 3_600);
    StateConfig {
        features: vec![
            FeatureDef::new("c_count_1h", KeySource::Entity, Agg::Count).window(h(1), 12),
            FeatureDef::new("c_sum_24h", KeySource::Entity, Agg::Sum).window(h(24), 24),
            FeatureDef::new("c_devices", KeySource::Entity, Agg::Distinct)
                .of("device")
                .window(h(24), 24)
                .current(Current::Include),
            FeatureDef::new("m_cards", KeySource::Merchant, Agg::Distinct)
                .of("card")
                .window(h(24), 24),
            FeatureDef::new("m_gap", KeySource::Merchant, Agg::SinceLast),
            FeatureDef::new("m_fraud", KeySource::Merchant, Agg::FraudCount)
                .window(h(24), 4)
                .delay(h(24)),
        ],
        snapshot,
        ..StateConfig::default()
    }
}

fn features(st: &StateEngine, s: &Arc<FeatureSchema>, evs: &[Ev]) -> Vec<Vec<u32>> {
    evs.iter()
        .map(|e| {
            let mut t = e.txn(s);
            st.apply(&mut t);
            t.features.values().iter().map(|v| v.to_bits()).collect()
        })
        .collect()
}

#[test]
fn snapshot_then_restore_gives_identical_features() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let c = cfg(Some(path.clone()));
    let s = schema(&c);
    let evs = stream(11, 6_000, 60, 8);
    let (a, b) = evs.split_at(3_000);
    let live = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    features(&live, &s, a);
    let info = live.snapshot(&path).unwrap();
    assert!(info.keys >= 60, "{info:?}");
    // A new engine restores the file at start (state.snapshot).
    let restored = StateEngine::new(c, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    assert_eq!(features(&restored, &s, b), features(&live, &s, b));
}

#[test]
fn corrupt_torn_and_foreign_snapshots_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let c = cfg(None);
    let s = schema(&c);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    features(&st, &s, &stream(12, 500, 20, 4));
    st.snapshot(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let fresh = || StateEngine::new(c.clone(), Arc::clone(&s), clock(T0)).unwrap();
    let reason = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        match fresh().restore(&path) {
            Err(StateError::BadSnapshot { reason, .. }) => reason,
            other => panic!("{other:?}"),
        }
    };
    let mut flipped = good.clone();
    let n = flipped.len();
    flipped[n - 10] ^= 0x40;
    assert!(reason(&flipped).contains("checksum"));
    assert!(reason(&good[..good.len() - 7]).contains("torn"));
    assert!(reason(b"hello").contains("magic"));
    // Other definitions: what they define alike is restored (`snapshot_carry.rs`),
    // nothing when they share no window: refused at build.
    std::fs::write(&path, &good).unwrap();
    let mut other = cfg(Some(path.clone()));
    other.features.pop();
    assert!(StateEngine::new(other, Arc::clone(&s), clock(T0)).is_ok());
    let mut foreign = cfg(Some(path.clone()));
    foreign.features = vec![FeatureDef::new("c_count_1h", KeySource::Device, Agg::Count)];
    let e = StateEngine::new(foreign, s, clock(T0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("fingerprint"), "{e}");
}

/// With `[privacy] key` the snapshot (which holds entity keys) is sealed: the same key
/// restores identical features; no key, another key or an altered byte is refused by name.
#[test]
fn a_sealed_snapshot_restores_only_with_its_key() {
    use risk_core::pseudo::Pseudonymiser;
    use risk_core::state::StatePrivacy;
    let private = |k: &[u8]| StatePrivacy {
        pseudonymiser: Some(Pseudonymiser::new("privacy.key", k).unwrap()),
        file_mode: risk_core::files::FileMode::Private,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let c = cfg(Some(path.clone()));
    let s = schema(&c);
    let evs = stream(12, 4_000, 40, 8);
    let (a, b) = evs.split_at(2_000);
    let key = b"0123456789abcdef-snapshot-key";
    let now = clock(T0 + 400 * DAY);
    let live =
        StateEngine::with_privacy(c.clone(), Arc::clone(&s), now.clone(), private(key)).unwrap();
    features(&live, &s, a);
    live.snapshot(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"RSKSTATC");
    let restored =
        StateEngine::with_privacy(c.clone(), Arc::clone(&s), now.clone(), private(key)).unwrap();
    assert_eq!(features(&restored, &s, b), features(&live, &s, b));

    let e = StateEngine::new(c.clone(), Arc::clone(&s), now.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("sealed with a [privacy] key"), "{e}");
    let other = private(b"0123456789abcdef-another-key");
    let e = StateEngine::with_privacy(c.clone(), Arc::clone(&s), now.clone(), other)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another [privacy] key"), "{e}");
    // One ciphertext byte changed, the checksum fixed: it does not authenticate.
    let mut bad = bytes.clone();
    let at = bad.len() - 5;
    bad[at] ^= 1;
    let crc = crc32c::crc32c(&bad[28..]);
    bad[24..28].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bad).unwrap();
    let e = StateEngine::with_privacy(c, s, now, private(key))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not authenticate"), "{e}");
}
