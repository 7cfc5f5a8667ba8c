//! One key source's records: a slab of fixed-size records and a set-associative index.
//!
//! - **Index**: a power-of-two table of 64-byte sets, each one cache line holding its
//!   lock, 8 ways of (16-bit tag, 32-bit slot), reference bits and a clock hand. A key
//!   hashes to one set; a probe reads that line and the record of a matching tag (whose
//!   word 0 is the full key). There is no allocation per key and no chain to walk.
//! - **Slab**: records of `words` 8-byte words in chunks of up to [`CHUNK`] records
//!   (fewer for large records: a chunk holds at most [`CHUNK_BYTES`], so a source whose
//!   records carry long sequences does not allocate gigabytes for its first key), allocated
//!   zeroed on first use (memory grows with the keys held, not with `max_keys`), 64-byte
//!   aligned, 2 MiB aligned with transparent huge pages asked for (`madvise`) when a
//!   chunk is that large. Slots are handed out in order; once `max_keys` are held a new
//!   key takes the slot of an evicted one.
//! - **Eviction** is CLOCK (second chance), which approximates LRU at one bit per key:
//!   a probe sets the key's reference bit; a full set evicts its first way without the
//!   bit (clearing bits as it passes); a full slab sweeps sets with a global hand the same
//!   way. Idle keys go first.
//!
//! A record (and its spill) is only touched while the set whose way holds its slot is
//! locked: that is the whole of the store's concurrency argument.

use super::record::{Rec, Spill};
use parking_lot::{Mutex, MutexGuard};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// Ways per set.
pub(crate) const WAYS: usize = 8;
/// Records per chunk at most.
pub(crate) const CHUNK: usize = 1 << 12;
/// Bytes per chunk at most, past one record (a multiple of the 2 MiB huge page).
pub(crate) const CHUNK_BYTES: usize = 8 << 20;
/// Records of a slab that never held more than this many bytes stay in a core's L2 (a
/// quarter of the 1 MiB of Zen 4 or Skylake-SP, a half of older 512 KiB parts' L2 or
/// the L3 share beside it): merchants, terminals and countries of most fleets, the
/// cards of a test. Their events skip the prefetch of the buckets they write, which
/// there only costs instructions (measured on the 50-card stage: −25 to −70 ns without
/// it in cache, +100 to +170 ns without it for a million cards).
pub(crate) const SMALL_BYTES: usize = 256 << 10;

/// log2 of the records a chunk of `words`-word records holds: a power of two (a slot's
/// chunk is a shift, not a division) of at most [`CHUNK`] records and [`CHUNK_BYTES`].
fn chunk_shift(words: usize) -> u32 {
    (CHUNK_BYTES / (words.max(1) * 8)).clamp(1, CHUNK).ilog2()
}

/// One set of the index (one cache line with its lock).
#[derive(Debug, Default)]
pub(crate) struct SetMeta {
    /// Reference bit per way.
    refs: u8,
    /// Where this set's clock hand stands.
    hand: u8,
    /// Tag per way (0: empty).
    tags: [u16; WAYS],
    slots: [u32; WAYS],
}

#[repr(align(64))]
struct Set(Mutex<SetMeta>);

/// A zeroed, aligned run of records.
struct Chunk {
    ptr: NonNull<u64>,
    layout: std::alloc::Layout,
    spill: Box<[UnsafeCell<Spill>]>,
}

// SAFETY: a chunk is plain memory; every access to a record or spill inside it goes
// through `Slab::rec`, whose callers hold the lock of the set that owns the slot.
unsafe impl Send for Chunk {}
// SAFETY: as above: shared references only hand out records under a set's lock.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A chunk of `per` records.
    fn new(words: usize, per: usize, spills: bool) -> Option<Self> {
        let bytes = (words * 8 * per).max(64);
        let huge = bytes >= 2 << 20;
        let align = if huge { 2 << 20 } else { 64 };
        let layout = std::alloc::Layout::from_size_align(bytes, align).ok()?;
        let raw = if huge {
            // std's `alloc_zeroed` with a 2 MiB alignment zeroes by writing, which faults
            // the pages in small before any advice: allocate, advise, then zero.
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { std::alloc::alloc(layout) };
            if !raw.is_null() {
                advise_huge(raw, bytes);
                // SAFETY: `raw` is a fresh allocation of `bytes` bytes.
                unsafe { std::ptr::write_bytes(raw, 0, bytes) };
            }
            raw
        } else {
            // SAFETY: the layout has a non-zero size.
            unsafe { std::alloc::alloc_zeroed(layout) }
        };
        let ptr = NonNull::new(raw.cast::<u64>())?;
        let spill = if spills {
            (0..per).map(|_| UnsafeCell::new(None)).collect()
        } else {
            Box::default()
        };
        Some(Self { ptr, layout, spill })
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) }
    }
}

