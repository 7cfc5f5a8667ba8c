//! Replays synthetic transactions through the engine of `examples/risk.toml` and through
//! the same tiers called by hand (`hand_written`), alternating rounds in one process:
//! per-decision p50 / p99 on one thread and decisions per second on one and two threads.
//! The difference is what `Engine::decide` adds over its tiers' work (issue [18] part 5).
//!
//! `cargo run --release --example lean_replay -- [rows] [rounds]` (defaults 100,000 and 3).
//! Latencies are timed one decision at a time (`Instant` around each call, ~20–40 ns of
//! the figure is the clock itself, equally on both sides).

use risk_core::synth::{generate, SynthConfig};
use risk_core::Transaction;
use risk_examples::hand_written::{example_engine, HandWritten};
use std::hint::black_box;
use std::time::Instant;

fn percentiles(mut ns: Vec<u64>) -> (u64, u64) {
    ns.sort_unstable();
    (ns[ns.len() / 2], ns[ns.len() * 99 / 100])
}

/// Nanoseconds of each call of `f` over `rows`.
fn timed(rows: &[Transaction], f: impl Fn(&Transaction)) -> Vec<u64> {
    rows.iter()
        .map(|t| {
            let t0 = Instant::now();
            f(t);
            t0.elapsed().as_nanos() as u64
        })
        .collect()
}

/// Decisions per second with `threads` callers splitting `rows`.
fn throughput(rows: &[Transaction], threads: usize, f: &(impl Fn(&Transaction) + Sync)) -> f64 {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for part in rows.chunks(rows.len().div_ceil(threads)) {
            s.spawn(move || part.iter().for_each(f));
        }
    });
    rows.len() as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map_or(100_000, |a| a.parse().expect("rows: a number"));
    let rounds: usize = args
        .next()
        .map_or(3, |a| a.parse().expect("rounds: a number"));
    let engine = example_engine();
    let hand = HandWritten::new(&engine);
    let rows: Vec<Transaction> = generate(&SynthConfig::new(42, n))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    let mut differ = 0;
    for t in &rows {
        differ += usize::from(engine.decide(t).expect("decides").action != hand.decide(t).0);
    }
    assert_eq!(
        differ, 0,
        "the hand-written engine must decide as the engine does"
    );
    let explained = rows.iter().filter(|t| hand.decide(t).1 >= 0.3).count();
    println!(
        "{n} synthetic rows, {:.1}% scored >= 0.3 (TreeSHAP reasons computed); same actions on every row",
        100.0 * explained as f64 / n as f64
    );
    let e = |t: &Transaction| {
        black_box(engine.decide(black_box(t)).expect("decides"));
    };
    let h = |t: &Transaction| {
        black_box(hand.decide(black_box(t)));
    };
    println!("round  engine p50/p99 ns  hand p50/p99 ns  engine 1t/2t k/s  hand 1t/2t k/s");
    for r in 1..=rounds {
        let (ep50, ep99) = percentiles(timed(&rows, e));
        let (hp50, hp99) = percentiles(timed(&rows, h));
        let (e1, h1) = (throughput(&rows, 1, &e), throughput(&rows, 1, &h));
        let (e2, h2) = (throughput(&rows, 2, &e), throughput(&rows, 2, &h));
        println!(
            "{r:>5}  {ep50:>8} / {ep99:<8} {hp50:>6} / {hp99:<8} {:>7.0} / {:<7.0} {:>6.0} / {:<6.0}",
            e1 / 1e3,
            e2 / 1e3,
            h1 / 1e3,
            h2 / 1e3
        );
    }
}
