//! Snapshot to disk and restore on start.
//!
//! File: `RSKSTATB` | definitions fingerprint (u64 LE, [`super::fingerprint`]) | payload length (u64 LE) |
//! CRC-32C of the payload (u32 LE) | payload (postcard: the definitions, then every key's source, record words
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
//! refused when others can write to it. A torn or corrupt file is refused (typed error)
//! and nothing is restored. The payload starts with the definitions that wrote it
//! ([`super::carry::Defs`]): a snapshot of other feature definitions restores the
//! windows both define alike, and the others start empty ([`super::carry`]); one that
//! shares no window with these, or one of a version before `RSKSTATB` (no definitions
//! in it) written by other definitions, is refused.
//!
//! With `[privacy] key` the payload (which holds entity keys) is sealed: magic `RSKSTATC`,
//! payload = key id (4 bytes, [`Pseudonymiser::key_id`](crate::pseudo::Pseudonymiser::key_id))
//! | nonce (12 random bytes) | ChaCha20-Poly1305 of the postcard bytes, under a key derived
//! from the `[privacy] key`, with the header's magic and fingerprint as associated data. A
//! sealed snapshot read without the key, with another key, or altered is refused by name.

use super::carry::{Carry, Defs};
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
        let defs = Defs::of(&self.plan, &self.seqs);
        let plain =
            postcard::to_allocvec(&(&defs, &items)).map_err(|e| StateError::BadSnapshot {
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

    /// Restores a snapshot; returns the keys restored. Written by other definitions,
    /// the windows both define alike are restored and the others start empty (see the
    /// module's text).
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
        // Written by other definitions: its alike windows are carried (`super::carry`).
        let foreign = current && word(8) != self.fingerprint();
        // Versions before this one fingerprinted without the fields and filters, and
        // carry no definitions: only the ones that wrote them restore them.
        if !current && !fingerprint::before_fields(&self.plan, &self.seqs).contains(&word(8)) {
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
        } else if current {
            let (defs, items): (Defs, Vec<SnapKey>) =
                postcard::from_bytes(payload).map_err(decoding)?;
            if foreign {
                let carry = Carry::new(&defs, &self.plan, &self.seqs).map_err(&bad)?;
                if !carry.any() {
                    return Err(bad(
                        "written by other feature definitions (the fingerprint differs) that share no window with these".into(),
                    ));
                }
                let mem = self.mem_or_refuse(path)?;
                let here = mem.layouts();
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.extend(carry.key(item, &here).map_err(&bad)?);
                }
                tracing::warn!(
                    target: "risk::state",
                    carried = carry.carried,
                    windows = carry.groups_here,
                    "a snapshot of other feature definitions: the windows both define alike were restored, the others start empty"
                );
                out
            } else {
                items
            }
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
#[path = "snapshot_tests.rs"]
mod tests;
