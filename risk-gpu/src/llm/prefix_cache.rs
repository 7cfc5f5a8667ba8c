//! Shared-prefix KV cache store.
//!
//! The deep tier prefills the same system prompt before every transaction. Its KV state is
//! computed once and shared. The key is the **full** identity of what produced the state:
//! the prompt's token ids, the model identity (including a hash of its weights or a
//! version) and the precision plan; a lookup compares all three, not only their hash, so a
//! changed prompt, a weight update or a new quantization plan can never be served another
//! state (vLLM leaves this invalidation to the user). Entries can be pinned (never
//! evicted); the rest are evicted least-recently-used when the entry or byte budget is
//! exceeded. Values are opaque (`Arc<V>`), so this store does not depend on the tensor
//! library.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// What a cached prefix state was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixKey {
    tokens: Arc<[u32]>,
    model: Arc<str>,
    plan: Arc<str>,
    hash: u64,
}

impl Hash for PrefixKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PrefixKey {
    /// A key from the prompt's token ids, the model identity (name plus weights hash or
    /// version) and the precision plan's canonical text.
    pub fn new(tokens: &[u32], model: &str, plan: &str) -> Self {
        let mut h = risk_core::schema::Fnv::new();
        for t in tokens {
            h.write(&t.to_le_bytes());
        }
        h.write(&[0xff]);
        h.write(model.as_bytes());
        h.write(&[0xff]);
        h.write(plan.as_bytes());
        Self {
            tokens: tokens.into(),
            model: model.into(),
            plan: plan.into(),
            hash: h.finish(),
        }
    }

    /// The prompt tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The model identity.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The precision plan's canonical text.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// The 64-bit hash (for logs and metrics; lookups compare the whole key).
    pub fn hash64(&self) -> u64 {
        self.hash
    }
}

/// Counters of a [`PrefixCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found their state.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// States stored.
    pub inserts: u64,
    /// States evicted to stay within budget.
    pub evictions: u64,
    /// Entries now.
    pub entries: usize,
    /// Pinned entries now.
    pub pinned: usize,
    /// Bytes held now.
    pub bytes: usize,
}

/// Refused insertions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A state larger than the whole byte budget.
    #[error("prefix state of {bytes} bytes exceeds the cache budget of {budget} bytes")]
    TooLarge {
        /// The state's size.
        bytes: usize,
        /// The budget.
        budget: usize,
    },
    /// Pinned states alone would exceed the budget.
    #[error(
        "pinned prefix states would exceed the cache budget ({pinned} + {bytes} > {budget} bytes)"
    )]
    PinnedFull {
        /// Bytes already pinned.
        pinned: usize,
        /// The new state's size.
        bytes: usize,
        /// The budget.
        budget: usize,
    },
}

struct Entry<V> {
    value: Arc<V>,
    bytes: usize,
    pinned: bool,
    used: u64,
}

struct Inner<V> {
    map: HashMap<PrefixKey, Entry<V>>,
    tick: u64,
    bytes: usize,
    stats: CacheStats,
}

/// A bounded, thread-safe store of prefix states.
pub struct PrefixCache<V> {
    inner: Mutex<Inner<V>>,
    max_entries: usize,
    max_bytes: usize,
}

impl<V> std::fmt::Debug for PrefixCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("stats", &self.stats())
            .field("max_entries", &self.max_entries)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

