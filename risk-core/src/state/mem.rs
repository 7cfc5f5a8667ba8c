//! The embedded store: per key source, 64 shards of an S3-FIFO cache (`quick_cache`)
//! behind small mutexes. One lock per key source per decision; fixed memory per key
//! (one bucket ring per group; distinct sets are bounded by `exact_limit`, then a sketch).

use super::group::{GState, GroupRead};
use super::plan::{Plan, Request, MAX_SOURCES};
use crate::decision::Action;
use parking_lot::Mutex;
use quick_cache::unsync::{Cache, DefaultLifecycle};
use quick_cache::UnitWeighter;
use serde::{Deserialize, Serialize};
use std::hash::BuildHasherDefault;

use crate::hash::{splitmix, KeyHasher};

const SHARDS: usize = 64;

/// One key's state: its clock (latest event time) and one state per group of its source.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct KeyState {
    pub clock: i64,
    pub groups: Box<[GState]>,
}

type Map = Cache<
    u64,
    KeyState,
    UnitWeighter,
    BuildHasherDefault<KeyHasher>,
    DefaultLifecycle<u64, KeyState>,
>;

struct Source {
    shards: Box<[Mutex<Map>]>,
}

fn shard(key: u64) -> usize {
    (splitmix(key) >> 58) as usize % SHARDS
}

/// The in-process store.
pub(crate) struct MemStore {
    sources: Vec<Source>,
}

/// What a read-update learned beyond the reads: per source, whether it had a key and
/// the event's effective time there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub present: [bool; MAX_SOURCES],
    pub te: [i64; MAX_SOURCES],
    /// Sources whose event came later than `max_lateness` (counted at the key's time).
    pub late: u32,
}

impl Applied {
    /// Nothing applied yet, for an event at `ts`.
    pub fn new(ts: i64) -> Self {
        Self {
            present: [false; MAX_SOURCES],
            te: [ts; MAX_SOURCES],
            late: 0,
        }
    }
}

/// `n` shards of an S3-FIFO cache of `u64` keys holding `cap` in all (at least one per
/// shard): the layout of every sharded store here (entity state, pending labels, the
/// engine's feedback).
/// One shard: an S3-FIFO cache of `u64` keys.
pub(crate) type Shard<V> =
    Mutex<Cache<u64, V, UnitWeighter, BuildHasherDefault<KeyHasher>, DefaultLifecycle<u64, V>>>;

pub(crate) fn sharded<V: Clone>(n: usize, cap: usize) -> Box<[Shard<V>]> {
    let per = cap.div_ceil(n).max(1);
    (0..n)
        .map(|_| {
            Mutex::new(Cache::with(
                per,
                per as u64,
                UnitWeighter,
                BuildHasherDefault::default(),
                DefaultLifecycle::default(),
            ))
        })
        .collect()
}

impl MemStore {
    pub fn new(plan: &Plan, max_keys: usize) -> Self {
        let sources = plan
            .sources
            .iter()
            .map(|_| Source {
                shards: sharded(SHARDS, max_keys),
            })
            .collect();
        Self { sources }
    }

    fn fresh(plan: &Plan, s: usize) -> KeyState {
        KeyState {
            clock: i64::MIN,
            groups: plan.by_source[s]
                .iter()
                .map(|&g| GState::new(&plan.groups[g].spec))
                .collect(),
        }
    }

