//! Per-entity state: deep-tier feedback and daily average fast scores.
//!
//! Sharded maps behind small mutexes: one lock per decision (read the feedback shift,
//! add the model score to the entity's day). The last completed day's average is the
//! deep tier's cached score when the model is late or fails. Days follow event time
//! (`timestamp_ms`), so replays behave like live traffic. When a shard is full, inserting
//! a new entity evicts an arbitrary one (bounded memory beats perfect recall here).

use crate::config::FeedbackConfig;
use crate::decision::EntityFeedback;
use crate::txn::EntityKey;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const SHARDS: usize = 64;
const DAY_MS: i64 = 86_400_000;

/// Multiply-xorshift hasher for `u64` keys (entity keys may be sequential ids).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map = HashMap<u64, State, BuildHasherDefault<KeyHasher>>;

#[derive(Debug, Clone, Copy, Default)]
struct State {
    day: i64,
    sum: f64,
    n: u32,
    last_day_avg: Option<f32>,
    feedback: Option<EntityFeedback>,
}

#[derive(Debug)]
pub(crate) struct EntityStore {
    shards: Box<[Mutex<Map>]>,
    cap_per_shard: usize,
    cfg: FeedbackConfig,
}

fn shard_of(key: EntityKey) -> usize {
    let mut h = KeyHasher(0);
    h.write_u64(key.0);
    (h.finish() as usize) % SHARDS
}

impl EntityStore {
    pub(crate) fn new(cfg: FeedbackConfig) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            cap_per_shard: cfg.max_entities.div_ceil(SHARDS).max(1),
            cfg,
        }
    }

    fn entry<'a>(&self, map: &'a mut Map, key: EntityKey) -> &'a mut State {
        if map.len() >= self.cap_per_shard && !map.contains_key(&key.0) {
            if let Some(&victim) = map.keys().next() {
                map.remove(&victim);
            }
        }
        map.entry(key.0).or_default()
    }

    /// The threshold shift for a decision at `ts_ms`, and records the model score into
    /// the entity's day. One lock.
    #[inline]
    pub(crate) fn on_decide(&self, key: EntityKey, ts_ms: i64, model: Option<f32>) -> f32 {
        let mut map = self.shards[shard_of(key)].lock();
        let shift = |s: &State| match s.feedback {
            Some(fb) if ts_ms.saturating_sub(fb.at_ms) <= self.cfg.ttl.as_millis() as i64 => {
                fb.threshold_shift
            }
            _ => 0.0,
        };
        let Some(p) = model else {
            return map.get(&key.0).map_or(0.0, shift);
        };
        let s = self.entry(&mut map, key);
        let day = ts_ms.div_euclid(DAY_MS);
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
        shift(s)
    }

    /// The entity's last completed day's average model score.
    pub(crate) fn cached_average(&self, key: EntityKey, now_ms: i64) -> Option<f32> {
        let map = self.shards[shard_of(key)].lock();
        let s = map.get(&key.0)?;
        // If the current day of the state is already over at `now_ms`, it is complete.
        if s.n > 0 && now_ms.div_euclid(DAY_MS) > s.day {
            return Some((s.sum / s.n as f64) as f32);
        }
        s.last_day_avg
    }

    pub(crate) fn set_feedback(&self, key: EntityKey, fb: EntityFeedback) {
        let mut map = self.shards[shard_of(key)].lock();
        self.entry(&mut map, key).feedback = Some(fb);
    }

    pub(crate) fn feedback(&self, key: EntityKey) -> Option<EntityFeedback> {
        self.shards[shard_of(key)]
            .lock()
            .get(&key.0)
            .and_then(|s| s.feedback)
    }

    pub(crate) fn cfg(&self) -> &FeedbackConfig {
        &self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeepSource;

    #[test]
    fn daily_average_and_feedback_ttl() {
        let st = EntityStore::new(FeedbackConfig::default());
        let e = EntityKey(42);
        assert_eq!(st.cached_average(e, 0), None);
        st.on_decide(e, 1_000, Some(0.2));
        st.on_decide(e, 2_000, Some(0.4));
        assert_eq!(st.cached_average(e, 3_000), None, "day not complete yet");
        st.on_decide(e, DAY_MS + 5, Some(0.9));
        let avg = st.cached_average(e, DAY_MS + 10).unwrap();
        assert!((avg - 0.3).abs() < 1e-6);
        st.set_feedback(
            e,
            EntityFeedback {
                deep_score: 0.9,
                source: DeepSource::Model,
                at_ms: DAY_MS,
                threshold_shift: 0.2,
            },
        );
        assert_eq!(st.on_decide(e, DAY_MS + 100, None), 0.2);
        assert_eq!(st.on_decide(EntityKey(43), DAY_MS + 100, None), 0.0);
        // Past the TTL the feedback no longer applies.
        assert_eq!(st.on_decide(e, 3 * DAY_MS, None), 0.0);
    }

    #[test]
    fn bounded() {
        let st = EntityStore::new(FeedbackConfig {
            max_entities: 64,
            ..Default::default()
        });
        for k in 0..10_000 {
            st.on_decide(EntityKey(k), 0, Some(0.1));
        }
        let total: usize = st.shards.iter().map(|s| s.lock().len()).sum();
        assert!(total <= 64, "{total}");
    }
}
