//! A key's exact windows as its record reaches them: the event logs in the record's
//! spill (see [`super::exact`]), read and written beside the ring's buckets. Apart from
//! `exact` so that `record` (which holds the logs) and `exact` (the log itself) do not
//! import each other.

use super::exact::{EventLog, LogAt, Win};
use super::group::{Cols, GroupInput, GroupRead, GroupSpec, Kind};
use super::layout::{Divs, GLayout, RingAt};
use super::record::{occupy, parts, vacate, view, view_mut, Rec};

/// An exact group's ring: its first word, its occupancy bits' first word, its buckets.
fn ring_of(gl: &GLayout) -> Option<(usize, usize, usize)> {
    match *gl {
        GLayout::Count { n, occ, len, .. }
        | GLayout::Sum { n, occ, len, .. }
        | GLayout::Full { n, occ, len, .. } => Some((n, occ, len)),
        GLayout::Label { ring, occ, len, .. } => Some((ring, occ, len)),
        _ => None,
    }
}

impl Rec<'_> {
    /// The log at `at`, made on first use (`None`: the source keeps no spill).
    fn log(&mut self, at: LogAt) -> Option<&mut EventLog> {
        let sp = self
            .spill
            .as_deref_mut()?
            .get_or_insert_with(Default::default);
        if sp.logs.len() < at.n {
            sp.logs.resize_with(at.n, EventLog::default);
        }
        sp.logs.get_mut(at.li)
    }

    /// Whether exact group `at`'s ring is kept: from the first event its log dropped
    /// for `max_events` on (or always, where the source keeps no log). Until then every
    /// read is answered by the log, and the ring is neither advanced, written nor read.
    #[inline]
    pub fn ring_live(&mut self, at: LogAt) -> bool {
        self.log(at).is_none_or(|l| l.overflowed())
    }

    /// Reads exact group `spec`'s window for an event at `te` into `out` (a fresh
    /// read) from its log, or from its ring (`gl`, newest bucket `hb`, advanced by the
    /// caller when [`ring_live`](Self::ring_live)) when the log cannot answer (an event
    /// inside the window was dropped for `max_events`); then enters the event when
    /// `add` (see [`exact_add`](Self::exact_add)). True when the ring answered.
    #[allow(clippy::too_many_arguments)]
    pub fn exact(
        &mut self,
        at: LogAt,
        gl: &GLayout,
        spec: &GroupSpec,
        divs: &Divs,
        hb: i64,
        te: i64,
        keep: i64,
        input: &GroupInput,
        add: bool,
        out: &mut GroupRead,
    ) -> bool {
        let label = spec.kind == Kind::Label;
        let scan = spec.cols >= Cols::MinMax;
        let answered = self
            .log(at)
            .is_some_and(|log| log.read(Win::of(spec), te, scan, label, out));
        if !answered {
            self.ring_fold(gl, spec, divs, hb, out);
        }
        if add {
            self.exact_add(at, gl, spec, divs, hb, te, keep, input);
        }
        !answered
    }

    /// Enters an event at `te` in exact group `spec` (also an outcome group's, after
    /// the decision): into its log, pruning events at or before `keep` (and before the
    /// oldest bucket its ring can fold, newest `hb`), and into its ring when that is
    /// kept. The insert that first drops an event for `max_events` builds the ring
    /// from the log and the dropped event, in time order.
    #[allow(clippy::too_many_arguments)]
    pub fn exact_add(
        &mut self,
        at: LogAt,
        gl: &GLayout,
        spec: &GroupSpec,
        divs: &Divs,
        hb: i64,
        te: i64,
        keep: i64,
        input: &GroupInput,
    ) {
        if !input.pass {
            return;
        }
        let label = spec.kind == Kind::Label;
        let v = if label { 0.0 } else { input.value };
        // Until the ring is kept, a bucket it could fold keeps its events in the log
        // (past the windows' reach: no read changes), so that the ring built on the
        // first drop holds what a ring kept all along would.
        let oldest = ring_of(gl).map_or(i64::MAX, |(_, _, len)| {
            (hb - len as i64 + 1).saturating_mul(spec.width_ms)
        });
        let (win, max) = (Win::of(spec), spec.max_events as usize);
        let (live, left) = match self.log(at) {
            Some(log) if log.overflowed() => (true, log.insert(win, te, v, max, keep)),
            Some(log) => {
                let keep = keep.min(oldest.saturating_sub(1));
                (false, log.insert(win, te, v, max, keep))
            }
            None => (true, None),
        };
        if live {
            enter(self.w, gl, divs, hb, divs.bucket(te), v, false);
            return;
        }
        let Some((t0, v0)) = left else {
            return;
        };
        // The first drop: the ring starts from the events the log held.
        let Some((ring, oa, len)) = ring_of(gl) else {
            return;
        };
        let (w, spill) = (&mut *self.w, &self.spill);
        let (_, _, occ) = parts(w, ring, oa, len);
        occ.fill(0);
        let fold = |w: &mut [u64], (t, x): (i64, f64)| {
            enter(w, gl, divs, hb, divs.bucket(t), x, label && x > 0.0);
        };
        fold(w, (t0, v0));
        if let Some(log) = spill
            .as_deref()
            .and_then(|s| s.as_deref())
            .and_then(|s| s.logs.get(at.li))
        {
            for e in log.events() {
                fold(w, e);
            }
        }
    }

    /// A label for the transaction at `te` in exact label group `at`.
    pub fn exact_label(&mut self, at: LogAt, te: i64, delta: i32) -> bool {
        self.log(at).is_some_and(|l| l.label(te, delta))
    }

    /// Moves exact group `gl`'s ring (the buckets its reads fall back to past
    /// `max_events`, once [`ring_live`](Self::ring_live)) from bucket `head` to `hb`.
    /// It keeps no running totals, so a bucket
    /// that leaves only clears its occupancy bit: nothing of it is read or zeroed (the
    /// next event landing in its slot writes the slot afresh), and a long window costs
    /// what a short one does while its log answers.
    pub fn ring_advance(&mut self, gl: &GLayout, divs: &Divs, head: i64, hb: i64) {
        if let Some((ring, oa, len)) = ring_of(gl) {
            let (_, _, occ) = parts(self.w, ring, oa, len);
            vacate(
                occ,
                RingAt {
                    head,
                    len,
                    q: divs.len,
                },
                hb,
                |_, _| {},
            );
        }
    }

    /// Exact group `gl`'s window at bucket `hb` read from its ring into `out` (when its
    /// log cannot answer): the occupied buckets of the window, oldest first.
    pub fn ring_fold(
        &mut self,
        gl: &GLayout,
        spec: &GroupSpec,
        divs: &Divs,
        hb: i64,
        out: &mut GroupRead,
    ) {
        let Some((ring, oa, len)) = ring_of(gl) else {
            return;
        };
        let (_, rw, occ) = parts(self.w, ring, oa, len);
        let r = RingAt {
            head: hb,
            len,
            q: divs.len,
        };
        let lo = hb - spec.window_b;
        match *gl {
            GLayout::Count { .. } => {
                let ns = view::<u32>(rw, 0, len);
                r.occupied_range(lo, hb, occ, |i| out.n += ns[i] as f64);
            }
            GLayout::Sum { n, sum, .. } => {
                let (ns, ss) = (view::<u32>(rw, 0, len), view::<f64>(rw, sum - n, len));
                r.occupied_range(lo, hb, occ, |i| {
                    out.n += ns[i] as f64;
                    out.sum += ss[i];
                });
            }
            GLayout::Full {
                n, min, max, sums, ..
            } => {
                let ns = view::<u32>(rw, 0, len);
                let (mins, maxs) = (view::<f32>(rw, min - n, len), view::<f32>(rw, max - n, len));
                let sums =
                    sums.map(|(s, q)| (view::<f64>(rw, s - n, len), view::<f64>(rw, q - n, len)));
                r.occupied_range(lo, hb, occ, |i| {
                    out.n += ns[i] as f64;
                    if let Some((ss, qs)) = sums {
                        out.sum += ss[i];
                        out.sumsq += qs[i];
                    }
                    let (a, b) = (mins[i] as f64, maxs[i] as f64);
                    out.min = if out.min.is_nan() { a } else { out.min.min(a) };
                    out.max = if out.max.is_nan() { b } else { out.max.max(b) };
                });
            }
            GLayout::Label { .. } => {
                let top = hb - spec.delay_b;
                let bs = &rw[..len];
                r.occupied_range(top - spec.window_b, top, occ, |i| {
                    out.txns += (bs[i] as u32) as f64;
                    out.frauds += ((bs[i] >> 32) as u32) as f64;
                });
            }
            _ => {}
        }
    }
}