    /// Reads every group before the event and enters the event (groups without an
    /// outcome filter); `read(group, what it held)` is called as each group is read (no
    /// array of every group's read: filling and zeroing one measured more than reading).
    pub fn read_update(
        &self,
        plan: &Plan,
        req: &Request,
        lateness_ms: i64,
        mut read: impl FnMut(usize, &GroupRead),
    ) -> Applied {
        let mut a = Applied::new(req.ts);
        for (s, src) in self.sources.iter().enumerate() {
            let key = req.keys[s];
            if key == 0 {
                continue;
            }
            a.present[s] = true;
            let mut map = src.shards[shard(key)].lock();
            let got = map.get_mut_or_insert_with(&key, || {
                Ok::<_, std::convert::Infallible>(Self::fresh(plan, s))
            });
            let Ok(Some(mut st)) = got else {
                // Not admitted (impossible with unit weights): features missing.
                a.present[s] = false;
                continue;
            };
            let clock = st.clock.max(req.ts);
            st.clock = clock;
            let te = if clock - req.ts <= lateness_ms {
                req.ts
            } else {
                a.late += 1;
                clock
            };
            a.te[s] = te;
            for (gs, &g) in st.groups.iter_mut().zip(&plan.by_source[s]) {
                let grp = &plan.groups[g];
                let spec = &grp.spec;
                let r = gs.read_add(
                    spec,
                    spec.bucket(clock),
                    spec.bucket(te),
                    te,
                    &req.inputs[g],
                    grp.outcome == 0,
                );
                read(g, &r);
            }
        }
        a
    }

    /// Enters the event into the groups whose outcome filter `action` passes.
    pub fn record_outcome(&self, plan: &Plan, req: &Request, applied: &Applied, action: Action) {
        for (s, src) in self.sources.iter().enumerate() {
            let key = req.keys[s];
            let gs_of = &plan.by_source[s];
            if !applied.present[s] || !gs_of.iter().any(|&g| plan.outcome_passes(g, action)) {
                continue;
            }
            let mut map = src.shards[shard(key)].lock();
            let Some(mut st) = map.get_mut(&key) else {
                continue;
            };
            let clock = st.clock;
            let te = applied.te[s];
            for (gs, &g) in st.groups.iter_mut().zip(gs_of) {
                if plan.outcome_passes(g, action) {
                    let spec = &plan.groups[g].spec;
                    gs.read_add(
                        spec,
                        spec.bucket(clock),
                        spec.bucket(te),
                        te,
                        &req.inputs[g],
                        true,
                    );
                }
            }
        }
    }

    /// A label (`delta` +1 fraud, -1 retracted) for group `g` of source `s` at time `te`.
    pub fn label(&self, plan: &Plan, s: usize, key: u64, te: i64, delta: i32) -> usize {
        let mut map = self.sources[s].shards[shard(key)].lock();
        let Some(mut st) = map.get_mut(&key) else {
            return 0;
        };
        let mut applied = 0;
        for (gs, &g) in st.groups.iter_mut().zip(&plan.by_source[s]) {
            let spec = &plan.groups[g].spec;
            if spec.kind == super::group::Kind::Label && gs.label(spec.bucket(te), delta) {
                applied += 1;
            }
        }
        applied
    }

    /// Keys held per source.
    pub fn keys(&self) -> Vec<usize> {
        self.sources
            .iter()
            .map(|s| s.shards.iter().map(|m| m.lock().len()).sum())
            .collect()
    }

    /// Bytes held by one key of source `s` (fresh, or the largest of a few sampled).
    pub fn key_bytes(plan: &Plan, s: usize) -> usize {
        let f = Self::fresh(plan, s);
        std::mem::size_of::<KeyState>() + 8 + f.groups.iter().map(GState::bytes).sum::<usize>()
    }

    /// Every key's state, for a snapshot.
    pub fn dump(&self) -> Vec<(u8, u64, KeyState)> {
        let mut v = Vec::new();
        for (s, src) in self.sources.iter().enumerate() {
            for m in src.shards.iter() {
                let m = m.lock();
                v.extend(m.iter().map(|(k, st)| (s as u8, *k, st.clone())));
            }
        }
        v
    }

    /// Restores keys from a snapshot (their group layout checked by the caller).
    pub fn restore(&self, items: Vec<(u8, u64, KeyState)>) {
        for (s, k, st) in items {
            if let Some(src) = self.sources.get(s as usize) {
                src.shards[shard(k)].lock().insert(k, st);
            }
        }
    }
}