/// A key's set locked by [`Slab::probe`], its record on its way.
pub(crate) struct Probe<'a> {
    guard: MutexGuard<'a, SetMeta>,
    set: usize,
    tag: u16,
    key: u64,
    /// The first way whose tag matches (`WAYS`: none).
    way: usize,
}

impl Probe<'_> {
    /// The slot the key's tag points at, if any (the key itself is not yet compared).
    #[inline]
    pub fn slot(&self) -> Option<u32> {
        self.guard.slots.get(self.way).copied()
    }
}

/// A key's place: its set's guard and its slot.
pub(crate) struct Found<'a> {
    /// Held while the record is used.
    _guard: MutexGuard<'a, SetMeta>,
    pub slot: u32,
}

/// One key source's index and records.
pub(crate) struct Slab {
    sets: Box<[Set]>,
    mask: usize,
    chunks: Box<[OnceLock<Chunk>]>,
    grow: Mutex<()>,
    words: usize,
    /// log2 of the records per chunk ([`chunk_shift`]).
    shift: u32,
    /// Words of a record every event reads (prefetched with the record).
    head: usize,
    /// Whether every record handed out so far fits in [`SMALL_BYTES`] (cleared once, by
    /// the slot that passes it; read by every decision, written once).
    small: AtomicBool,
    /// Records that fit in [`SMALL_BYTES`].
    small_keys: usize,
    spills: bool,
    cap: usize,
    /// Slots handed out so far (may pass `cap` while full; see `len`).
    next: AtomicUsize,
    /// Keys held: slots handed out and in a set (an eviction hands its slot on).
    live: AtomicUsize,
    /// The global clock hand (a set number).
    hand: AtomicUsize,
}

/// The set and tag of a key.
#[inline]
fn place(key: u64, mask: usize) -> (usize, u16) {
    let h = crate::hash::splitmix(key);
    let tag = (h >> 48) as u16;
    (h as usize & mask, if tag == 0 { 1 } else { tag })
}

impl Slab {
    /// A slab of at most `cap` records of `words` words, the first `head` of which
    /// every event reads (`spills`: records may spill distinct sets).
    pub fn new(words: usize, head: usize, spills: bool, cap: usize) -> Self {
        let cap = cap.clamp(1, u32::MAX as usize);
        // Sets for ~2 keys each at capacity (8 ways): a set overflows, evicting one of
        // its keys before the slab is full, about once per 10,000 keys at capacity (at 4
        // keys a set, measured: 0.65% of a million cards).
        let sets = cap.div_ceil(2).next_power_of_two();
        let mut index = Vec::with_capacity(sets);
        advise_huge(
            index.as_ptr() as *const u8,
            sets * std::mem::size_of::<Set>(),
        );
        index.extend((0..sets).map(|_| Set(Mutex::new(SetMeta::default()))));
        let shift = chunk_shift(words);
        Self {
            sets: index.into_boxed_slice(),
            mask: sets - 1,
            chunks: (0..cap.div_ceil(1 << shift))
                .map(|_| OnceLock::new())
                .collect(),
            grow: Mutex::new(()),
            words,
            shift,
            head: head.clamp(1, words),
            small: AtomicBool::new(true),
            small_keys: SMALL_BYTES / (words.max(1) * 8),
            spills,
            cap,
            next: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            hand: AtomicUsize::new(0),
        }
    }

    /// Whether the slab has never held more than [`SMALL_BYTES`] of records (its
    /// records are then likely in cache, and a prefetch of their words only costs).
    #[inline]
    pub fn small(&self) -> bool {
        self.small.load(Relaxed)
    }

    /// Keys held (a counter: no lock taken).
    pub fn len(&self) -> usize {
        self.live.load(Relaxed)
    }

