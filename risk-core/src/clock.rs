//! Injectable time.
//!
//! Every time-dependent behaviour of the engine (the fast-tier deadline, the circuit
//! breaker's window and open period, the deep tier's budget and batching wait, drain on
//! shutdown) reads time from a [`Clock`] and waits through it. Production uses
//! [`SystemClock`]; tests use [`ManualClock`], whose time moves only when the test calls
//! [`ManualClock::advance`], so a "scorer that blocks for one second" is tested without
//! sleeping and with an exact outcome.

use parking_lot::{Condvar, Mutex};
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Monotonic time in nanoseconds since the clock's own origin.
pub type Nanos = u64;

/// Converts a duration to [`Nanos`], saturating.
#[inline]
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A wake-up signal that waiters block on through a [`Clock`].
///
/// `notify` bumps a sequence number; a waiter reads [`Notify::seq`], checks its condition,
/// and then waits until the sequence changes or its deadline passes. This closes the race
/// between "checked, found nothing" and "went to sleep".
#[derive(Default)]
pub struct Notify {
    seq: AtomicU64,
    lock: Mutex<()>,
    cv: Condvar,
}

impl fmt::Debug for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notify").field("seq", &self.seq()).finish()
    }
}

impl Notify {
    /// A new signal.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The current sequence number; pass it to [`Clock::wait`].
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Wakes every waiter.
    pub fn notify(&self) {
        let _g = self.lock.lock();
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.cv.notify_all();
    }

    /// Blocks until the sequence differs from `seen` or `timeout` (if any) elapses.
    fn wait_changed(&self, seen: u64, timeout: Option<Duration>) {
        let mut g = self.lock.lock();
        match timeout {
            None => {
                while self.seq() == seen {
                    self.cv.wait(&mut g);
                }
            }
            Some(t) => {
                let end = Instant::now() + t;
                while self.seq() == seen {
                    if self.cv.wait_until(&mut g, end).timed_out() {
                        break;
                    }
                }
            }
        }
    }
}

/// A source of monotonic time that can also block a thread until a deadline.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Current monotonic time.
    fn now(&self) -> Nanos;

    /// Blocks until `signal`'s sequence differs from `seen`, or until `now() >= deadline`,
    /// whichever comes first. May return early (spuriously); callers re-check their
    /// condition and the time in a loop. `deadline == Nanos::MAX` means no deadline.
    fn wait(&self, signal: &Arc<Notify>, seen: u64, deadline: Nanos);

    /// [`wait`](Self::wait) for a deadline that must be met within microseconds (the
    /// fast tier's): the last `spin` before `deadline` is spent polling `signal` on the
    /// CPU instead of asleep, so a late timer wake-up (or a halted vCPU's) is absorbed by
    /// the margin. With `spin` zero it must wait exactly as [`wait`](Self::wait) does; the
    /// default (and [`ManualClock`]) always does.
    fn wait_precise(&self, signal: &Arc<Notify>, seen: u64, deadline: Nanos, spin: Duration) {
        let _ = spin;
        self.wait(signal, seen, deadline);
    }

    /// Wall-clock time, milliseconds since the Unix epoch: the processing time that bounds
    /// how far in the future a transaction's event time may be (entity state). The
    /// default reads the system clock.
    fn unix_ms(&self) -> i64 {
        system_unix_ms()
    }

    /// [`unix_ms`](Self::unix_ms) at `now`, a time [`now`](Self::now) returned lately:
    /// lets a caller that has just read the monotonic clock skip a wall-clock read.
    /// The default reads [`unix_ms`](Self::unix_ms).
    fn unix_ms_at(&self, now: Nanos) -> i64 {
        let _ = now;
        self.unix_ms()
    }
}

/// The system's wall-clock time in ms since the Unix epoch (0 if the clock is before it).
pub fn system_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Waits on `signal` through `clock` until `ready()` is true or `deadline` passes.
/// Returns whether `ready()` became true.
pub fn wait_for(
    clock: &dyn Clock,
    signal: &Arc<Notify>,
    deadline: Nanos,
    ready: impl FnMut() -> bool,
) -> bool {
    // A zero margin is `Clock::wait` (the trait's contract).
    wait_for_precise(clock, signal, deadline, Duration::ZERO, ready)
}

/// [`wait_for`] through [`Clock::wait_precise`]: the last `spin` before `deadline` is
/// polled on the CPU.
pub fn wait_for_precise(
    clock: &dyn Clock,
    signal: &Arc<Notify>,
    deadline: Nanos,
    spin: Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    loop {
        let seen = signal.seq();
        if ready() {
            return true;
        }
        if clock.now() >= deadline {
            return false;
        }
        clock.wait_precise(signal, seen, deadline, spin);
    }
}

// ===== SystemClock =====

