//! The model directory: every deployed version side by side with its metadata, and the
//! promoted version of each target, so that a rollback is one call and a restart comes
//! back on the last promoted version.
//!
//! ```text
//! <dir>/<target>/<key>/meta.json       VersionMeta (JSON)
//! <dir>/<target>/<key>/<artifact>      a copy of the model or rule file (spec candidates)
//! <dir>/<target>/PROMOTED              the promoted version's key
//! ```
//! `key` is the content hash as 16 hex digits. Every file is written to a temporary name
//! (created exclusively, `0600`; directories `0700`, one writable by others refused),
//! synced, renamed over the old one and the directory synced, so a crash leaves the old
//! file or the new one, never a torn one: a crash mid-deploy leaves `PROMOTED` naming the
//! last promoted version.
//!
//! The copied artifact is recorded in `meta.json` by name and BLAKE3 at save; reading a
//! version back ([`ModelDirectory::meta`], so every restore and stored deploy) re-hashes it
//! and refuses a mismatch ([`DeployError::ArtifactMismatch`]), and refuses a `meta.json`
//! whose artifact or spec `path` is absolute or holds `..` ([`DeployError::UnsafePath`]).
//! URLs in a stored spec are written without credentials
//! ([`redact_url`](crate::secret::redact_url)).

use super::{DeployError, Target};
use crate::calibrate::Calibration;
use crate::files::{self, FileMode};
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

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
    /// The artifact copied into the version's directory, with its hash at save.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactMeta>,
}

/// A stored artifact: its file name in the version's directory and its BLAKE3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactMeta {
    /// File name (one plain component).
    pub file: String,
    /// BLAKE3 of its bytes, 64 lowercase hex digits.
    pub blake3: String,
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
    mode: FileMode,
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
    /// Opens (creating, `0700`) a model directory; one others can write is refused.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, DeployError> {
        Self::open_with_mode(root, FileMode::Private)
    }

    /// [`open`](Self::open) with the modes of `mode`.
    pub fn open_with_mode(root: impl Into<PathBuf>, mode: FileMode) -> Result<Self, DeployError> {
        let root = root.into();
        files::create_dir(&root, mode).map_err(|e| DeployError::Directory(e.to_string()))?;
        Ok(Self { root, mode })
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
        self.verify(target, &m, &p)?;
        Ok(m)
    }

    /// Refuses unsafe paths in `m` and an artifact whose hash changed since it was saved.
    fn verify(&self, target: Target, m: &VersionMeta, meta: &Path) -> Result<(), DeployError> {
        if let Some(text) = &m.spec {
            if let Ok(table) = toml::from_str::<toml::Table>(text) {
                if let Some(p) = table.get("path").and_then(|p| p.as_str()) {
                    check_path(meta, p, false)?;
                }
            }
        }
        let Some(a) = &m.artifact else {
            return Ok(());
        };
        check_path(meta, &a.file, true)?;
        let path = self.version_dir(target, &m.key).join(&a.file);
        let got = hash_file(&path)?;
        if got != a.blake3 {
            return Err(DeployError::ArtifactMismatch {
                path,
                expected: a.blake3.clone(),
                got,
            });
        }
        Ok(())
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
        files::create_dir(&dir, self.mode).map_err(|e| DeployError::Directory(e.to_string()))?;
        let mut meta = meta.clone();
        if let Some(src) = artifact {
            let name = src.file_name().ok_or_else(|| {
                DeployError::Directory(format!("{} has no file name", src.display()))
            })?;
            let dst = dir.join(name);
            let bytes = std::fs::read(src).map_err(|e| io("cannot read", src, e))?;
            let hash = blake3::hash(&bytes).to_hex().to_string();
            if !dst.exists() || hash_file(&dst)? != hash {
                self.write(&dst, &bytes)?;
            }
            meta.artifact = Some(ArtifactMeta {
                file: name.to_string_lossy().into_owned(),
                blake3: hash,
            });
        }
        meta.spec = meta.spec.as_deref().map(redact_spec);
        let text = serde_json::to_string_pretty(&meta)
            .map_err(|e| DeployError::Directory(e.to_string()))?;
        self.write(&dir.join("meta.json"), text.as_bytes())
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
        self.write(&p, key.as_bytes())
    }

    /// Writes `bytes` to `path` atomically with this directory's mode.
    fn write(&self, path: &Path, bytes: &[u8]) -> Result<(), DeployError> {
        files::write_atomic(path, bytes, self.mode)
            .map_err(|e| DeployError::Directory(e.to_string()))
    }
}

/// Refuses a path from a `meta.json` that is absolute or climbs out with `..` (and, for
/// the artifact, anything but one plain file name).
fn check_path(meta: &Path, p: &str, file_name: bool) -> Result<(), DeployError> {
    let bad = |why| DeployError::UnsafePath {
        meta: meta.to_path_buf(),
        path: p.to_owned(),
        why,
    };
    let path = Path::new(p);
    if path.is_absolute() || p.starts_with('/') || p.starts_with('\\') {
        return Err(bad("is absolute"));
    }
    let mut n = 0;
    for c in path.components() {
        match c {
            Component::Normal(_) => n += 1,
            Component::CurDir => {}
            Component::ParentDir => return Err(bad("holds a `..` component")),
            Component::RootDir | Component::Prefix(_) => return Err(bad("is absolute")),
        }
    }
    if file_name && n != 1 {
        return Err(bad("is not one file name"));
    }
    Ok(())
}

/// The BLAKE3 of a file's bytes (64 hex digits).
fn hash_file(p: &Path) -> Result<String, DeployError> {
    let mut h = blake3::Hasher::new();
    let f = std::fs::File::open(p).map_err(|e| io("cannot read", p, e))?;
    h.update_reader(f).map_err(|e| io("cannot read", p, e))?;
    Ok(h.finalize().to_hex().to_string())
}

/// `spec` (a TOML table) with every string that holds a URL written without credentials.
fn redact_spec(spec: &str) -> String {
    fn walk(v: &mut toml::Value) {
        match v {
            toml::Value::String(s) if s.contains("://") => *s = crate::secret::redact_url(s),
            toml::Value::Array(a) => a.iter_mut().for_each(walk),
            toml::Value::Table(t) => t.iter_mut().for_each(|(_, v)| walk(v)),
            _ => {}
        }
    }
    match toml::from_str::<toml::Table>(spec) {
        Ok(t) => {
            let mut v = toml::Value::Table(t);
            walk(&mut v);
            toml::to_string(&v).unwrap_or_default()
        }
        Err(_) => spec.to_owned(),
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
