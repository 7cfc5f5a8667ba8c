//! What carrying Redis keys across a change of definitions adds to a card's first
//! decision under the new definitions (`state.redis.carry_keys`): the script reads the
//! card's key of the old definitions and writes the new key with every alike window
//! copied in. Same run, three peers, each on cards of its own:
//! - `first_decision_carried`: the card's key of the old definitions holds one event;
//!   the new key is built from it, then decided on;
//! - `decision_on_its_key`: the same history already in a key of the new definitions
//!   (decided once before): what the carried decision costs without the carry;
//! - `first_decision_new_key` (`carry_keys = false`): the card starts empty.
//!
//! Old definitions: the ten features without the 24-hour max of `card_age_days`; the
//! deploy adds it. Needs `tools/servers.sh start redis` (`RISK_REDIS_URL`).

use crate::state::{evalsha_usec, far_clock, ten_features, warmup};
use criterion::{black_box, Criterion};
use risk_core::state::{RedisConfig, StateConfig, StateEngine};
use risk_core::synth::schema;
use risk_core::{EntityKey, Transaction};
use std::time::{Duration, Instant};

/// Cards prepared: a third for each peer, each decided once by its timed engine: 30,000
/// in alternated blocks, then ~30,000 a bench with `--warm-up-time 1 --measurement-time 2`.
const CARDS: u64 = 180_000;

/// The peers' names, in the order of their cards (card `i` goes to peer `i % 3`).
const PEERS: [&str; 3] = [
    "first_decision_carried",
    "decision_on_its_key",
    "first_decision_new_key",
];

fn config(url: &str, prefix: &str, carry_keys: bool, added: bool) -> StateConfig {
    let mut c = ten_features();
    if !added {
        c.features.pop();
    }
    c.redis = Some(RedisConfig {
        url: url.to_owned(),
        timeout: Duration::from_millis(200),
        prefix: prefix.to_owned(),
        carry_keys,
        ..RedisConfig::default()
    });
    c
}

/// `CARDS` transactions of distinct cards (the synthetic rows' fields, new card ids).
fn cards() -> Vec<Transaction> {
    let rows = warmup();
    (0..CARDS)
        .map(|i| {
            let mut t = rows[i as usize % rows.len()].clone();
            t.entity = EntityKey(0x5eed_0000_0000 + i);
            t
        })
        .collect()
}

/// What a carried key adds to a card's first decision after a deploy.
pub fn carry(c: &mut Criterion) {
    let url = std::env::var("RISK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let prefix = format!("risk-bench-carry-{}", std::process::id());
    let engine = |carry: bool, added: bool| {
        StateEngine::new(config(&url, &prefix, carry, added), schema(), far_clock())
            .unwrap_or_else(|e| panic!("Redis at {url}: {e} (tools/servers.sh start redis)"))
    };
    let txns = cards();
    // The old definitions see every card once (the keys to carry).
    let old = engine(true, false);
    for t in &txns {
        old.apply(&mut t.clone());
    }
    // The new definitions, carrying: they share their keys, each peer on its own cards.
    let carrying = engine(true, true);
    let empty = engine(false, true);
    // The second peer's cards: their new keys made once (carried), so that the timed
    // decision meets the history a carried key holds, already in place.
    for t in txns.iter().skip(1).step_by(3) {
        carrying.apply(&mut t.clone());
    }
    let peers = [&carrying, &carrying, &empty];
    let mut next = [0usize, 1, 2];
    let mut run = |k: usize, iters: u64| {
        let start = Instant::now();
        for _ in 0..iters {
            let i = next[k];
            assert!(
                i < txns.len(),
                "more iterations than prepared cards ({CARDS})"
            );
            next[k] += 3;
            black_box(peers[k].apply(&mut txns[i].clone()));
        }
        start.elapsed()
    };
    // The server's own time (`INFO commandstats`), without this process's wake-ups:
    // blocks of 1,000 decisions, the peers alternated, the median of 10 blocks each.
    let mut blocks = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..10 {
        for (k, b) in blocks.iter_mut().enumerate() {
            let before = evalsha_usec(&url);
            run(k, 1_000);
            let after = evalsha_usec(&url);
            b.push((after.1 - before.1) as f64 / (after.0 - before.0).max(1) as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let server: Vec<f64> = blocks.iter_mut().map(median).collect();
    let mut g = c.benchmark_group("state_redis_carry");
    g.sample_size(10);
    for (k, name) in PEERS.iter().enumerate() {
        g.bench_function(*name, |b| b.iter_custom(|iters| run(k, iters)));
    }
    g.finish();
    let (a, e) = (carrying.stats(), empty.stats());
    println!(
        "server time a decision, medians of alternated blocks: carried {:.1} us, on its key {:.1} us, new key {:.1} us; carried keys {} (carry_keys = false: {}); degraded {} / {}",
        server[0], server[1], server[2], a.store_keys_carried, e.store_keys_carried, a.degraded, e.degraded
    );
}
