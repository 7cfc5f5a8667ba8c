//! A worker pool that runs one task per worker and lets the caller wait at most until a
//! deadline.
//!
//! Each worker owns a reusable task slot. A caller claims an idle worker (one CAS), fills
//! the slot in place (no allocation for the fast tier: the transaction is copied into the
//! worker's buffer), wakes it and waits through the engine's [`Clock`] until the result or
//! the deadline. If the deadline wins, the caller marks the job abandoned and returns; the
//! worker discards the late result and frees itself; a job whose caller gave up before a
//! worker picked it up is not run at all (counted as skipped). A worker stuck in a stalled call stays
//! claimed, so when every worker is stuck new calls get [`PoolError::Saturated`] at once
//! instead of queueing past their deadline.

use crate::clock::{wait_for_precise, Clock, Nanos, Notify};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Work a pool worker runs. `run` must not unwind (catch panics inside).
pub(crate) trait Task: Default + Send + 'static {
    type Output: Send + 'static;
    fn run(&mut self) -> Self::Output;
}

/// Why the pool did not return a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolError {
    /// Every worker is busy.
    Saturated,
    /// The deadline passed first; the job was abandoned.
    Timeout,
}

struct Slot<T: Task> {
    task: T,
    has_job: bool,
    result: Option<T::Output>,
    abandoned: bool,
    shutdown: bool,
}

struct Worker<T: Task> {
    slot: Mutex<Slot<T>>,
    work_cv: Condvar,
    done: Arc<Notify>,
    busy: AtomicBool,
    pending: AtomicBool,
    ready: AtomicBool,
}

/// A fixed set of workers, each running at most one task at a time.
pub(crate) struct DeadlinePool<T: Task> {
    workers: Vec<Arc<Worker<T>>>,
    next: AtomicUsize,
    spin: Duration,
    /// The last stretch before a caller's deadline that it polls instead of sleeping
    /// ([`Clock::wait_precise`]).
    deadline_spin: Duration,
}

impl<T: Task> std::fmt::Debug for DeadlinePool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlinePool")
            .field("workers", &self.workers.len())
            .field("spin", &self.spin)
            .field("deadline_spin", &self.deadline_spin)
            .finish()
    }
}

