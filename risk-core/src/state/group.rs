//! One group's state and arithmetic: the time-bucket ring several features share.
//!
//! Time is cut into buckets of `width` ms, numbered `floor(t / width)`. A window of
//! `B` buckets read at bucket `h` covers buckets `h-B ..= h`: the current, partial one
//! and `B` full ones, so between `W = B * width` and `W + width` of history. A label
//! window with a delay of `D` buckets covers `h-D-B ..= h-D`. Every store (in process,
//! Redis) keeps exactly this layout, so they agree on every stream.

use super::distinct::Distinct;
use super::ring::Ring;
use serde::{Deserialize, Serialize};

/// What kind of state a group keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Count, sum, sum of squares, min, max per bucket (and the last event time).
    Stats,
    /// Only the last event time.
    Last,
    /// Distinct values: exact set, then a per-bucket HyperLogLog.
    Distinct,
    /// Transactions and labelled frauds per bucket of event time.
    Label,
}

/// The compiled shape of a group (identical in every store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct GroupSpec {
    pub kind: Kind,
    /// Bucket width, ms (> 0).
    pub width_ms: i64,
    /// `B`: full buckets in the window.
    pub window_b: i64,
    /// `D`: label delay in buckets.
    pub delay_b: i64,
    /// Values kept exactly ([`Kind::Distinct`]).
    pub exact_limit: usize,
    /// What a stats bucket keeps (the most its features need).
    pub cols: Cols,
}

/// The columns of a stats bucket: a count only (4 bytes), count and sum (16), or
/// count, sum, sum of squares, min and max (32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Cols {
    Count,
    Sum,
    Full,
}

impl GroupSpec {
    /// Buckets the ring keeps.
    pub fn ring_len(&self) -> usize {
        match self.kind {
            Kind::Last => 0,
            Kind::Label => (self.delay_b + self.window_b + 1) as usize,
            _ => (self.window_b + 1) as usize,
        }
    }
    /// The bucket of time `t_ms`.
    #[inline]
    pub fn bucket(&self, t_ms: i64) -> i64 {
        t_ms.div_euclid(self.width_ms)
    }
}

/// One event's input to one group: whether it passes the filters and what it adds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GroupInput {
    /// Passes the group's filters (and has its value).
    pub pass: bool,
    /// The value aggregated (stats groups).
    pub value: f64,
    /// The mixed 52-bit hash of the value counted (distinct groups).
    pub hash: u64,
}

/// What a group holds for a window, before the current event.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct GroupRead {
    pub n: f64,
    pub sum: f64,
    pub sumsq: f64,
    pub min: f64,
    pub max: f64,
    /// The previous matching event's time.
    pub last_ms: Option<i64>,
    /// Distinct values before / after the current one.
    pub distinct_before: f64,
    pub distinct_after: f64,
    /// Label window: transactions and frauds.
    pub txns: f64,
    pub frauds: f64,
}

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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
            Cols::Full => StatsRing::Full(Ring::new(n)),
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
    fn len(&self) -> usize {
        match self {
            StatsRing::Count(r) => r.ring.slots.len(),
            StatsRing::Sum(r) => r.ring.slots.len(),
            StatsRing::Full(r) => r.slots.len(),
        }
    }
    fn bytes(&self) -> usize {
        match self {
            StatsRing::Count(r) => std::mem::size_of_val(&*r.ring.slots) + 4,
            StatsRing::Sum(r) => std::mem::size_of_val(&*r.ring.slots) + 16,
            StatsRing::Full(r) => std::mem::size_of_val(&*r.slots),
        }
    }
    fn cols(&self) -> Cols {
        match self {
            StatsRing::Count(_) => Cols::Count,
            StatsRing::Sum(_) => Cols::Sum,
            StatsRing::Full(_) => Cols::Full,
        }
    }
}

/// Per-bucket statistics (all columns).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Bucket {
    pub n: u32,
    pub min: f32,
    pub max: f32,
    pub sum: f64,
    pub sumsq: f64,
}

/// Per-bucket label counts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct LabelBucket {
    pub txns: u32,
    pub frauds: u32,
}

/// One group's state for one key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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

    /// Whether a restored state has the layout `spec` gives (kind and ring length).
    pub fn fits(&self, spec: &GroupSpec) -> bool {
        let n = spec.ring_len();
        match (self, spec.kind) {
            (GState::Stats { ring, .. }, Kind::Stats) => {
                ring.len() == n && ring.cols() == spec.cols
            }
            (GState::Label { ring }, Kind::Label) => ring.slots.len() == n,
            (GState::Last { .. }, Kind::Last) => true,
            (GState::Distinct { d, .. }, Kind::Distinct) => match d {
                Distinct::Exact(v) => v.len() <= spec.exact_limit,
                Distinct::Sketch(r) => r.slots.len() == n,
            },
            _ => false,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match self {
                GState::Stats { ring, .. } => ring.bytes(),
                GState::Label { ring } => ring.bytes() - std::mem::size_of::<Ring<LabelBucket>>(),
                GState::Last { .. } => 0,
                GState::Distinct { d, .. } => match d {
                    Distinct::Exact(v) => v.capacity() * 16,
                    Distinct::Sketch(r) => r.bytes(),
                },
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
    fn hll_is_within_its_error_far_past_the_exact_limit() {
        let spec = GroupSpec {
            kind: Kind::Distinct,
            width_ms: 1_000,
            window_b: 4,
            delay_b: 0,
            exact_limit: 8,
            cols: Cols::Count,
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
}
