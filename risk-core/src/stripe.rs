//! Per-thread stripes for what every decision adds to (counters, histograms, the
//! breaker's successes): each thread that records writes its own cache lines, summed
//! when read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How many stripes a [`Histogram`](crate::Histogram) (and the engine's decision
/// counters and breakers) keeps: the threads that record are spread over them in the
/// order they first record, so up to this many threads recording at once each write
/// their own cache lines.
pub(crate) const STRIPES: usize = 8;

/// The calling thread's stripe in `0..STRIPES`: threads take the next one, round robin,
/// the first time they ask.
///
/// Hand-written (no crate): a thread-local index is all it needs. On the 2-core AMD EPYC
/// of BENCHMARKS [18] the shared counters and histograms of every decision were the
/// engine's largest cost that grew with a second caller thread (cache lines moving
/// between cores on every decision).
#[inline]
pub(crate) fn stripe() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        let v = m.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Relaxed) % STRIPES;
        m.set(v);
        v
    })
}

/// One `T` per stripe ([`stripe`]): what a thread adds lands in its own.
#[derive(Debug)]
pub(crate) struct Striped<T>(Box<[T]>);

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Self((0..STRIPES).map(|_| T::default()).collect())
    }
}

impl<T> Striped<T> {
    /// The calling thread's.
    #[inline]
    pub(crate) fn mine(&self) -> &T {
        &self.0[stripe()]
    }

    /// Every stripe's, to be summed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }
}

/// A counter alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded(AtomicU64);

/// A counter added to on every decision, striped by thread.
pub(crate) type StripedCounter = Striped<Padded>;

impl Striped<Padded> {
    /// Adds `n` on the calling thread's stripe.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.mine().0.fetch_add(n, Relaxed);
    }

    /// The sum over the stripes.
    pub(crate) fn get(&self) -> u64 {
        self.iter().map(|p| p.0.load(Relaxed)).sum()
    }
}