    /// Asks the CPU to bring `key`'s set line into cache.
    #[inline]
    pub fn prefetch_set(&self, key: u64) {
        let (s, _) = place(key, self.mask);
        prefetch((&self.sets[s] as *const Set).cast(), 64);
    }

    /// Asks the CPU to bring the head of `slot`'s record (its first `head` words)
    /// into cache.
    #[inline]
    pub fn prefetch_rec(&self, slot: u32) {
        if let Some(p) = self.rec_ptr(slot) {
            prefetch(p.as_ptr().cast_const().cast(), self.head * 8);
        }
    }

    /// Where `slot`'s record starts, to ask the CPU for some of its words (located
    /// once for all of them); `None` where its chunk is not allocated.
    #[inline]
    pub fn prefetcher(&self, slot: u32) -> Option<Prefetcher> {
        self.rec_ptr(slot)
            .map(|p| Prefetcher(p.as_ptr().cast_const()))
    }

    fn rec_ptr(&self, slot: u32) -> Option<NonNull<u64>> {
        let slot = slot as usize;
        let c = self.chunks.get(slot >> self.shift)?.get()?;
        let i = slot & ((1 << self.shift) - 1);
        // SAFETY: `i` is below the chunk's records, so the offset stays inside it.
        Some(unsafe { c.ptr.add(i * self.words) })
    }

    /// The record of `slot`, borrowed for as long as the guard of the set that holds it.
    #[inline]
    pub fn rec<'g>(&'g self, found: &'g mut Found<'_>) -> Rec<'g> {
        self.rec_of(found.slot)
    }

    /// The record of `slot`; the caller holds the lock of the set that owns it (or the
    /// slot is owned by no set and by this caller alone).
    #[inline]
    fn rec_of(&self, slot: u32) -> Rec<'_> {
        let slot_u = slot as usize;
        let i = slot_u & ((1 << self.shift) - 1);
        let c = self.chunks[slot_u >> self.shift]
            .get()
            .expect("a handed-out slot's chunk exists");
        // SAFETY: the slot lies inside the chunk; its words are only reached through
        // this function by a thread holding the owning set's lock (or owning the slot
        // while no set holds it), so this is the only live reference to them.
        let w = unsafe {
            std::slice::from_raw_parts_mut(c.ptr.as_ptr().add(i * self.words), self.words)
        };
        // SAFETY: as for the words: the set's lock makes this the only reference.
        let spill = c.spill.get(i).map(|s| unsafe { &mut *s.get() });
        Rec { w, spill }
    }

    /// Finds `key`, inserting a fresh record (evicting when needed) unless `insert` is
    /// false. `None`: not found (or no memory for a new chunk).
    pub fn find(&self, key: u64, insert: bool) -> Option<Found<'_>> {
        self.confirm(self.probe(key), insert)
    }

    /// The first half of [`find`](Self::find): locks `key`'s set and starts bringing in
    /// the record its tag points at, without waiting for it. A decision probes each of its
    /// keys before it confirms any, so their record misses overlap instead of following
    /// one another.
    #[inline]
    pub fn probe(&self, key: u64) -> Probe<'_> {
        let (s, tag) = place(key, self.mask);
        let g = self.sets[s].0.lock();
        let way = g.tags.iter().position(|&t| t == tag).unwrap_or(WAYS);
        if way < WAYS {
            self.prefetch_rec(g.slots[way]);
        }
        Probe {
            guard: g,
            set: s,
            tag,
            key,
            way,
        }
    }

    /// The second half of [`find`](Self::find): compares the probed record's key (and any
    /// other way with the same tag), else inserts as `find` does.
    pub fn confirm<'a>(&'a self, p: Probe<'a>, insert: bool) -> Option<Found<'a>> {
        let Probe {
            guard: mut g,
            set: s,
            tag,
            key,
            way: first,
        } = p;
        for w in first..WAYS {
            if g.tags[w] == tag {
                let slot = g.slots[w];
                if w != first {
                    self.prefetch_rec(slot);
                }
                if self.rec_of(slot).key() == key {
                    g.refs |= 1 << w;
                    return Some(Found { _guard: g, slot });
                }
            }
        }
        if !insert {
            return None;
        }
        let way = match g.tags.iter().position(|&t| t == 0) {
            Some(w) => {
                let (slot, new) = self.take_slot(s)?;
                if new {
                    self.live.fetch_add(1, Relaxed);
                }
                g.slots[w] = slot;
                w
            }
            None => evict_in(&mut g)?,
        };
        g.tags[way] = tag;
        g.refs |= 1 << way;
        let slot = g.slots[way];
        self.rec_of(slot).reset(key);
        Some(Found { _guard: g, slot })
    }

    /// A slot for a new key of set `own` (whose lock the caller holds): a never used
    /// one (`true`), or one evicted from another set (`false`).
    fn take_slot(&self, own: usize) -> Option<(u32, bool)> {
        let n = self.next.fetch_add(1, Relaxed);
        if n == self.small_keys {
            self.small.store(false, Relaxed);
        }
        if n < self.cap {
            let c = n >> self.shift;
            if self.chunks[c].get().is_none() {
                let _g = self.grow.lock();
                if self.chunks[c].get().is_none() {
                    let chunk = Chunk::new(self.words, 1 << self.shift, self.spills)?;
                    let _ = self.chunks[c].set(chunk);
                }
            }
            return Some((n as u32, true));
        }
        self.next.store(self.cap, Relaxed);
        // Full: sweep other sets (second chance); two passes find a victim unless
        // every other set is locked or empty.
        for _ in 0..2 * self.sets.len() {
            let s = self.hand.fetch_add(1, Relaxed) & self.mask;
            if s == own {
                continue;
            }
            if let Some(mut g) = self.sets[s].0.try_lock() {
                if let Some(w) = sweep(&mut g) {
                    let slot = g.slots[w];
                    g.tags[w] = 0;
                    g.refs &= !(1 << w);
                    return Some((slot, false));
                }
            }
        }
        None
    }

    /// Every key's record words and spill, for a snapshot.
    pub fn dump(&self, mut each: impl FnMut(&[u64], &Spill)) {
        for set in self.sets.iter() {
            let g = set.0.lock();
            for w in (0..WAYS).filter(|&w| g.tags[w] != 0) {
                let r = self.rec_of(g.slots[w]);
                each(r.w, r.spill.as_deref().unwrap_or(&None));
            }
        }
    }
}