/// Enters an event at bucket `eb` (valued `x`; `fraud`: a label group's event marked
/// fraudulent) into exact group `gl`'s ring in record words `w`, whose newest bucket is
/// `hb`: a slot whose bit is clear is written afresh.
fn enter(w: &mut [u64], gl: &GLayout, divs: &Divs, hb: i64, eb: i64, x: f64, fraud: bool) {
    let Some((ring, oa, len)) = ring_of(gl) else {
        return;
    };
    let Some(i) = (RingAt {
        head: hb,
        len,
        q: divs.len,
    })
    .get(eb) else {
        return;
    };
    let (_, rw, occ) = parts(w, ring, oa, len);
    let held = occ[i / 64] >> (i % 64) & 1 != 0;
    occupy(occ, i);
    // As the bucketed rings add (from 0 when the bucket is new): the same bits.
    let add = |old: f64, x: f64| if held { old + x } else { 0.0 + x };
    match *gl {
        GLayout::Count { .. } => {
            let c = &mut view_mut::<u32>(rw, 0, len)[i];
            *c = if held { c.saturating_add(1) } else { 1 };
        }
        GLayout::Sum { n, sum, .. } => {
            let c = &mut view_mut::<u32>(rw, 0, len)[i];
            *c = if held { c.saturating_add(1) } else { 1 };
            let s = &mut view_mut::<f64>(rw, sum - n, len)[i];
            *s = add(*s, x);
        }
        GLayout::Full {
            n, min, max, sums, ..
        } => {
            let v32 = x as f32;
            let c = &mut view_mut::<u32>(rw, 0, len)[i];
            *c = if held { c.saturating_add(1) } else { 1 };
            let mn = &mut view_mut::<f32>(rw, min - n, len)[i];
            *mn = if held { mn.min(v32) } else { v32 };
            let mx = &mut view_mut::<f32>(rw, max - n, len)[i];
            *mx = if held { mx.max(v32) } else { v32 };
            if let Some((s, q)) = sums {
                let sv = &mut view_mut::<f64>(rw, s - n, len)[i];
                *sv = add(*sv, x);
                let qv = &mut view_mut::<f64>(rw, q - n, len)[i];
                *qv = add(*qv, x * x);
            }
        }
        GLayout::Label { .. } => {
            let b = &mut rw[i];
            let (txns, frauds) = if held {
                (*b as u32, (*b >> 32) as u32)
            } else {
                (0, 0)
            };
            let frauds = frauds.saturating_add(fraud as u32);
            *b = (frauds as u64) << 32 | txns.saturating_add(1) as u64;
        }
        _ => {}
    }
}
