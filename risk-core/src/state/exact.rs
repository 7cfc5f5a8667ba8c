//! Exact windows (`exact = true` on a feature): besides its bucket ring, the group keeps
//! each key's events inside the window (time and value, in time order), so that count,
//! sum, avg, min, max, stddev, ratio, fraud_count and fraud_rate equal a sliding window
//! over the raw events. For an event at `t` the window is the events at `(t - W, t]`
//! (label windows: `(t - D - W, t - D]`) that arrived before it: pandas'
//! `rolling(W, closed="right")` over the events seen so far, sorted by time (ties in
//! arrival order), with `current = "include"` adding the event itself.
//!
//! Cost: the window that in-order reads ask for is a cursor over the events (`lo..hi`,
//! with its sum), moved forward as the key's time moves; each event enters and leaves it
//! once, so count, sum, avg, ratio, fraud_count and fraud_rate cost O(1) amortised
//! whatever the window's length (30 days costs what 1 hour costs). Min, max and stddev
//! scan the window's events (at most `max_events`; a running sum of squares would
//! drift, and a restored key would then read other bits than the live one). A read at a
//! time before the cursor's (an out-of-order event) binary-searches its window and
//! scans it.
//!
//! Bounds: at most `max_events` per key and group. Past it the oldest event is dropped,
//! and a read whose window may have held a dropped event falls back to the ring's
//! bucketed value (counted in [`StateStats::exact_fallback`](super::StateStats)). The
//! ring is kept only from a key's first dropped event on: until then it is neither
//! advanced nor written (a 30-day ring of hourly buckets costs an event nothing), and
//! the insert that drops the first event builds it from the log, label marks included.
//! Events older than every window still read (`W + D + max_lateness` behind the key's
//! clock) are pruned as events arrive; until the ring is kept, those of the oldest
//! bucket it can fold stay, so that the ring built then holds them.

use super::group::{GroupRead, GroupSpec};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// No time yet: the same value as `record::NO_TIME` (a unit test holds them equal;
/// imported from there it would make `record` and `exact` import each other).
pub(crate) const NO_TIME: i64 = i64::MIN;

/// Events one exact window may keep per key (`max_events`), at most.
pub const MAX_EVENTS: u32 = 65_536;

/// The span of an exact group's window: `(r - delay - span, r - delay]` for a read at `r`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Win {
    span: i64,
    delay: i64,
}

impl Win {
    /// The window of `spec` (`W = width * B`, `D = width * delay_b`).
    pub fn of(spec: &GroupSpec) -> Self {
        Self {
            span: spec.width_ms.saturating_mul(spec.window_b),
            delay: spec.width_ms.saturating_mul(spec.delay_b),
        }
    }

    /// `(start, end)`: the window `(start, end]` of a read at `r`.
    #[inline]
    fn bounds(self, r: i64) -> (i64, i64) {
        let e = r.saturating_sub(self.delay);
        (e.saturating_sub(self.span), e)
    }

    /// Events at or before this time (for a key whose clock is `clock`) are in no
    /// window a read can still ask for.
    pub fn keep_after(self, clock: i64, lateness_ms: i64) -> i64 {
        clock
            .saturating_sub(lateness_ms)
            .saturating_sub(self.delay)
            .saturating_sub(self.span)
    }
}

/// One key's events of one exact group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EventLog {
    /// `(time ms, value)` in time order, ties in arrival order. Label groups: the value
    /// is the transaction's fraud mark (0 or 1).
    ev: VecDeque<(i64, f64)>,
    /// The latest time of an event dropped for the bound ([`NO_TIME`]: none).
    dropped: i64,
    /// The cursor's read time ([`NO_TIME`]: none yet).
    at: i64,
    /// The cursor: events `lo..hi` are the window of a read at `at` (rebuilt on restore).
    #[serde(skip)]
    lo: usize,
    #[serde(skip)]
    hi: usize,
    #[serde(skip)]
    sum: f64,
}

impl Default for EventLog {
    fn default() -> Self {
        Self {
            ev: VecDeque::new(),
            dropped: NO_TIME,
            at: NO_TIME,
            lo: 0,
            hi: 0,
            sum: 0.0,
        }
    }
}

impl EventLog {
    #[inline]
    fn enter(&mut self, v: f64) {
        self.sum += v;
    }

    #[inline]
    fn leave(&mut self, v: f64) {
        self.sum -= v;
        if self.lo == self.hi {
            // An empty window restarts its total exactly (no drift carried on).
            self.sum = 0.0;
        }
    }

    /// Moves the cursor forward to a read at `r` (`r >= at`).
    #[inline]
    fn advance(&mut self, win: Win, r: i64) {
        self.at = r;
        let (s, e) = win.bounds(r);
        while let Some(&(t, v)) = self.ev.get(self.hi) {
            if t > e {
                break;
            }
            self.hi += 1;
            self.enter(v);
        }
        while self.lo < self.hi && self.ev[self.lo].0 <= s {
            let v = self.ev[self.lo].1;
            self.lo += 1;
            self.leave(v);
        }
    }

