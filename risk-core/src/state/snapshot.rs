//! Snapshot to disk and restore on start.
//!
//! File: `RSKSTAT3` | definitions fingerprint (u64 LE) | payload length (u64 LE) |
//! CRC-32C of the payload (u32 LE) | payload (postcard: every key's source, record words
//! as laid out by [`super::layout`] in the machine's byte order, and spilled distinct
//! sets). Snapshots of the earlier store (`RSKSTAT1` / `RSKSTAT2`: a table per group) are
//! refused by name: start without them (the state refills from traffic).
//! Written to a temporary file (created exclusively, `0600`), synced, then renamed over
//! the old one: a crash leaves the previous snapshot. The configured path's directory is created `0700` at start and
//! refused when others can write to it. A snapshot written by other feature definitions, a torn or
//! corrupt file is refused (typed error) and nothing is restored.
//!
//! With `[privacy] key` the payload (which holds entity keys) is sealed: magic `RSKSTAT4`,
//! payload = key id (4 bytes, [`Pseudonymiser::key_id`](crate::pseudo::Pseudonymiser::key_id))
//! | nonce (12 random bytes) | ChaCha20-Poly1305 of the postcard bytes, under a key derived
//! from the `[privacy] key`, with the header's magic and fingerprint as associated data. A
//! sealed snapshot read without the key, with another key, or altered is refused by name.

use super::mem::SnapKey;
use super::{StateEngine, StateError};
use crate::hash::Fnv;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RSKSTAT3";
/// A sealed snapshot (`[privacy] key` set).
const SEALED: &[u8; 8] = b"RSKSTAT4";
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

/// The definitions' fingerprint: a snapshot (or a Redis key prefix) of other
/// definitions is never read as this one's.
pub(super) fn fingerprint(plan: &super::plan::Plan) -> u64 {
    let specs: Vec<_> = plan
        .groups
        .iter()
        .map(|g| (g.source, g.spec, g.outcome))
        .collect();
    Fnv::hash(format!("{:?}{specs:?}", plan.sources).as_bytes())
}

impl StateEngine {
    fn fingerprint(&self) -> u64 {
        fingerprint(&self.plan)
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
        if bytes.len() < HEADER || (&bytes[..8] != MAGIC && &bytes[..8] != SEALED) {
            return Err(bad("not a state snapshot (bad magic or too short)".into()));
        }
        let sealed = &bytes[..8] == SEALED;
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if word(8) != self.fingerprint() {
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
                let aad = [&SEALED[..], &bytes[8..16]].concat();
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
        let items: Vec<SnapKey> =
            postcard::from_bytes(payload).map_err(|e| bad(format!("decoding: {e}")))?;
        // Each key's record must have the layout of its source's groups now.
        let mem = self.mem_or_refuse(path)?;
        for item in &items {
            mem.check(&self.plan, item).map_err(bad)?;
        }
        let n = items.len();
        mem.restore(&self.plan, items);
        Ok(n)
    }
}
