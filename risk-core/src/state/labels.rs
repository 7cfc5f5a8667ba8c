//! Transactions awaiting a label: their keys and effective event times, so that a
//! chargeback reported days later lands in the bucket of the transaction's own time.
//!
//! Bounded (`state.max_pending_labels`, S3-FIFO eviction); a label for a transaction
//! no longer remembered is refused with [`StateError::UnknownTxn`](super::StateError).
//! Reporting the same label twice counts once; a label can be retracted (fraud, then
//! not fraud).

use parking_lot::Mutex;
use quick_cache::unsync::{Cache, DefaultLifecycle};
use quick_cache::UnitWeighter;
use std::hash::BuildHasherDefault;

use crate::hash::{splitmix, KeyHasher};

/// Label sources one plan may use.
pub(crate) const MAX_LABEL_SOURCES: usize = 4;
const SHARDS: usize = 32;

/// One remembered transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    /// (source index, key, effective event time) per label source; `u8::MAX` = unused.
    pub at: [(u8, u64, i64); MAX_LABEL_SOURCES],
    /// Its event time (a label must not be known before it).
    pub ts: i64,
    /// The label so far: 0 none, 1 fraud, -1 not fraud.
    pub label: i8,
    /// The decision's action (`Action as u8`; `u8::MAX` until decided).
    pub action: u8,
}

type Map = Cache<
    u64,
    Pending,
    UnitWeighter,
    BuildHasherDefault<KeyHasher>,
    DefaultLifecycle<u64, Pending>,
>;

pub(crate) struct PendingIndex {
    shards: Box<[Mutex<Map>]>,
}

fn shard(id: u64) -> usize {
    (splitmix(id) >> 59) as usize % SHARDS
}

impl PendingIndex {
    pub fn new(cap: usize) -> Self {
        Self {
            shards: super::mem::sharded(SHARDS, cap),
        }
    }

    pub fn remember(&self, id: u64, p: Pending) {
        self.shards[shard(id)].lock().insert(id, p);
    }

    /// Applies `f` to the remembered transaction `id`, if any.
    pub fn with<R>(&self, id: u64, f: impl FnOnce(&mut Pending) -> R) -> Option<R> {
        let mut m = self.shards[shard(id)].lock();
        let mut p = m.get_mut(&id)?;
        Some(f(&mut p))
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}
