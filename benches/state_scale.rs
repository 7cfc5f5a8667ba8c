//! Entity state at fleet scale: the state stage for the ten features of
//! [`crate::state::ten_features`] over card + terminal keys with 50 cards (everything in
//! cache) and with 1,000,000 cards (each decision on a random one of them: the working
//! set far beyond the caches), and two-thread `decide` throughput with state on over
//! 50,000 cards against the same engine with state off, same run.
//!
//! Rows are synthetic raw transactions with their card replaced by a card drawn from the
//! population (SplitMix64 of a counter, so the sequence is the same in every run) and
//! times moving forward so that each card makes two transactions a day on average (as
//! a processor's active cards do); terminals are the data's.

use crate::state::ten_features;
use criterion::{black_box, Criterion, Throughput};
use risk_core::hash::splitmix;
use risk_core::state::StateEngine;
use risk_core::synth::{generate_raw, schema, SynthConfig};
use risk_core::{Engine, EntityKey, ManualClock, Transaction};
use std::sync::Arc;

fn far_clock() -> Arc<ManualClock> {
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    clock
}

/// `n` rows: 256 for the stage alone (a transaction is in cache when it is decided, as
/// in a service; with 8,192 rows a third of the 50-card stage was the first read of the
/// row's features); 16,384 for throughput (their ~9,000 terminals: two threads rarely
/// update one terminal at once, as in a processor's traffic).
fn templates(n: usize) -> Vec<Transaction> {
    generate_raw(&SynthConfig::new(7, n))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

/// Rows over `cards` cards: the templates' fields, a card drawn per row, one second
/// apart; `next` continues the sequence.
struct Stream {
    tpl: Vec<Transaction>,
    cards: u64,
    i: u64,
    t: i64,
}

impl Stream {
    fn new(cards: u64, rows: usize) -> Self {
        Self {
            tpl: templates(rows),
            cards,
            i: 0,
            t: 1_767_571_200_000,
        }
    }
    #[inline]
    fn next(&mut self) -> &mut Transaction {
        self.i += 1;
        // Two transactions per card per day (at least a millisecond apart).
        self.t += (43_200_000 / self.cards as i64).max(1);
        let n = self.tpl.len();
        let row = &mut self.tpl[self.i as usize % n];
        row.entity = EntityKey(1 + splitmix(self.i) % self.cards);
        row.timestamp_ms = self.t;
        row
    }
    /// Every card once, then `more` rows.
    fn warm(&mut self, apply: impl Fn(&mut Transaction)) {
        for card in 1..=self.cards {
            let row = self.next();
            row.entity = EntityKey(card);
            apply(row);
        }
    }
    fn rows(&mut self, n: usize) -> Vec<Transaction> {
        (0..n).map(|_| self.next().clone()).collect()
    }
}

/// The state stage alone with 50 and with 1,000,000 cards.
pub fn scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("state_scale");
    for (name, cards) in [
        ("read_update_10_features_50_cards", 50u64),
        ("read_update_10_features_1m_cards", 1_000_000),
    ] {
        // Set up on the routine's first call, which criterion makes only when its filter
        // selects it: `tools/state_instructions.sh` counts the 50-card stage under
        // callgrind without building a million cards first.
        let mut setup: Option<(StateEngine, Stream)> = None;
        g.bench_function(name, |b| {
            let (st, s) = setup.get_or_insert_with(|| {
                let mut cfg = ten_features();
                cfg.max_keys = cards as usize + 20_000;
                let st = StateEngine::new(cfg, schema(), far_clock()).unwrap();
                let mut s = Stream::new(cards, 256);
                s.warm(|t| {
                    st.apply(t);
                });
                // Two days of traffic more, so windows hold history.
                for _ in 0..4 * cards as usize {
                    st.apply(s.next());
                }
                (st, s)
            });
            b.iter(|| black_box(st.apply(black_box(s.next()))))
        });
        for m in setup.iter().flat_map(|(st, _)| st.memory()) {
            println!(
                "{name}: {} keys of {} at {} bytes each",
                m.keys, m.source, m.bytes_per_key
            );
        }
    }
    g.finish();
}

fn engine(state: bool, cards: u64) -> Engine {
    crate::state::engine_with(state.then(|| {
        let mut cfg = ten_features();
        cfg.max_keys = cards as usize + 20_000;
        cfg
    }))
}

/// Two threads deciding over 50,000 cards, state on vs off.
pub fn throughput(c: &mut Criterion) {
    let cards = 50_000;
    let mut g = c.benchmark_group("state_scale_throughput");
    g.throughput(Throughput::Elements(40_000));
    g.sample_size(10);
    for (name, on) in [
        ("two_threads_50k_cards_state_off", false),
        ("two_threads_50k_cards_state_on", true),
    ] {
        let e = engine(on, cards);
        let mut s = Stream::new(cards, 16_384);
        s.warm(|t| {
            e.decide(t).unwrap();
        });
        // Rows a day later than the warm-up, in time order per thread's share.
        let txns = s.rows(65_536);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| risk_benches::two_threads(&e, &txns, 20_000))
                    .sum()
            })
        });
    }
    g.finish();
}

/// Exact windows against bucketed ones, short against long: the card's count, sum and
/// mean and the terminal's count over one window (the Fraud Detection Handbook's
/// features), 1 hour and 30 days, bucketed (12 buckets; 720 hourly buckets for 30 days)
/// and exact, over 1,000 cards with 60 days of history (about 60 events per card in a
/// 30-day window).
pub fn exact(c: &mut Criterion) {
    use risk_core::state::{Agg, FeatureDef, KeySource, StateConfig};
    use std::time::Duration;
    let hour = Duration::from_secs(3_600);
    let mut g = c.benchmark_group("state_exact");
    for (name, window, buckets, exact) in [
        ("buckets_1h", hour, 12, false),
        ("exact_1h", hour, 12, true),
        ("buckets_30d_hourly", 720 * hour, 720, false),
        ("exact_30d", 720 * hour, 720, true),
        // The buckets are only the fallback past max_events: daily ones are enough.
        ("exact_30d_daily_fallback", 720 * hour, 30, true),
    ] {
        let f = |n: &str, k: KeySource, agg: Agg| {
            let d = FeatureDef::new(n, k, agg).window(window, buckets);
            if exact {
                d.exact(1_024)
            } else {
                d
            }
        };
        // Fields of the synthetic schema (the rows carry it), given other meanings.
        let cfg = StateConfig {
            features: vec![
                f("txn_count_24h", KeySource::Entity, Agg::Count),
                f("amount_sum_24h", KeySource::Entity, Agg::Sum),
                f("amount_ratio", KeySource::Entity, Agg::Avg),
                f("merchant_txn_count_1h", KeySource::Merchant, Agg::Count),
            ],
            max_keys: 100_000,
            ..StateConfig::default()
        };
        let st = StateEngine::new(cfg, schema(), far_clock()).unwrap();
        let mut s = Stream::new(1_000, 256);
        s.warm(|t| {
            st.apply(t);
        });
        for _ in 0..120_000 {
            st.apply(s.next());
        }
        g.bench_function(name, |b| {
            b.iter(|| black_box(st.apply(black_box(s.next()))))
        });
        // The exact rows measure the log, not its fallback to the buckets.
        let fell = st.stats().exact_fallback;
        assert_eq!(fell, 0, "{name}: {fell} reads fell back to the buckets");
    }
    g.finish();
}
