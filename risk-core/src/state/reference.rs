//! The reference implementation of a group's arithmetic: one allocation per ring, the
//! semantics documented in [`super::group`]. Test-only: the in-process store's records
//! ([`super::record`]) are checked against it bit for bit on random streams.

use super::distinct::Distinct;
use super::group::{Cols, GroupInput, GroupRead, GroupSpec, Kind};
use super::ring::Ring;

/// What a stats bucket does: enter a value, add itself into a read.
pub(crate) trait StatBucket: Default + Copy {
    fn add(&mut self, v: f64);
    fn fold(&self, out: &mut GroupRead);
}

/// A bucket whose contents can be taken out of a running total.
pub(crate) trait Totalled: StatBucket {
    fn sub(&mut self, b: &Self);
}

impl Totalled for u32 {
    #[inline]
    fn sub(&mut self, b: &Self) {
        *self = self.saturating_sub(*b);
    }
}

impl Totalled for SumBucket {
    #[inline]
    fn sub(&mut self, b: &Self) {
        self.n = self.n.saturating_sub(b.n);
        self.sum -= b.sum;
    }
}

/// A ring whose window total is kept as buckets enter and leave: a read is O(1) (the
/// window of a stats group is the whole ring). Sums are updated by adding each value and
/// subtracting each bucket that leaves, in that order in every store (the Redis script
/// does the same), so stores agree bit for bit; f32 inputs sum exactly in f64 until the
/// total passes 2^29 times their resolution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TotRing<T> {
    ring: Ring<T>,
    total: T,
}

impl<T: Totalled> TotRing<T> {
    fn new(len: usize) -> Self {
        Self {
            ring: Ring::new(len),
            total: T::default(),
        }
    }
    #[inline]
    fn read_add(&mut self, hb: i64, eb: i64, v: Option<f64>, out: &mut GroupRead) {
        let total = &mut self.total;
        let mut cleared = false;
        self.ring
            .advance_with(hb, |b| total.sub(b), || cleared = true);
        if cleared {
            self.total = T::default();
        }
        self.total.fold(out);
        if let Some(v) = v {
            if let Some(b) = self.ring.get_mut(eb) {
                b.add(v);
                self.total.add(v);
            }
        }
    }
}

impl StatBucket for u32 {
    #[inline]
    fn add(&mut self, _v: f64) {
        *self = self.saturating_add(1);
    }
    #[inline]
    fn fold(&self, out: &mut GroupRead) {
        out.n += *self as f64;
    }
}

/// Count and sum.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SumBucket {
    pub n: u32,
    pub sum: f64,
}

impl StatBucket for SumBucket {
    #[inline]
    fn add(&mut self, v: f64) {
        self.n = self.n.saturating_add(1);
        self.sum += v;
    }
    #[inline]
    fn fold(&self, out: &mut GroupRead) {
        out.n += self.n as f64;
        out.sum += self.sum;
    }
}

impl StatBucket for Bucket {
    #[inline]
    fn add(&mut self, v: f64) {
        let v32 = v as f32;
        if self.n == 0 {
            self.min = v32;
            self.max = v32;
        } else {
            self.min = self.min.min(v32);
            self.max = self.max.max(v32);
        }
        self.n = self.n.saturating_add(1);
        self.sum += v;
        self.sumsq += v * v;
    }
    #[inline]
    fn fold(&self, out: &mut GroupRead) {
        if self.n == 0 {
            return;
        }
        out.n += self.n as f64;
        out.sum += self.sum;
        out.sumsq += self.sumsq;
        out.min = if out.min.is_nan() {
            self.min as f64
        } else {
            out.min.min(self.min as f64)
        };
        out.max = if out.max.is_nan() {
            self.max as f64
        } else {
            out.max.max(self.max as f64)
        };
    }
}

/// A stats ring with the columns its features need.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StatsRing {
    Count(TotRing<u32>),
    Sum(TotRing<SumBucket>),
    Full(Ring<Bucket>),
}

#[inline]
fn stats_read_add<T: StatBucket>(
    ring: &mut Ring<T>,
    lo: i64,
    hb: i64,
    eb: i64,
    v: Option<f64>,
    out: &mut GroupRead,
) {
    ring.advance(hb);
    for b in ring.range(lo, hb) {
        b.fold(out);
    }
    if let Some(v) = v {
        if let Some(b) = ring.get_mut(eb) {
            b.add(v);
        }
    }
}

