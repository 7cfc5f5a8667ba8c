//! The embedded store: per key source, a slab of fixed-size records behind a
//! set-associative index ([`super::slab`]), records laid out by [`super::layout`] and
//! computed by [`super::record`]. Per decision: both keys hashed and their index lines
//! prefetched, then their records located and prefetched, then the arithmetic; one
//! index-set lock per key source, taken in source order.

use super::exact::Win;
use super::group::GroupRead;
use super::layout::Div;
use super::layout::{Divs, Hot, Layout, KEY};
use super::plan::{Plan, Request, MAX_GROUPS, MAX_SOURCES};
use super::record::{fresh_read, Spilled};
use super::seq_plan::SeqPlans;
use super::slab::{Found, Probe, Slab};
use crate::decision::Action;
use crate::seq::Sequence;
use crate::txn::Transaction;
use arrayvec::ArrayVec;
use parking_lot::Mutex;
use quick_cache::unsync::{Cache, DefaultLifecycle};
use quick_cache::UnitWeighter;
use std::hash::BuildHasherDefault;

use crate::hash::KeyHasher;

struct Source {
    slab: Slab,
    layout: Layout,
    /// The layout of the same definitions in snapshots before `RSKSTAT9` (a last event
    /// time per stats group), for their records.
    legacy: Layout,
    /// The divisors of each group of the source (layout order).
    divs: Vec<Divs>,
    /// The source's distinct bucket widths, and per group (layout order) the index of
    /// its own: windows share a few widths (the ten-feature set's seven card groups
    /// have three), so a decision divides each of its times once per width, not once
    /// per group (a `u64` division by a constant is ~20 instructions).
    widths: Vec<Div>,
    width_of: Vec<u8>,
    /// The distinct (width, ring length) pairs of the groups an event writes, and per
    /// such group (not an exact group's: its ring is kept only past its bound; not a
    /// last-time group's) its pair and the words an event in bucket slot `i` writes
    /// ([`Layout::write_words`]).
    pairs: Vec<Divs>,
    writes: Vec<(usize, ArrayVec<(usize, u32), 6>)>,
}

/// Index of `x` in `v`, pushed when new.
fn index_of<T: Copy>(v: &mut Vec<T>, x: T, eq: impl Fn(&T, &T) -> bool) -> usize {
    match v.iter().position(|y| eq(y, &x)) {
        Some(i) => i,
        None => {
            v.push(x);
            v.len() - 1
        }
    }
}

/// Asks the CPU for the words of `slot`'s record that an event at `ts` writes: each
/// group's bucket of `ts` (not for a small slab's: [`super::slab::SMALL_BYTES`]).
#[inline]
fn prefetch_writes(src: &Source, slot: u32, ts: i64) {
    if src.slab.small() {
        return;
    }
    if let Some(rec) = src.slab.prefetcher(slot) {
        let mut slots = [0usize; MAX_GROUPS];
        for (i, d) in slots.iter_mut().zip(&src.pairs) {
            *i = d.len.rem(d.bucket(ts));
        }
        for (p, words) in &src.writes {
            let i = slots[*p];
            for &(base, shift) in words {
                rec.word(base + (i >> shift));
            }
        }
    }
}

/// The in-process store.
pub(crate) struct MemStore {
    sources: Vec<Source>,
}

/// One key in a snapshot: its source, its record's words (the key in word 0) and its
/// spill (distinct sets, exact windows' events).
pub(crate) type SnapKey = (u8, Vec<u64>, Option<Spilled>);

/// What a read-update learned beyond the reads: per source, whether it had a key and
/// the event's effective time there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub present: [bool; MAX_SOURCES],
    pub te: [i64; MAX_SOURCES],
    /// Sources whose event came later than `max_lateness` (counted at the key's time).
    pub late: u32,
    /// Exact windows read from their ring: an event dropped for `max_events` may have
    /// been inside them.
    pub fallback: u32,
}

impl Applied {
    /// Nothing applied yet, for an event at `ts`.
    pub fn new(ts: i64) -> Self {
        Self {
            present: [false; MAX_SOURCES],
            te: [ts; MAX_SOURCES],
            late: 0,
            fallback: 0,
        }
    }
}

/// One shard of an S3-FIFO cache of `u64` keys (pending labels, the engine's feedback).
pub(crate) type Shard<V> =
    Mutex<Cache<u64, V, UnitWeighter, BuildHasherDefault<KeyHasher>, DefaultLifecycle<u64, V>>>;