    /// Reads the window of a read at `r` into `out` (`scan`: sum, sum of squares, min
    /// and max folded from the events, for min / max / stddev; `label`: as transactions
    /// and frauds). False, `out` untouched, when an event dropped for the bound may have
    /// been inside it.
    pub fn read(&mut self, win: Win, r: i64, scan: bool, label: bool, out: &mut GroupRead) -> bool {
        let (s, e) = win.bounds(r);
        if self.dropped != NO_TIME && self.dropped > s {
            return false;
        }
        let in_order = r >= self.at;
        let (a, b) = if in_order {
            self.advance(win, r);
            (self.lo, self.hi)
        } else {
            (
                self.ev.partition_point(|x| x.0 <= s),
                self.ev.partition_point(|x| x.0 <= e),
            )
        };
        let n = (b - a) as f64;
        if in_order && !scan {
            (out.n, out.sum) = (n, self.sum);
        } else {
            let init = (0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY);
            let (sum, sumsq, mn, mx) = self.ev.range(a..b).fold(init, |(s, q, mn, mx), &(_, v)| {
                (s + v, q + v * v, mn.min(v), mx.max(v))
            });
            (out.n, out.sum, out.sumsq) = (n, sum, sumsq);
            (out.min, out.max) = if b > a {
                (mn, mx)
            } else {
                (f64::NAN, f64::NAN)
            };
        }
        if label {
            (out.txns, out.frauds) = (out.n, out.sum);
            (out.n, out.sum) = (0.0, 0.0);
        }
        true
    }

    /// Removes the oldest event, keeping the cursor; returns its time.
    fn pop_front(&mut self) -> Option<i64> {
        let (t, v) = self.ev.pop_front()?;
        if self.lo > 0 {
            self.lo -= 1;
            self.hi -= 1;
        } else if self.hi > 0 {
            self.hi -= 1;
            self.leave(v);
        }
        Some(t)
    }

    /// Enters an event at `t` worth `v`, first pruning events at or before `keep` (in no
    /// window a read can reach) and dropping the oldest when `max` are held; returns
    /// the event dropped for the bound, if one was.
    pub fn insert(
        &mut self,
        win: Win,
        t: i64,
        v: f64,
        max: usize,
        keep: i64,
    ) -> Option<(i64, f64)> {
        while self.ev.front().is_some_and(|x| x.0 <= keep) {
            self.pop_front();
        }
        let mut left = None;
        if self.ev.len() >= max.max(1) {
            left = self.ev.front().copied();
            if let Some(t0) = self.pop_front() {
                self.dropped = self.dropped.max(t0);
            }
        }
        // In order (the common case) is a push: a binary search would walk a cold
        // log line by line (~10 cache misses on a 1,000-event log).
        if self.ev.back().is_none_or(|x| x.0 <= t) {
            self.ev.push_back((t, v));
        } else {
            let p = self.ev.partition_point(|x| x.0 <= t);
            self.ev.insert(p, (t, v));
        }
        // Where the event falls against the cursor's window (before it, inside, after).
        let (s, e) = win.bounds(self.at);
        if self.at == NO_TIME || t > e {
            return left;
        }
        if t <= s {
            self.lo += 1;
            self.hi += 1;
        } else {
            self.hi += 1;
            self.enter(v);
        }
        left
    }

    /// Whether an event was ever dropped for the bound: from then on some reads fall
    /// back to the group's ring, which is kept only from that event on.
    #[inline]
    pub fn overflowed(&self) -> bool {
        self.dropped != NO_TIME
    }

    /// The events held, `(time ms, value)` in time order.
    pub fn events(&self) -> impl Iterator<Item = (i64, f64)> + '_ {
        self.ev.iter().copied()
    }

    /// A label for the transaction at `t`: `delta` +1 marks one of its events
    /// fraudulent, -1 clears one. False when no event at `t` can take it.
    pub fn label(&mut self, t: i64, delta: i32) -> bool {
        let a = self.ev.partition_point(|x| x.0 < t);
        let b = self.ev.partition_point(|x| x.0 <= t);
        let marked = delta < 0;
        let Some(i) = (a..b).find(|&i| (self.ev[i].1 > 0.0) == marked) else {
            return false;
        };
        let (old, new) = (self.ev[i].1, if marked { 0.0 } else { 1.0 });
        self.ev[i].1 = new;
        if (self.lo..self.hi).contains(&i) {
            self.sum += new - old;
        }
        true
    }

    /// Recomputes the cursor (after a restore: it is not written to snapshots).
    pub fn rebuild(&mut self, win: Win) {
        let at = self.at;
        (self.lo, self.hi, self.sum) = (0, 0, 0.0);
        if at != NO_TIME {
            self.advance(win, at);
        }
    }

    /// Whether a restored log is well formed: within `max`, in time order, finite.
    pub fn valid(&self, max: u32) -> bool {
        self.ev.len() <= max as usize
            && self.ev.iter().all(|x| x.1.is_finite())
            && self
                .ev
                .iter()
                .zip(self.ev.iter().skip(1))
                .all(|(a, b)| a.0 <= b.0)
    }

    /// Events held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ev.len()
    }
}

/// Where an exact group's log is in its key's spill: `li` of `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogAt {
    pub li: usize,
    pub n: usize,
}

#[cfg(test)]
#[path = "exact_tests.rs"]
mod tests;