/// The real monotonic clock: the CPU's invariant time-stamp counter scaled to
/// nanoseconds (`quanta`), or the OS's monotonic clock where the CPU has no invariant
/// TSC; and a wall clock derived from it.
///
/// A decision reads the clock four times and the wall clock once. `std::time::Instant`
/// costs ~51 ns a read and `SystemTime::now` ~60 ns on the AMD EPYC of BENCHMARKS [18]
/// (a VM: the vDSO plus `Timespec` arithmetic), 264 ns a decision; a TSC read scaled by
/// `quanta` costs ~15 ns, and the wall clock at a monotonic time this clock has just
/// read ([`Clock::unix_ms_at`]) costs an addition.
#[derive(Debug, Clone)]
pub struct SystemClock {
    tsc: quanta::Clock,
    /// The raw counter at the origin.
    origin: u64,
    /// Wall-clock nanoseconds since the epoch minus [`Clock::now`], measured at the
    /// last anchoring.
    wall_offset_ns: Arc<AtomicI64>,
    /// When (in [`Clock::now`] time) the offset is measured again.
    anchor_until: Arc<AtomicU64>,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

/// How often [`SystemClock`] re-measures the wall clock's offset from its monotonic
/// time: a step of the wall clock (NTP, an operator) shows in
/// [`Clock::unix_ms_at`] within this long; the two clocks' rates differ by parts per
/// million, a fraction of a microsecond over it.
pub const WALL_ANCHOR_PERIOD: Duration = Duration::from_millis(100);

impl SystemClock {
    /// A clock whose origin is now. The first in a process calibrates the TSC against
    /// the OS clock (`quanta`: 0.5 to 200 ms, once).
    pub fn new() -> Self {
        let tsc = quanta::Clock::new();
        let origin = tsc.raw();
        let c = Self {
            tsc,
            origin,
            wall_offset_ns: Arc::new(AtomicI64::new(0)),
            anchor_until: Arc::new(AtomicU64::new(0)),
        };
        c.anchor();
        c
    }

    /// Measures the wall clock's offset from the monotonic time again.
    #[cold]
    fn anchor(&self) {
        let mono = self.now();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let mono_i = i64::try_from(mono).unwrap_or(i64::MAX);
        self.wall_offset_ns
            .store(wall.saturating_sub(mono_i), Ordering::Relaxed);
        self.anchor_until.store(
            mono.saturating_add(nanos(WALL_ANCHOR_PERIOD)),
            Ordering::Relaxed,
        );
    }
}

/// The fast tier's default [`Clock::wait_precise`] margin (`pool.deadline_spin_us`): the
/// caller sleeps on the condition variable until this much time is left, then polls on
/// the CPU. A timed condvar wake-up is late by the kernel's timer slack (~50-100 µs) and,
/// on a loaded machine, by scheduling; polling for the last 200 µs meets a deadline
/// within microseconds at p99 (BENCHMARKS [1]). The poll spins rather than calling
/// `sched_yield`: with every core busy a yielding thread hands the rest of its time slice
/// to another runnable thread and is late by milliseconds (BENCHMARKS [1],
/// `deadline_wait/busy`).
pub const SPIN_MARGIN: Duration = Duration::from_micros(200);

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.tsc.delta_as_nanos(self.origin, self.tsc.raw())
    }

    /// The wall clock at `now` from the offset measured at most
    /// [`WALL_ANCHOR_PERIOD`] ago (measured again first when older).
    #[inline]
    fn unix_ms_at(&self, now: Nanos) -> i64 {
        if now >= self.anchor_until.load(Ordering::Relaxed) {
            self.anchor();
        }
        let mono = i64::try_from(now).unwrap_or(i64::MAX);
        mono.saturating_add(self.wall_offset_ns.load(Ordering::Relaxed)) / 1_000_000
    }

    /// Sleeps on the condition variable until the signal or the deadline; no polling
    /// (background waits: batching, budgets, drain).
    fn wait(&self, signal: &Arc<Notify>, seen: u64, deadline: Nanos) {
        self.wait_precise(signal, seen, deadline, Duration::ZERO);
    }

    fn wait_precise(&self, signal: &Arc<Notify>, seen: u64, deadline: Nanos, spin: Duration) {
        if deadline == Nanos::MAX {
            signal.wait_changed(seen, None);
            return;
        }
        let now = self.now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        let margin = nanos(spin);
        if left > margin {
            signal.wait_changed(seen, Some(Duration::from_nanos(left - margin)));
            return;
        }
        while signal.seq() == seen && self.now() < deadline {
            std::hint::spin_loop();
        }
    }
}

// ===== ManualClock =====

/// A clock that moves only when told to: deterministic tests of deadlines and windows.
///
/// Threads waiting through this clock wake when the time they wait for is reached by
/// [`advance`](Self::advance) or [`set`](Self::set), or when their signal fires.
#[derive(Default)]
pub struct ManualClock {
    now: AtomicU64,
    /// Wall-clock time at `now == 0` (ms since the epoch); 0: the system's wall clock.
    unix_origin_ms: AtomicI64,
    /// Threads inside [`Clock::wait`] now.
    waiting: AtomicUsize,
    waiters: Mutex<Vec<Weak<Notify>>>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now.load(Ordering::SeqCst))
            .finish()
    }
}

