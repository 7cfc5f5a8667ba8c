//! The fixed layout of one key's record in the in-process store, computed when the
//! configuration compiles.
//!
//! A record is a run of 8-byte words: the key (word 0) and its clock (word 1), then every
//! group's *hot* words (running totals, last event time, the inline distinct set's
//! length) so that a read of a count or sum window touches the record's first line or
//! two, with each ring's occupancy (a bit per bucket holding events: empty buckets are
//! neither cleared nor folded, so a key with a few events a day touches a few lines of its
//! rings; a ring of up to 64 buckets keeps its bits in its hot word), then the groups'
//! bucket rings, each column an array of its own (no padding: a count+sum bucket takes 12
//! bytes, a full stats bucket 28), then the occupancy bits of the rings longer than 64
//! buckets, a word per 64 buckets (their hot occupancy word is unused, so that every
//! other word stays where the layouts of earlier versions put it and a snapshot of
//! those migrates by inserting these words). No ring keeps a head: every
//! ring of a key is advanced to the bucket of the key's clock on every event, so a
//! ring's head is `bucket(clock)` (and "never advanced" is a fresh record's clock,
//! `i64::MIN`).
//!
//! Columns are the reference's types (u32 counts, f64 sums, f32 min / max): the store
//! computes the same bits as before and as the Redis store. Narrower columns (u16
//! counts, f32 sums) would change values past 65,535 events a bucket or on sums of
//! mixed magnitudes, so they are not used.

use super::exact::LogAt;
use super::group::{Cols, GroupSpec, Kind};
use super::plan::Plan;
use super::seq_plan::SeqPlans;
use arrayvec::ArrayVec;

/// Distinct values a record keeps inline before its set moves to the key's spill (a
/// card rarely sees more than a few countries or devices in a window).
pub(crate) const INLINE_DISTINCT: usize = 4;

/// Word of the key, and of its clock.
pub(crate) const KEY: usize = 0;
pub(crate) const CLOCK: usize = 1;

/// Where one group's state lies in a record (word offsets; `len` buckets per ring;
/// `occ`: the ring's occupancy bits, [`occ_words`] words, the group's last hot word for
/// rings of up to 64 buckets, after every ring for longer ones). In the layouts of
/// [`Hot::WithLast`] a stats group's hot words start with its last event time, at `hot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GLayout {
    /// hot: window count, occupancy; ring: count (u32).
    Count {
        hot: usize,
        n: usize,
        occ: usize,
        len: usize,
    },
    /// hot: window count, window sum, occupancy; ring: count (u32), sum (f64).
    Sum {
        hot: usize,
        n: usize,
        sum: usize,
        occ: usize,
        len: usize,
    },
    /// hot: occupancy; ring: count (u32), min, max (f32), and with `sums` sum and sum
    /// of squares (f64; min / max groups keep none).
    Full {
        hot: usize,
        n: usize,
        min: usize,
        max: usize,
        sums: Option<(usize, usize)>,
        occ: usize,
        len: usize,
    },
    /// hot: last event time.
    Last { hot: usize },
    /// hot: entries inline (bit 63: the set lives in the spill); `at`: [`INLINE_DISTINCT`]
    /// (hash, bucket) pairs; `spill`: this group's index in the key's spill.
    Distinct { hot: usize, at: usize, spill: usize },
    /// hot: occupancy; ring: transactions (low u32), frauds (high u32) per bucket.
    Label {
        hot: usize,
        ring: usize,
        occ: usize,
        len: usize,
    },
}

