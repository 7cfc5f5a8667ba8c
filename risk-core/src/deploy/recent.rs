//! A sample of recent live transactions for the validation gate.
//!
//! Every `every`-th decision (by a hash of the transaction id, so no shared counter) is
//! copied into a ring of `capacity` buffers under a `try_lock`: a decision that finds the
//! ring busy skips its turn instead of waiting. Once the ring is full a copy reuses a
//! buffer's allocation.

use crate::hash::splitmix_finalize;
use crate::txn::Transaction;
use parking_lot::Mutex;

pub(crate) struct Recent {
    ring: Mutex<(Vec<Transaction>, usize)>,
    capacity: usize,
    every: u64,
}

impl Recent {
    pub(crate) fn new(capacity: usize, every: u64) -> Self {
        Self {
            ring: Mutex::new((Vec::new(), 0)),
            capacity,
            every: every.max(1),
        }
    }

    /// Offers one decided transaction (caller's thread; never waits).
    #[inline]
    pub(crate) fn offer(&self, txn: &Transaction) {
        if self.capacity == 0 || !splitmix_finalize(txn.id.0 ^ 0x7ec3).is_multiple_of(self.every) {
            return;
        }
        self.store(txn);
    }

    #[cold]
    fn store(&self, txn: &Transaction) {
        let Some(mut g) = self.ring.try_lock() else {
            return;
        };
        let (ring, next) = &mut *g;
        if ring.len() < self.capacity {
            ring.push(txn.clone());
        } else {
            ring[*next].copy_from(txn);
        }
        *next = (*next + 1) % self.capacity;
    }

    /// Up to `n` of the most recent transactions.
    pub(crate) fn snapshot(&self, n: usize) -> Vec<Transaction> {
        let g = self.ring.lock();
        let (ring, next) = &*g;
        let len = ring.len();
        let take = n.min(len);
        // Newest first: walk back from the slot written last.
        (0..take)
            .map(|k| ring[(next + len - 1 - k) % len].clone())
            .collect()
    }
}
