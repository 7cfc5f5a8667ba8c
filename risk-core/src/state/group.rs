//! The shape of a group: the time-bucket ring several features share, what one event
//! brings to it and what a read of it gives. The arithmetic lives in [`super::record`]
//! (in process) and `redis.lua` (Redis); a test-only reference implementation with one
//! allocation per ring checks the records bit for bit.
//!
//! Time is cut into buckets of `width` ms, numbered `floor(t / width)`. A window of
//! `B` buckets read at bucket `h` covers buckets `h-B ..= h`: the current, partial one
//! and `B` full ones, so between `W = B * width` and `W + width` of history. A label
//! window with a delay of `D` buckets covers `h-D-B ..= h-D`. Every store (in process,
//! Redis) keeps exactly this layout, so they agree on every stream.

/// What kind of state a group keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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

/// The compiled shape of a group (identical in every store). Its `Debug` text is part
/// of the definitions' fingerprint (snapshots, Redis key names): `max_events` shows only
/// when set, so groups without exact windows keep the fingerprints of earlier versions.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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
    /// Exact windows (`exact = true`): events kept per key at most, besides the ring
    /// (the fallback past the bound); 0: bucketed only.
    pub max_events: u32,
}

/// The columns of a stats bucket: a count only (4 bytes in process), count and sum
/// (12), count, min and max (12), or count, sum, sum of squares, min and max (28).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub(crate) enum Cols {
    Count,
    Sum,
    MinMax,
    Full,
}

impl Cols {
    /// The columns that hold both `self`'s and `other`'s.
    pub fn join(self, other: Cols) -> Cols {
        match (self, other) {
            (a, b) if a == b => a,
            (Cols::Count, x) | (x, Cols::Count) => x,
            _ => Cols::Full,
        }
    }
    /// The columns the Redis store keeps (min / max groups as full ones: the same
    /// count, min and max, two columns more).
    #[cfg(feature = "redis")]
    pub fn stored(self) -> Cols {
        match self {
            Cols::MinMax => Cols::Full,
            c => c,
        }
    }
}

impl std::fmt::Debug for GroupSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("GroupSpec");
        d.field("kind", &self.kind)
            .field("width_ms", &self.width_ms)
            .field("window_b", &self.window_b)
            .field("delay_b", &self.delay_b)
            .field("exact_limit", &self.exact_limit)
            .field("cols", &self.cols);
        if self.max_events > 0 {
            d.field("max_events", &self.max_events);
        }
        d.finish()
    }
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
    /// The bucket of time `t_ms` (the stores divide through [`super::layout::Divs`]).
    #[cfg(test)]
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
