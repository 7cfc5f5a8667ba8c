//! Rule-set versions kept on disk, for [`RuleScorer::rollback`](crate::scorer::RuleScorer::rollback).
//!
//! Every set the scorer starts serving is recorded: its exact source text in
//! `<dir>/<seq>-<hash>.rules` (so a rollback recompiles precisely what served, and the
//! decision records' rule version, name + version + FNV-1a of the text, matches), and a
//! line in `<dir>/index.json` (sequence, version, hash, original file, when). Files are
//! written to a temporary name, synced and renamed, so a crash leaves the previous index
//! whole. The history is bounded (`keep` newest distinct texts; a text served again moves
//! to the end); files past the bound are deleted. A damaged index or a missing file is a
//! typed error at open or rollback; it never replaces the serving set.

use crate::ruleset::RuleSet;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most versions a history may keep.
pub const MAX_KEEP: usize = 1_000;
/// Largest `index.json` read back.
const MAX_INDEX: u64 = 16 << 20;

/// One recorded version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleVersion {
    /// Position in the history: increases by one per recorded set.
    pub seq: u64,
    /// The file's `version` line (or `unversioned`).
    pub version: String,
    /// FNV-1a 64 of the source text, as on decision records (hex on display).
    pub hash: u64,
    /// The file name it was compiled from.
    pub file: String,
    /// When it started serving, milliseconds since the Unix epoch.
    pub loaded_at_ms: i64,
}

impl RuleVersion {
    fn name(&self) -> String {
        format!("{:06}-{:016x}.rules", self.seq, self.hash)
    }
}

/// Why the history could not be read, written or rolled back to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// A file of the history could not be read or written.
    #[error("rule history {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// `index.json` is not a history index.
    #[error("rule history index {path} is damaged: {message}")]
    Damaged {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// No recorded version matches.
    #[error(
        "no rule version {0:?} in the history (a version name, a 16-digit hash, or \"previous\")"
    )]
    Unknown(String),
    /// `keep` is out of range.
    #[error("rule history must keep between 1 and {MAX_KEEP} versions, not {0}")]
    Keep(usize),
    /// The history's directory or a file cannot be private (a directory others can write).
    #[error("rule history: {0}")]
    Files(#[from] risk_core::files::FilesError),
}

/// The versions a [`RuleScorer`](crate::scorer::RuleScorer) has served.
#[derive(Debug)]
pub struct History {
    dir: PathBuf,
    keep: usize,
    entries: Mutex<Vec<RuleVersion>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HistoryError + '_ {
    move |source| HistoryError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` through a synced temporary file (created exclusively, `0600`)
/// and a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HistoryError> {
    Ok(risk_core::files::write_atomic(
        path,
        bytes,
        risk_core::files::FileMode::Private,
    )?)
}

impl History {
    /// Opens (or creates) the history in `dir`, keeping the `keep` newest versions.
    pub fn open(dir: impl AsRef<Path>, keep: usize) -> Result<Self, HistoryError> {
        if !(1..=MAX_KEEP).contains(&keep) {
            return Err(HistoryError::Keep(keep));
        }
        let dir = dir.as_ref().to_path_buf();
        risk_core::files::create_dir(&dir, risk_core::files::FileMode::Private)?;
        let index = dir.join("index.json");
        let entries = match std::fs::metadata(&index) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(&index)(e)),
            Ok(m) if m.len() > MAX_INDEX => {
                return Err(HistoryError::Damaged {
                    path: index.display().to_string(),
                    message: format!("{} bytes (max {MAX_INDEX})", m.len()),
                })
            }
            Ok(_) => {
                let text = std::fs::read(&index).map_err(io(&index))?;
                let v: Vec<RuleVersion> =
                    serde_json::from_slice(&text).map_err(|e| HistoryError::Damaged {
                        path: index.display().to_string(),
                        message: e.to_string(),
                    })?;
                if v.windows(2).any(|w| w[0].seq >= w[1].seq) {
                    return Err(HistoryError::Damaged {
                        path: index.display().to_string(),
                        message: "sequence numbers are not increasing".into(),
                    });
                }
                v
            }
        };
        Ok(Self {
            dir,
            keep,
            entries: Mutex::new(entries),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Recorded versions, oldest first.
    pub fn versions(&self) -> Vec<RuleVersion> {
        self.entries.lock().clone()
    }

    /// Records `set` as served now (a text already recorded moves to the end).
    pub fn record(&self, set: &RuleSet, now_ms: i64) -> Result<RuleVersion, HistoryError> {
        let mut entries = self.entries.lock();
        let hash = set.version_id().hash();
        if let Some(last) = entries.last() {
            if last.hash == hash {
                return Ok(last.clone());
            }
        }
        let v = RuleVersion {
            seq: entries.last().map_or(1, |l| l.seq + 1),
            version: set.version().to_owned(),
            hash,
            file: set.file().to_owned(),
            loaded_at_ms: now_ms,
        };
        write_atomic(&self.dir.join(v.name()), set.source().as_bytes())?;
        let mut next: Vec<RuleVersion> =
            entries.iter().filter(|e| e.hash != hash).cloned().collect();
        let mut dropped: Vec<RuleVersion> =
            entries.iter().filter(|e| e.hash == hash).cloned().collect();
        next.push(v.clone());
        if next.len() > self.keep {
            dropped.extend(next.drain(..next.len() - self.keep));
        }
        let index = serde_json::to_vec_pretty(&next).map_err(|e| HistoryError::Damaged {
            path: self.dir.join("index.json").display().to_string(),
            message: e.to_string(),
        })?;
        write_atomic(&self.dir.join("index.json"), &index)?;
        // Only once the index no longer names them.
        for d in dropped {
            let _ = std::fs::remove_file(self.dir.join(d.name()));
        }
        *entries = next;
        Ok(v)
    }

    /// The version `to` names: a `version` (the newest with it), a 16-digit hex hash,
    /// or `"previous"` (the one recorded before `serving`), with its source text.
    pub fn find(&self, to: &str, serving: u64) -> Result<(RuleVersion, String), HistoryError> {
        let entries = self.entries.lock();
        let found = if to == "previous" {
            let at = entries.iter().rposition(|e| e.hash == serving);
            at.and_then(|i| i.checked_sub(1)).map(|i| &entries[i])
        } else {
            let hash = (to.len() == 16)
                .then(|| u64::from_str_radix(to, 16).ok())
                .flatten();
            entries
                .iter()
                .rev()
                .find(|e| e.version == to || Some(e.hash) == hash)
        };
        let v = found
            .ok_or_else(|| HistoryError::Unknown(to.to_owned()))?
            .clone();
        let path = self.dir.join(v.name());
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        if risk_core::schema::Fnv::hash(text.as_bytes()) != v.hash {
            return Err(HistoryError::Damaged {
                path: path.display().to_string(),
                message: "its content no longer matches its hash".into(),
            });
        }
        Ok((v, text))
    }
}
