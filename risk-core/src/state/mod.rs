//! Entity state: velocity and behaviour features computed by the SDK from raw
//! transactions, delayed labels, and block / allow lists.
//!
//! Features are defined in `risk.toml` (`[[state.features]]`) or with [`FeatureDef`];
//! each fills a numeric schema field that rules and models read like any other. The
//! engine computes them in stage 1 of every decision, before the rules, on a copy of
//! the caller's transaction (a value the caller set in such a field is replaced).
//!
//! ## Semantics
//! - **Event time.** Windows follow the transaction's `timestamp_ms`, bounded ahead of
//!   the clock's wall time by `state.max_future_ms` (a skewed terminal cannot push a
//!   key into the future). Each key (card, device, merchant, ...) keeps its own clock:
//!   the latest event time it has seen. A transaction without an event time reads and
//!   writes no state (its features are missing); one without a key for a source gets
//!   that source's features missing (`NaN`, never 0).
//! - **Windows.** A window of length `W` with `B` buckets is kept as time buckets of
//!   `g = W / B` (aligned to the epoch). Read at the key's clock it covers the current
//!   bucket and the `B` before it: **between `W` and `W + g` of history** (never less
//!   than the window; at most one bucket more). Count, sum, min, max, mean and stddev
//!   over that span are exact; `distinct` is exact up to `exact_limit` values in the
//!   span, then a HyperLogLog (128 registers per bucket, about 9% standard error).
//! - **Exact windows** (`exact = true`, [`FeatureDef::exact`]): the feature also keeps
//!   the event times and values of its window per key (`exact`), bounded by
//!   `max_events`; read at the key's clock `t` it covers exactly `(t - W, t]` (pandas'
//!   `rolling(W, closed="right")`). Past the bound the buckets answer, counted in
//!   [`StateStats::exact_fallback`]. In process only (refused with `[state.redis]`).
//! - **Sequences** (`[[state.sequences]]`, [`SequenceDef`]): a key's last `length`
//!   events (by effective event time, ties in arrival order; a late event takes its
//!   place, one older than every row of a full sequence is not kept), each a row of the
//!   definition's fields read after the features are written (so a row may hold this
//!   transaction's state features), handed to tiers as [`crate::seq::Sequence`] on
//!   `txn.sequences`. Kept in the key's record after its rings (`record_seq`); on Redis
//!   as a region of the key's value, read in the decision's call and its row written by
//!   a second call not waited for (`redis/seq.rs`).
//! - **Out of order.** An event at most `state.max_lateness_ms` behind its key's clock
//!   enters the bucket of its own time; a later one counts at the key's clock (never
//!   lost, never moving time backwards), counted in [`StateStats::late`]. Features are
//!   always read as of the key's clock.
//! - **The current transaction** is excluded by default (`current = "exclude"`: the
//!   state before it, "in the hour before"); `current = "include"` counts it when it
//!   passes the filters. Outcome-filtered features (`outcome = ["decline"]`) enter a
//!   transaction after its decision and cannot include it.
//! - **Labels.** [`StateEngine::report_label`] marks a remembered transaction fraudulent
//!   (or retracts that); `fraud_count` / `fraud_rate` features with a `delay` `D` read
//!   the window `W` that ended `D` before the key's clock, counting the transactions of
//!   that span and those of them reported fraudulent (the Fraud Detection Handbook's
//!   terminal risk features: a label is only trusted once the delay has passed).
//! - **Memory** is fixed per key: one record per key laid out when the configuration
//!   compiles (`layout`), one ring per group inside it (features with the same key,
//!   window, filters and value share one), running totals and occupancy bits in the
//!   record's first lines; distinct sets past a few values spill out of the record. Keys
//!   per source are bounded by `state.max_keys` in a slab behind a set-associative index
//!   (`slab`), idle keys evicted first (CLOCK). See [`StateEngine::memory`].

mod carry;
mod config;
mod def;
mod distinct;
mod error;
mod exact;
mod fingerprint;
mod group;
mod labels;
mod layout;
mod layout_migrate;
mod lists;
pub(crate) mod mem;
pub(crate) mod plan;
mod record;
mod record_exact;
mod record_seq;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_conn;
#[cfg(test)]
mod reference;
mod ring;
mod seq_plan;
// Fixed-size records in chunks handed out under a lock: the crate's only unsafe code.
#[allow(unsafe_code)]
mod slab;
mod snapshot;
mod stats;