impl StatsRing {
    fn new(spec: &GroupSpec) -> Self {
        let n = spec.ring_len();
        match spec.cols {
            Cols::Count => StatsRing::Count(TotRing::new(n)),
            Cols::Sum => StatsRing::Sum(TotRing::new(n)),
            Cols::MinMax | Cols::Full => StatsRing::Full(Ring::new(n)),
        }
    }
    #[inline]
    fn read_add(&mut self, lo: i64, hb: i64, eb: i64, v: Option<f64>, out: &mut GroupRead) {
        match self {
            StatsRing::Count(r) => r.read_add(hb, eb, v, out),
            StatsRing::Sum(r) => r.read_add(hb, eb, v, out),
            StatsRing::Full(r) => stats_read_add(r, lo, hb, eb, v, out),
        }
    }
}

/// Per-bucket statistics (all columns).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Bucket {
    pub n: u32,
    pub min: f32,
    pub max: f32,
    pub sum: f64,
    pub sumsq: f64,
}

/// Per-bucket label counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct LabelBucket {
    pub txns: u32,
    pub frauds: u32,
}

/// One group's state for one key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GState {
    Stats { ring: StatsRing, last_ms: i64 },
    Last { last_ms: i64 },
    Distinct { d: Distinct, head: i64 },
    Label { ring: Ring<LabelBucket> },
}

const NO_TIME: i64 = i64::MIN;

impl GState {
    pub fn new(spec: &GroupSpec) -> Self {
        match spec.kind {
            Kind::Stats => GState::Stats {
                ring: StatsRing::new(spec),
                last_ms: NO_TIME,
            },
            Kind::Last => GState::Last { last_ms: NO_TIME },
            Kind::Distinct => GState::Distinct {
                d: Distinct::Exact(Vec::new()),
                head: i64::MIN,
            },
            Kind::Label => GState::Label {
                ring: Ring::new(spec.ring_len()),
            },
        }
    }

    /// Advances to the key's clock bucket `hb`, reads the window, and (when `add`)
    /// enters the event at bucket `eb` / time `te`.
    pub fn read_add(
        &mut self,
        spec: &GroupSpec,
        hb: i64,
        eb: i64,
        te: i64,
        input: &GroupInput,
        add: bool,
    ) -> GroupRead {
        let mut out = GroupRead {
            min: f64::NAN,
            max: f64::NAN,
            ..Default::default()
        };
        let lo = hb - spec.window_b;
        match self {
            GState::Stats { ring, last_ms } => {
                let v = (add && input.pass).then_some(input.value);
                ring.read_add(lo, hb, eb, v, &mut out);
                out.last_ms = (*last_ms != NO_TIME).then_some(*last_ms);
                if v.is_some() {
                    *last_ms = (*last_ms).max(te);
                }
            }
            GState::Last { last_ms } => {
                out.last_ms = (*last_ms != NO_TIME).then_some(*last_ms);
                if add && input.pass {
                    *last_ms = (*last_ms).max(te);
                }
            }
            GState::Distinct { d, head } => {
                *head = (*head).max(hb);
                if let Distinct::Sketch(r) = d {
                    r.advance(hb);
                }
                out.distinct_before = d.count(lo, hb);
                if add && input.pass && eb >= lo {
                    d.add(input.hash, eb, lo, hb, spec.exact_limit, spec.ring_len());
                    out.distinct_after = d.count(lo, hb);
                } else {
                    out.distinct_after = out.distinct_before;
                }
            }
            GState::Label { ring } => {
                ring.advance(hb);
                let top = hb - spec.delay_b;
                for b in ring.range(top - spec.window_b, top) {
                    out.txns += b.txns as f64;
                    out.frauds += b.frauds as f64;
                }
                if add && input.pass {
                    if let Some(b) = ring.get_mut(eb) {
                        b.txns = b.txns.saturating_add(1);
                    }
                }
            }
        }
        out
    }

