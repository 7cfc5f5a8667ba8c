//! A key's sequences in its record ([`SeqAt`]): a ring of the last `N` events in
//! event-time order (ties in arrival order). An event in order is written at the ring's
//! end; a late one is inserted at its place (the newer rows move up one); when the ring is
//! full the oldest row leaves, or the new event does when it is older than every row held
//! (the sequence is the key's `N` latest events). The time of the latest event that left
//! is kept so that the first row's `dt` stays the gap to its real predecessor.

use super::layout::SeqAt;
use super::record::{Rec, NO_TIME};
use super::seq_plan::{SeqCol, SeqPlan};
use crate::seq::Sequence;
use crate::txn::Transaction;

const HELD: u64 = 0xFFFF_FFFF;

impl Rec<'_> {
    /// Events held, the ring's first slot, and the time of the latest event that left
    /// (`NO_TIME`: none).
    #[inline]
    fn seq_head(&self, q: &SeqAt) -> (usize, usize, i64) {
        let h = self.w[q.at];
        let prev = (self.w[q.at + 1] as i64) ^ NO_TIME;
        ((h & HELD) as usize, (h >> 32) as usize, prev)
    }

    #[inline]
    fn seq_set_head(&mut self, q: &SeqAt, held: usize, start: usize, prev: i64) {
        self.w[q.at] = held as u64 | (start as u64) << 32;
        self.w[q.at + 1] = (prev ^ NO_TIME) as u64;
    }

    /// First word of physical slot `j`.
    #[inline]
    fn seq_slot(q: &SeqAt, j: usize) -> usize {
        q.at + 2 + j * q.stride
    }

    /// Time of the event at logical row `i` (0: oldest).
    #[inline]
    fn seq_time(&self, q: &SeqAt, start: usize, i: usize) -> i64 {
        self.w[Self::seq_slot(q, (start + i) % q.rows)] as i64
    }

    /// Enters an event at `t` with its stored values; false when it was older than
    /// every event of a full ring (it is not among the key's `N` latest).
    pub fn seq_push(&mut self, q: &SeqAt, t: i64, vals: &[f32]) -> bool {
        let (mut held, mut start, mut prev) = self.seq_head(q);
        if held >= q.rows {
            let oldest = self.seq_time(q, start, 0);
            if t < oldest {
                self.seq_set_head(q, held, start, prev.max(t));
                return false;
            }
            prev = prev.max(oldest);
            start = (start + 1) % q.rows;
            held -= 1;
        }
        // In order (the common case): no row moves.
        let mut p = held;
        while p > 0 && self.seq_time(q, start, p - 1) > t {
            p -= 1;
        }
        for i in (p + 1..=held).rev() {
            let from = Self::seq_slot(q, (start + i - 1) % q.rows);
            let to = Self::seq_slot(q, (start + i) % q.rows);
            self.w.copy_within(from..from + q.stride, to);
        }
        let at = Self::seq_slot(q, (start + p) % q.rows);
        self.w[at] = t as u64;
        for (k, pair) in vals.chunks(2).enumerate() {
            let lo = pair[0].to_bits() as u64;
            let hi = pair.get(1).map_or(0, |v| v.to_bits() as u64);
            self.w[at + 1 + k] = lo | hi << 32;
        }
        self.seq_set_head(q, held + 1, start, prev);
        true
    }

    /// Reads the sequence as of the key's clock `clock` into `out` (its shape is `p`'s).
    pub fn seq_read(&self, q: &SeqAt, p: &SeqPlan, clock: i64, out: &mut Sequence) {
        let (held, start, prev) = self.seq_head(q);
        let held = held.min(q.rows);
        // The slots walked with a wrapping index and the predecessor's time carried
        // along: no division per row.
        let mut j = start;
        let mut before = prev;
        out.set(held, |_, row| {
            let at = Self::seq_slot(q, j);
            let t = self.w[at] as i64;
            let b = if before == NO_TIME { t } else { before };
            for (o, c) in row.iter_mut().zip(&p.cols) {
                let v = match *c {
                    SeqCol::Stored(k) => {
                        let w = self.w[at + 1 + k / 2];
                        f32::from_bits(if k.is_multiple_of(2) {
                            w as u32
                        } else {
                            (w >> 32) as u32
                        })
                    }
                    SeqCol::Dt => (t - b).max(0) as f32 / 1e3,
                    SeqCol::Age => (clock - t).max(0) as f32 / 1e3,
                };
                *o = if v.is_nan() { p.missing } else { v };
            }
            before = t;
            j = if j + 1 == q.rows { 0 } else { j + 1 };
        });
    }

    /// One decision's step on sequence `p` (both stores run it: the Redis store on its
    /// copy of the key's region): `txn` enters at `te` where it passes the filters (its
    /// stored values left in `vals`), before the read when the sequence includes the
    /// current transaction, after it otherwise; `out` gets the tensor as of `clock`.
    /// Returns whether `txn` entered.
    #[allow(clippy::too_many_arguments)]
    pub fn seq_step(
        &mut self,
        q: &SeqAt,
        p: &SeqPlan,
        te: i64,
        clock: i64,
        txn: &Transaction,
        vals: &mut [f32],
        out: &mut Sequence,
    ) -> bool {
        let add = p.passes(txn);
        let vals = &mut vals[..q.stored];
        if add {
            p.values(txn, vals);
        }
        if add && p.include {
            self.seq_push(q, te, vals);
        }
        self.seq_read(q, p, clock, out);
        if add && !p.include {
            self.seq_push(q, te, vals);
        }
        add
    }

    /// Whether the sequence's words are within its bounds and in time order (a
    /// snapshot's record, before it is restored).
    pub fn seq_valid(&self, q: &SeqAt) -> bool {
        let (held, start, _) = self.seq_head(q);
        if held > q.rows || start >= q.rows {
            return false;
        }
        (1..held).all(|i| self.seq_time(q, start, i - 1) <= self.seq_time(q, start, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record holding one sequence of 3 rows storing one value, at word 2.
    fn seq() -> (Vec<u64>, SeqAt) {
        let q = SeqAt {
            at: 2,
            rows: 3,
            stride: 2,
            stored: 1,
        };
        (vec![0; 2 + SeqAt::words(3, 1)], q)
    }

    fn times(w: &mut [u64], q: &SeqAt) -> Vec<i64> {
        let r = Rec { w, spill: None };
        let (held, start, _) = r.seq_head(q);
        (0..held).map(|i| r.seq_time(q, start, i)).collect()
    }

    #[test]
    fn late_events_take_their_place_and_old_ones_leave() {
        let (mut w, q) = seq();
        let push = |w: &mut Vec<u64>, t: i64| Rec { w, spill: None }.seq_push(&q, t, &[t as f32]);
        assert!(push(&mut w, 10));
        assert!(push(&mut w, 30));
        assert!(push(&mut w, 20));
        assert_eq!(times(&mut w, &q), vec![10, 20, 30]);
        // Full: a newer event pushes the oldest out; one older than all is not kept.
        assert!(push(&mut w, 25));
        assert_eq!(times(&mut w, &q), vec![20, 25, 30]);
        assert!(!push(&mut w, 15));
        assert_eq!(times(&mut w, &q), vec![20, 25, 30]);
        // A tie goes after the events of its time (arrival order).
        assert!(push(&mut w, 25));
        assert_eq!(times(&mut w, &q), vec![25, 25, 30]);
        let r = Rec {
            w: &mut w,
            spill: None,
        };
        // The latest event that left (20) is the first row's predecessor.
        assert_eq!(r.seq_head(&q).2, 20);
        assert!(r.seq_valid(&q));
    }

    #[test]
    fn a_record_out_of_bounds_or_order_is_invalid() {
        let (mut w, q) = seq();
        for t in [1, 2, 3] {
            Rec {
                w: &mut w,
                spill: None,
            }
            .seq_push(&q, t, &[0.0]);
        }
        let mut held = w.clone();
        held[q.at] = 4;
        assert!(!Rec {
            w: &mut held,
            spill: None
        }
        .seq_valid(&q));
        let mut start = w.clone();
        start[q.at] |= 3 << 32;
        assert!(!Rec {
            w: &mut start,
            spill: None
        }
        .seq_valid(&q));
        let mut order = w.clone();
        order[q.at + 2] = 9;
        assert!(!Rec {
            w: &mut order,
            spill: None
        }
        .seq_valid(&q));
        assert!(Rec {
            w: &mut w,
            spill: None
        }
        .seq_valid(&q));
    }
}
