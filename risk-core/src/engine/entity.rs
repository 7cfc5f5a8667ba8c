//! Per-entity state: deep-tier feedback and daily average fast scores.
//!
//! Sharded caches behind small mutexes: one lock per decision (read the feedback shift,
//! add the model score to the entity's day), taken only when the engine has a deep tier
//! (nothing else writes or reads this store). The last completed day's average is the
//! deep tier's cached score when the model is late or fails. Days follow event time
//! (`timestamp_ms`), so replays behave like live traffic.
//!
//! Time is made robust to clock skew: an event time is bounded ahead of the clock's wall
//! time (`feedback.max_future_ms`) and is monotone per entity (an event older than the
//! entity's latest counts at that latest time, so windows never go backwards). A
//! transaction without an entity or an event time has no entity state at all.
//!
//! Memory is bounded by `feedback.max_entities`: each shard is a `quick_cache` S3-FIFO
//! cache (scan-resistant: a burst of one-off cards does not flush the entities seen
//! again and again, and the entity just inserted is never the one evicted).

use crate::clock::Clock;
use crate::config::FeedbackConfig;
use crate::decision::EntityFeedback;
use crate::hash::KeyHasher;
use crate::txn::{EntityKey, Transaction};
use parking_lot::Mutex;
use quick_cache::unsync::{Cache, DefaultLifecycle};
use quick_cache::UnitWeighter;
use std::hash::BuildHasherDefault;
use std::hash::Hasher;
use std::sync::Arc;

const SHARDS: usize = 64;
const DAY_MS: i64 = 86_400_000;

type Map =
    Cache<u64, State, UnitWeighter, BuildHasherDefault<KeyHasher>, DefaultLifecycle<u64, State>>;

#[derive(Debug, Clone, Copy, Default)]
struct State {
    /// The latest event time seen (after the future bound): event time is monotone per
    /// entity from here.
    last_ms: i64,
    day: i64,
    sum: f64,
    n: u64,
    last_day_avg: Option<f32>,
    feedback: Option<EntityFeedback>,
}

pub(crate) struct EntityStore {
    shards: Box<[Mutex<Map>]>,
    cfg: FeedbackConfig,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for EntityStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityStore")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn shard_of(key: EntityKey) -> usize {
    let mut h = KeyHasher::default();
    h.write_u64(key.0);
    (h.finish() as usize) % SHARDS
}