impl ManualClock {
    /// A manual clock at time zero.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Moves time forward by `d` and wakes every waiter so it re-checks its deadline.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(nanos(d), Ordering::SeqCst);
        self.wake_all();
    }

    /// Threads blocked in [`Clock::wait`] on this clock right now: lets a test proceed
    /// once the threads it expects are waiting (an event, not a sleep).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Pins the wall clock: [`Clock::unix_ms`] is `origin_ms` plus the manual time.
    /// Until this is called it reads the system's wall clock.
    pub fn set_unix_origin_ms(&self, origin_ms: i64) {
        self.unix_origin_ms.store(origin_ms, Ordering::SeqCst);
    }

    /// Sets the time (it must not go backwards; a smaller value is ignored).
    pub fn set(&self, t: Nanos) {
        self.now.fetch_max(t, Ordering::SeqCst);
        self.wake_all();
    }

    fn wake_all(&self) {
        let mut w = self.waiters.lock();
        w.retain(|weak| match weak.upgrade() {
            Some(n) => {
                n.notify();
                true
            }
            None => false,
        });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }

    fn wait(&self, signal: &Arc<Notify>, seen: u64, deadline: Nanos) {
        {
            let mut w = self.waiters.lock();
            if !w.iter().any(|x| x.as_ptr() == Arc::as_ptr(signal)) {
                w.push(Arc::downgrade(signal));
            }
        }
        // Registered before re-checking the time: an advance() that happened before the
        // registration is visible here; one that happens after will notify us.
        if self.now() >= deadline {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        signal.wait_changed(seen, None);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    fn unix_ms(&self) -> i64 {
        match self.unix_origin_ms.load(Ordering::SeqCst) {
            0 => system_unix_ms(),
            o => o.saturating_add((self.now() / 1_000_000) as i64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_wakes_waiter_at_deadline() {
        let clock = ManualClock::new();
        let sig = Notify::new();
        let c2 = clock.clone();
        let s2 = sig.clone();
        let h = std::thread::spawn(move || wait_for(&*c2, &s2, 1_000, || false));
        // Advancing below the deadline does not release the waiter; reaching it does.
        clock.advance(Duration::from_nanos(500));
        clock.advance(Duration::from_nanos(500));
        assert!(!h.join().unwrap());
        assert_eq!(clock.now(), 1_000);
    }

    #[test]
    fn signal_releases_before_deadline() {
        let clock = ManualClock::new();
        let sig = Notify::new();
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c2, s2, f2) = (clock.clone(), sig.clone(), flag.clone());
        let h = std::thread::spawn(move || {
            wait_for(&*c2, &s2, Nanos::MAX, || f2.load(Ordering::SeqCst))
        });
        flag.store(true, Ordering::SeqCst);
        sig.notify();
        assert!(h.join().unwrap());
    }

    #[test]
    fn precise_wait_meets_the_deadline_and_still_wakes_on_the_signal() {
        let clock = SystemClock::new();
        // The whole wait inside the spin margin, and none of it: both end at the deadline.
        for spin in [Duration::from_millis(5), Duration::ZERO] {
            let sig = Notify::new();
            let d = clock.now() + 1_000_000;
            assert!(!wait_for_precise(&clock, &sig, d, spin, || false));
            assert!(clock.now() >= d);
        }
        // A signal during the polled margin releases the waiter before its deadline.
        let sig = Notify::new();
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s2, f2) = (sig.clone(), flag.clone());
        let h = std::thread::spawn(move || {
            let d = clock.now() + 10_000_000_000;
            wait_for_precise(&clock, &s2, d, Duration::from_secs(3600), || {
                f2.load(Ordering::SeqCst)
            })
        });
        flag.store(true, Ordering::SeqCst);
        sig.notify();
        assert!(h.join().unwrap());
    }

    #[test]
    fn system_wall_clock_at_a_monotonic_time_is_the_system_wall_clock() {
        let clock = SystemClock::new();
        // Within a millisecond: the anchored time is off by the gap between two reads
        // and the clocks' drift since the anchoring (well under a microsecond), which
        // can put it across a millisecond boundary from the system's.
        let within = |before: i64, at: i64, after: i64| before - 1 <= at && at <= after + 1;
        for _ in 0..3 {
            let before = system_unix_ms();
            let at = clock.unix_ms_at(clock.now());
            let after = system_unix_ms();
            assert!(within(before, at, after), "{before} <= {at} <= {after}");
        }
        // Past the anchor's period it is measured again (the wall clock may have been
        // stepped): a time read then still lands between the two reads.
        let late = clock.now() + nanos(WALL_ANCHOR_PERIOD);
        clock.anchor_until.store(0, Ordering::Relaxed);
        let before = system_unix_ms();
        let at = clock.unix_ms_at(clock.now());
        let after = system_unix_ms();
        assert!(within(before, at, after), "{before} <= {at} <= {after}");
        assert!(clock.anchor_until.load(Ordering::Relaxed) >= late);
    }

    #[test]
    fn system_clock_times_out() {
        let clock = SystemClock::new();
        let sig = Notify::new();
        let d = clock.now() + 1_000_000;
        assert!(!wait_for(&clock, &sig, d, || false));
        assert!(clock.now() >= d);
    }
}