impl<V> PrefixCache<V> {
    /// At most `max_entries` states and `max_bytes` bytes (both at least 1).
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                tick: 0,
                bytes: 0,
                stats: CacheStats::default(),
            }),
            max_entries: max_entries.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    /// The state for `key`, if stored (and marks it recently used).
    pub fn get(&self, key: &PrefixKey) -> Option<Arc<V>> {
        let mut g = self.inner.lock();
        g.tick += 1;
        let tick = g.tick;
        match g.map.get_mut(key) {
            Some(e) => {
                e.used = tick;
                let v = Arc::clone(&e.value);
                g.stats.hits += 1;
                Some(v)
            }
            None => {
                g.stats.misses += 1;
                None
            }
        }
    }

    /// Stores a state of `bytes` bytes, evicting least-recently-used unpinned states as
    /// needed. If the key is already present, the stored state is kept and returned.
    pub fn insert(
        &self,
        key: PrefixKey,
        value: V,
        bytes: usize,
        pinned: bool,
    ) -> Result<Arc<V>, CacheError> {
        if bytes > self.max_bytes {
            return Err(CacheError::TooLarge {
                bytes,
                budget: self.max_bytes,
            });
        }
        let mut g = self.inner.lock();
        g.tick += 1;
        let tick = g.tick;
        if let Some(e) = g.map.get_mut(&key) {
            e.used = tick;
            e.pinned |= pinned;
            return Ok(Arc::clone(&e.value));
        }
        if pinned {
            let pinned_bytes: usize = g.map.values().filter(|e| e.pinned).map(|e| e.bytes).sum();
            if pinned_bytes + bytes > self.max_bytes {
                return Err(CacheError::PinnedFull {
                    pinned: pinned_bytes,
                    bytes,
                    budget: self.max_bytes,
                });
            }
        }
        while g.map.len() + 1 > self.max_entries || g.bytes + bytes > self.max_bytes {
            let victim = g
                .map
                .iter()
                .filter(|(_, e)| !e.pinned)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            match victim {
                Some(k) => {
                    if let Some(e) = g.map.remove(&k) {
                        g.bytes -= e.bytes;
                        g.stats.evictions += 1;
                    }
                }
                // Only pinned states left: an unpinned newcomer is not stored.
                None if !pinned => return Ok(Arc::new(value)),
                None => break,
            }
        }
        let value = Arc::new(value);
        g.map.insert(
            key,
            Entry {
                value: Arc::clone(&value),
                bytes,
                pinned,
                used: tick,
            },
        );
        g.bytes += bytes;
        g.stats.inserts += 1;
        Ok(value)
    }

    /// Pins or unpins a stored state; returns whether it was present.
    pub fn set_pinned(&self, key: &PrefixKey, pinned: bool) -> bool {
        match self.inner.lock().map.get_mut(key) {
            Some(e) => {
                e.pinned = pinned;
                true
            }
            None => false,
        }
    }

    /// Drops every state computed by `model` (e.g. after a weight update, to free memory:
    /// such states could never be served anyway, the model is part of the key).
    pub fn invalidate_model(&self, model: &str) -> usize {
        let mut g = self.inner.lock();
        let before = g.map.len();
        let mut freed = 0;
        g.map.retain(|k, e| {
            let keep = &*k.model != model;
            if !keep {
                freed += e.bytes;
            }
            keep
        });
        g.bytes -= freed;
        before - g.map.len()
    }

    /// Counters and sizes now.
    pub fn stats(&self) -> CacheStats {
        let g = self.inner.lock();
        CacheStats {
            entries: g.map.len(),
            pinned: g.map.values().filter(|e| e.pinned).count(),
            bytes: g.bytes,
            ..g.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &[u32], model: &str, plan: &str) -> PrefixKey {
        PrefixKey::new(t, model, plan)
    }

    #[test]
    fn any_change_of_prompt_model_or_plan_is_a_different_key() {
        let c = PrefixCache::new(10, 1000);
        let k = key(&[1, 2, 3], "smollm2@abc", "f32");
        c.insert(k.clone(), "state", 10, false).unwrap();
        assert_eq!(c.get(&k).as_deref(), Some(&"state"));
        for other in [
            key(&[1, 2, 4], "smollm2@abc", "f32"),
            key(&[1, 2], "smollm2@abc", "f32"),
            key(&[1, 2, 3], "smollm2@abd", "f32"),
            key(&[1, 2, 3], "smollm2@abc", "layers.0-7=f16"),
        ] {
            assert!(c.get(&other).is_none(), "{other:?}");
        }
        let s = c.stats();
        assert_eq!((s.hits, s.misses), (1, 4));
    }

    #[test]
    fn lru_evicts_unpinned_and_keeps_pinned() {
        let c = PrefixCache::new(3, 100);
        let (a, b, d, e) = (
            key(&[1], "m", "p"),
            key(&[2], "m", "p"),
            key(&[3], "m", "p"),
            key(&[4], "m", "p"),
        );
        c.insert(a.clone(), 1, 10, true).unwrap();
        c.insert(b.clone(), 2, 10, false).unwrap();
        c.insert(d.clone(), 3, 10, false).unwrap();
        c.get(&b); // b is now more recent than d
        c.insert(e.clone(), 4, 10, false).unwrap(); // evicts d (LRU unpinned), never a
        assert!(c.get(&a).is_some() && c.get(&b).is_some() && c.get(&e).is_some());
        assert!(c.get(&d).is_none());
        assert_eq!(c.stats().evictions, 1);
        // Byte budget: a 75-byte state pushes out the unpinned ones only.
        c.insert(key(&[5], "m", "p"), 5, 75, false).unwrap();
        let s = c.stats();
        assert!(s.bytes <= 100 && c.get(&a).is_some(), "{s:?}");
    }

    #[test]
    fn budget_errors_and_invalidation() {
        let c = PrefixCache::new(4, 100);
        assert!(matches!(
            c.insert(key(&[1], "m", "p"), 0, 101, false),
            Err(CacheError::TooLarge { .. })
        ));
        c.insert(key(&[1], "m", "p"), 0, 60, true).unwrap();
        assert!(matches!(
            c.insert(key(&[2], "m", "p"), 0, 50, true),
            Err(CacheError::PinnedFull { .. })
        ));
        // An unpinned state that cannot fit beside the pinned ones is returned, not stored.
        let v = c.insert(key(&[3], "m", "p"), 7, 50, false).unwrap();
        assert_eq!(*v, 7);
        assert!(c.get(&key(&[3], "m", "p")).is_none());
        c.insert(key(&[4], "other", "p"), 1, 10, false).unwrap();
        assert_eq!(c.invalidate_model("m"), 1);
        assert_eq!(c.stats().entries, 1);
        assert_eq!(c.stats().bytes, 10);
    }
}