    /// A label for a transaction at bucket `eb`: `delta` = +1 (fraud) or -1 (retracted).
    /// False when the bucket has left the ring.
    pub fn label(&mut self, eb: i64, delta: i32) -> bool {
        let GState::Label { ring } = self else {
            return false;
        };
        match ring.get_mut(eb) {
            Some(b) => {
                b.frauds = b.frauds.saturating_add_signed(delta).min(b.txns);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_clears_what_it_passes_and_forgets_the_old() {
        let mut r = Ring::<u32>::new(4);
        r.advance(10);
        *r.get_mut(10).unwrap() = 1;
        r.advance(12);
        *r.get_mut(11).unwrap() = 2;
        assert_eq!(
            r.range(9, 12).copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 0]
        );
        r.advance(13);
        assert!(r.get_mut(9).is_none());
        assert_eq!(r.range(0, 13).sum::<u32>(), 3);
        r.advance(14);
        assert_eq!(r.range(0, 14).sum::<u32>(), 2, "bucket 10 left the ring");
        r.advance(100);
        assert_eq!(r.range(0, 100).sum::<u32>(), 0);
    }

    #[test]
    fn divisions_by_a_constant_equal_the_euclidean_ones() {
        use super::super::layout::Div;
        let big = [
            1i64 << 32,
            u32::MAX as i64,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ];
        for d in [
            1i64,
            3,
            12,
            24,
            30,
            1_440,
            300_000,
            86_400_000,
            1 << 33,
            i64::MAX,
        ] {
            let q = Div::new(d);
            let near = (-3i64..3)
                .flat_map(|k| (-2i64..=2).map(move |e| k.wrapping_mul(d).wrapping_add(e)));
            let times = near.chain(
                big.iter()
                    .flat_map(|&b| [b, b.wrapping_sub(1), b.wrapping_add(1)]),
            );
            for t in times.chain([5_900_000, 1_767_571_200_000, -1_767_571_200_000]) {
                assert_eq!(q.div(t), t.div_euclid(d), "{t} / {d}");
                assert_eq!(q.rem(t) as i64, t.rem_euclid(d), "{t} % {d}");
            }
        }
    }

    #[test]
    fn hll_is_within_its_error_far_past_the_exact_limit() {
        let spec = GroupSpec {
            kind: Kind::Distinct,
            width_ms: 1_000,
            window_b: 4,
            delay_b: 0,
            exact_limit: 8,
            cols: Cols::Count,
            max_events: 0,
        };
        let mut g = GState::new(&spec);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..5_000u64 {
            x = crate::hash::splitmix(i + 1) >> 12;
            let inp = GroupInput {
                pass: true,
                value: 0.0,
                hash: x,
            };
            g.read_add(&spec, 2, 2, 2_000, &inp, true);
        }
        let r = g.read_add(&spec, 2, 2, 2_000, &GroupInput::default(), false);
        let err = (r.distinct_before - 5_000.0).abs() / 5_000.0;
        assert!(err < 0.3, "estimate {} ({err})", r.distinct_before);
        assert_ne!(x, 0);
    }

    /// One record with a group of every kind and a reference state per group, driven by
    /// the same random stream (out of order, gaps past the window, repeated and new
    /// distinct values, outcome-only entries, labels): every read equal bit for bit.
    #[test]
    fn records_equal_the_reference_bit_for_bit() {
        use crate::state::layout::{Divs, Layout};
        use crate::state::record::{fresh_read, Rec, Spill};
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng = crate::hash::splitmix(rng);
            rng
        };
        let spec = |kind, width_ms, window_b, delay_b, exact_limit, cols| GroupSpec {
            kind,
            width_ms,
            window_b,
            delay_b,
            exact_limit,
            cols,
            max_events: 0,
        };
        for round in 0..40u64 {
            let w = 1_000 * (1 + (next() % 600) as i64);
            let b = 1 + (next() % 30) as i64;
            let specs = vec![
                spec(Kind::Stats, w, b, 0, 0, Cols::Count),
                spec(Kind::Stats, w * 2, b + 3, 0, 0, Cols::Sum),
                spec(Kind::Stats, w, b, 0, 0, Cols::Full),
                spec(Kind::Last, 1, 0, 0, 0, Cols::Count),
                spec(
                    Kind::Distinct,
                    w,
                    b,
                    0,
                    1 + (next() % 9) as usize,
                    Cols::Count,
                ),
                spec(Kind::Distinct, w * 3, b, 0, 2, Cols::Count),
                spec(Kind::Label, w, b, (next() % 5) as i64, 0, Cols::Count),
                spec(Kind::Stats, w / 2, 1, 0, 0, Cols::Sum),
                // Rings past 64 buckets keep their occupancy bits after the rings.
                spec(Kind::Stats, w / 4, 70, 0, 0, Cols::Sum),
                spec(Kind::Stats, w / 4, 66 + b, 0, 0, Cols::Full),
                spec(Kind::Stats, w / 5, 64, 0, 0, Cols::Count),
                spec(Kind::Label, w / 4, 60, 10, 0, Cols::Count),
                spec(Kind::Stats, w, b + 1, 0, 0, Cols::MinMax),
                spec(Kind::Stats, w / 4, 70, 0, 0, Cols::MinMax),
                // Several words of occupancy: steps across words, runs that wrap.
                spec(Kind::Stats, w / 8, 130 + b, 0, 0, Cols::Count),
                spec(Kind::Stats, w / 8, 190, 0, 0, Cols::Full),
                spec(Kind::Label, w / 8, 100, 40 + b, 0, Cols::Count),
            ];
            let layout = Layout::of_specs(&specs);
            let mut words = vec![0u64; layout.words];
            let mut spill: Spill = None;
            let mut rec = Rec {
                w: &mut words,
                spill: Some(&mut spill),
            };
            rec.reset(42);
            let mut refs: Vec<GState> = specs.iter().map(GState::new).collect();
            let mut clock = i64::MIN;
            let mut t = 1_700_000_000_000i64 + (next() % 1_000_000) as i64;
            let lateness = w * b / 2;
            let mut seen = Vec::new();
            for i in 0..600 {
                let r = next();
                t += match r % 10 {
                    0 => (next() % (w as u64 * b as u64 * 3)) as i64,
                    1..=2 => -((next() % (w as u64 * b as u64)) as i64),
                    _ => (next() % (w as u64 / 2 + 1)) as i64,
                };
                let ts = t;
                let old = clock;
                clock = clock.max(ts);
                let te = if clock - ts <= lateness { ts } else { clock };
                let value = match next() % 4 {
                    0 => (next() % 100) as f32 as f64,
                    1 => f32::from_bits((next() as u32 & 0x007f_ffff) | 0x4400_0000) as f64,
                    2 => -((next() % 7) as f32 as f64) * 0.37f32 as f64,
                    _ => ((next() % 1_000_000) as f32 / 7.0) as f64,
                };
                let hash = (next() % (3 + round % 12)) << 20 | 1;
                let input = GroupInput {
                    pass: next() % 7 != 0,
                    value,
                    hash,
                };
                let add = next() % 5 != 0;
                rec.set_clock(clock);
                for (g, sp) in specs.iter().enumerate() {
                    let (hb, eb) = (sp.bucket(clock), sp.bucket(te));
                    let want = refs[g].read_add(sp, hb, eb, te, &input, add);
                    let d = Divs::of(sp);
                    let mut got = fresh_read();
                    rec.read_add(
                        &layout.groups[g],
                        sp,
                        &d,
                        d.head(old),
                        hb,
                        eb,
                        te,
                        &input,
                        add,
                        &mut got,
                    );
                    // A min / max group keeps no sums (its features read none).
                    let sums = sp.cols != Cols::MinMax;
                    let bits = |r: &GroupRead| {
                        [
                            r.n,
                            if sums { r.sum } else { 0.0 },
                            if sums { r.sumsq } else { 0.0 },
                            r.min,
                            r.max,
                            r.distinct_before,
                            r.distinct_after,
                            r.txns,
                            r.frauds,
                        ]
                        .map(f64::to_bits)
                    };
                    // The last event time is a `since_last` group's read alone (a stats
                    // group's record keeps none).
                    let last = |r: &GroupRead| r.last_ms.filter(|_| sp.kind == Kind::Last);
                    assert_eq!(
                        (bits(&got), last(&got)),
                        (bits(&want), last(&want)),
                        "round {round} event {i} group {g} ({sp:?})"
                    );
                    if !add {
                        // An outcome entry after the decision (the clock unchanged).
                        let want = refs[g].read_add(sp, hb, eb, te, &input, true);
                        let (l, mut got) = (&layout.groups[g], fresh_read());
                        rec.read_add(l, sp, &d, hb, hb, eb, te, &input, true, &mut got);
                        assert_eq!(bits(&got), bits(&want), "outcome, event {i} group {g}");
                    }
                }
                seen.push(te);
                if next() % 3 == 0 {
                    let at = seen[(next() % seen.len() as u64) as usize];
                    let delta = if next() % 4 == 0 { -1 } else { 1 };
                    for g in [6, 11, specs.len() - 1] {
                        let eb = specs[g].bucket(at);
                        assert_eq!(
                            rec.label(&layout.groups[g], &Divs::of(&specs[g]), eb, delta),
                            refs[g].label(eb, delta),
                            "label, event {i}"
                        );
                    }
                }
            }
        }
    }
}
