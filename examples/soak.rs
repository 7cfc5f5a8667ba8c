//! Soak and overload runs for RELIABILITY.md (issue [7]).
//!
//! `cargo run --release --example soak -- soak SECONDS` decides synthetic transactions on
//! several threads for SECONDS against the default rule set, a fast tier that injects a
//! fault into a known share of its calls (stall past the deadline, panic, NaN, error) and a
//! deep tier that injects faults into its batches, and reports: every call answered,
//! lateness past the deadline (p99.9 and max), RSS sampled after warm-up, and the engine's
//! fallback counters against the faults the scorers injected. `-- soak SECONDS THREADS
//! SPIN_US` sets the caller threads and `pool.deadline_spin` (default 2 and 200 µs).
//!
//! Beside the callers, a probe thread makes the same wait as a timed-out caller
//! ([`Clock::wait_precise`] for the deadline, same margin) on a signal nobody fires, with no
//! engine involved: its lateness is this machine's wake-up floor at that moment, measured
//! in the same run, against which the engine's lateness is read.
//!
//! `cargo run --release --example soak -- overload SECONDS` measures the deep tier's
//! capacity, then offers gray-zone work at twice that rate: the decide path's p99 against
//! a run with the deep tier idle, the gray zone shedding with counts, nothing blocking.
//!
//! Real clock throughout (this is a measurement, not a test).

use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{
    CircuitConfig, Clock, DeepConfig, Engine, FallbackCause, Histogram, Latency, LatencySummary,
    Notify, PoolConfig, Score, ScoreError, Scorer, ScorerInfo, Shutdown, SystemClock, Transaction,
};
use risk_rules::{RuleScorer, RuleSet, DEFAULT_RULES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_millis(15);
/// Caller threads unless the third argument says otherwise: one per core here (2 vCPUs).
/// `-- soak 600 1` leaves a core free for the wake-ups of a caller whose deadline passed.
const THREADS: usize = 2;

/// What a call does, by a hash of (transaction id, call number): reproducible shares.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    None,
    Stall,
    Panic,
    Nan,
    Error,
}

fn fault(id: u64, salt: u64, per_mille: u64) -> Fault {
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    match x % 1000 {
        v if v < per_mille => Fault::Stall,
        v if v < 2 * per_mille => Fault::Panic,
        v if v < 3 * per_mille => Fault::Nan,
        v if v < 4 * per_mille => Fault::Error,
        _ => Fault::None,
    }
}

/// A scorer that injects faults and counts what it injected.
struct Faulty {
    latency: Latency,
    per_mille: u64,
    stall: Duration,
    salt: AtomicU64,
    injected: [AtomicU64; 5],
}

impl Faulty {
    fn new(latency: Latency, per_mille: u64, stall: Duration) -> Arc<Self> {
        Arc::new(Self {
            latency,
            per_mille,
            stall,
            salt: AtomicU64::new(1),
            injected: Default::default(),
        })
    }
    fn act(&self, id: u64) -> Result<Score, ScoreError> {
        let salt = self.salt.fetch_add(1, Relaxed);
        let f = fault(id, salt, self.per_mille);
        self.injected[f as usize].fetch_add(1, Relaxed);
        match f {
            Fault::None => Ok(Score::new(((id % 97) as f32 / 97.0).clamp(0.01, 0.99))),
            Fault::Stall => {
                std::thread::sleep(self.stall);
                Ok(Score::new(0.5))
            }
            Fault::Panic => panic!("injected panic"),
            Fault::Nan => Ok(Score::new(f32::NAN)),
            Fault::Error => Err(ScoreError::Failed("injected error".into())),
        }
    }
    fn count(&self, f: Fault) -> u64 {
        self.injected[f as usize].load(Relaxed)
    }
}

impl Scorer for Faulty {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("faulty", "1", self.latency)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        self.act(t.id.0)
    }
    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        let s = self.act(txns[0].id.0)?;
        out.extend(txns.iter().map(|_| s));
        Ok(())
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