pub use crate::hash::{email_hash, key_hash};
pub(crate) use config::RawState;
pub use def::{
    Agg, Current, FeatureDef, Filter, KeySource, ListDef, RedisConfig, SeqField, SequenceDef,
    StateConfig, MAX_SEQUENCE_FIELDS, MAX_SEQUENCE_LEN,
};
pub use error::StateError;
pub use exact::MAX_EVENTS;
#[cfg(feature = "redis")]
pub use lists::ListSyncStatus;
pub use lists::{Lists, COMPACT_MIN_LINES, MAX_LIST_FILE};
pub use plan::MAX_BUCKETS;
pub use snapshot::SnapshotInfo;
use stats::Counters;
pub use stats::{SourceMemory, StateStats};

use crate::clock::Clock;
use crate::decision::{Action, StateFault, StateStatus};
use crate::error::ConfigError;
use crate::schema::FeatureSchema;
use crate::txn::{Transaction, TxnId};
use group::Kind;
use labels::{Pending, PendingIndex, MAX_LABEL_SOURCES};
use mem::{Applied, MemStore};
use plan::{Plan, Request};
use seq_plan::SeqPlans;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What a decision's state stage did, for the after-decision step.
#[derive(Debug, Clone)]
pub struct Ticket {
    req: Request,
    applied: Applied,
}

/// What [`StateEngine::apply`] did.
#[derive(Debug, Clone)]
pub struct StateOutcome {
    /// Whether the features were computed.
    pub status: StateStatus,
    /// Whether the lists are shared through Redis and it could not be reached: the list
    /// features came from the last known entries ([`Lists::stale`]).
    pub lists_stale: bool,
    /// Boxed: only outcome-filtered features need it (and moving it cost more than
    /// the allocation it avoids).
    ticket: Option<Box<Ticket>>,
}

/// The store behind a state engine.
enum Store {
    Mem(MemStore),
    #[cfg(feature = "redis")]
    Redis(Box<redis::RedisStore>),
}

/// What a label did: the windows it reached, the decision's action and the label the
/// transaction had before (the label monitor's input).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LabelApplied {
    pub reached: usize,
    pub action: Option<Action>,
    pub prev: Option<bool>,
}

/// How state writes its files and names identifiers in them (wired from `[privacy]`).
#[derive(Clone, Debug, Default)]
pub struct StatePrivacy {
    /// Keyed pseudonyms (`[privacy] key`): list entries are held and journalled as
    /// pseudonyms; `None`: raw keys.
    pub pseudonymiser: Option<crate::pseudo::Pseudonymiser>,
    /// Modes of the files and directories state creates (journals, snapshots).
    pub file_mode: crate::files::FileMode,
}

/// Entity state: the plan, the store, lists and pending labels. The engine holds one;
/// it can also run alone (the training export computes features exactly as serving).
pub struct StateEngine {
    cfg: StateConfig,
    plan: Plan,
    seqs: SeqPlans,
    store: Store,
    lists: Lists,
    /// Label sources: (source index, group has labels).
    label_sources: Vec<usize>,
    pending: Option<PendingIndex>,
    schema: Arc<FeatureSchema>,
    clock: Arc<dyn Clock>,
    counters: Counters,
    privacy: StatePrivacy,
}

impl std::fmt::Debug for StateEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateEngine")
            .field("features", &self.cfg.features.len())
            .field("lists", &self.lists)
            .finish_non_exhaustive()
    }
}

impl StateEngine {
    /// Compiles `cfg` against `schema` (which must have every field the configuration
    /// fills, see [`StateConfig::extend_schema`]), opens its lists and restores its
    /// snapshot when the file exists.
    pub fn new(
        cfg: StateConfig,
        schema: Arc<FeatureSchema>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        Self::with_privacy(cfg, schema, clock, StatePrivacy::default())
    }

