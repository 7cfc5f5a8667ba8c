//! The bucket arithmetic of one key's record (see [`super::layout`]): the same
//! operations, in the same order, as the reference semantics in [`super::group`] and the
//! Redis script, so every store computes the same bits.

use super::distinct::Distinct;
use super::exact::EventLog;
use super::group::{GroupInput, GroupRead, GroupSpec};
use super::layout::{
    occ_words, take_bits, Advance, Divs, GLayout, RingAt, CLOCK, INLINE_DISTINCT, KEY,
};
use bytemuck::Pod;

/// What of a key lives outside its record: distinct sets that outgrew it (by distinct
/// group of the source) and exact windows' events (by exact group); each vector as long
/// as the last one used.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Spilled {
    pub distinct: Vec<Distinct>,
    pub logs: Vec<EventLog>,
}

/// A key's spill (made on first use).
pub(crate) type Spill = Option<Box<Spilled>>;

/// No event time yet (a record's fresh clock, a group's fresh last event time).
pub(crate) const NO_TIME: i64 = i64::MIN;

/// Bit of a distinct group's hot word: its set lives in the spill.
const SPILLED: u64 = 1 << 63;

#[inline]
pub(super) fn view<T: Pod>(w: &[u64], at: usize, len: usize) -> &[T] {
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    &bytemuck::cast_slice(&w[at..at + words])[..len]
}

#[inline]
pub(super) fn view_mut<T: Pod>(w: &mut [u64], at: usize, len: usize) -> &mut [T] {
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    &mut bytemuck::cast_slice_mut(&mut w[at..at + words])[..len]
}

#[inline]
fn f64_at(w: &[u64], at: usize) -> f64 {
    f64::from_bits(w[at])
}

/// Marks slot `i` as holding events.
#[inline]
pub(super) fn occupy(occ: &mut [u64], i: usize) {
    occ[i / 64] |= 1 << (i % 64);
}

/// Vacates the slots the move of ring `r` to bucket `hb` passes: `leave(i, all)` for each
/// one that holds events (in bucket order when stepping; `all`: every bucket leaves,
/// the window's totals restart), clearing its bit. Returns `all`.
#[inline]
pub(super) fn vacate(
    occ: &mut [u64],
    r: RingAt,
    hb: i64,
    mut leave: impl FnMut(usize, bool),
) -> bool {
    match r.advance(hb) {
        Advance::All => {
            take_bits(occ, 0, r.len, &mut |i| leave(i, true));
            true
        }
        Advance::Step { from, to } => {
            // Buckets `from ..= to` (fewer than the ring's length): at most two runs.
            if to < from {
                return false; // the same bucket
            }
            let n = (to - from + 1) as usize;
            let start = r.idx(from);
            let a = n.min(r.len - start);
            take_bits(occ, start, start + a, &mut |i| leave(i, false));
            take_bits(occ, 0, n - a, &mut |i| leave(i, false));
            false
        }
    }
}

/// A record split for one group: the words before its ring (its hot words among them),
/// its ring's words onwards (up to the long rings' occupancy), and its occupancy bits.
#[inline]
pub(super) fn parts(
    w: &mut [u64],
    ring: usize,
    occ: usize,
    len: usize,
) -> (&mut [u64], &mut [u64], &mut [u64]) {
    let (a, b) = w.split_at_mut(ring);
    if occ < ring {
        // The group's last hot word.
        let (h, o) = a.split_at_mut(occ);
        (h, b, &mut o[..1])
    } else {
        let (r, o) = b.split_at_mut(occ - ring);
        (a, r, &mut o[..occ_words(len)])
    }
}

/// One key's record and spill, borrowed while its index set is locked.
pub(crate) struct Rec<'a> {
    pub w: &'a mut [u64],
    /// `None` for sources without distinct groups.
    pub spill: Option<&'a mut Spill>,
}

/// A fresh read (min / max missing until a bucket has a value).
#[inline]
pub(super) fn fresh_read() -> GroupRead {
    GroupRead {
        min: f64::NAN,
        max: f64::NAN,
        ..Default::default()
    }
}