/// The first way of a full set without its reference bit (clearing bits as it passes),
/// its slot kept for the new key.
fn evict_in(g: &mut SetMeta) -> Option<usize> {
    for _ in 0..2 * WAYS {
        let w = g.hand as usize % WAYS;
        g.hand = ((w + 1) % WAYS) as u8;
        if g.refs & (1 << w) != 0 {
            g.refs &= !(1 << w);
        } else {
            return Some(w);
        }
    }
    None
}

/// One pass of a set's ways for the global hand: an occupied way without its reference
/// bit (bits cleared on the way), or none.
fn sweep(g: &mut SetMeta) -> Option<usize> {
    for w in 0..WAYS {
        if g.tags[w] == 0 {
            continue;
        }
        if g.refs & (1 << w) != 0 {
            g.refs &= !(1 << w);
        } else {
            return Some(w);
        }
    }
    None
}

/// Asks the kernel to back the whole 2 MiB pages inside `bytes` from `p` (memory not
/// yet touched) with transparent huge pages: a random probe into a gigabyte of records
/// then misses the TLB far less. A hint; refused or unsupported, nothing changes.
fn advise_huge(p: *const u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    let start = (p as usize).next_multiple_of(HUGE);
    let end = (p as usize + bytes) / HUGE * HUGE;
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: [start, end) lies inside a live allocation of this process; the
        // advice changes how the kernel backs the pages, never their contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, end);
}