impl GLayout {
    /// The runs of words `(at, words)` the group keeps in a record, in an order fixed
    /// by its spec: two groups of equal specs pair up run for run (a snapshot's groups
    /// carried into other definitions).
    pub fn runs(&self) -> ArrayVec<(usize, usize), 8> {
        let mut r = ArrayVec::new();
        let long = |r: &mut ArrayVec<(usize, usize), 8>, occ: usize, len: usize| {
            if len > HOT_OCC {
                r.push((occ, occ_words(len)));
            }
        };
        match *self {
            GLayout::Count { hot, n, occ, len } => {
                r.extend([(hot, 2), (n, half(len))]);
                long(&mut r, occ, len);
            }
            GLayout::Sum {
                hot,
                n,
                sum,
                occ,
                len,
            } => {
                r.extend([(hot, 3), (n, half(len)), (sum, len)]);
                long(&mut r, occ, len);
            }
            GLayout::Full {
                hot,
                n,
                min,
                max,
                sums,
                occ,
                len,
            } => {
                r.extend([(hot, 1), (n, half(len)), (min, half(len)), (max, half(len))]);
                if let Some((s, q)) = sums {
                    r.extend([(s, len), (q, len)]);
                }
                long(&mut r, occ, len);
            }
            GLayout::Last { hot } => r.push((hot, 1)),
            GLayout::Distinct { hot, at, .. } => r.extend([(hot, 1), (at, 2 * INLINE_DISTINCT)]),
            GLayout::Label {
                hot,
                ring,
                occ,
                len,
            } => {
                r.extend([(hot, 1), (ring, len)]);
                long(&mut r, occ, len);
            }
        }
        r
    }
}

/// Whether a stats group (count, sum, full) keeps its last event time among its hot
/// words. The layouts of the snapshots before `RSKSTAT9` did; nothing read it
/// (`since_last` has a group of its own), so records now keep none: 8 bytes a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hot {
    /// No last event time (records now).
    Lean,
    /// A last event time first (records of `RSKSTAT3` to `RSKSTAT8` snapshots).
    WithLast,
}

/// Buckets whose occupancy fits the group's hot word.
pub(crate) const HOT_OCC: usize = 64;

/// The shift of a [`Layout::write_words`] word that is the same for every slot.
pub(crate) const FIXED: u32 = usize::BITS - 1;

/// Words of occupancy bits a ring of `len` buckets keeps.
#[inline]
pub(crate) fn occ_words(len: usize) -> usize {
    len.div_ceil(64).max(1)
}

/// The layout of one key source's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Words per record.
    pub words: usize,
    /// One per group of the source, in `plan.by_source[s]` order.
    pub groups: Vec<GLayout>,
    /// Distinct groups (entries of the key's spill).
    pub spills: usize,
    /// Per group: its exact window's log in the key's spill (`exact = true`).
    pub log_of: Vec<Option<LogAt>>,
    /// The source's sequences (`[[state.sequences]]`), after the rings.
    pub seqs: Vec<SeqAt>,
    /// The occupancy bits of rings past [`HOT_OCC`] buckets: first word and words
    /// (after the rings, before the sequences; what a record of the layouts before them
    /// lacks).
    pub long_occ: (usize, usize),
}

/// Where one sequence lies in a record: a header of two words (events held in the low
/// 32 bits and the ring's first slot in the high 32; the time of the latest event that
/// left it, `t ^ NO_TIME` so that 0 is none), then `rows` slots of `stride` words each:
/// the event time, then the stored values as f32, two a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeqAt {
    pub at: usize,
    pub rows: usize,
    pub stride: usize,
    pub stored: usize,
}

impl SeqAt {
    /// Words one sequence of `rows` rows storing `stored` values takes.
    pub fn words(rows: usize, stored: usize) -> usize {
        2 + rows * (1 + half(stored))
    }
}

/// Words an array of `len` 4-byte values takes.
pub(super) fn half(len: usize) -> usize {
    len.div_ceil(2)
}

impl Layout {
    /// The layout of source `s`'s records (its groups, then its sequences).
    pub fn of(plan: &Plan, seqs: &SeqPlans, s: usize) -> Self {
        Self::of_hot(plan, seqs, s, Hot::Lean)
    }

    /// The layout of source `s`'s records with hot words `v`.
    pub fn of_hot(plan: &Plan, seqs: &SeqPlans, s: usize, v: Hot) -> Self {
        let specs: Vec<GroupSpec> = plan.by_source[s]
            .iter()
            .map(|&g| plan.groups[g].spec)
            .collect();
        let dims: Vec<(usize, usize)> = seqs.of(s).map(|q| (q.rows, q.stored.len())).collect();
        Self::of_parts(&specs, &dims, v)
    }

