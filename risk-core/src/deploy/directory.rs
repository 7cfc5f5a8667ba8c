//! The model directory: every deployed version side by side with its metadata, and the
//! promoted version of each target, so that a rollback is one call and a restart comes
//! back on the last promoted version.
//!
//! ```text
//! <dir>/<target>/<key>/meta.json       VersionMeta (JSON)
//! <dir>/<target>/<key>/<artifact>      a copy of the model or rule file (spec candidates)
//! <dir>/<target>/PROMOTED              the promoted version's key
//! ```
//! `key` is the content hash as 16 hex digits. Every file is written to a temporary name,
//! synced, renamed over the old one and the directory synced, so a crash leaves the old
//! file or the new one, never a torn one: a crash mid-deploy leaves `PROMOTED` naming the
//! last promoted version.

use super::{DeployError, Target};
use crate::calibrate::Calibration;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The most bytes a `meta.json` or `PROMOTED` file may have.
const MAX_META: u64 = 16 << 20;

/// One stored version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionMeta {
    /// Directory key (content hash, 16 hex digits).
    pub key: String,
    /// `rules`, `fast`, `deep` or `policy`.
    pub target: String,
    /// Scorer name.
    pub name: String,
    /// Human version.
    pub version: String,
    /// When first stored (Unix ms).
    pub created_ms: i64,
    /// Who or what deployed it ([`RolloutPlan::by`](super::RolloutPlan::by)).
    pub deployed_by: String,
    /// The scorer table (TOML) that rebuilds it, paths relative to the version's
    /// directory; `None`: a caller-built scorer that cannot be rebuilt from here.
    pub spec: Option<String>,
    /// Its calibration.
    pub calibration: Option<Calibration>,
    /// Thresholds (policy versions).
    pub policy: Option<PolicyMeta>,
    /// What the validation gate measured.
    pub gate: Option<serde_json::Value>,
    /// State changes, oldest first.
    pub history: Vec<StateChange>,
}

/// Thresholds as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyMeta {
    /// `thresholds.approve_below`.
    pub approve_below: f32,
    /// `thresholds.decline_at`.
    pub decline_at: f32,
    /// `thresholds.hard_rule_override`.
    pub hard_rule_override: bool,
    /// `thresholds.static_action`.
    pub static_action: String,
}

/// One state change of a stored version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateChange {
    /// When (Unix ms).
    pub at_ms: i64,
    /// `validated`, `refused`, `shadow`, `canary`, `promoted`, `rolled_back`, ...
    pub state: String,
    /// Details (share, broken guard, reason).
    pub detail: String,
}

/// A model directory.
#[derive(Debug, Clone)]
pub struct ModelDirectory {
    root: PathBuf,
}

fn io(what: &str, p: &Path, e: std::io::Error) -> DeployError {
    DeployError::Directory(format!("{what} {}: {e}", p.display()))
}

/// Whether `key` is a directory key (16 lowercase hex digits): refuses anything that
/// could name a path outside the directory.
pub(crate) fn valid_key(key: &str) -> bool {
    key.len() == 16
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl ModelDirectory {
    /// Opens (creating) a model directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, DeployError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|e| io("cannot create", &root, e))?;
        Ok(Self { root })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of one version.
    pub fn version_dir(&self, target: Target, key: &str) -> PathBuf {
        self.root.join(target.as_str()).join(key)
    }

    /// Every stored version of `target`, oldest first.
    pub fn versions(&self, target: Target) -> Result<Vec<VersionMeta>, DeployError> {
        let dir = self.root.join(target.as_str());
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("cannot list", &dir, e)),
        };
        let mut v = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if valid_key(&name) {
                v.push(self.meta(target, &name)?);
            }
        }
        v.sort_by_key(|m| m.created_ms);
        Ok(v)
    }

    /// One version's metadata.
    pub fn meta(&self, target: Target, key: &str) -> Result<VersionMeta, DeployError> {
        if !valid_key(key) {
            return Err(DeployError::Directory(format!(
                "{key:?} is not a version key (16 hex digits)"
            )));
        }
        let p = self.version_dir(target, key).join("meta.json");
        let text = read_bounded(&p)?;
        let m: VersionMeta = serde_json::from_str(&text)
            .map_err(|e| DeployError::Directory(format!("{}: {e}", p.display())))?;
        if m.key != key || m.target != target.as_str() {
            return Err(DeployError::Directory(format!(
                "{} describes {}/{}, not {target}/{key}",
                p.display(),
                m.target,
                m.key
            )));
        }
        Ok(m)
    }

    /// The promoted version of `target`, if one was ever promoted.
    pub fn promoted(&self, target: Target) -> Result<Option<VersionMeta>, DeployError> {
        let p = self.root.join(target.as_str()).join("PROMOTED");
        if !p.exists() {
            return Ok(None);
        }
        let key = read_bounded(&p)?;
        self.meta(target, key.trim()).map(Some)
    }

    /// Stores a new version (or updates one): copies `artifact` into its directory
    /// (when given and not there yet) and writes its metadata.
    pub(crate) fn store(
        &self,
        target: Target,
        meta: &VersionMeta,
        artifact: Option<&Path>,
    ) -> Result<(), DeployError> {
        let dir = self.version_dir(target, &meta.key);
        std::fs::create_dir_all(&dir).map_err(|e| io("cannot create", &dir, e))?;
        if let Some(src) = artifact {
            let name = src.file_name().ok_or_else(|| {
                DeployError::Directory(format!("{} has no file name", src.display()))
            })?;
            let dst = dir.join(name);
            if !dst.exists() {
                let bytes = std::fs::read(src).map_err(|e| io("cannot read", src, e))?;
                write_atomic(&dst, &bytes)?;
            }
        }
        let text = serde_json::to_string_pretty(meta)
            .map_err(|e| DeployError::Directory(e.to_string()))?;
        write_atomic(&dir.join("meta.json"), text.as_bytes())
    }

    /// Appends a state change to a stored version.
    pub(crate) fn record(
        &self,
        target: Target,
        key: &str,
        change: StateChange,
    ) -> Result<(), DeployError> {
        let mut m = self.meta(target, key)?;
        m.history.push(change);
        // Bounded: a version deployed and rolled back for years keeps its latest changes.
        let n = m.history.len();
        if n > 1000 {
            m.history.drain(..n - 1000);
        }
        self.store(target, &m, None)
    }

    /// Forgets `target`'s promoted version (the configured one serves after a restart):
    /// a rollback to a version the directory never stored.
    pub(crate) fn clear_promoted(&self, target: Target) -> Result<(), DeployError> {
        let p = self.root.join(target.as_str()).join("PROMOTED");
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("cannot remove", &p, e)),
        }
    }

    /// Makes `key` the promoted version of `target` (atomically).
    pub(crate) fn set_promoted(&self, target: Target, key: &str) -> Result<(), DeployError> {
        let p = self.root.join(target.as_str()).join("PROMOTED");
        write_atomic(&p, key.as_bytes())
    }
}

fn read_bounded(p: &Path) -> Result<String, DeployError> {
    let len = std::fs::metadata(p)
        .map_err(|e| io("cannot read", p, e))?
        .len();
    if len > MAX_META {
        return Err(DeployError::Directory(format!(
            "{} is {len} bytes, at most {MAX_META}",
            p.display()
        )));
    }
    std::fs::read_to_string(p).map_err(|e| io("cannot read", p, e))
}

/// Writes `bytes` to `path` through a synced temporary file and a rename, then syncs
/// the directory.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DeployError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| io("cannot create", &tmp, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| io("cannot write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("cannot rename onto", path, e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