fn engine(fast: Arc<Faulty>, deep: Arc<Faulty>, queue: usize, deadline_spin: Duration) -> Engine {
    let s = schema();
    let set = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).expect("default rules");
    Engine::builder(s.clone())
        .rules(Arc::new(RuleScorer::new(set, s)))
        .fast(fast)
        .fast_deadline(DEADLINE)
        .deep(deep)
        .gray_queue_capacity(queue)
        .deep_config(DeepConfig {
            budget: Duration::from_millis(200),
            max_batch: 8,
            max_wait: Duration::from_millis(2),
            workers: 1,
            global_prior: 0.5,
            subscriber_capacity: 16,
        })
        // Breakers that do not open: every injected fault then maps to one fallback.
        .circuit(CircuitConfig {
            min_calls: u32::MAX,
            ..Default::default()
        })
        .pool_config(PoolConfig {
            fast_workers: 32,
            deadline_spin,
            ..Default::default()
        })
        .build()
        .expect("engine")
}

/// Runs `threads` deciding loops for `secs`; returns (decisions, errors, latency ns of
/// every decision, lateness past the deadline of timed-out ones).
fn drive(
    e: &Engine,
    txns: &Arc<Vec<Transaction>>,
    threads: usize,
    secs: u64,
) -> (u64, u64, LatencySummary, LatencySummary) {
    let stop = Arc::new(AtomicBool::new(false));
    let (total, late) = (Arc::new(Histogram::new()), Arc::new(Histogram::new()));
    let (n, errs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let hs: Vec<_> = (0..threads)
        .map(|k| {
            let (e, txns, stop) = (e.clone(), Arc::clone(txns), Arc::clone(&stop));
            let (total, late, n, errs) = (total.clone(), late.clone(), n.clone(), errs.clone());
            std::thread::spawn(move || {
                let mut i = k;
                while !stop.load(Relaxed) {
                    let t = &txns[i % txns.len()];
                    i += threads;
                    let t0 = Instant::now();
                    let d = e.decide(t);
                    let ns = t0.elapsed().as_nanos() as u64;
                    total.record(ns);
                    n.fetch_add(1, Relaxed);
                    match d {
                        Ok(d) if d.fallback == Some(FallbackCause::Timeout) => {
                            late.record(ns.saturating_sub(DEADLINE.as_nanos() as u64))
                        }
                        Ok(_) => {}
                        Err(_) => {
                            errs.fetch_add(1, Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Relaxed);
    hs.into_iter()
        .for_each(|h| h.join().expect("driver thread"));
    (
        n.load(Relaxed),
        errs.load(Relaxed),
        total.snapshot(),
        late.snapshot(),
    )
}

fn transactions(n: usize) -> Arc<Vec<Transaction>> {
    let mut v: Vec<Transaction> = generate(&SynthConfig::new(7, n))
        .into_iter()
        .map(|l| l.txn)
        .collect();
    // Unique ids, so the injected faults are independent of the replay position.
    for (i, t) in v.iter_mut().enumerate() {
        t.id = risk_core::TxnId(i as u64 + 1);
    }
    Arc::new(v)
}

/// Waits for the deadline over and over as a timed-out caller does, with no engine: the
/// machine's own lateness for that wait while the soak runs.
fn probe(stop: Arc<AtomicBool>, spin: Duration) -> LatencySummary {
    let clock = SystemClock::new();
    let never = Notify::new();
    let h = Histogram::new();
    while !stop.load(Relaxed) {
        let deadline = clock.now() + DEADLINE.as_nanos() as u64;
        let seen = never.seq();
        while clock.now() < deadline {
            clock.wait_precise(&never, seen, deadline, spin);
        }
        h.record(clock.now() - deadline);
    }
    h.snapshot()
}

/// `p50 … ms p99 … ms p99.9 … ms max … ms`.
fn quantiles(l: &LatencySummary) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    format!(
        "p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms max {:.3} ms",
        ms(l.p50_ns),
        ms(l.p99_ns),
        ms(l.p999_ns),
        ms(l.max_ns)
    )
}

fn soak(secs: u64) {
    let arg = |i: usize| std::env::args().nth(i).and_then(|s| s.parse::<u64>().ok());
    let threads = arg(3).map_or(THREADS, |t| t as usize);
    let spin = arg(4).map_or(PoolConfig::default().deadline_spin, Duration::from_micros);
    let fast = Faulty::new(Latency::Unbounded, 5, DEADLINE * 3);
    let deep = Faulty::new(Latency::Unbounded, 20, Duration::from_millis(400));
    let e = engine(fast.clone(), deep.clone(), 256, spin);
    let txns = transactions(50_000);
    std::panic::set_hook(Box::new(|_| {})); // injected panics are caught; keep stderr readable
    let warm = secs.min(60) / 4;
    let _ = drive(&e, &txns, THREADS, warm);
    let rss0 = rss_kib();
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let ss = Arc::clone(&sampler_stop);
    let sampler = std::thread::spawn(move || {
        let mut v = Vec::new();
        while !ss.load(Relaxed) {
            v.push(rss_kib());
            std::thread::sleep(Duration::from_secs(5));
        }
        v
    });
    let ps = Arc::clone(&sampler_stop);
    let prober = std::thread::spawn(move || probe(ps, spin));
    let (n, errs, total, late) = drive(&e, &txns, threads, secs);
    sampler_stop.store(true, Relaxed);
    let rss = sampler.join().expect("sampler");
    let floor = prober.join().expect("probe");
    let m = e.metrics();
    let (t, l) = (total, late);
    println!(
        "soak: {secs} s after {warm} s warm-up, {threads} caller threads, deadline {DEADLINE:?}, deadline spin {spin:?}"
    );
    println!(
        "  decisions {n} (+ warm-up), errors {errs}, answered 100%: {}",
        errs == 0
    );
    println!("  decide latency {}", quantiles(&t));
    println!(
        "  timed-out calls: {} ; lateness past the deadline {}",
        l.count,
        quantiles(&l)
    );
    println!(
        "  probe (the same wait, no engine, same run): {} waits ; lateness {}",
        floor.count,
        quantiles(&floor)
    );
    println!(
        "  engine lateness over the probe's: p50 {:+.3} ms p99 {:+.3} ms p99.9 {:+.3} ms",
        (l.p50_ns as f64 - floor.p50_ns as f64) / 1e6,
        (l.p99_ns as f64 - floor.p99_ns as f64) / 1e6,
        (l.p999_ns as f64 - floor.p999_ns as f64) / 1e6
    );
    let (lo, hi) = (
        rss.iter().copied().min().unwrap_or(0),
        rss.iter().copied().max().unwrap_or(0),
    );
    println!(
        "  RSS after warm-up {rss0} KiB; sampled every 5 s: min {lo} max {hi} KiB, first {} last {} ({} samples)",
        rss.first().unwrap_or(&0),
        rss.last().unwrap_or(&0),
        rss.len()
    );
    let per_minute: Vec<String> = rss.iter().step_by(12).map(|k| k.to_string()).collect();
    println!("  RSS each minute (KiB): {}", per_minute.join(" "));
    let f = |c| m.fallback(c);
    println!("  fast tier, injected vs engine fallbacks (warm-up included in both):");
    println!(
        "    panic   {:>8} vs {:>8}",
        fast.count(Fault::Panic),
        f(FallbackCause::Panic)
    );
    println!(
        "    error   {:>8} vs {:>8}",
        fast.count(Fault::Error),
        f(FallbackCause::Error)
    );
    println!(
        "    nan     {:>8} vs {:>8}",
        fast.count(Fault::Nan),
        f(FallbackCause::InvalidScore)
    );
    println!(
        "    stall   {:>8} vs {:>8} timeouts ({} of them late on the machine, not injected)",
        fast.count(Fault::Stall),
        f(FallbackCause::Timeout),
        f(FallbackCause::Timeout) as i64 - fast.count(Fault::Stall) as i64
    );
    println!(
        "    saturated {} circuit_open {} skipped {}",
        f(FallbackCause::Saturated),
        f(FallbackCause::CircuitOpen),
        m.fast_skipped
    );
    let g = m.gray;
    println!(
        "  deep tier: batches {} ; injected stall {} panic {} nan {} error {} ; verdicts completed {} timed_out {} failed {} saturated {} ; enqueued {} shed {}",
        g.batches,
        deep.count(Fault::Stall),
        deep.count(Fault::Panic),
        deep.count(Fault::Nan),
        deep.count(Fault::Error),
        g.completed,
        g.timed_out,
        g.failed,
        g.saturated,
        g.enqueued,
        g.shed
    );
    let r = e.shutdown(Shutdown::Drain {
        timeout: Duration::from_secs(2),
    });
    println!(
        "  shutdown: drained {} abandoned {}",
        r.drained, r.abandoned
    );
}

fn overload(secs: u64) {
    // A healthy but slow deep tier: 8 items per 20 ms batch = 400 verdicts/s at most.
    struct Slow;
    impl Scorer for Slow {
        fn info(&self) -> ScorerInfo {
            ScorerInfo::new("slow-deep", "1", Latency::Unbounded)
        }
        fn score(&self, _t: &Transaction) -> Result<Score, ScoreError> {
            Ok(Score::new(0.5))
        }
        fn score_batch(&self, t: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
            std::thread::sleep(Duration::from_millis(20));
            out.clear();
            out.extend(t.iter().map(|_| Score::new(0.5)));
            Ok(())
        }
    }
    let txns = transactions(50_000);
    let run = |rate: Option<f64>| {
        let fast = Faulty::new(Latency::Bounded, 0, Duration::ZERO);
        let s = schema();
        let set = RuleSet::compile(DEFAULT_RULES, "default.rules", &s).expect("rules");
        let e = Engine::builder(s.clone())
            .rules(Arc::new(RuleScorer::new(set, s)))
            .fast(fast)
            .deep(Arc::new(Slow))
            .gray_queue_capacity(64)
            .gray_band(0.0, 1.0) // every decision offers gray-zone work
            .build()
            .expect("engine");
        let total = Histogram::new();
        let start = Instant::now();
        let mut i = 0usize;
        while start.elapsed() < Duration::from_secs(secs) {
            if let Some(r) = rate {
                // Open loop at `r` decisions/s.
                let due = start + Duration::from_secs_f64(i as f64 / r);
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            let t0 = Instant::now();
            let _ = e.decide(&txns[i % txns.len()]).expect("decide");
            total.record(t0.elapsed().as_nanos() as u64);
            i += 1;
        }
        let m = e.metrics();
        e.shutdown(Shutdown::Abandon);
        (i, start.elapsed(), total.snapshot(), m.gray)
    };
    // Capacity of the deep tier: offer far more than it can take and count verdicts/s.
    let (_, took, _, g) = run(None);
    let capacity = (g.completed + g.timed_out) as f64 / took.as_secs_f64();
    let (n0, t0, base, g0) = run(Some(capacity * 0.5));
    let (n2, t2, over, g2) = run(Some(capacity * 2.0));
    println!("overload: deep tier capacity {capacity:.0} verdicts/s (measured, {secs} s)");
    for (name, n, t, l, g) in [("0.5x", n0, t0, base, g0), ("2x", n2, t2, over, g2)] {
        println!(
            "  offered {name}: {n} decisions in {:.1} s ; decide p50 {:.1} us p99 {:.1} us p99.9 {:.1} us max {:.1} us ; gray enqueued {} shed {} completed {} timed_out {}",
            t.as_secs_f64(),
            l.p50_ns as f64 / 1e3,
            l.p99_ns as f64 / 1e3,
            l.p999_ns as f64 / 1e3,
            l.max_ns as f64 / 1e3,
            g.enqueued,
            g.shed,
            g.completed,
            g.timed_out
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    match args.first().map(String::as_str) {
        Some("soak") => soak(secs),
        Some("overload") => overload(secs),
        _ => eprintln!(
            "usage: soak (soak SECONDS [CALLER_THREADS [DEADLINE_SPIN_US]] | overload SECONDS)"
        ),
    }
}