    /// The layout of records holding groups of `specs`, then sequences of `(rows,
    /// stored values)`, with hot words `v` (a snapshot's definitions rebuild theirs).
    pub fn of_parts(specs: &[GroupSpec], seqs: &[(usize, usize)], v: Hot) -> Self {
        let mut l = Self::of_specs_hot(specs, v);
        for &(rows, stored) in seqs {
            l.seqs.push(SeqAt {
                at: l.words,
                rows,
                stride: 1 + half(stored),
                stored,
            });
            l.words += SeqAt::words(rows, stored);
        }
        l
    }

    /// The layout of records holding groups of `specs`, in order.
    #[cfg(test)]
    pub fn of_specs(specs: &[GroupSpec]) -> Self {
        Self::of_specs_hot(specs, Hot::Lean)
    }

    /// The layout of records holding groups of `specs`, in order, with hot words `v`.
    pub fn of_specs_hot(specs: &[GroupSpec], v: Hot) -> Self {
        let last = (v == Hot::WithLast) as usize;
        let mut hot = 2;
        let mut hots = Vec::with_capacity(specs.len());
        for spec in specs {
            hots.push(hot);
            hot += match (spec.kind, spec.cols) {
                (Kind::Stats, Cols::Count) => 2 + last,
                (Kind::Stats, Cols::Sum) => 3 + last,
                (Kind::Stats, Cols::Full | Cols::MinMax) => 1 + last,
                (Kind::Last, _) | (Kind::Distinct, _) | (Kind::Label, _) => 1,
            };
        }
        let mut at = hot;
        let mut take = |w: usize| {
            let a = at;
            at += w;
            a
        };
        let mut spills = 0;
        let mut groups: Vec<GLayout> = specs
            .iter()
            .zip(hots)
            .map(|(spec, hot)| {
                let len = spec.ring_len();
                match (spec.kind, spec.cols) {
                    (Kind::Stats, Cols::Count) => GLayout::Count {
                        hot,
                        n: take(half(len)),
                        occ: hot + 1 + last,
                        len,
                    },
                    (Kind::Stats, Cols::Sum) => GLayout::Sum {
                        hot,
                        n: take(half(len)),
                        sum: take(len),
                        occ: hot + 2 + last,
                        len,
                    },
                    (Kind::Stats, c @ (Cols::Full | Cols::MinMax)) => GLayout::Full {
                        hot,
                        n: take(half(len)),
                        min: take(half(len)),
                        max: take(half(len)),
                        sums: (c == Cols::Full).then(|| (take(len), take(len))),
                        occ: hot + last,
                        len,
                    },
                    (Kind::Last, _) => GLayout::Last { hot },
                    (Kind::Distinct, _) => {
                        spills += 1;
                        GLayout::Distinct {
                            hot,
                            at: take(2 * INLINE_DISTINCT),
                            spill: spills - 1,
                        }
                    }
                    (Kind::Label, _) => GLayout::Label {
                        hot,
                        ring: take(len),
                        occ: hot,
                        len,
                    },
                }
            })
            .collect();
        // The long rings' occupancy, after every ring.
        let first = take(0);
        for g in &mut groups {
            if let GLayout::Count { occ, len, .. }
            | GLayout::Sum { occ, len, .. }
            | GLayout::Full { occ, len, .. }
            | GLayout::Label { occ, len, .. } = g
            {
                if *len > HOT_OCC {
                    *occ = take(occ_words(*len));
                }
            }
        }
        let long_occ = (first, take(0) - first);
        let n = specs.iter().filter(|s| s.max_events > 0).count();
        let mut li = 0;
        let log_of = specs
            .iter()
            .map(|s| {
                (s.max_events > 0).then(|| {
                    li += 1;
                    LogAt { li: li - 1, n }
                })
            })
            .collect();
        Self {
            words: at,
            groups,
            spills,
            log_of,
            seqs: Vec::new(),
            long_occ,
        }
    }

