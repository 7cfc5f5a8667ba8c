//! Shared lists' data apart from the wire: a list file as the base of a shared list, the
//! table of a list read from Redis, the sync status. The client and the subscriber are in
//! [`redis`](super::redis), opening [`Lists`](super::Lists) on Redis in `shared.rs`.

use super::journal::Op;
use super::Table;
use crate::hash::splitmix;
use std::time::Duration;

/// A list file's entries as the base of a shared list.
#[derive(Debug, Clone)]
pub(super) struct Seed {
    pub(super) digest: String,
    pub(super) entries: Vec<(u64, i64)>,
}

impl Seed {
    /// The base of a list file that gives `ops` (adds).
    pub(super) fn new(ops: &[Op]) -> Self {
        let mut h = splitmix(ops.len() as u64);
        let entries: Vec<(u64, i64)> = ops
            .iter()
            .filter_map(|op| match *op {
                Op::Add(k, e) => Some((k, e)),
                Op::Remove(_) => None,
            })
            .collect();
        for &(k, e) in &entries {
            h = splitmix(h ^ k).wrapping_add(splitmix(e as u64));
        }
        Self {
            digest: format!("{h:016x}"),
            entries,
        }
    }
}

/// How the shared lists stand on this host ([`Lists::sync_status`](super::Lists::sync_status)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListSyncStatus {
    /// Whether Redis cannot be reached now: the last known entries serve.
    pub stale: bool,
    /// For how long they have been stale (zero when fresh).
    pub stale_for: Duration,
    /// Changes received from Redis and applied (pub/sub messages).
    pub changes_applied: u64,
    /// Full reloads of a list from Redis (start, reconnect, a missed message, a reload).
    pub resyncs: u64,
    /// Subscriber failures (connection lost, a check timed out); each makes the lists
    /// stale until the next full reload.
    pub errors: u64,
    /// Reloads refused because Redis held a malformed entry (the last known serve).
    pub refused: u64,
    /// The version of each list applied here, by name.
    pub versions: Vec<(String, u64)>,
    /// The last failure, scrubbed of secrets.
    pub last_error: Option<String>,
}

pub(super) fn purge_table(t: &Table, now: i64) {
    for s in t.shards.iter() {
        s.write().retain(|_, e| now < *e);
    }
}

/// The table of a list whose base and changes on Redis are `base` and `chg` (field,
/// value pairs).
pub(super) fn build(base: &[String], chg: &[String]) -> Result<Table, String> {
    let key = |f: &str| {
        (f.len() == 16)
            .then(|| u64::from_str_radix(f, 16).ok())
            .flatten()
            .ok_or_else(|| format!("{f:?} is not a 16-hex-digit key"))
    };
    let exp = |v: &str| {
        v.parse::<i64>()
            .map_err(|_| format!("{v:?} is not an expiry in ms since the epoch"))
    };
    let t = Table::new();
    for p in base.chunks(2) {
        if let [f, v] = p {
            t.apply(Op::Add(key(f)?, exp(v)?));
        }
    }
    for p in chg.chunks(2) {
        if let [f, v] = p {
            let k = key(f)?;
            t.apply(if v == "-" {
                Op::Remove(k)
            } else {
                Op::Add(k, exp(v)?)
            });
        }
    }
    Ok(t)
}
