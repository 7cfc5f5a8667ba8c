//! How late a caller waiting for the fast tier's deadline returns, by wait strategy, with
//! the machine idle and with every core kept busy by other runnable threads (another
//! caller deciding, a pool worker scoring): the reason `SystemClock::wait_precise` polls
//! with `spin_loop` and not `sched_yield` for its last stretch.
//!
//! Each iteration waits for a deadline 1 ms ahead on a signal nobody fires; criterion
//! reports the whole wait, and the bench prints the lateness past the deadline (p50, p99,
//! max) of every strategy. Peers, measured in the same run: a plain timed condition-variable
//! wait (`SystemClock::wait`, no margin) and the previous strategy (the last 200 µs polled
//! with `yield_now`), written out here.

use criterion::{BenchmarkId, Criterion};
use risk_core::{Clock, Histogram, Notify, SystemClock};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

const WAIT: u64 = 1_000_000;
const MARGIN: Duration = Duration::from_micros(200);

#[derive(Clone, Copy)]
enum Strategy {
    /// `SystemClock::wait_precise` with the default 200 µs margin (what the pool does).
    Spin,
    /// Sleep until 200 µs before, then `yield_now` until the deadline (the old policy).
    Yield,
    /// `SystemClock::wait`: a timed condvar wait to the deadline.
    Condvar,
}

fn wait_once(clock: &SystemClock, never: &Arc<Notify>, how: Strategy) -> u64 {
    let deadline = clock.now() + WAIT;
    let seen = never.seq();
    while clock.now() < deadline {
        match how {
            Strategy::Spin => clock.wait_precise(never, seen, deadline, MARGIN),
            Strategy::Condvar => clock.wait(never, seen, deadline),
            Strategy::Yield => {
                let left = deadline.saturating_sub(clock.now());
                if left > MARGIN.as_nanos() as u64 {
                    clock.wait(never, seen, deadline - MARGIN.as_nanos() as u64);
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
    clock.now() - deadline
}

/// Threads that keep every core busy until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `deadline_wait/{idle,busy}/{spin,yield,condvar}`.
pub fn wait(c: &mut Criterion) {
    let clock = SystemClock::new();
    let never = Notify::new();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut g = c.benchmark_group("deadline_wait");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    for (load, busy) in [("idle", 0), ("busy", cores)] {
        let _load = Load::start(busy);
        for (name, how) in [
            ("spin", Strategy::Spin),
            ("yield", Strategy::Yield),
            ("condvar", Strategy::Condvar),
        ] {
            let late = Histogram::new();
            g.bench_function(BenchmarkId::new(load, name), |b| {
                b.iter(|| late.record(wait_once(&clock, &never, how)))
            });
            let l = late.snapshot();
            println!(
                "deadline_wait/{load}/{name}: lateness past the deadline n={} p50={:.1}us p99={:.1}us max={:.1}us",
                l.count,
                l.p50_ns as f64 / 1e3,
                l.p99_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3
            );
        }
    }
    g.finish();
}
