//! Entity state's memory: bytes per key for the synthetic feature set, and the resident
//! memory that one million cards (and 20,000 terminals) take, measured.
//!
//! ```text
//! cargo run --release --example state_memory            # 1,000,000 cards
//! cargo run --release --example state_memory -- 200000
//! cargo run --release --example state_memory -- 1000000 ten   # + card 24 h mean, max
//! cargo run --release --example state_memory -- 1000000 ten snapshot
//! ```
//!
//! With `snapshot`, also the time to write a snapshot of every key, to restore it into
//! the same definitions, and into definitions with a window changed (the windows both
//! define alike carried, the changed one empty).

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
    let flag = |f: &str| std::env::args().skip(2).any(|a| a == f);
    if flag("ten") {
        // The benches' ten features: a card 24 h mean and 24 h max more.
        use risk_core::state::{Agg, FeatureDef, KeySource};
        let day = std::time::Duration::from_secs(86_400);
        cfg.features
            .push(FeatureDef::new("hour", KeySource::Entity, Agg::Avg).window(day, 24));
        cfg.features
            .push(FeatureDef::new("card_age_days", KeySource::Entity, Agg::Max).window(day, 24));
    }
    cfg.max_keys = n as usize + 1;
    let st = StateEngine::new(cfg.clone(), s.clone(), clock.clone())?;
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
    if flag("snapshot") {
        drop(txn);
        snapshot_times(&st, cfg, &s, clock)?;
    }
    Ok(())
}

/// Writes a snapshot of `st`, restores it into the same definitions and into `cfg` with
/// a feature more, and prints the times.
fn snapshot_times(
    st: &StateEngine,
    cfg: risk_core::state::StateConfig,
    s: &std::sync::Arc<risk_core::FeatureSchema>,
    clock: std::sync::Arc<ManualClock>,
) -> Result<(), Box<dyn std::error::Error>> {
    use risk_core::state::{Agg, FeatureDef, KeySource};
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("risk-state-memory-{}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let path = dir.join("state.snap");
    let t = std::time::Instant::now();
    let info = st.snapshot(&path)?;
    let wrote = t.elapsed();
    println!(
        "snapshot: {} keys, {:.1} MiB, written in {:.2} s ({:.0} ns a key)",
        info.keys,
        info.bytes as f64 / (1 << 20) as f64,
        wrote.as_secs_f64(),
        wrote.as_nanos() as f64 / info.keys as f64
    );
    // The card's hour count made two hours (its field is in the schema already).
    let mut more = cfg.clone();
    for f in more
        .features
        .iter_mut()
        .filter(|f| f.name == "txn_count_1h")
    {
        *f = FeatureDef::new("txn_count_1h", KeySource::Entity, Agg::Count)
            .window(std::time::Duration::from_secs(7_200), 24);
    }
    for (what, c) in [("the same definitions", cfg), ("a window changed", more)] {
        let e = StateEngine::new(c, s.clone(), clock.clone())?;
        let t = std::time::Instant::now();
        let n = e.restore(&path)?;
        let took = t.elapsed();
        println!(
            "restore into {what}: {n} keys in {:.2} s ({:.0} ns a key)",
            took.as_secs_f64(),
            took.as_nanos() as f64 / n as f64
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
