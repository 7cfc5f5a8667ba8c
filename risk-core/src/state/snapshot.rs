//! Snapshot to disk and restore on start.
//!
//! File: `RSKSTATB` | definitions fingerprint (u64 LE, [`super::fingerprint`]) | payload length (u64 LE) |
//! CRC-32C of the payload (u32 LE) | payload (postcard: every key's source, record words
//! as laid out by [`super::layout`] in the machine's byte order, and its spill: distinct
//! sets and exact windows' events). Snapshots of earlier versions are read and their
//! records migrated (`super::layout_migrate`): `RSKSTAT9` / sealed `RSKSTATA` (the same
//! records, under a fingerprint that left out the fields groups aggregate and their
//! filters: checked against that one), those whose stats groups kept a last event
//! time (`RSKSTAT7` / sealed `RSKSTAT8`), those from before rings longer than 64 buckets
//! kept occupancy bits (`RSKSTAT5` / sealed `RSKSTAT6`), and those from before exact
//! windows (`RSKSTAT3` / sealed `RSKSTAT4`: a spill of distinct sets only).
//! Snapshots of the earlier store (`RSKSTAT1` / `RSKSTAT2`: a table per group) are
//! refused by name: start without them (the state refills from traffic).
//! Written to a temporary file (created exclusively, `0600`), synced, then renamed over
//! the old one: a crash leaves the previous snapshot. The configured path's directory is created `0700` at start and
//! refused when others can write to it. A snapshot written by other feature definitions, a torn or
//! corrupt file is refused (typed error) and nothing is restored.
//!
//! With `[privacy] key` the payload (which holds entity keys) is sealed: magic `RSKSTATC`,
//! payload = key id (4 bytes, [`Pseudonymiser::key_id`](crate::pseudo::Pseudonymiser::key_id))
//! | nonce (12 random bytes) | ChaCha20-Poly1305 of the postcard bytes, under a key derived
//! from the `[privacy] key`, with the header's magic and fingerprint as associated data. A
//! sealed snapshot read without the key, with another key, or altered is refused by name.

use super::fingerprint;
use super::mem::SnapKey;
use super::{StateEngine, StateError};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RSKSTATB";
/// A sealed snapshot (`[privacy] key` set).
const SEALED: &[u8; 8] = b"RSKSTATC";
/// The version whose fingerprint left out the fields groups aggregate and their
/// filters (plain, sealed): read, checked against that fingerprint.
const FORMAT_9: [&[u8; 8]; 2] = [b"RSKSTAT9", b"RSKSTATA"];
/// The versions whose stats groups kept a last event time (plain, sealed): read,
/// records migrated.
const FORMAT_7: [&[u8; 8]; 2] = [b"RSKSTAT7", b"RSKSTAT8"];
/// The versions before long rings' occupancy bits (plain, sealed): read, records migrated.
const FORMAT_5: [&[u8; 8]; 2] = [b"RSKSTAT5", b"RSKSTAT6"];
/// The version before exact windows (plain, sealed): read, spills migrated.
const FORMAT_3: [&[u8; 8]; 2] = [b"RSKSTAT3", b"RSKSTAT4"];
/// One key of a format-3 snapshot: its spill held distinct sets only.
type SnapKey3 = (u8, Vec<u64>, Option<Vec<super::distinct::Distinct>>);
/// The earlier store's snapshots (plain, sealed): refused by name.
const FORMAT_1: [&[u8; 8]; 2] = [b"RSKSTAT1", b"RSKSTAT2"];
/// What the snapshot key is derived for.
const KEY_PURPOSE: &str = "risk 2026-12 state snapshot key";
/// Key id and nonce before a sealed payload's ciphertext.
const SEAL_PREFIX: usize = 4 + 12;

fn cipher(p: &crate::pseudo::Pseudonymiser) -> chacha20poly1305::ChaCha20Poly1305 {
    use chacha20poly1305::KeyInit;
    chacha20poly1305::ChaCha20Poly1305::new(&p.subkey(KEY_PURPOSE).into())
}

