//! [`Ring`]: a fixed ring of time buckets, the storage every group's state is made of.

use serde::{Deserialize, Serialize};

/// A fixed ring of buckets; `head` is the newest bucket number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Ring<T> {
    pub(super) head: i64,
    pub(super) slots: Box<[T]>,
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
}