    /// Words of the record's head (key, clock, every group's hot words): the part
    /// every event reads.
    pub fn head_words(&self) -> usize {
        self.groups
            .iter()
            .map(|g| match *g {
                GLayout::Count { n, .. } | GLayout::Sum { n, .. } | GLayout::Full { n, .. } => n,
                GLayout::Distinct { at, .. } => at,
                GLayout::Label { ring, .. } => ring,
                GLayout::Last { .. } => self.words,
            })
            .min()
            .unwrap_or(self.words)
            .min(self.seqs.first().map_or(self.words, |q| q.at))
    }

    /// The words that bucket slot `i` of group `gl` occupies, one per column (the
    /// lines an event at that bucket writes), as `(base, shift)`: word `base + (i >>
    /// shift)` (shift 6 for an occupancy word of a long ring, 1 for a half-word column,
    /// 0 for a word column, [`FIXED`] for a word that does not move with the slot).
    /// Computed once per group, so the prefetch before an event is a loop of adds (the
    /// per-event match over the layout and its closure were 7% of the 50-card stage).
    pub fn write_words(gl: &GLayout) -> ArrayVec<(usize, u32), 6> {
        let mut w = ArrayVec::new();
        if let GLayout::Count { occ, len, .. }
        | GLayout::Sum { occ, len, .. }
        | GLayout::Full { occ, len, .. }
        | GLayout::Label { occ, len, .. } = *gl
        {
            if len > HOT_OCC {
                w.push((occ, 6));
            }
        }
        match *gl {
            GLayout::Count { n, .. } => w.push((n, 1)),
            GLayout::Sum { n, sum, .. } => {
                w.push((n, 1));
                w.push((sum, 0));
            }
            GLayout::Full {
                n, min, max, sums, ..
            } => {
                w.push((n, 1));
                w.push((min, 1));
                w.push((max, 1));
                if let Some((sum, sumsq)) = sums {
                    w.push((sum, 0));
                    w.push((sumsq, 0));
                }
            }
            GLayout::Label { ring, .. } => w.push((ring, 0)),
            GLayout::Distinct { at, .. } => w.push((at, FIXED)),
            GLayout::Last { .. } => {}
        }
        w
    }

    /// Exact groups (logs of the key's spill).
    pub fn logs(&self) -> usize {
        self.log_of.iter().flatten().count()
    }

    /// Whether records of this layout may spill (distinct sets, exact windows).
    pub fn spills_anything(&self) -> bool {
        self.spills > 0 || self.logs() > 0
    }

    /// Bytes one record takes.
    pub fn bytes(&self) -> usize {
        self.words * 8
    }
}

/// How a ring moves from head `old` (`i64::MIN`: never advanced) to bucket `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advance {
    /// Every bucket leaves (first event, or a gap of a ring or more).
    All,
    /// Buckets `from ..= b` enter, in order; each one's slot is vacated first.
    Step { from: i64, to: i64 },
}

/// Division by a group's constant (bucket width, ring length) as a multiplication for
/// the non-negative numbers every real time and bucket is (an `idiv` per use was the
/// largest cost of the state stage: ~7 per window per event).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Div {
    /// The divisor.
    pub d: i64,
    r: strength_reduce::StrengthReducedU64,
}

impl Div {
    /// Division by `d` (≥ 1).
    pub fn new(d: i64) -> Self {
        let d = d.max(1);
        Self {
            d,
            r: strength_reduce::StrengthReducedU64::new(d as u64),
        }
    }
    /// `t.div_euclid(d)`.
    #[inline]
    pub fn div(self, t: i64) -> i64 {
        if t >= 0 {
            (t as u64 / self.r) as i64
        } else {
            t.div_euclid(self.d)
        }
    }
    /// The bucket of a key's clock `clock` when this divides times into buckets
    /// (`i64::MIN`, a fresh key's clock, stays `i64::MIN`: never advanced).
    #[inline]
    pub fn head(self, clock: i64) -> i64 {
        if clock == i64::MIN {
            i64::MIN
        } else {
            self.div(clock)
        }
    }
    /// `t.rem_euclid(d)`.
    #[inline]
    pub fn rem(self, t: i64) -> usize {
        if t >= 0 {
            (t as u64 % self.r) as usize
        } else {
            t.rem_euclid(self.d) as usize
        }
    }
}

/// A group's divisors: its bucket width and its ring's length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Divs {
    pub width: Div,
    pub len: Div,
}