fn key_id_bytes(p: &crate::pseudo::Pseudonymiser) -> [u8; 4] {
    let id = p.key_id();
    let mut out = [0u8; 4];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    out
}
const HEADER: usize = 8 + 8 + 8 + 4;

/// What a snapshot wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The file.
    pub path: PathBuf,
    /// Keys written.
    pub keys: usize,
    /// File size.
    pub bytes: u64,
}

impl StateEngine {
    fn fingerprint(&self) -> u64 {
        fingerprint::of(&self.plan, &self.seqs)
    }

    fn mem_or_refuse(&self, path: &Path) -> Result<&super::mem::MemStore, StateError> {
        self.mem().ok_or_else(|| StateError::BadSnapshot {
            path: path.to_path_buf(),
            reason: "the state lives on Redis (Redis persists it)".into(),
        })
    }

    /// Writes every key's state to `path` (atomically: temporary file, sync, rename;
    /// private modes, see [`crate::files`]).
    pub fn snapshot(&self, path: impl AsRef<Path>) -> Result<SnapshotInfo, StateError> {
        let path = path.as_ref();
        let items = self.mem_or_refuse(path)?.dump();
        let keys = items.len();
        let plain = postcard::to_allocvec(&items).map_err(|e| StateError::BadSnapshot {
            path: path.to_path_buf(),
            reason: format!("encoding: {e}"),
        })?;
        let fp = self.fingerprint();
        let (magic, payload) = match &self.privacy.pseudonymiser {
            None => (MAGIC, plain),
            Some(p) => {
                use chacha20poly1305::aead::{Aead, AeadCore, OsRng, Payload};
                let nonce = chacha20poly1305::ChaCha20Poly1305::generate_nonce(&mut OsRng);
                let aad = [&SEALED[..], &fp.to_le_bytes()].concat();
                let ct = cipher(p)
                    .encrypt(
                        &nonce,
                        Payload {
                            msg: &plain,
                            aad: &aad,
                        },
                    )
                    .map_err(|_| StateError::BadSnapshot {
                        path: path.to_path_buf(),
                        reason: "sealing failed".into(),
                    })?;
                let mut sealed = Vec::with_capacity(SEAL_PREFIX + ct.len());
                sealed.extend_from_slice(&key_id_bytes(p));
                sealed.extend_from_slice(&nonce);
                sealed.extend_from_slice(&ct);
                (SEALED, sealed)
            }
        };
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        bytes.extend_from_slice(magic);
        bytes.extend_from_slice(&fp.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let mode = self.privacy.file_mode;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Must exist (made at start for the configured path) and not be open to others.
            crate::files::check_dir(dir)?;
        }
        crate::files::write_atomic(path, &bytes, mode)?;
        Ok(SnapshotInfo {
            path: path.to_path_buf(),
            keys,
            bytes: (HEADER + payload.len()) as u64,
        })
    }