/// Asks the CPU to bring `bytes` from `p` into cache (a hint; nothing on other CPUs).
#[inline]
fn prefetch(p: *const i8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut off = 0;
        while off < bytes {
            // SAFETY: a prefetch is a hint that never faults, whatever the address; SSE
            // is part of the x86-64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// A record's start, for prefetches only ([`Slab::prefetcher`]): never read through.
pub(crate) struct Prefetcher(*const u64);

impl Prefetcher {
    /// Asks the CPU to bring word `w` of the record into cache.
    #[inline]
    pub fn word(&self, w: usize) {
        prefetch(self.0.wrapping_add(w).cast(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(s: &Slab, key: u64) -> bool {
        match s.find(key, true) {
            Some(mut f) => s.rec(&mut f).key() == key,
            None => false,
        }
    }

    #[test]
    fn a_chunk_of_large_records_stays_within_its_bytes() {
        // The ten-feature card (1,432 B): 4,096 records a chunk, as before.
        assert_eq!(1 << chunk_shift(179), CHUNK);
        // A record with 8 sequences of 256 rows x 64 values (541 KB): 8 records, 4.3
        // MB, not 2.2 GB for its first key; one record larger than the bound: one.
        let big = 8 * (2 + 256 * 33);
        assert_eq!(1 << chunk_shift(big), 8);
        assert_eq!(1 << chunk_shift(CHUNK_BYTES), 1);
        // Records across several small chunks: every key is held and found again.
        let s = Slab::new(big, 2, false, 40);
        assert_eq!(1 << s.shift, 8);
        for k in 1..=40u64 {
            assert!(touch(&s, k), "key {k} admitted");
        }
        let found = (1..=40u64).filter(|&k| s.find(k, false).is_some()).count();
        assert!(found >= 36, "{found} of 40 keys found");
        assert!(s.chunks.iter().filter(|c| c.get().is_some()).count() >= 3);
    }

    #[test]
    fn a_slab_is_small_until_its_records_pass_the_bytes() {
        // 1,400-byte records: 187 fit in 256 KiB.
        let s = Slab::new(175, 2, false, 10_000);
        let fit = SMALL_BYTES / 1_400;
        for k in 1..=fit as u64 {
            assert!(s.small(), "{} keys", k - 1);
            assert!(touch(&s, k));
        }
        assert!(s.small(), "{fit} keys fit");
        assert!(touch(&s, fit as u64 + 1));
        assert!(!s.small(), "one more key passes the bytes");
        // A record larger than the bytes: never small once it holds a key.
        let big = Slab::new(SMALL_BYTES / 8 + 1, 2, false, 4);
        assert!(touch(&big, 1));
        assert!(!big.small());
    }

    #[test]
    fn keys_stay_within_the_bound_and_the_newest_is_held() {
        let s = Slab::new(4, 2, false, 100);
        for k in 1..=1_000u64 {
            assert!(touch(&s, k), "key {k} admitted");
            assert!(s.len() <= 100, "{} keys held", s.len());
        }
        assert!(s.find(1_000, false).is_some());
        assert!(s.len() >= 90, "the slab fills: {}", s.len());
        let held: usize = s
            .sets
            .iter()
            .map(|x| x.0.lock().tags.iter().filter(|&&t| t != 0).count())
            .sum();
        assert_eq!(s.len(), held, "the counter counts the keys in the index");
    }

    #[test]
    fn a_key_in_use_survives_a_scan_of_new_ones() {
        let s = Slab::new(4, 2, false, 64);
        for k in 1..=10_000u64 {
            assert!(touch(&s, 1 << 40));
            assert!(touch(&s, k));
        }
        assert!(s.find(1 << 40, false).is_some(), "the hot key was evicted");
    }

    #[test]
    fn an_evicted_key_comes_back_fresh() {
        let s = Slab::new(4, 2, false, 8);
        {
            let mut f = s.find(7, true).unwrap();
            let mut r = s.rec(&mut f);
            r.set_clock(123);
            r.w[3] = 99;
        }
        let mut k = 100;
        while s.find(7, false).is_some() {
            k += 1;
            touch(&s, k);
        }
        let mut f = s.find(7, true).unwrap();
        let r = s.rec(&mut f);
        assert_eq!((r.key(), r.clock(), r.w[3]), (7, i64::MIN, 0));
    }

    #[test]
    fn two_threads_evicting_keep_every_record_its_own() {
        let s = Slab::new(8, 2, true, 256);
        std::thread::scope(|sc| {
            for t in 0..2u64 {
                let s = &s;
                sc.spawn(move || {
                    for i in 0..50_000u64 {
                        let key = 1 + crate::hash::splitmix(i * 2 + t) % 2_000;
                        let mut f = s.find(key, true).expect("admitted");
                        let r = s.rec(&mut f);
                        assert_eq!(r.key(), key);
                        r.w[2] = r.w[2].wrapping_add(1);
                    }
                });
            }
        });
        assert!(s.len() <= 256);
    }
}