impl EntityStore {
    pub(crate) fn new(cfg: FeedbackConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            shards: crate::state::mem::sharded(SHARDS, cfg.max_entities),
            cfg,
            clock,
        }
    }

    /// The event time `ts_ms` bounded ahead of the clock's wall time.
    #[inline]
    fn bounded(&self, ts_ms: i64) -> i64 {
        match self.cfg.max_future {
            None => ts_ms,
            Some(f) => {
                let limit = self
                    .clock
                    .unix_ms()
                    .saturating_add(i64::try_from(f.as_millis()).unwrap_or(i64::MAX));
                ts_ms.min(limit)
            }
        }
    }

    /// The threshold shift for a decision on `txn`, and records the model score into
    /// the entity's day. One lock. Without entity state (no entity or no event time):
    /// no shift, nothing recorded.
    #[inline]
    pub(crate) fn on_decide(&self, txn: &Transaction, model: Option<f32>) -> f32 {
        if !txn.has_entity_state() {
            return 0.0;
        }
        let key = txn.entity;
        let ts = self.bounded(txn.timestamp_ms);
        let ttl = self.cfg.ttl.as_millis() as i64;
        let shift = |s: &State, t: i64| match s.feedback {
            Some(fb) if t.saturating_sub(fb.at_ms) <= ttl => fb.threshold_shift,
            _ => 0.0,
        };
        let mut map = self.shards[shard_of(key)].lock();
        let Some(p) = model else {
            return map.get_mut(&key.0).map_or(0.0, |mut s| {
                s.last_ms = ts.max(s.last_ms);
                shift(&s, s.last_ms)
            });
        };
        let inserted = map.get_mut_or_insert_with(&key.0, || {
            Ok::<_, std::convert::Infallible>(State::default())
        });
        let Ok(Some(mut s)) = inserted else {
            // Not admitted (impossible with unit weights and a capacity of at least one):
            // no state rather than a panic.
            return 0.0;
        };
        let t = ts.max(s.last_ms);
        s.last_ms = t;
        let day = t.div_euclid(DAY_MS);
        if day > s.day {
            if s.n > 0 {
                s.last_day_avg = Some((s.sum / s.n as f64) as f32);
            }
            s.day = day;
            s.sum = 0.0;
            s.n = 0;
        }
        s.sum += p as f64;
        s.n += 1;
        shift(&s, t)
    }

    /// The entity's last completed day's average model score, as of `txn`'s event time.
    pub(crate) fn cached_average(&self, txn: &Transaction) -> Option<f32> {
        if !txn.has_entity_state() {
            return None;
        }
        let map = self.shards[shard_of(txn.entity)].lock();
        let s = map.peek(&txn.entity.0)?;
        let now_ms = self.bounded(txn.timestamp_ms).max(s.last_ms);
        // If the current day of the state is already over at `now_ms`, it is complete.
        if s.n > 0 && now_ms.div_euclid(DAY_MS) > s.day {
            return Some((s.sum / s.n as f64) as f32);
        }
        s.last_day_avg
    }

    /// Stores a deep verdict for `txn`'s entity (`fb.at_ms` is bounded like event times;
    /// nothing without entity state).
    pub(crate) fn set_feedback(&self, txn: &Transaction, mut fb: EntityFeedback) {
        if !txn.has_entity_state() {
            return;
        }
        fb.at_ms = self.bounded(fb.at_ms);
        let key = txn.entity.0;
        let mut map = self.shards[shard_of(txn.entity)].lock();
        match map.get_mut(&key) {
            Some(mut s) => s.feedback = Some(fb),
            None => map.insert(
                key,
                State {
                    last_ms: fb.at_ms,
                    feedback: Some(fb),
                    ..State::default()
                },
            ),
        }
    }

    pub(crate) fn feedback(&self, key: EntityKey) -> Option<EntityFeedback> {
        self.shards[shard_of(key)]
            .lock()
            .peek(&key.0)
            .and_then(|s| s.feedback)
    }

    pub(crate) fn cfg(&self) -> &FeedbackConfig {
        &self.cfg
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::decision::DeepSource;
    use crate::schema::FeatureSchema;

    const T0: i64 = 1_767_571_200_000; // 2026-01-05

    fn store(cfg: FeedbackConfig) -> (EntityStore, Arc<ManualClock>) {
        let clock = ManualClock::new();
        clock.set_unix_origin_ms(T0 + 10 * DAY_MS);
        (EntityStore::new(cfg, clock.clone()), clock)
    }

    fn txn(entity: u64, ts: i64) -> Transaction {
        let s = FeatureSchema::builder().numeric("x").build().unwrap();
        Transaction::builder(&s)
            .entity(entity)
            .timestamp_ms(ts)
            .amount(1.0, "USD")
            .build()
            .unwrap()
    }

    fn fb(at_ms: i64, shift: f32) -> EntityFeedback {
        EntityFeedback {
            deep_score: 0.9,
            source: DeepSource::Model,
            at_ms,
            threshold_shift: shift,
        }
    }

    #[test]
    fn daily_average_and_feedback_ttl() {
        let (st, _) = store(FeedbackConfig::default());
        let e = 42;
        assert_eq!(st.cached_average(&txn(e, T0)), None);
        st.on_decide(&txn(e, T0 + 1_000), Some(0.2));
        st.on_decide(&txn(e, T0 + 2_000), Some(0.4));
        assert_eq!(
            st.cached_average(&txn(e, T0 + 3_000)),
            None,
            "day not complete yet"
        );
        st.on_decide(&txn(e, T0 + DAY_MS + 5), Some(0.9));
        let avg = st.cached_average(&txn(e, T0 + DAY_MS + 10)).unwrap();
        assert!((avg - 0.3).abs() < 1e-6);
        st.set_feedback(&txn(e, T0 + DAY_MS), fb(T0 + DAY_MS, 0.2));
        assert_eq!(st.on_decide(&txn(e, T0 + DAY_MS + 100), None), 0.2);
        assert_eq!(st.on_decide(&txn(43, T0 + DAY_MS + 100), None), 0.0);
        // Past the TTL the feedback no longer applies.
        assert_eq!(st.on_decide(&txn(e, T0 + 3 * DAY_MS), None), 0.0);
    }

    /// Eviction used to remove the first key of the shard's map: the same entities
    /// every time, possibly the one just inserted. Now an entity seen again and again
    /// survives a scan of one-off entities, and the entity just inserted is kept.
    #[test]
    fn eviction_keeps_hot_entities_and_the_newest() {
        let (st, _) = store(FeedbackConfig {
            max_entities: 64 * 64,
            ..Default::default()
        });
        let hot: Vec<u64> = (1..=256).collect();
        for round in 0..4 {
            for &k in &hot {
                st.on_decide(&txn(k, T0 + round), Some(0.1));
            }
        }
        for k in 1_000..60_000u64 {
            st.on_decide(&txn(k, T0 + 10), Some(0.1));
            assert!(
                st.shards[shard_of(EntityKey(k))].lock().peek(&k).is_some(),
                "entity {k} evicted as it was inserted"
            );
            // Hot entities keep being seen.
            let h = hot[(k % 256) as usize];
            st.on_decide(&txn(h, T0 + 10), Some(0.1));
        }
        let kept = hot
            .iter()
            .filter(|&&k| st.shards[shard_of(EntityKey(k))].lock().peek(&k).is_some())
            .count();
        assert!(
            kept >= 250,
            "only {kept} of 256 hot entities survived the scan"
        );
        assert!(st.len() <= 64 * 64 + SHARDS, "{}", st.len());
    }

    #[test]
    fn bounded() {
        let (st, _) = store(FeedbackConfig {
            max_entities: 64,
            ..Default::default()
        });
        for k in 1..10_000 {
            st.on_decide(&txn(k, T0), Some(0.1));
        }
        assert!(st.len() <= 64 + SHARDS, "{}", st.len());
    }

    /// Transactions without an entity or an event time share no state (they used to
    /// share `EntityKey(0)`'s record, and time 0 froze every window).
    #[test]
    fn no_entity_or_no_time_means_no_state() {
        let (st, _) = store(FeedbackConfig::default());
        st.set_feedback(&txn(0, T0), fb(T0, 0.2));
        st.set_feedback(&txn(7, 0), fb(0, 0.2));
        assert_eq!(st.len(), 0);
        assert_eq!(st.on_decide(&txn(0, T0), Some(0.9)), 0.0);
        assert_eq!(st.on_decide(&txn(7, 0), Some(0.9)), 0.0);
        assert_eq!(st.len(), 0);
        assert_eq!(st.cached_average(&txn(0, T0 + 2 * DAY_MS)), None);
    }

    /// A far-future event time (a terminal with a skewed clock) used to make the
    /// entity's feedback never expire and to freeze its day: it is bounded ahead of the
    /// wall clock, and time never goes backwards for the entity.
    #[test]
    fn future_and_out_of_order_times_are_bounded_and_monotone() {
        let (st, clock) = store(FeedbackConfig::default());
        let now = clock.unix_ms();
        let e = 9;
        let far = now + 365 * DAY_MS;
        st.on_decide(&txn(e, far), Some(0.5));
        st.set_feedback(&txn(e, far), fb(far, 0.2));
        let stored = st.feedback(EntityKey(e)).unwrap().at_ms;
        assert_eq!(stored, now + 300_000, "bounded to now + max_future");
        // Two days later (wall and event time), the feedback has expired.
        clock.advance(std::time::Duration::from_secs(2 * 86_400));
        assert_eq!(st.on_decide(&txn(e, now + 2 * DAY_MS), None), 0.0);
        // An older event counts at the entity's latest time (monotone): it does not
        // reopen the expired feedback window.
        assert_eq!(st.on_decide(&txn(e, now), Some(0.1)), 0.0);
        // Counters cannot overflow: the count is 64-bit.
        let map = st.shards[shard_of(EntityKey(e))].lock();
        assert_eq!(map.peek(&e).unwrap().n, 1);
    }
}
