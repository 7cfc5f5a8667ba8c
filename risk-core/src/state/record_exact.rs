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

    /// Reads exact group `spec`'s window for an event at `te` into `out` (a fresh
    /// read), then enters the event when `add` and it passes; `keep` as in
    /// [`EventLog::insert`]. False when the log cannot answer (an event inside the
    /// window was dropped for `max_events`): the caller reads the ring instead.
    #[allow(clippy::too_many_arguments)]
    pub fn exact(
        &mut self,
        at: LogAt,
        spec: &GroupSpec,
        te: i64,
        keep: i64,
        input: &GroupInput,
        add: bool,
        out: &mut GroupRead,
    ) -> bool {
        let Some(log) = self.log(at) else {
            return false;
        };
        let label = spec.kind == Kind::Label;
        let ok = log.read(Win::of(spec), te, spec.cols >= Cols::MinMax, label, out);
        if add {
            self.exact_add(at, spec, te, keep, input);
        }
        ok
    }

    /// Enters an event in exact group `spec` (an outcome group, after the decision).
    pub fn exact_add(
        &mut self,
        at: LogAt,
        spec: &GroupSpec,
        te: i64,
        keep: i64,
        input: &GroupInput,
    ) {
        if !input.pass {
            return;
        }
        if let Some(log) = self.log(at) {
            let v = if spec.kind == Kind::Label {
                0.0
            } else {
                input.value
            };
            log.insert(Win::of(spec), te, v, spec.max_events as usize, keep);
        }
    }

    /// A label for the transaction at `te` in exact label group `at`.
    pub fn exact_label(&mut self, at: LogAt, te: i64, delta: i32) -> bool {
        self.log(at).is_some_and(|l| l.label(te, delta))
    }

    /// Moves exact group `gl`'s ring (the buckets its reads fall back to past
    /// `max_events`) from bucket `head` to `hb`. It keeps no running totals, so a bucket
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

    /// Enters an event at bucket `eb` (valued `x`) into exact group `gl`'s ring, whose
    /// newest bucket is `hb`: a slot whose bit is clear is written afresh.
    pub fn ring_enter(&mut self, gl: &GLayout, divs: &Divs, hb: i64, eb: i64, x: f64) {
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
        let (_, rw, occ) = parts(self.w, ring, oa, len);
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
                *b = if held {
                    (*b & !0xffff_ffff) | (*b as u32).saturating_add(1) as u64
                } else {
                    1
                };
            }
            _ => {}
        }
    }
}