impl<T: Task> DeadlinePool<T> {
    /// Starts `n` workers named `{name}-{i}`. `spin`: how long a worker polls for work and
    /// a caller for its result before parking; `deadline_spin`: how long before its
    /// deadline a waiting caller polls again. `late` counts discarded late results,
    /// `skipped` jobs never run because their caller had already given up.
    pub(crate) fn new(
        name: &str,
        n: usize,
        spin: Duration,
        deadline_spin: Duration,
        late: Arc<AtomicU64>,
        skipped: Arc<AtomicU64>,
    ) -> std::io::Result<Self> {
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let w = Arc::new(Worker {
                slot: Mutex::new(Slot {
                    task: T::default(),
                    has_job: false,
                    result: None,
                    abandoned: false,
                    shutdown: false,
                }),
                work_cv: Condvar::new(),
                done: Notify::new(),
                busy: AtomicBool::new(false),
                pending: AtomicBool::new(false),
                ready: AtomicBool::new(false),
            });
            let w2 = Arc::clone(&w);
            let (late2, skipped2) = (Arc::clone(&late), Arc::clone(&skipped));
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || worker_loop(&w2, spin, &late2, &skipped2))?;
            workers.push(w);
        }
        Ok(Self {
            workers,
            next: AtomicUsize::new(0),
            spin,
            deadline_spin,
        })
    }

    /// Number of workers currently claimed (running or stuck).
    pub(crate) fn busy(&self) -> usize {
        self.workers
            .iter()
            .filter(|w| w.busy.load(Ordering::Relaxed))
            .count()
    }

    /// Claims an idle worker, trying the most recently used one first: it is the one
    /// most likely still spinning (warm), and the others stay parked instead of
    /// competing for the cores.
    fn claim(&self) -> Option<(usize, &Arc<Worker<T>>)> {
        let n = self.workers.len();
        let start = self.next.load(Ordering::Relaxed);
        (0..n)
            .map(|k| ((start + k) % n, &self.workers[(start + k) % n]))
            .find(|(_, w)| {
                w.busy
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
    }

    /// Runs a task filled by `fill` on an idle worker and waits until `deadline`.
    pub(crate) fn run(
        &self,
        clock: &dyn Clock,
        deadline: Nanos,
        fill: impl FnOnce(&mut T),
    ) -> Result<T::Output, PoolError> {
        let (idx, w) = self.claim().ok_or(PoolError::Saturated)?;
        {
            let mut s = w.slot.lock();
            fill(&mut s.task);
            s.has_job = true;
            s.result = None;
            s.abandoned = false;
        }
        w.pending.store(true, Ordering::Release);
        w.work_cv.notify_one();

        if !self.spin.is_zero() {
            let start = Instant::now();
            while !w.ready.load(Ordering::Acquire)
                && start.elapsed() < self.spin
                && clock.now() < deadline
            {
                std::hint::spin_loop();
            }
        }
        wait_for_precise(clock, &w.done, deadline, self.deadline_spin, || {
            w.ready.load(Ordering::Acquire)
        });

        let mut s = w.slot.lock();
        if let Some(out) = s.result.take() {
            w.ready.store(false, Ordering::Relaxed);
            w.busy.store(false, Ordering::Release);
            self.next.store(idx, Ordering::Relaxed);
            return Ok(out);
        }
        s.abandoned = true;
        Err(PoolError::Timeout)
    }

    /// Asks every worker to exit once idle. Stuck workers exit when their call returns.
    pub(crate) fn shutdown(&self) {
        for w in &self.workers {
            w.slot.lock().shutdown = true;
            w.work_cv.notify_all();
        }
    }
}

impl<T: Task> Drop for DeadlinePool<T> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn worker_loop<T: Task>(w: &Worker<T>, spin: Duration, late: &AtomicU64, skipped: &AtomicU64) {
    loop {
        if !spin.is_zero() {
            let start = Instant::now();
            while !w.pending.load(Ordering::Acquire) && start.elapsed() < spin {
                std::hint::spin_loop();
            }
        }
        let mut task = {
            let mut s = w.slot.lock();
            while !s.has_job && !s.shutdown {
                w.work_cv.wait(&mut s);
            }
            if s.shutdown && !s.has_job {
                return;
            }
            s.has_job = false;
            w.pending.store(false, Ordering::Relaxed);
            if s.abandoned {
                // The caller's deadline passed before this worker started: the answer
                // could only be discarded, so the work is not done at all.
                s.abandoned = false;
                skipped.fetch_add(1, Ordering::Relaxed);
                w.busy.store(false, Ordering::Release);
                drop(s);
                w.done.notify();
                continue;
            }
            std::mem::take(&mut s.task)
        };
        let out = task.run();
        {
            let mut s = w.slot.lock();
            s.task = task;
            if s.abandoned {
                s.abandoned = false;
                late.fetch_add(1, Ordering::Relaxed);
                w.busy.store(false, Ordering::Release);
            } else {
                s.result = Some(out);
                w.ready.store(true, Ordering::Release);
            }
        }
        w.done.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::mpsc;

    /// A task that reports it started and then waits for a release message.
    #[derive(Default)]
    struct Gate {
        started: Option<mpsc::Sender<()>>,
        release: Option<Arc<Mutex<mpsc::Receiver<u32>>>>,
    }

    impl Task for Gate {
        type Output = u32;
        fn run(&mut self) -> u32 {
            if let Some(s) = self.started.take() {
                let _ = s.send(());
            }
            match self.release.take() {
                Some(r) => r.lock().recv().unwrap_or(0),
                None => 7,
            }
        }
    }

    #[test]
    fn returns_result_before_deadline() {
        let clock = ManualClock::new();
        let pool = DeadlinePool::<Gate>::new(
            "t",
            1,
            Duration::ZERO,
            Duration::ZERO,
            Default::default(),
            Default::default(),
        )
        .unwrap();
        assert_eq!(pool.run(&*clock, 100, |_| {}), Ok(7));
        assert_eq!(pool.busy(), 0);
    }

    #[test]
    fn stalled_task_times_out_and_saturates() {
        let clock = ManualClock::new();
        let late = Arc::new(AtomicU64::new(0));
        let pool = Arc::new(
            DeadlinePool::<Gate>::new(
                "t",
                1,
                Duration::ZERO,
                Duration::ZERO,
                Arc::clone(&late),
                Default::default(),
            )
            .unwrap(),
        );
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (p2, c2) = (Arc::clone(&pool), Arc::clone(&clock));
        let h = std::thread::spawn(move || {
            p2.run(&*c2, 1_000, |t| {
                t.started = Some(started_tx);
                t.release = Some(release_rx);
            })
        });
        started_rx.recv().unwrap();
        clock.advance(Duration::from_nanos(1_000));
        assert_eq!(h.join().unwrap(), Err(PoolError::Timeout));
        // The only worker is stuck: the next call is refused at once.
        assert_eq!(pool.run(&*clock, 5_000, |_| {}), Err(PoolError::Saturated));
        // When the stuck call returns, its late result is discarded and the worker freed.
        release_tx.send(1).unwrap();
        while pool.busy() != 0 {
            std::thread::yield_now();
        }
        assert_eq!(late.load(Ordering::Relaxed), 1);
        assert_eq!(pool.run(&*clock, 5_000, |_| {}), Ok(7));
    }

    /// A job whose caller gave up before any worker started it is skipped, not run.
    #[test]
    fn job_abandoned_before_it_starts_is_skipped() {
        let clock = ManualClock::new();
        let (late, skipped) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let pool = Arc::new(
            DeadlinePool::<Gate>::new(
                "t",
                1,
                Duration::ZERO,
                Duration::ZERO,
                Arc::clone(&late),
                Arc::clone(&skipped),
            )
            .unwrap(),
        );
        // The state a caller leaves when its deadline passed before the worker took the
        // job (claimed, filled, then marked abandoned), set under the slot lock so the
        // worker cannot take it half-way.
        let w = Arc::clone(&pool.workers[0]);
        let (started_tx, started_rx) = mpsc::channel();
        assert!(w
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok());
        {
            let mut s = w.slot.lock();
            s.task.started = Some(started_tx);
            s.has_job = true;
            s.abandoned = true;
        }
        w.pending.store(true, Ordering::Release);
        w.work_cv.notify_one();
        while pool.busy() != 0 {
            std::thread::yield_now();
        }
        assert!(started_rx.try_recv().is_err(), "the abandoned job ran");
        assert_eq!(skipped.load(Ordering::Relaxed), 1);
        assert_eq!(late.load(Ordering::Relaxed), 0);
        assert_eq!(pool.run(&*clock, 5_000, |_| {}), Ok(7));
        drop(w);
    }
}
