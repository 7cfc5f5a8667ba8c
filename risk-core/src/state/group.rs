//! One group's state and arithmetic: the time-bucket ring several features share.
//!
//! Time is cut into buckets of `width` ms, numbered `floor(t / width)`. A window of
//! `B` buckets read at bucket `h` covers buckets `h-B ..= h`: the current, partial one
//! and `B` full ones, so between `W = B * width` and `W + width` of history. A label
//! window with a delay of `D` buckets covers `h-D-B ..= h-D`. Every store (in process,
//! Redis) keeps exactly this layout, so they agree on every stream.

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

/// HyperLogLog registers of one bucket.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub(crate) struct Regs(#[serde(with = "serde_regs")] pub [u8; HLL_M]);

impl Default for Regs {
    fn default() -> Self {
        Regs([0; HLL_M])
    }
}

mod serde_regs {
    use super::HLL_M;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(r: &[u8; HLL_M], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(r)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; HLL_M], D::Error> {
        let v: Vec<u8> = Vec::deserialize(d)?;
        v.try_into()
            .map_err(|_| serde::de::Error::custom("HyperLogLog registers of the wrong length"))
    }
}

/// Registers per HyperLogLog (standard error 1.04 / sqrt(128) = 9.2%).
pub(crate) const HLL_M: usize = 128;

/// A fixed ring of buckets; `head` is the newest bucket number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Ring<T> {
    head: i64,
    slots: Box<[T]>,
}

impl<T: Default + Copy> Ring<T> {
    pub fn new(len: usize) -> Self {
        Self {
            head: i64::MIN,
            slots: vec![T::default(); len.max(1)].into_boxed_slice(),
        }
    }

    fn idx(&self, b: i64) -> usize {
        b.rem_euclid(self.slots.len() as i64) as usize
    }

    /// Moves the head forward to bucket `b`, clearing the buckets it passes.
    pub fn advance(&mut self, b: i64) {
        self.advance_with(b, |_| {}, || {});
    }

    /// [`advance`](Self::advance), telling `left` each bucket that leaves the ring one
    /// by one, or `all` when they all do.
    #[inline]
    pub fn advance_with(&mut self, b: i64, mut left: impl FnMut(&T), all: impl FnOnce()) {
        if self.head == i64::MIN || b - self.head >= self.slots.len() as i64 {
            self.slots.fill(T::default());
            self.head = b;
            all();
            return;
        }
        let len = self.slots.len();
        let mut i = self.idx(self.head);
        while self.head < b {
            self.head += 1;
            i = if i + 1 == len { 0 } else { i + 1 };
            left(&self.slots[i]);
            self.slots[i] = T::default();
        }
    }

    /// The bucket `b`, when the ring still holds it.
    pub fn get_mut(&mut self, b: i64) -> Option<&mut T> {
        if self.head == i64::MIN || b > self.head || self.head - b >= self.slots.len() as i64 {
            return None;
        }
        let i = self.idx(b);
        Some(&mut self.slots[i])
    }

    /// The buckets `lo ..= hi` the ring holds, oldest first. One division for the
    /// first slot, then a wrapping increment (a division per bucket cost more than the
    /// whole fold: measured).
    pub fn range(&self, lo: i64, hi: i64) -> impl Iterator<Item = &T> + '_ {
        let len = self.slots.len();
        let first = lo.max(self.head.saturating_sub(len as i64 - 1));
        let last = hi.min(self.head);
        let n = if self.head == i64::MIN || last < first {
            0
        } else {
            (last - first + 1) as usize
        };
        let start = if n == 0 { 0 } else { self.idx(first) };
        let (a, b) = self.slots.split_at(start);
        b.iter().chain(a.iter()).take(n)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + std::mem::size_of_val(&*self.slots)
    }
}

/// Distinct values: exact `(hash, last bucket)` pairs, or a HyperLogLog per bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) enum Distinct {
    Exact(Vec<(u64, i64)>),
    Sketch(Ring<Regs>),
}

/// Sets the register of a 52-bit hash (52 bits so that a server-side script, whose
/// numbers are doubles, computes the very same registers): the top 7 bits pick the
/// register, the rank is one plus the leading zeros of the other 45.
fn hll_set(r: &mut Regs, h: u64) {
    let j = ((h >> 45) & 0x7f) as usize;
    let w = h & ((1 << 45) - 1);
    let rank = (w.leading_zeros() - 19) as u8 + 1;
    r.0[j] = r.0[j].max(rank);
}

fn hll_estimate(m: &[u8; HLL_M]) -> f64 {
    let mf = HLL_M as f64;
    let alpha = 0.7213 / (1.0 + 1.079 / mf);
    let (sum, zeros) = m.iter().fold((0.0, 0u32), |(s, z), &r| {
        (s + 2f64.powi(-(r as i32)), z + (r == 0) as u32)
    });
    let e = alpha * mf * mf / sum;
    if e <= 2.5 * mf && zeros > 0 {
        mf * (mf / zeros as f64).ln()
    } else {
        e
    }
}

impl Distinct {
    fn count(&self, lo: i64, hi: i64) -> f64 {
        match self {
            Distinct::Exact(v) => v.iter().filter(|e| e.1 >= lo && e.1 <= hi).count() as f64,
            Distinct::Sketch(ring) => {
                let mut m = [0u8; HLL_M];
                for r in ring.range(lo, hi) {
                    for (a, b) in m.iter_mut().zip(r.0.iter()) {
                        *a = (*a).max(*b);
                    }
                }
                hll_estimate(&m).round()
            }
        }
    }

    fn add(&mut self, h: u64, b: i64, lo: i64, head: i64, spec: &GroupSpec) {
        match self {
            Distinct::Exact(v) => {
                if let Some(e) = v.iter_mut().find(|e| e.0 == h) {
                    e.1 = e.1.max(b);
                    return;
                }
                v.retain(|e| e.1 >= lo);
                v.push((h, b));
                if v.len() > spec.exact_limit {
                    let mut ring = Ring::<Regs>::new(spec.ring_len());
                    ring.advance(head);
                    for &(h, b) in v.iter() {
                        if let Some(r) = ring.get_mut(b) {
                            hll_set(r, h);
                        }
                    }
                    *self = Distinct::Sketch(ring);
                }
            }
            Distinct::Sketch(ring) => {
                if let Some(r) = ring.get_mut(b) {
                    hll_set(r, h);
                }
            }
        }
    }
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
                    d.add(input.hash, eb, lo, hb, spec);
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