    /// Restores a snapshot written by the same definitions; returns the keys restored.
    pub fn restore(&self, path: impl AsRef<Path>) -> Result<usize, StateError> {
        let path = path.as_ref();
        let bad = |reason: String| StateError::BadSnapshot {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| StateError::io(path, e))?;
        if bytes.len() >= 8 && FORMAT_1.iter().any(|m| &bytes[..8] == *m) {
            return Err(bad(
                "a snapshot of the earlier state store (format 1), which this version cannot read: start without it (move the file away); the state refills from traffic".into(),
            ));
        }
        let known = [
            MAGIC,
            SEALED,
            FORMAT_9[0],
            FORMAT_9[1],
            FORMAT_7[0],
            FORMAT_7[1],
            FORMAT_5[0],
            FORMAT_5[1],
            FORMAT_3[0],
            FORMAT_3[1],
        ];
        if bytes.len() < HEADER || !known.iter().any(|m| &bytes[..8] == *m) {
            return Err(bad("not a state snapshot (bad magic or too short)".into()));
        }
        let magic: &[u8; 8] = bytes[..8].try_into().expect("8 bytes");
        let sealed = [SEALED, FORMAT_9[1], FORMAT_7[1], FORMAT_5[1], FORMAT_3[1]].contains(&magic);
        let old = FORMAT_3.contains(&magic);
        let before_occ = old || FORMAT_5.contains(&magic);
        let before_lean = before_occ || FORMAT_7.contains(&magic);
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let current = magic == MAGIC || magic == SEALED;
        let fits = if current {
            word(8) == self.fingerprint()
        } else {
            // Versions before this one fingerprinted without the fields and filters.
            fingerprint::before_fields(&self.plan, &self.seqs).contains(&word(8))
        };
        if !fits {
            return Err(bad(
                "written by other feature definitions (the fingerprint differs)".into(),
            ));
        }
        let len = word(16);
        if len != (bytes.len() - HEADER) as u64 {
            return Err(bad(format!(
                "payload of {len} bytes announced, {} present (torn file)",
                bytes.len() - HEADER
            )));
        }
        let crc = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
        let payload = &bytes[HEADER..];
        if crc32c::crc32c(payload) != crc {
            return Err(bad("checksum mismatch (corrupt file)".into()));
        }
        let opened;
        let payload = match (sealed, &self.privacy.pseudonymiser) {
            (false, _) => payload,
            (true, None) => {
                return Err(bad(
                    "sealed with a [privacy] key; this engine has none".into()
                ))
            }
            (true, Some(p)) => {
                use chacha20poly1305::aead::{Aead, Payload};
                if payload.len() < SEAL_PREFIX {
                    return Err(bad("sealed payload too short".into()));
                }
                let id = &payload[..4];
                if id != key_id_bytes(p) {
                    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                    return Err(bad(format!(
                        "sealed with another [privacy] key (key id {hex}, this engine's {})",
                        p.key_id()
                    )));
                }
                let nonce = chacha20poly1305::Nonce::from_slice(&payload[4..SEAL_PREFIX]);
                let aad = [&magic[..], &bytes[8..16]].concat();
                opened = cipher(p)
                    .decrypt(
                        nonce,
                        Payload {
                            msg: &payload[SEAL_PREFIX..],
                            aad: &aad,
                        },
                    )
                    .map_err(|_| bad("sealed payload does not authenticate (altered)".into()))?;
                &opened[..]
            }
        };
        let decoding = |e: postcard::Error| bad(format!("decoding: {e}"));
        let mut items: Vec<SnapKey> = if old {
            let v: Vec<SnapKey3> = postcard::from_bytes(payload).map_err(decoding)?;
            v.into_iter()
                .map(|(s, w, d)| {
                    let spill = d.map(|distinct| super::record::Spilled {
                        distinct,
                        logs: Vec::new(),
                    });
                    (s, w, spill)
                })
                .collect()
        } else {
            postcard::from_bytes(payload).map_err(decoding)?
        };
        // Each key's record must have the layout of its source's groups now.
        let mem = self.mem_or_refuse(path)?;
        if before_lean {
            items
                .iter_mut()
                .for_each(|item| mem.migrate(item, before_occ));
        }
        for item in &items {
            mem.check(&self.plan, item).map_err(bad)?;
        }
        let n = items.len();
        mem.restore(&self.plan, items);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
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
        let bits = |t: &Transaction| -> Vec<u32> {
            t.features.values().iter().map(|v| v.to_bits()).collect()
        };
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
        // The last version's fingerprint, under its format: read; under this format
        // (which carries the fingerprint with fields and filters): refused.
        let last = fingerprint::legacy(&wrote.plan, &wrote.seqs);
        let bytes = postcard::to_allocvec(&now).unwrap();
        write_as(last, FORMAT_9[0], &bytes, &path);
        assert_eq!(mk(&cfg).restore(&path).unwrap(), now.len());
        write_as(last, MAGIC, &bytes, &path);
        let err = mk(&cfg).restore(&path).unwrap_err().to_string();
        assert!(err.contains("fingerprint differs"), "{err}");
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
}
