//! Snapshot to disk and restore on start.
//!
//! File: `RSKSTAT1` | definitions fingerprint (u64 LE) | payload length (u64 LE) |
//! CRC-32C of the payload (u32 LE) | payload (postcard: every key's clock and groups).
//! Written to a temporary file (created exclusively, `0600`), synced, then renamed over
//! the old one: a crash leaves the previous snapshot. Its directory is created `0700` and
//! refused when others can write to it. A snapshot written by other feature definitions, a torn or
//! corrupt file is refused (typed error) and nothing is restored.

use super::mem::KeyState;
use super::{StateEngine, StateError};
use crate::hash::Fnv;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RSKSTAT1";
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
        let payload = postcard::to_allocvec(&items).map_err(|e| StateError::BadSnapshot {
            path: path.to_path_buf(),
            reason: format!("encoding: {e}"),
        })?;
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&self.fingerprint().to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let mode = self.privacy.file_mode;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::files::create_dir(dir, mode)?;
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
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(bad("not a state snapshot (bad magic or too short)".into()));
        }
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
        let items: Vec<(u8, u64, KeyState)> =
            postcard::from_bytes(payload).map_err(|e| bad(format!("decoding: {e}")))?;
        // Each key's groups must have the layout of its source's groups now.
        for (s, _, st) in &items {
            let Some(gs) = self.plan.by_source.get(*s as usize) else {
                return Err(bad(format!("key source {s} does not exist")));
            };
            if gs.len() != st.groups.len()
                || !gs
                    .iter()
                    .zip(st.groups.iter())
                    .all(|(&g, state)| state.fits(&self.plan.groups[g].spec))
            {
                return Err(bad("a key's groups do not match the definitions".into()));
            }
        }
        let n = items.len();
        self.mem_or_refuse(path)?.restore(items);
        Ok(n)
    }
}