/// `n` shards of an S3-FIFO cache of `u64` keys holding `cap` in all (at least one per
/// shard).
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
    pub fn new(plan: &Plan, seqs: &SeqPlans, max_keys: usize) -> Self {
        let sources = (0..plan.sources.len())
            .map(|s| {
                let layout = Layout::of(plan, seqs, s);
                let divs: Vec<Divs> = plan.by_source[s]
                    .iter()
                    .map(|&g| Divs::of(&plan.groups[g].spec))
                    .collect();
                let mut widths = Vec::new();
                let width_of = divs
                    .iter()
                    .map(|d| index_of(&mut widths, d.width, |a, b| a.d == b.d) as u8)
                    .collect();
                let mut pairs = Vec::new();
                let writes = layout
                    .groups
                    .iter()
                    .zip(&layout.log_of)
                    .zip(&divs)
                    .filter(|((_, log), _)| log.is_none())
                    .map(|((gl, _), d)| (d, Layout::write_words(gl)))
                    .filter(|(_, w)| !w.is_empty())
                    .map(|(d, w)| {
                        let same =
                            |a: &Divs, b: &Divs| a.width.d == b.width.d && a.len.d == b.len.d;
                        (index_of(&mut pairs, *d, same), w)
                    })
                    .collect();
                Source {
                    divs,
                    widths,
                    width_of,
                    pairs,
                    writes,
                    slab: Slab::new(
                        layout.words,
                        layout.head_words(),
                        layout.spills_anything(),
                        max_keys,
                    ),
                    layout,
                    legacy: Layout::of_hot(plan, seqs, s, Hot::WithLast),
                }
            })
            .collect();
        Self { sources }
    }

    /// Starts bringing in the index lines of `txn`'s keys: the first thing a
    /// decision's state stage does, so that the lines arrive while it checks its lists
    /// and builds its request.
    #[inline]
    pub fn prefetch_keys(&self, plan: &Plan, txn: &Transaction) {
        for (src, key) in self.sources.iter().zip(&plan.sources) {
            let k = key.value(txn);
            if k != 0 {
                src.slab.prefetch_set(k);
            }
        }
    }

    /// Reads every group before the event and enters the event (groups without an
    /// outcome filter); `read(group, what it held)` is called as each group is read (no
    /// array of every group's read: filling and zeroing one measured more than reading).
    #[inline]
    pub fn read_update(
        &self,
        plan: &Plan,
        req: &Request,
        lateness_ms: i64,
        mut read: impl FnMut(usize, &GroupRead),
    ) -> Applied {
        let mut a = Applied::new(req.ts);
        let srcs = &self.sources;
        // Every key's index line first (`prefetch_keys`, before the request was built),
        // then every record, then the arithmetic: the misses of a decision's keys overlap
        // instead of following one another.
        // Every key's set locked (in source order) and the record its tag points at on
        // its way, with the buckets this event writes (at its own time: right unless it
        // is late), before any key is compared: the record misses of a decision's keys
        // overlap.
        let mut probes: ArrayVec<(usize, Probe<'_>), MAX_SOURCES> = ArrayVec::new();
        for (s, src) in srcs.iter().enumerate() {
            if req.keys[s] != 0 {
                let p = src.slab.probe(req.keys[s]);
                if let Some(slot) = p.slot() {
                    prefetch_writes(src, slot, req.ts);
                }
                // At most MAX_SOURCES sources (more are refused when the plan compiles).
                let _ = probes.try_push((s, p));
            }
        }
        let mut found: ArrayVec<(usize, Found<'_>), MAX_SOURCES> = ArrayVec::new();
        // Drained, not moved: moving the array of guards copied all of it (a `memcpy`
        // a decision).
        for (s, p) in probes.drain(..) {
            let src = &srcs[s];
            let probed = p.slot();
            // `None`: not admitted (every set of the slab busy, or no memory): missing.
            if let Some(f) = src.slab.confirm(p, true) {
                if probed != Some(f.slot) {
                    prefetch_writes(src, f.slot, req.ts); // a new or another record
                }
                let _ = found.try_push((s, f));
                a.present[s] = true;
            }
        }
        for (s, f) in found.iter_mut() {
            let (s, src) = (*s, &srcs[*s]);
            let mut rec = src.slab.rec(f);
            let old = rec.clock();
            let clock = old.max(req.ts);
            rec.set_clock(clock);
            let te = if clock - req.ts <= lateness_ms {
                req.ts
            } else {
                a.late += 1;
                clock
            };
            a.te[s] = te;
            // Per width: the buckets of the clock, of the event and of the old clock
            // (one division per distinct time: in order, all three are one).
            let mut at: ArrayVec<(i64, i64, i64), MAX_GROUPS> = ArrayVec::new();
            for w in &src.widths {
                let hb = w.div(clock);
                let eb = if te == clock { hb } else { w.div(te) };
                let head = if old == clock { hb } else { w.head(old) };
                // At most MAX_GROUPS widths (one per group).
                let _ = at.try_push((hb, eb, head));
            }
            let groups = src.layout.groups.iter().zip(&src.divs).zip(&src.width_of);
            let groups = groups.zip(&plan.by_source[s]).zip(&src.layout.log_of);
            for ((((gl, d), &wi), &g), log) in groups {
                let grp = &plan.groups[g];
                let (hb, eb, head) = at[wi as usize];
                let (inp, add) = (&req.inputs[g], grp.outcome == 0);
                let Some(at) = *log else {
                    let mut r = fresh_read();
                    rec.read_add(gl, &grp.spec, d, head, hb, eb, te, inp, add, &mut r);
                    read(g, &r);
                    continue;
                };
                // An exact window: its log answers; its ring only when the log cannot
                // (and only once the log has dropped an event is the ring kept).
                let spec = &grp.spec;
                if rec.ring_live(at) {
                    rec.ring_advance(gl, d, head, hb);
                }
                let keep = Win::of(spec).keep_after(clock, lateness_ms);
                let mut r = fresh_read();
                if rec.exact(at, gl, spec, d, hb, te, keep, inp, add, &mut r) {
                    a.fallback += 1;
                }
                read(g, &r);
            }
        }
        a
    }

    /// Enters the event into the groups whose outcome filter `action` passes.
    pub fn record_outcome(
        &self,
        plan: &Plan,
        req: &Request,
        applied: &Applied,
        action: Action,
        lateness_ms: i64,
    ) {
        for (s, src) in self.sources.iter().enumerate() {
            let gs_of = &plan.by_source[s];
            if !applied.present[s] || !gs_of.iter().any(|&g| plan.outcome_passes(g, action)) {
                continue;
            }
            let Some(mut f) = src.slab.find(req.keys[s], false) else {
                continue;
            };
            let mut rec = src.slab.rec(&mut f);
            let clock = rec.clock();
            let te = applied.te[s];
            let groups = src.layout.groups.iter().zip(&src.divs);
            for (((gl, d), &g), log) in groups.zip(gs_of).zip(&src.layout.log_of) {
                if plan.outcome_passes(g, action) {
                    let hb = d.head(clock);
                    if let Some(at) = *log {
                        let spec = &plan.groups[g].spec;
                        let keep = Win::of(spec).keep_after(clock, lateness_ms);
                        rec.exact_add(at, gl, spec, d, hb, te, keep, &req.inputs[g]);
                        continue;
                    }
                    rec.read_add(
                        gl,
                        &plan.groups[g].spec,
                        d,
                        hb,
                        hb,
                        d.bucket(te),
                        te,
                        &req.inputs[g],
                        true,
                        &mut fresh_read(),
                    );
                }
            }
        }
    }

    /// Reads and enters the sequences of a decision whose features are in `txn` (so a
    /// row may hold state features), at the times `applied` found; `out` holds one tensor
    /// per sequence (empty where the transaction has no key for its source).
    pub fn sequences(
        &self,
        seqs: &SeqPlans,
        req: &Request,
        applied: &Applied,
        txn: &Transaction,
        out: &mut [Sequence],
    ) {
        let mut vals = [0f32; super::def::MAX_SEQUENCE_FIELDS];
        for (s, src) in self.sources.iter().enumerate() {
            if src.layout.seqs.is_empty() || !applied.present[s] {
                continue;
            }
            let Some(mut f) = src.slab.find(req.keys[s], true) else {
                continue;
            };
            let mut rec = src.slab.rec(&mut f);
            let clock = rec.clock();
            let te = applied.te[s];
            for (q, &i) in src.layout.seqs.iter().zip(&seqs.of_source[s]) {
                rec.seq_step(q, &seqs.seqs[i], te, clock, txn, &mut vals, &mut out[i]);
            }
        }
    }

    /// A label (`delta` +1 fraud, -1 retracted) for the label groups of source `s` at
    /// time `te`; returns how many it reached.
    pub fn label(&self, plan: &Plan, s: usize, key: u64, te: i64, delta: i32) -> usize {
        let src = &self.sources[s];
        let Some(mut f) = src.slab.find(key, false) else {
            return 0;
        };
        let mut rec = src.slab.rec(&mut f);
        let mut applied = 0;
        let _ = plan;
        for ((gl, d), log) in src
            .layout
            .groups
            .iter()
            .zip(&src.divs)
            .zip(&src.layout.log_of)
        {
            // An exact group's ring takes labels once it is kept (it is built from the
            // log, marks included, when the log first drops an event).
            let live = log.is_none_or(|at| rec.ring_live(at));
            let ring = rec.label(gl, d, d.bucket(te), if live { delta } else { 0 });
            let exact = log.is_some_and(|at| rec.exact_label(at, te, delta));
            if ring || exact {
                applied += 1;
            }
        }
        applied
    }

    /// Keys held per source.
    pub fn keys(&self) -> Vec<usize> {
        self.sources.iter().map(|s| s.slab.len()).collect()
    }

    /// Bytes one key of source `s` holds: its record, its share of the index at
    /// capacity (a 64-byte set per 2 keys) and its spill pointer (distinct sets past
    /// a few values grow into the spill, up to the sketch; exact windows keep their
    /// events there, 16 bytes each).
    pub fn key_bytes(plan: &Plan, seqs: &SeqPlans, s: usize) -> usize {
        let l = Layout::of(plan, seqs, s);
        l.bytes() + 32 + if l.spills_anything() { 8 } else { 0 }
    }

    /// Every key's state, for a snapshot.
    pub fn dump(&self) -> Vec<SnapKey> {
        let mut v = Vec::new();
        for (s, src) in self.sources.iter().enumerate() {
            src.slab.dump(|w, spill| {
                v.push((s as u8, w.to_vec(), spill.as_deref().cloned()));
            });
        }
        v
    }

    /// A key of a snapshot written before rings longer than 64 buckets kept occupancy
    /// bits (`long_occ`) or before stats groups dropped their last event time (every
    /// version before `RSKSTAT9`), in this layout; a record of another length is left
    /// for [`check`](Self::check) to refuse.
    pub fn migrate(&self, item: &mut SnapKey, long_occ: bool) {
        let Some(src) = self.sources.get(item.0 as usize) else {
            return;
        };
        if long_occ {
            if let Some(w) = src.legacy.migrate_long_occ(&item.1) {
                item.1 = w;
            }
        }
        if let Some(w) = src.layout.migrate_stats_last(&src.legacy, &item.1) {
            item.1 = w;
        }
    }

    /// Each source's record layout, in source order.
    pub fn layouts(&self) -> Vec<&Layout> {
        self.sources.iter().map(|s| &s.layout).collect()
    }

    /// Why a snapshot's key cannot be restored here, if it cannot.
    pub fn check(&self, plan: &Plan, item: &SnapKey) -> Result<(), String> {
        let (s, w, spill) = item;
        let src = self
            .sources
            .get(*s as usize)
            .ok_or_else(|| format!("key source {s} does not exist"))?;
        if w.len() != src.layout.words {
            return Err(format!(
                "a record of {} words where the definitions lay out {}",
                w.len(),
                src.layout.words
            ));
        }
        if w[KEY] == 0 {
            return Err("a record without a key".into());
        }
        let specs: Vec<_> = plan.by_source[*s as usize]
            .iter()
            .map(|&g| &plan.groups[g].spec)
            .collect();
        if let Some(sp) = spill {
            if sp.distinct.len() > src.layout.spills {
                return Err("a key's distinct sets do not match the definitions".into());
            }
            if sp.logs.len() > src.layout.logs() {
                return Err("a key's exact windows do not match the definitions".into());
            }
            let exact = specs.iter().zip(&src.layout.log_of);
            for (spec, at) in exact.filter_map(|(s, l)| Some((s, (*l)?))) {
                if sp
                    .logs
                    .get(at.li)
                    .is_some_and(|l| !l.valid(spec.max_events))
                {
                    return Err("a key's exact window is out of its bounds or order".into());
                }
            }
        }
        let mut words = w.clone();
        let mut sp: super::record::Spill = spill.clone().map(Box::new);
        let rec = super::record::Rec {
            w: &mut words,
            spill: Some(&mut sp),
        };
        if !rec.valid(&src.layout.groups, &specs) {
            return Err("a key's distinct set is out of its bounds".into());
        }
        if !src.layout.seqs.iter().all(|q| rec.seq_valid(q)) {
            return Err("a key's sequence is out of its bounds or order".into());
        }
        Ok(())
    }

    /// Restores keys from a snapshot (each checked with [`check`](Self::check) first).
    pub fn restore(&self, plan: &Plan, items: Vec<SnapKey>) {
        for (s, w, mut spill) in items {
            let Some(src) = self.sources.get(s as usize) else {
                continue;
            };
            if let Some(sp) = spill.as_mut() {
                let exact = plan.by_source[s as usize].iter().zip(&src.layout.log_of);
                for (&g, at) in exact.filter_map(|(g, l)| Some((g, (*l)?))) {
                    if let Some(l) = sp.logs.get_mut(at.li) {
                        l.rebuild(Win::of(&plan.groups[g].spec));
                    }
                }
            }
            let Some(mut f) = src.slab.find(w[KEY], true) else {
                continue;
            };
            let rec = src.slab.rec(&mut f);
            rec.w.copy_from_slice(&w);
            if let Some(slot) = rec.spill {
                *slot = spill.map(Box::new);
            }
        }
    }
}