impl Divs {
    /// The divisors of `spec`.
    pub fn of(spec: &GroupSpec) -> Self {
        Self {
            width: Div::new(spec.width_ms),
            len: Div::new(spec.ring_len().max(1) as i64),
        }
    }
    /// The bucket of time `t` (`spec.bucket(t)`).
    #[inline]
    pub fn bucket(&self, t: i64) -> i64 {
        self.width.div(t)
    }
    /// The head bucket of a ring whose key's clock is `clock` ([`Div::head`]).
    #[inline]
    pub fn head(&self, clock: i64) -> i64 {
        self.width.head(clock)
    }
}

/// Ring arithmetic over a head derived from the key's clock; `len` ≥ 1 buckets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingAt {
    /// The newest bucket (`i64::MIN`: never advanced).
    pub head: i64,
    pub len: usize,
    /// Division by `len`.
    pub q: Div,
}

impl RingAt {
    /// The slot of bucket `b`.
    #[inline]
    pub fn idx(&self, b: i64) -> usize {
        self.q.rem(b)
    }

    /// How the ring moves to `b` (`b` ≥ the head).
    #[inline]
    pub fn advance(&self, b: i64) -> Advance {
        if self.head == i64::MIN || b - self.head >= self.len as i64 {
            Advance::All
        } else {
            Advance::Step {
                from: self.head + 1,
                to: b,
            }
        }
    }

    /// The slot of bucket `b` when the ring holds it.
    #[inline]
    pub fn get(&self, b: i64) -> Option<usize> {
        if self.head == i64::MIN || b > self.head || self.head - b >= self.len as i64 {
            return None;
        }
        Some(self.idx(b))
    }

    /// `each` slot of buckets `lo ..= hi` the ring holds whose bit is set in `occ` (the
    /// ring's [`occ_words`]), oldest first: the range is at most two runs of slots, each
    /// walked by its set bits.
    #[inline]
    pub fn occupied_range(&self, lo: i64, hi: i64, occ: &[u64], mut each: impl FnMut(usize)) {
        let len = self.len;
        let first = lo.max(self.head.saturating_sub(len as i64 - 1));
        let last = hi.min(self.head);
        if self.head == i64::MIN || last < first || occ.len() == 1 && occ[0] == 0 {
            return;
        }
        let n = (last - first + 1) as usize;
        let start = self.idx(first);
        let a = n.min(len - start);
        bits_in(occ, start, start + a, &mut each);
        bits_in(occ, 0, n - a, &mut each);
    }
}

/// The bits of slots `lo .. hi` within word `j` (slots `64 j ..`), `lo < hi`.
#[inline(always)]
fn mask_in(j: usize, lo: usize, hi: usize) -> u64 {
    let from = lo.max(j * 64) - j * 64;
    let to = hi.min(j * 64 + 64) - j * 64;
    (u64::MAX >> (64 - (to - from))) << from
}

/// Calls `each` for the set bits of `m`, lowest first, as slots of word `j`.
#[inline]
fn each_bit(j: usize, mut m: u64, each: &mut impl FnMut(usize)) {
    while m != 0 {
        each(j * 64 + m.trailing_zeros() as usize);
        m &= m - 1;
    }
}

/// Calls `each` for the set bits of slots `lo .. hi` of `occ`, in slot order.
#[inline]
pub(crate) fn bits_in(occ: &[u64], lo: usize, hi: usize, each: &mut impl FnMut(usize)) {
    if lo < hi {
        let first = lo / 64;
        for (k, &o) in occ[first..=(hi - 1) / 64].iter().enumerate() {
            each_bit(first + k, o & mask_in(first + k, lo, hi), each);
        }
    }
}

/// [`bits_in`], clearing each bit it passes.
#[inline]
pub(crate) fn take_bits(occ: &mut [u64], lo: usize, hi: usize, each: &mut impl FnMut(usize)) {
    if lo < hi {
        let first = lo / 64;
        for (k, o) in occ[first..=(hi - 1) / 64].iter_mut().enumerate() {
            let m = *o & mask_in(first + k, lo, hi);
            *o &= !m;
            each_bit(first + k, m, each);
        }
    }
}
