//! What the state stage reports: counters ([`StateStats`]), memory per key source
//! ([`SourceMemory`]) and both as JSON.

use super::mem::MemStore;
use super::{plan, StateConfig, StateEngine, Store};
use crate::schema::FeatureSchema;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of the state stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateStats {
    /// Transactions whose features were computed.
    pub updates: u64,
    /// Transactions without an event time (features missing).
    pub no_time: u64,
    /// (source, transaction) pairs later than `max_lateness` (counted at the key's time).
    pub late: u64,
    /// Exact-window reads answered from the bucket ring instead: the key had dropped an
    /// event of the window for `max_events`.
    pub exact_fallback: u64,
    /// Labels applied (a repeat of the same label is not counted).
    pub labels: u64,
    /// Labels refused: transaction unknown.
    pub labels_unknown: u64,
    /// List lookups that hit a live entry.
    pub list_hits: u64,
    /// Decisions whose features are missing because the store failed.
    pub degraded: u64,
    /// Store calls that timed out (Redis).
    pub store_timeouts: u64,
    /// Store calls that failed otherwise (Redis).
    pub store_errors: u64,
    /// Decisions that skipped the store while it was down (Redis).
    pub store_skipped: u64,
    /// Background writes shed by a full queue (Redis outcomes and pending labels).
    pub store_shed: u64,
    /// Transactions remembered for labels on Redis that were dropped (oldest first)
    /// because their shard was full (`state.redis.max_pending`).
    pub pending_dropped: u64,
    /// Connections opened for labels (Redis; a pool keeps them between labels).
    pub label_connects: u64,
    /// Keys met on Redis in the format of an earlier version (a MessagePack hash):
    /// read as new keys and rewritten in the current layout.
    pub store_reset_old_format: u64,
    /// Keys met on Redis holding a value of the wrong layout: read as new keys and
    /// rewritten.
    pub store_reset_corrupt: u64,
    /// Keys missing on Redis under these definitions that were built from the key of
    /// other definitions (`state.redis.carry_keys`): their alike windows carried.
    pub store_keys_carried: u64,
    /// Redis decide calls sent again with their keys' specs in full because the server
    /// no longer held them (restarted, the script's library loaded again): one extra
    /// round trip each.
    pub store_specs_resent: u64,
    /// Sequence rows (Redis) whose write failed or was shed: the row is missing from
    /// its key's sequence.
    pub sequence_rows_lost: u64,
    /// Sequence rows holding a decision's own state features sent in a later
    /// decision's call (Redis, one server: no call of their own); a row whose call then
    /// failed is also in [`sequence_rows_lost`](Self::sequence_rows_lost).
    pub sequence_rows_carried: u64,
    /// Such rows sent in a call of their own (no call came within `rows_linger_ms`, a
    /// flush, or a server that had lost the script); failures also count as lost.
    pub sequence_rows_alone: u64,
    /// Decisions' calls to Redis (one server) made on the deciding thread because the
    /// shared connection was idle; the others went through its I/O thread's queue.
    pub store_calls_direct: u64,
    /// Socket reads of the decide path's Redis connections that found the reply's
    /// bytes while polling (`read_spin_us`): no wake-up from the kernel.
    pub store_reads_polled: u64,
    /// Those that slept in the kernel first (every read when `read_spin_us` is 0; the
    /// others ran out of their spin: a spin shorter than the round trip).
    pub store_reads_blocked: u64,
    /// Decisions whose list features came from shared lists while Redis could not be
    /// reached (the last known entries).
    pub lists_stale: u64,
    /// Shared lists: changes received from Redis and applied here.
    pub list_changes: u64,
    /// Shared lists: full reloads of a list from Redis (start, reconnect, missed change).
    pub list_resyncs: u64,
    /// Shared lists: subscriber failures (connection lost, a check timed out).
    pub list_sync_errors: u64,
    /// Shared lists: reloads refused because Redis held a malformed entry.
    pub list_refused: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    /// Bumped by every decision of every thread: striped.
    pub(super) updates: Striped,
    pub(super) no_time: AtomicU64,
    /// Bumped by every late event: striped (a replay of old data is all late).
    pub(super) late: Striped,
    /// Bumped by every read past `max_events`: striped (a busy key falls back on every
    /// event).
    pub(super) exact_fallback: Striped,
    pub(super) labels: AtomicU64,
    pub(super) labels_unknown: AtomicU64,
    pub(super) list_hits: AtomicU64,
    pub(super) degraded: AtomicU64,
    pub(super) lists_stale: AtomicU64,
}

/// Stripes of a [`Striped`] counter.
const STRIPES: usize = 16;

/// One stripe, alone on its cache lines (two, for the adjacent-line prefetcher).
#[derive(Default)]
#[repr(align(128))]
struct Stripe(AtomicU64);

/// A counter that every deciding thread bumps: a stripe per thread (threads numbered in
/// the order they first count), so two threads deciding never write the same line (one
/// shared counter cost the two-thread state bench a contended line per decision).
#[derive(Default)]
pub(super) struct Striped([Stripe; STRIPES]);

static NEXT_STRIPE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static STRIPE: usize = (NEXT_STRIPE.fetch_add(1, Relaxed) % STRIPES as u64) as usize;
}