    /// [`new`](Self::new) with `privacy`: list entries pseudonymised by its key (list
    /// files hashed at load, journals holding pseudonyms only) and files created with its
    /// modes.
    pub fn with_privacy(
        cfg: StateConfig,
        schema: Arc<FeatureSchema>,
        clock: Arc<dyn Clock>,
        privacy: StatePrivacy,
    ) -> Result<Self, ConfigError> {
        let mut plan = Plan::compile(&cfg, &schema)?;
        let seqs = SeqPlans::compile(&cfg, &schema, &mut plan)?;
        let label_sources: Vec<usize> = (0..plan.sources.len())
            .filter(|&s| {
                plan.by_source[s]
                    .iter()
                    .any(|&g| plan.groups[g].spec.kind == Kind::Label)
            })
            .collect();
        if label_sources.len() > MAX_LABEL_SOURCES {
            return Err(ConfigError::invalid(
                "state.features",
                format!("label features over more than {MAX_LABEL_SOURCES} key sources"),
            ));
        }
        let defs: Vec<_> = cfg
            .lists
            .iter()
            .cloned()
            .zip(plan.lists.iter().map(|l| l.key))
            .collect();
        let lists = match &cfg.redis {
            #[cfg(feature = "redis")]
            Some(r) if r.share_lists && !defs.is_empty() => Lists::open_shared(
                &defs,
                Arc::clone(&schema),
                Arc::clone(&clock),
                privacy.clone(),
                r,
            )?,
            _ => Lists::open(
                &defs,
                Arc::clone(&schema),
                Arc::clone(&clock),
                cfg.dir.clone(),
                privacy.clone(),
            )
            .map_err(|e| ConfigError::invalid("state.lists", e.to_string()))?,
        };
        if let (Some(_), Some(f)) = (&cfg.redis, cfg.features.iter().find(|f| f.exact)) {
            return Err(ConfigError::invalid(
                format!("state.features ({}).exact", f.name),
                "exact windows are kept in process only: not with [state.redis] (use buckets there)",
            ));
        }
        let store = match &cfg.redis {
            None => Store::Mem(MemStore::new(&plan, &seqs, cfg.max_keys)),
            #[cfg(feature = "redis")]
            Some(r) => Store::Redis(Box::new(redis::RedisStore::open(
                r.clone(),
                &plan,
                &seqs,
                fingerprint::of(&plan, &seqs),
            )?)),
            #[cfg(not(feature = "redis"))]
            Some(_) => {
                return Err(ConfigError::invalid(
                    "state.redis",
                    "this build of risk-core lacks the `redis` feature",
                ))
            }
        };
        let me = Self {
            store,
            pending: (!label_sources.is_empty()).then(|| PendingIndex::new(cfg.max_pending_labels)),
            label_sources,
            plan,
            seqs,
            lists,
            schema,
            clock,
            counters: Counters::default(),
            cfg,
            privacy,
        };
        if let Some(p) = me.cfg.snapshot.clone() {
            // The configured snapshot's directory is made (private) at start; an explicit
            // `snapshot(path)` elsewhere needs its directory to exist.
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                crate::files::create_dir(dir, me.privacy.file_mode)
                    .map_err(|e| ConfigError::invalid("state.snapshot", e.to_string()))?;
            }
            if p.exists() {
                me.restore(&p)
                    .map_err(|e| ConfigError::invalid("state.snapshot", e.to_string()))?;
            }
        }
        Ok(me)
    }

    /// The configuration.
    pub fn config(&self) -> &StateConfig {
        &self.cfg
    }

    /// The schema the plan was compiled against.
    pub fn schema(&self) -> &Arc<FeatureSchema> {
        &self.schema
    }

    /// The lists.
    pub fn lists(&self) -> &Lists {
        &self.lists
    }

    /// Computes the state features of `txn` into it and enters it into the state.
    /// The returned ticket enters it into outcome-filtered features once decided
    /// ([`record_outcome`](Self::record_outcome)).
    pub fn apply(&self, txn: &mut Transaction) -> StateOutcome {
        self.fill(txn, self.clock.unix_ms())
    }

    /// Computes the state features of `txn` into it, as of wall time `now_ms` (list
    /// expiry, the future bound), and enters it into the state. The list hits are
    /// written first (a sequence row may hold one); everything the windows read from
    /// `txn` is read before they write.
    #[inline]
    pub(crate) fn fill(&self, txn: &mut Transaction, now_ms: i64) -> StateOutcome {
        use plan::MAX_LISTS;
        match &self.store {
            Store::Mem(m) => m.prefetch_keys(&self.plan, txn),
            #[cfg(feature = "redis")]
            Store::Redis(_) => {}
        }
        if !self.plan.lists.is_empty() {
            let mut hits = [f32::NAN; MAX_LISTS];
            for (i, l) in self.plan.lists.iter().enumerate().take(MAX_LISTS) {
                let k = l.key.value(txn);
                if k != 0 {
                    let hit = self.lists.member(i, k, now_ms);
                    if hit {
                        self.counters.list_hits.fetch_add(1, Relaxed);
                    }
                    hits[i] = hit as u8 as f32;
                }
            }
            let out = txn.features.values_mut();
            for (l, &h) in self.plan.lists.iter().zip(&hits) {
                out[l.slot.index()] = h;
            }
        }
        let lists_stale = !self.plan.lists.is_empty() && self.lists.stale();
        if lists_stale {
            self.counters.lists_stale.fetch_add(1, Relaxed);
        }
        let mut res = StateOutcome {
            status: StateStatus::Off,
            lists_stale,
            ticket: None,
        };
        if !self.plan.groups.is_empty() || !self.seqs.is_empty() {
            if txn.timestamp_ms == Transaction::NO_TIME {
                self.counters.no_time.fetch_add(1, Relaxed);
                self.clear(txn);
            } else {
                res = match self.update(txn, now_ms) {
                    Ok(ticket) => StateOutcome {
                        status: StateStatus::Fresh,
                        lists_stale,
                        ticket,
                    },
                    Err(fault) => {
                        self.counters.degraded.fetch_add(1, Relaxed);
                        self.clear(txn);
                        StateOutcome {
                            status: StateStatus::Degraded(fault),
                            lists_stale,
                            ticket: None,
                        }
                    }
                };
            }
        }
        res
    }

    /// Every state feature of `txn` missing.
    fn clear(&self, txn: &mut Transaction) {
        let out = txn.features.values_mut();
        for o in self.plan.slots.iter().take(self.cfg.features.len()) {
            out[o.index()] = f32::NAN;
        }
        if !self.seqs.is_empty() {
            txn.sequences = crate::seq::Sequences::default();
        }
    }

    #[inline]
    fn update(
        &self,
        txn: &mut Transaction,
        now_ms: i64,
    ) -> Result<Option<Box<Ticket>>, StateFault> {
        let future = i64::try_from(self.cfg.max_future.as_millis()).unwrap_or(i64::MAX);
        let ts = txn.timestamp_ms.min(now_ms.saturating_add(future));
        let mut req = plan::Request::new(ts);
        self.plan.request(txn, &mut req);
        let lateness = i64::try_from(self.cfg.max_lateness.as_millis()).unwrap_or(i64::MAX);
        let plan = &self.plan;
        #[cfg(feature = "redis")]
        // Made only for Redis (~350 bytes to zero and drop: 2% of the in-process stage).
        let mut seq_reply: Option<redis::SeqReply> = None;
        #[cfg(feature = "redis")]
        if let (false, Store::Redis(r)) = (self.seqs.is_empty(), &self.store) {
            r.early_rows(
                &self.seqs,
                txn,
                seq_reply.get_or_insert_with(Default::default),
            );
        }
        let out = txn.features.values_mut();
        let applied = match &self.store {
            Store::Mem(m) => m.read_update(plan, &req, lateness, |g, r| {
                plan.write_group(g, &req, r, out)
            }),
            #[cfg(feature = "redis")]
            Store::Redis(r) => {
                let mut reads = [group::GroupRead::default(); plan::MAX_GROUPS];
                let sr = seq_reply.get_or_insert_with(Default::default);
                let a = r.read_update(plan, &req, lateness, &mut reads, sr)?;
                for (g, grp) in plan.groups.iter().enumerate() {
                    if a.present[grp.source] {
                        plan.write_group(g, &req, &reads[g], out);
                    }
                }
                a
            }
        };
        for s in (0..plan.sources.len()).filter(|&s| !applied.present[s]) {
            plan.write_missing(s, out);
        }
        if !self.seqs.is_empty() {
            // After the features: a row may hold this transaction's state features.
            let mut v: Vec<_> = self.seqs.seqs.iter().map(|q| q.empty()).collect();
            match &self.store {
                Store::Mem(m) => m.sequences(&self.seqs, &req, &applied, txn, &mut v),
                #[cfg(feature = "redis")]
                Store::Redis(r) => {
                    let sr = seq_reply.get_or_insert_with(Default::default);
                    r.sequences(&self.seqs, &req, &applied, txn, &mut v, sr)
                }
            }
            txn.sequences = crate::seq::Sequences::new(v);
        }
        self.counters.updates.add(1);
        if applied.late > 0 {
            self.counters.late.add(applied.late as u64);
        }
        if applied.fallback > 0 {
            self.counters.exact_fallback.add(applied.fallback as u64);
        }
        if let (Some(p), true) = (&self.pending, txn.id.0 != 0) {
            let mut at = [(u8::MAX, 0u64, 0i64); MAX_LABEL_SOURCES];
            for (slot, &s) in at.iter_mut().zip(&self.label_sources) {
                if applied.present[s] {
                    *slot = (s as u8, req.keys[s], applied.te[s]);
                }
            }
            p.remember(
                txn.id.0,
                Pending {
                    at,
                    ts,
                    label: 0,
                    action: u8::MAX,
                },
            );
            #[cfg(feature = "redis")]
            if let Store::Redis(r) = &self.store {
                r.remember(txn.id.0, ts, &at);
            }
        }
        Ok(self
            .plan
            .has_outcome_groups()
            .then(|| Box::new(Ticket { req, applied })))
    }

    /// Enters a decided transaction into the features filtered on its outcome.
    pub fn record_outcome(&self, outcome: &StateOutcome, action: Action) {
        let Some(t) = &outcome.ticket else { return };
        match &self.store {
            Store::Mem(m) => {
                let lateness = i64::try_from(self.cfg.max_lateness.as_millis()).unwrap_or(i64::MAX);
                m.record_outcome(&self.plan, &t.req, &t.applied, action, lateness)
            }
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.record_outcome(&self.plan, t, action),
        }
    }

    /// Reports that transaction `txn` was (`fraud = true`) or was not fraudulent, known
    /// at `at_ms`. Counts once however often it is repeated; `false` after `true`
    /// retracts it. Returns how many label windows it reached (0 when the
    /// transaction's bucket has already left every ring).
    pub fn report_label(&self, txn: TxnId, fraud: bool, at_ms: i64) -> Result<usize, StateError> {
        self.report_label_full(txn, fraud, at_ms).map(|l| l.reached)
    }

    /// Records the action a remembered transaction was decided with (for the label
    /// monitor; a lock on its pending entry, only with label features).
    pub(crate) fn note_action(&self, txn: TxnId, action: Action) {
        if let Some(p) = &self.pending {
            p.with(txn.0, |pd| pd.action = action as u8);
            #[cfg(feature = "redis")]
            if let Store::Redis(r) = &self.store {
                r.note_action(txn.0, action as u8);
            }
        }
    }

    /// [`report_label`](Self::report_label) with what the label monitor needs.
    pub(crate) fn report_label_full(
        &self,
        txn: TxnId,
        fraud: bool,
        at_ms: i64,
    ) -> Result<LabelApplied, StateError> {
        let p = self.pending.as_ref().ok_or(StateError::NoLabels)?;
        #[cfg(feature = "redis")]
        if let Store::Redis(r) = &self.store {
            // Any host may take the label: the transaction is remembered in Redis.
            let got = r.label(&self.plan, txn.0, fraud, at_ms);
            match &got {
                Ok(_) => {
                    self.counters.labels.fetch_add(1, Relaxed);
                }
                Err(StateError::UnknownTxn(_)) => {
                    self.counters.labels_unknown.fetch_add(1, Relaxed);
                }
                Err(_) => {}
            }
            return got;
        }
        let got = p.with(txn.0, |pd| {
            if at_ms < pd.ts {
                return Err(StateError::LabelBeforeTxn {
                    at_ms,
                    txn_ms: pd.ts,
                });
            }
            let new: i8 = if fraud { 1 } else { -1 };
            let delta = match (pd.label == 1, fraud) {
                (false, true) => 1,
                (true, false) => -1,
                _ => 0,
            };
            let changed = pd.label != new;
            let prev = match pd.label {
                1 => Some(true),
                -1 => Some(false),
                _ => None,
            };
            pd.label = new;
            let action = Action::ALL.get(pd.action as usize).copied();
            Ok((pd.at, delta, changed, prev, action))
        });
        let (at, delta, changed, prev, action) = match got {
            None => {
                self.counters.labels_unknown.fetch_add(1, Relaxed);
                return Err(StateError::UnknownTxn(txn.0));
            }
            Some(r) => r?,
        };
        if changed {
            self.counters.labels.fetch_add(1, Relaxed);
        }
        let mut reached = 0;
        if delta != 0 {
            for &(s, key, te) in at.iter().filter(|a| a.0 != u8::MAX) {
                if let Some(m) = self.mem() {
                    reached += m.label(&self.plan, s as usize, key, te, delta);
                }
            }
        }
        Ok(LabelApplied {
            reached,
            action,
            prev,
        })
    }

    /// The in-process store, unless state is on Redis.
    pub(crate) fn mem(&self) -> Option<&MemStore> {
        match &self.store {
            Store::Mem(m) => Some(m),
            #[cfg(feature = "redis")]
            Store::Redis(_) => None,
        }
    }

    /// Waits until background store writes queued so far are done (Redis: outcomes,
    /// pending labels and the sequence rows held for a later call; in process there are
    /// none). False when `timeout` passed first.
    pub fn flush(&self, timeout: std::time::Duration) -> bool {
        match &self.store {
            Store::Mem(_) => {
                let _ = timeout;
                true
            }
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.flush(timeout),
        }
    }

    /// Whether the features live on Redis.
    pub fn on_redis(&self) -> bool {
        self.mem().is_none()
    }

    /// Transactions remembered for labels.
    pub fn pending_labels(&self) -> usize {
        self.pending.as_ref().map_or(0, PendingIndex::len)
    }
}
