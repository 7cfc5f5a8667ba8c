//! What a [`SegmentLog`](super::SegmentLog) is opened with ([`LogOptions`]: durability,
//! the full-queue policy, feature selection, rotation and retention) and what it reports
//! ([`LogStats`], [`Recovery`]). Read by the log and by its writer thread alike.

use super::AuditError;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// When the writer forces records to stable storage (the module docs give loss windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` after every batch (`durability = "batch"`).
    Batch,
    /// `fdatasync` at most this long after a write (`"interval"`, `fsync_interval_ms`).
    Interval(Duration),
    /// Never forced (`"none"`), except by [`SegmentLog::flush`](super::SegmentLog::flush) and on close.
    None,
}

/// What [`SegmentLog::offer`](super::AuditSink::offer) does when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFull {
    /// Shed the record and count it (`on_full = "drop"`, default): `decide` never waits.
    Drop,
    /// Wait up to `max_wait` for room, then shed and count (`"backpressure"`,
    /// `backpressure_max_wait_us`): adds up to `max_wait` to a `decide` call.
    Backpressure {
        /// Longest wait.
        max_wait: Duration,
    },
}

/// Which feature values each decision record carries (data minimisation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeatureSelection {
    /// Every feature (`features = "all"`, default; replay needs it).
    All,
    /// None (`"none"`).
    None,
    /// These, by name (`features = ["amount", ...]`); unknown names are refused.
    Named(Vec<String>),
}

/// Options of a [`SegmentLog`](super::SegmentLog).
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Directory (created if missing).
    pub dir: PathBuf,
    /// When records are forced to disk.
    pub durability: Durability,
    /// Queue bound between the deciding threads and the writer.
    pub queue_capacity: usize,
    /// A full queue's policy.
    pub on_full: OnFull,
    /// Most records per write.
    pub max_batch: usize,
    /// Rotate when the active segment reaches this size.
    pub segment_bytes: u64,
    /// Rotate when the active segment is this old.
    pub segment_age: Duration,
    /// Delete closed segments older than this (`None`: keep).
    pub retention_age: Option<Duration>,
    /// Delete the oldest closed segments while the log is larger than this.
    pub retention_bytes: Option<u64>,
    /// Recorded features.
    pub features: FeatureSelection,
    /// At open, cut a damaged frame at the end of the last segment (and everything
    /// after it) instead of refusing to open. Off by default: damage is never silent.
    pub truncate_corrupt_tail: bool,
    /// Keyed pseudonyms for the entity keys in records, and the key of the hash chain's
    /// links (`[privacy] key`). `None`: entity keys are written as they are and the chain is
    /// unkeyed (the build log and `health()` say the trail is not pseudonymised).
    pub pseudonymiser: Option<crate::pseudo::Pseudonymiser>,
    /// Modes of the directory and segments (`file_mode`: `private` 0700/0600, default, or
    /// `group` 0750/0640).
    pub file_mode: crate::files::FileMode,
}

impl LogOptions {
    /// The defaults for `dir`: fsync per batch, 8192-record queue, drop when full,
    /// batches of up to 4096, 64 MiB / 1 h segments, 400 days' retention (PCI DSS 10.5.1 keeps
    /// a year of audit history), all features, private files, no pseudonymiser.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            durability: Durability::Batch,
            queue_capacity: 8192,
            on_full: OnFull::Drop,
            max_batch: 4096,
            segment_bytes: 64 << 20,
            segment_age: Duration::from_secs(3600),
            retention_age: Some(Duration::from_secs(400 * 86_400)),
            retention_bytes: None,
            features: FeatureSelection::All,
            truncate_corrupt_tail: false,
            pseudonymiser: None,
            file_mode: crate::files::FileMode::Private,
        }
    }

    pub(super) fn validate(&self) -> Result<(), AuditError> {
        let bad = |key, message: &str| {
            Err(AuditError::Invalid {
                key,
                message: message.into(),
            })
        };
        if self.queue_capacity == 0 {
            return bad("queue_capacity", "must be at least 1");
        }
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1");
        }
        if self.segment_bytes < 4096 {
            return bad("segment_bytes", "must be at least 4096");
        }
        if self.segment_age.is_zero() {
            return bad("segment_age_ms", "must be positive");
        }
        if let Durability::Interval(t) = self.durability {
            if t.is_zero() {
                return bad("fsync_interval_ms", "must be positive");
            }
        }
        Ok(())
    }
}

/// What opening the log found at the end of its last segment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// The segment that was repaired, if one was.
    pub segment: Option<PathBuf>,
    /// Bytes cut from its end (a torn write, or damage when allowed).
    pub truncated_bytes: u64,
    /// Whether what was cut was damage rather than a torn write.
    pub corrupt: bool,
    /// The last sequence number in the log after recovery (0: empty).
    pub last_seq: u64,
}

/// Counters of a [`SegmentLog`](super::SegmentLog).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Offers accepted into the queue.
    pub accepted: u64,
    /// Offers shed because the queue was full.
    pub shed_full: u64,
    /// Offers shed because the log was closed.
    pub shed_closed: u64,
    /// Highest sequence number written to the OS.
    pub written_seq: u64,
    /// Highest sequence number known durable (fsynced).
    pub durable_seq: u64,
    /// Batches written.
    pub batches: u64,
    /// Write or fsync errors (each retried).
    pub io_errors: u64,
    /// The last write error, rendered.
    pub last_error: Option<String>,
    /// Segments deleted by retention.
    pub segments_deleted: u64,
    /// What the open repaired.
    pub recovery: Recovery,
}

impl LogStats {
    /// Every counter as one JSON object (`accepted`, `shed_full`, `shed_closed`,
    /// `written_seq`, `durable_seq`, `batches`, `io_errors`, `last_error`,
    /// `segments_deleted`, `recovery` {`segment`, `truncated_bytes`, `corrupt`,
    /// `last_seq`}).
    pub fn to_json(&self) -> String {
        let LogStats {
            accepted,
            shed_full,
            shed_closed,
            written_seq,
            durable_seq,
            batches,
            io_errors,
            last_error,
            segments_deleted,
            recovery,
        } = self;
        let Recovery {
            segment,
            truncated_bytes,
            corrupt,
            last_seq,
        } = recovery;
        json!({
            "accepted": accepted,
            "shed_full": shed_full,
            "shed_closed": shed_closed,
            "written_seq": written_seq,
            "durable_seq": durable_seq,
            "batches": batches,
            "io_errors": io_errors,
            "last_error": last_error,
            "segments_deleted": segments_deleted,
            "recovery": {
                "segment": segment.as_ref().map(|p| p.display().to_string()),
                "truncated_bytes": truncated_bytes,
                "corrupt": corrupt,
                "last_seq": last_seq,
            },
        })
        .to_string()
    }
}