impl Rec<'_> {
    /// The key the record holds.
    pub fn key(&self) -> u64 {
        self.w[KEY]
    }

    /// The key's clock (latest event time; [`NO_TIME`] when fresh).
    #[inline]
    pub fn clock(&self) -> i64 {
        self.w[CLOCK] as i64
    }

    /// Sets the key's clock.
    #[inline]
    pub fn set_clock(&mut self, c: i64) {
        self.w[CLOCK] = c as u64;
    }

    /// Makes the record a fresh one of `key`.
    pub fn reset(&mut self, key: u64) {
        self.w.fill(0);
        self.w[KEY] = key;
        self.w[CLOCK] = NO_TIME as u64;
        if let Some(s) = self.spill.as_deref_mut() {
            *s = None;
        }
    }

    /// Advances group `gl` from bucket `head` (the bucket of the key's clock before
    /// the event, [`Divs::head`]) to bucket `hb` (of the clock now), reads its window,
    /// and (when `add`) enters the event at bucket `eb`, time `te`.
    ///
    /// The read is written into `out`, which must be [`fresh_read`]: returned by value,
    /// it was built on this function's stack and copied out in 16-byte moves over 8-byte
    /// stores, a stalled store forward per group (~15% of this function in the 50-card
    /// profile).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn read_add(
        &mut self,
        gl: &GLayout,
        spec: &GroupSpec,
        divs: &Divs,
        head: i64,
        hb: i64,
        eb: i64,
        te: i64,
        input: &GroupInput,
        add: bool,
        out: &mut GroupRead,
    ) {
        let q = divs.len;
        let lo = hb - spec.window_b;
        let v = (add && input.pass).then_some(input.value);
        let w = &mut *self.w;
        match *gl {
            GLayout::Count {
                hot,
                n,
                occ: oa,
                len,
            } => {
                let r = RingAt { head, len, q };
                let mut tot = w[hot] as u32;
                let (hw, rw, occ) = parts(w, n, oa, len);
                let ns = view_mut::<u32>(rw, 0, len);
                let all = vacate(occ, r, hb, |i, all| {
                    if !all {
                        tot = tot.saturating_sub(ns[i]);
                    }
                    ns[i] = 0;
                });
                if all {
                    tot = 0;
                }
                out.n = tot as f64;
                let r = RingAt { head: hb, len, q };
                if let (Some(_), Some(i)) = (v, r.get(eb)) {
                    ns[i] = ns[i].saturating_add(1);
                    tot = tot.saturating_add(1);
                    occupy(occ, i);
                }
                hw[hot] = tot as u64;
            }
            GLayout::Sum {
                hot,
                n,
                sum,
                occ: oa,
                len,
            } => {
                let r = RingAt { head, len, q };
                let mut tn = w[hot] as u32;
                let mut ts = f64_at(w, hot + 1);
                let (hw, rw, occ) = parts(w, n, oa, len);
                let (nw, sw) = rw.split_at_mut(sum - n);
                let ns = view_mut::<u32>(nw, 0, len);
                let ss = view_mut::<f64>(sw, 0, len);
                // The reference subtracts each leaving bucket from the total in bucket
                // order (the same order here; an empty bucket subtracts nothing).
                let all = vacate(occ, r, hb, |i, all| {
                    if !all {
                        tn = tn.saturating_sub(ns[i]);
                        ts -= ss[i];
                    }
                    ns[i] = 0;
                    ss[i] = 0.0;
                });
                if all {
                    tn = 0;
                    ts = 0.0;
                }
                out.n = tn as f64;
                out.sum = ts;
                let r = RingAt { head: hb, len, q };
                if let (Some(x), Some(i)) = (v, r.get(eb)) {
                    ns[i] = ns[i].saturating_add(1);
                    ss[i] += x;
                    tn = tn.saturating_add(1);
                    ts += x;
                    occupy(occ, i);
                }
                hw[hot] = tn as u64;
                hw[hot + 1] = ts.to_bits();
            }
            GLayout::Full {
                n,
                min,
                max,
                sums: cols,
                occ: oa,
                len,
                ..
            } => {
                let r = RingAt { head, len, q };
                // Column offsets from the ring's first word.
                let (min, max) = (min - n, max - n);
                let cols = cols.map(|(sum, sumsq)| (sum - n, sumsq - n));
                let (_, rw, occ) = parts(w, n, oa, len);
                let clear = |w: &mut [u64], i: usize| {
                    view_mut::<u32>(w, 0, len)[i] = 0;
                    view_mut::<u32>(w, min, len)[i] = 0;
                    view_mut::<u32>(w, max, len)[i] = 0;
                    if let Some((sum, sumsq)) = cols {
                        w[sum + i] = 0;
                        w[sumsq + i] = 0;
                    }
                };
                vacate(occ, r, hb, |i, _| clear(rw, i));
                let r = RingAt { head: hb, len, q };
                {
                    let (ns, mins, maxs) = (
                        view::<u32>(rw, 0, len),
                        view::<f32>(rw, min, len),
                        view::<f32>(rw, max, len),
                    );
                    let sums = cols.map(|(sum, sumsq)| {
                        (view::<f64>(rw, sum, len), view::<f64>(rw, sumsq, len))
                    });
                    let fold = |i: usize| {
                        if ns[i] == 0 {
                            return;
                        }
                        out.n += ns[i] as f64;
                        if let Some((sums, sqs)) = sums {
                            out.sum += sums[i];
                            out.sumsq += sqs[i];
                        }
                        let (lo_, hi_) = (mins[i] as f64, maxs[i] as f64);
                        out.min = if out.min.is_nan() {
                            lo_
                        } else {
                            out.min.min(lo_)
                        };
                        out.max = if out.max.is_nan() {
                            hi_
                        } else {
                            out.max.max(hi_)
                        };
                    };
                    // Only the occupied slots, oldest first.
                    r.occupied_range(lo, hb, occ, fold);
                }
                if let (Some(x), Some(i)) = (v, r.get(eb)) {
                    let v32 = x as f32;
                    let first = view::<u32>(rw, 0, len)[i] == 0;
                    let mn = &mut view_mut::<f32>(rw, min, len)[i];
                    *mn = if first { v32 } else { mn.min(v32) };
                    let mx = &mut view_mut::<f32>(rw, max, len)[i];
                    *mx = if first { v32 } else { mx.max(v32) };
                    let c = &mut view_mut::<u32>(rw, 0, len)[i];
                    *c = c.saturating_add(1);
                    if let Some((sum, sumsq)) = cols {
                        let s = &mut view_mut::<f64>(rw, sum, len)[i];
                        *s += x;
                        let q = &mut view_mut::<f64>(rw, sumsq, len)[i];
                        *q += x * x;
                    }
                    occupy(occ, i);
                }
            }
            GLayout::Last { hot } => last(w, hot, v, te, out),
            GLayout::Distinct { hot, at, spill } => {
                self.distinct(hot, at, spill, spec, hb, eb, input, add, out)
            }
            GLayout::Label {
                ring, occ: oa, len, ..
            } => {
                let r = RingAt { head, len, q };
                let (_, rw, occ) = parts(w, ring, oa, len);
                let bs = &mut rw[..len];
                vacate(occ, r, hb, |i, _| bs[i] = 0);
                let r = RingAt { head: hb, len, q };
                let top = hb - spec.delay_b;
                let fold = |i: usize| {
                    out.txns += (bs[i] as u32) as f64;
                    out.frauds += ((bs[i] >> 32) as u32) as f64;
                };
                r.occupied_range(top - spec.window_b, top, occ, fold);
                if add && input.pass {
                    if let Some(i) = r.get(eb) {
                        let t = (bs[i] as u32).saturating_add(1);
                        bs[i] = (bs[i] & !0xffff_ffff) | t as u64;
                        occupy(occ, i);
                    }
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn distinct(
        &mut self,
        hot: usize,
        at: usize,
        spill: usize,
        spec: &GroupSpec,
        hb: i64,
        eb: i64,
        input: &GroupInput,
        add: bool,
        out: &mut GroupRead,
    ) {
        let lo = hb - spec.window_b;
        let enter = add && input.pass && eb >= lo;
        let w = &mut *self.w;
        if w[hot] & SPILLED != 0 {
            let Some(sp) = self.spill.as_deref_mut().and_then(|s| s.as_mut()) else {
                // Impossible (the bit is set with the spill): read as empty.
                return;
            };
            let Some(d) = sp.distinct.get_mut(spill) else {
                return;
            };
            if let Distinct::Sketch(r) = d {
                r.advance(hb);
            }
            out.distinct_before = d.count(lo, hb);
            if enter {
                d.add(input.hash, eb, lo, hb, spec.exact_limit, spec.ring_len());
                out.distinct_after = d.count(lo, hb);
            } else {
                out.distinct_after = out.distinct_before;
            }
            return;
        }
        let n = (w[hot] as usize).min(INLINE_DISTINCT);
        let es = &mut w[at..at + 2 * n];
        let inside = |b: i64| b >= lo && b <= hb;
        let before = (0..n).filter(|&j| inside(es[2 * j + 1] as i64)).count();
        out.distinct_before = before as f64;
        out.distinct_after = out.distinct_before;
        if !enter {
            return;
        }
        if let Some(j) = (0..n).find(|&j| es[2 * j] == input.hash) {
            let b = (es[2 * j + 1] as i64).max(eb);
            es[2 * j + 1] = b as u64;
        } else {
            // retain the entries still inside the window (in order), then push.
            let mut kept = 0;
            for j in 0..n {
                if es[2 * j + 1] as i64 >= lo {
                    es[2 * kept] = es[2 * j];
                    es[2 * kept + 1] = es[2 * j + 1];
                    kept += 1;
                }
            }
            if kept < INLINE_DISTINCT && kept < spec.exact_limit {
                let w = &mut *self.w;
                w[at + 2 * kept] = input.hash;
                w[at + 2 * kept + 1] = eb as u64;
                w[hot] = (kept + 1) as u64;
            } else {
                // The set outgrows the record: it moves to the spill (and turns into
                // a sketch there when it passes the exact limit).
                let w = &mut *self.w;
                let v: Vec<(u64, i64)> = (0..kept)
                    .map(|j| (w[at + 2 * j], w[at + 2 * j + 1] as i64))
                    .collect();
                let mut d = Distinct::Exact(v);
                d.add(input.hash, eb, lo, hb, spec.exact_limit, spec.ring_len());
                w[hot] = SPILLED;
                w[at..at + 2 * INLINE_DISTINCT].fill(0);
                let Some(slot) = self.spill.as_deref_mut() else {
                    // Impossible (a source with distinct groups has spills).
                    return;
                };
                let spills = &mut slot.get_or_insert_with(Default::default).distinct;
                if spills.len() <= spill {
                    spills.resize(spill + 1, Distinct::Exact(Vec::new()));
                }
                spills[spill] = d;
            }
        }
        let w = &*self.w;
        let n = (w[hot] & !SPILLED) as usize;
        out.distinct_after = if w[hot] & SPILLED != 0 {
            self.spill
                .as_deref()
                .and_then(|s| s.as_ref())
                .and_then(|s| s.distinct.get(spill))
                .map_or(0.0, |d| d.count(lo, hb))
        } else {
            (0..n).filter(|&j| inside(w[at + 2 * j + 1] as i64)).count() as f64
        };
    }

    /// A label for a transaction at bucket `eb` of label group `gl`: `delta` = +1
    /// (fraud), -1 (retracted) or 0 (nothing written: whether the bucket is in the
    /// ring). False when the bucket has left the ring.
    pub fn label(&mut self, gl: &GLayout, divs: &Divs, eb: i64, delta: i32) -> bool {
        let GLayout::Label { ring, occ, len, .. } = *gl else {
            return false;
        };
        let head = divs.head(self.clock());
        let q = divs.len;
        let Some(i) = (RingAt { head, len, q }).get(eb) else {
            return false;
        };
        if delta == 0 || self.w[occ + i / 64] >> (i % 64) & 1 == 0 {
            // No transaction in that bucket (an exact group's ring may keep stale
            // words there).
            return true;
        }
        let b = &mut self.w[ring + i];
        let txns = *b as u32;
        let frauds = ((*b >> 32) as u32).saturating_add_signed(delta).min(txns);
        *b = (frauds as u64) << 32 | txns as u64;
        true
    }

    /// Whether a restored record is well formed for `layout` (its distinct sets within
    /// their bounds).
    pub fn valid(&self, gls: &[GLayout], specs: &[&GroupSpec]) -> bool {
        gls.iter().zip(specs).all(|(gl, spec)| match *gl {
            GLayout::Distinct { hot, spill, .. } => {
                let h = self.w[hot];
                if h & SPILLED == 0 {
                    h as usize <= INLINE_DISTINCT.min(spec.exact_limit)
                } else {
                    match self
                        .spill
                        .as_deref()
                        .and_then(|s| s.as_ref())
                        .and_then(|s| s.distinct.get(spill))
                    {
                        None => false,
                        Some(Distinct::Exact(v)) => v.len() <= spec.exact_limit,
                        Some(Distinct::Sketch(r)) => r.slots.len() == spec.ring_len(),
                    }
                }
            }
            _ => true,
        })
    }
}

/// The group's previous event time into `out`, then the event's (when it entered).
#[inline]
fn last(w: &mut [u64], hot: usize, v: Option<f64>, te: i64, out: &mut GroupRead) {
    let l = w[hot] as i64;
    // A fresh record's words are 0: time 0 is stored as `NO_TIME ^ 0`-free encoding
    // below (the word holds `l ^ NO_TIME`, so 0 means "none").
    let l = l ^ NO_TIME;
    out.last_ms = (l != NO_TIME).then_some(l);
    if v.is_some() {
        let n = l.max(te);
        w[hot] = (n ^ NO_TIME) as u64;
    }
}