impl Striped {
    /// Adds `n`.
    #[inline]
    pub(super) fn add(&self, n: u64) {
        let i = STRIPE.try_with(|s| *s).unwrap_or(0);
        self.0[i].0.fetch_add(n, Relaxed);
    }
    /// The total.
    pub(super) fn load(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

/// Memory per key source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMemory {
    /// The source (`entity`, `merchant`, ...).
    pub source: String,
    /// Keys held now.
    pub keys: usize,
    /// Bytes one key holds: its record and its share of the index (distinct sets past
    /// a few values grow into a spill, up to the sketch).
    pub bytes_per_key: usize,
}

impl StateEngine {
    /// Counters.
    pub fn stats(&self) -> StateStats {
        let c = &self.counters;
        StateStats {
            updates: c.updates.load(),
            no_time: c.no_time.load(Relaxed),
            late: c.late.load(),
            exact_fallback: c.exact_fallback.load(),
            labels: c.labels.load(Relaxed),
            labels_unknown: c.labels_unknown.load(Relaxed),
            list_hits: c.list_hits.load(Relaxed),
            degraded: c.degraded.load(Relaxed),
            lists_stale: c.lists_stale.load(Relaxed),
            ..self.list_stats(self.store_stats())
        }
    }

    /// `s` with the shared lists' counters.
    fn list_stats(&self, s: StateStats) -> StateStats {
        #[cfg(feature = "redis")]
        if let Some(l) = self.lists.sync_status() {
            return StateStats {
                list_changes: l.changes_applied,
                list_resyncs: l.resyncs,
                list_sync_errors: l.errors,
                list_refused: l.refused,
                ..s
            };
        }
        s
    }

    fn store_stats(&self) -> StateStats {
        match &self.store {
            Store::Mem(_) => StateStats::default(),
            #[cfg(feature = "redis")]
            Store::Redis(r) => {
                let c = &r.counters;
                StateStats {
                    store_timeouts: c.timeouts.load(Relaxed),
                    store_errors: c.errors.load(Relaxed),
                    store_skipped: c.skipped.load(Relaxed),
                    store_shed: c.shed.load(Relaxed),
                    pending_dropped: c.pending_dropped.load(Relaxed),
                    label_connects: c.label_connects.load(Relaxed),
                    store_reset_old_format: c.reset_old_format.load(Relaxed),
                    store_reset_corrupt: c.reset_corrupt.load(Relaxed),
                    store_keys_carried: c.carried.load(Relaxed),
                    store_specs_resent: c.specs_resent.load(Relaxed),
                    sequence_rows_lost: c.seq_lost.load(Relaxed),
                    sequence_rows_carried: c.seq_carried.load(Relaxed),
                    sequence_rows_alone: c.seq_alone.load(Relaxed),
                    store_calls_direct: c.direct.load(Relaxed),
                    store_reads_polled: c.reads_polled.load(Relaxed),
                    store_reads_blocked: c.reads_blocked.load(Relaxed),
                    ..StateStats::default()
                }
            }
        }
    }

    /// Keys held and bytes per key, per key source.
    pub fn memory(&self) -> Vec<SourceMemory> {
        let keys = match self.mem() {
            Some(m) => m.keys(),
            // On Redis the keys live (and expire) on the server.
            None => vec![0; self.plan.sources.len()],
        };
        self.plan
            .sources
            .iter()
            .enumerate()
            .map(|(s, k)| SourceMemory {
                source: source_name(&self.cfg, &self.schema, k),
                keys: keys[s],
                bytes_per_key: MemStore::key_bytes(&self.plan, &self.seqs, s),
            })
            .collect()
    }
}

fn source_name(_cfg: &StateConfig, schema: &FeatureSchema, k: &plan::CKey) -> String {
    use plan::CKey;
    match k {
        CKey::Entity => "entity".into(),
        CKey::Device => "device".into(),
        CKey::Merchant => "merchant".into(),
        CKey::Ip => "ip".into(),
        CKey::Email => "email".into(),
        CKey::Country => "country".into(),
        CKey::Slot(s) => schema.field(*s).name.clone(),
    }
}

impl StateEngine {
    /// Counters, memory per key source, pending labels and live entries per list, as
    /// JSON (`stats`, `memory`, `pending_labels`, `lists`).
    pub fn to_json(&self) -> String {
        let s = self.stats();
        let memory: Vec<_> = self
            .memory()
            .into_iter()
            .map(|m| {
                serde_json::json!({"source": m.source, "keys": m.keys, "bytes_per_key": m.bytes_per_key})
            })
            .collect();
        let lists: serde_json::Map<String, serde_json::Value> = self
            .lists
            .names()
            .into_iter()
            .map(|n| (n.to_owned(), self.lists.len(n).unwrap_or(0).into()))
            .collect();
        serde_json::json!({
            "stats": {
                "updates": s.updates, "no_time": s.no_time, "late": s.late, "exact_fallback": s.exact_fallback,
                "labels": s.labels, "labels_unknown": s.labels_unknown, "list_hits": s.list_hits,
                "degraded": s.degraded, "store_timeouts": s.store_timeouts, "store_errors": s.store_errors,
                "store_skipped": s.store_skipped, "store_shed": s.store_shed,
                "pending_dropped": s.pending_dropped, "label_connects": s.label_connects,
                "store_reset_old_format": s.store_reset_old_format, "store_reset_corrupt": s.store_reset_corrupt,
                "store_keys_carried": s.store_keys_carried, "store_specs_resent": s.store_specs_resent,
                "sequence_rows_lost": s.sequence_rows_lost,
                "sequence_rows_carried": s.sequence_rows_carried, "sequence_rows_alone": s.sequence_rows_alone,
                "store_calls_direct": s.store_calls_direct,
                "store_reads_polled": s.store_reads_polled, "store_reads_blocked": s.store_reads_blocked,
                "lists_stale": s.lists_stale, "list_changes": s.list_changes,
                "list_resyncs": s.list_resyncs, "list_sync_errors": s.list_sync_errors,
                "list_refused": s.list_refused,
            },
            "lists_stale": self.lists.stale(),
            "memory": memory,
            "pending_labels": self.pending_labels(),
            "lists": lists,
        })
        .to_string()
    }
}
