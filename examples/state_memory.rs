//! Entity state's memory: bytes per key for the synthetic feature set, and the resident
//! memory that one million cards (and 20,000 terminals) take, measured.
//!
//! ```text
//! cargo run --release --example state_memory            # 1,000,000 cards
//! cargo run --release --example state_memory -- 200000
//! cargo run --release --example state_memory -- 1000000 ten   # + card 24 h mean, max
//! ```

use risk_core::state::StateEngine;
use risk_core::synth::{schema, state_config};
use risk_core::{Channel, ManualClock, Transaction};

/// Resident set size in bytes (Linux `/proc/self/statm`).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Anonymous memory backed by transparent huge pages, bytes (Linux `smaps_rollup`).
fn huge() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let s = schema();
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    let mut cfg = state_config();
    if std::env::args().nth(2).as_deref() == Some("ten") {
        // The benches' ten features: a card 24 h mean and 24 h max more.
        use risk_core::state::{Agg, FeatureDef, KeySource};
        let day = std::time::Duration::from_secs(86_400);
        cfg.features
            .push(FeatureDef::new("hour", KeySource::Entity, Agg::Avg).window(day, 24));
        cfg.features
            .push(FeatureDef::new("card_age_days", KeySource::Entity, Agg::Max).window(day, 24));
    }
    cfg.max_keys = n as usize + 1;
    let st = StateEngine::new(cfg, s.clone(), clock)?;
    let t0 = 1_767_571_200_000i64;
    let mut txn = Transaction::builder(&s)
        .amount(25.0, "USD")
        .country("US")
        .channel(Channel::Ecom)
        .build()?;
    let before = rss();
    let start = std::time::Instant::now();
    for card in 1..=n {
        txn.id = risk_core::TxnId(card);
        txn.entity = risk_core::EntityKey(card);
        txn.timestamp_ms = t0 + card as i64 * 10;
        txn.merchant = risk_core::state::key_hash(&format!("T{:05}", card % 20_000));
        st.apply(&mut txn);
    }
    let took = start.elapsed();
    let after = rss();
    println!(
        "{} features over {} key sources",
        st.config().features.len(),
        st.memory().len()
    );
    for m in st.memory() {
        println!(
            "  {:<8} {:>8} keys  {:>5} bytes/key (computed)",
            m.source, m.keys, m.bytes_per_key
        );
    }
    println!(
        "{n} cards: resident memory +{:.1} MiB = {:.0} bytes per card (measured, all sources); {:.0} ns per update",
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) as f64 / n as f64,
        took.as_nanos() as f64 / n as f64
    );
    println!(
        "transparent huge pages: {:.1} MiB of anonymous memory",
        huge() as f64 / (1 << 20) as f64
    );
    Ok(())
}
