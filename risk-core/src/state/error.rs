//! What can go wrong with entity state: a label, a list, a snapshot, a file.

use std::path::{Path, PathBuf};

/// What went wrong with state: a label, a list, a snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A label for a transaction the engine does not remember (never decided, decided
    /// without an id, or evicted past `state.max_pending_labels`).
    #[error("no remembered transaction {0} (never decided, id 0, or evicted)")]
    UnknownTxn(u64),
    /// A label dated before its transaction.
    #[error("label at {at_ms} ms is before its transaction ({txn_ms} ms)")]
    LabelBeforeTxn {
        /// The label's time.
        at_ms: i64,
        /// The transaction's event time.
        txn_ms: i64,
    },
    /// The engine has no label features.
    #[error("no fraud_count or fraud_rate feature is configured")]
    NoLabels,
    /// The engine has no `[state]` section.
    #[error("the engine has no [state] section")]
    NoState,
    /// No list by this name.
    #[error("no list named {0:?}")]
    UnknownList(String),
    /// An entry that cannot be a key of its list.
    #[error("list {list:?}: {reason}")]
    BadEntry {
        /// The list.
        list: String,
        /// Why.
        reason: String,
    },
    /// A list file (or journal) refused at load; the list keeps serving what it had.
    #[error("list file {}:{line}: {reason}", path.display())]
    BadListFile {
        /// The file.
        path: PathBuf,
        /// The line (1-based; 0: the whole file).
        line: usize,
        /// Why.
        reason: String,
    },
    /// A snapshot that cannot be restored (corrupt, or written by other definitions).
    #[error("snapshot {}: {reason}", path.display())]
    BadSnapshot {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A state directory or file that cannot be private (a directory others can write).
    #[error("{0}")]
    Files(#[from] crate::files::FilesError),
    /// The shared lists' Redis (`[state.redis]`) could not make a change or a reload;
    /// nothing changed here (the change may have reached Redis if the reply was lost).
    /// The reason names the server without credentials.
    #[error("list {list:?}: the shared list store failed: {reason}")]
    ListStore {
        /// The list.
        list: String,
        /// Why.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl StateError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        StateError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Stable numeric code.
    pub fn code(&self) -> u32 {
        match self {
            StateError::UnknownTxn(_) => 1601,
            StateError::LabelBeforeTxn { .. } => 1602,
            StateError::NoLabels => 1603,
            StateError::UnknownList(_) => 1604,
            StateError::BadEntry { .. } => 1605,
            StateError::BadListFile { .. } => 1606,
            StateError::BadSnapshot { .. } => 1607,
            StateError::Io { .. } => 1608,
            StateError::NoState => 1609,
            StateError::Files(_) => 1610,
            StateError::ListStore { .. } => 1611,
        }
    }
}
