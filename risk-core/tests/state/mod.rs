//! Entity state: windowed features against a straightforward reference, labels,
//! lists, snapshots, and the engine computing its own features from `risk.toml`.

mod engine;
mod event_replay;
mod exact;
mod exact_ring;
mod labels;
mod list_journal;
mod lists;
#[cfg(feature = "redis")]
mod lists_redis;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_carry;
#[cfg(feature = "redis")]
mod redis_limits;
#[cfg(feature = "redis")]
mod redis_seq;
#[cfg(feature = "redis")]
mod redis_tls;
mod reference;
mod sequence;
mod snapshot;
mod snapshot_carry;
mod snapshot_golden;

use risk_core::state::StateConfig;
use risk_core::*;
use std::sync::Arc;

/// 2026-01-05T00:00Z.
pub const T0: i64 = 1_767_571_200_000;
pub const MIN: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;

/// A schema with the fields the state tests filter on, plus what `cfg` fills.
pub fn schema(cfg: &StateConfig) -> Arc<FeatureSchema> {
    let b = FeatureSchema::builder()
        .numeric_required("amount")
        .categorical("channel", &["pos", "ecom", "atm", "moto", "app"])
        .categorical("country", &["US", "GB", "DE", "NG"]);
    cfg.extend_schema(b).build().unwrap()
}

/// A clock whose wall time is far after every event (no future clamping) unless set.
pub fn clock(unix_ms: i64) -> Arc<ManualClock> {
    let c = ManualClock::new();
    c.set_unix_origin_ms(unix_ms);
    c
}

/// One raw event of a generated stream.
#[derive(Debug, Clone)]
pub struct Ev {
    pub id: u64,
    pub card: u64,
    pub merchant: u32,
    pub device: u64,
    pub ts: i64,
    pub amount: f64,
    pub channel: Channel,
    pub country: &'static str,
}

impl Ev {
    pub fn txn(&self, s: &Arc<FeatureSchema>) -> Transaction {
        let b = Transaction::builder(s)
            .id(self.id)
            .entity(self.card)
            .timestamp_ms(self.ts)
            .amount(self.amount, "USD")
            .channel(self.channel)
            .country(self.country)
            .device(self.device);
        let b = if self.merchant == 0 {
            b
        } else {
            b.merchant(&format!("m{}", self.merchant))
        };
        b.build().unwrap()
    }
}

/// A seeded stream over `cards` cards and `merchants` merchants: mostly in order, with
/// out-of-order events (some beyond the lateness bound), bursts and gaps.
pub fn stream(seed: u64, n: usize, cards: u64, merchants: u32) -> Vec<Ev> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t = T0;
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let r = next();
        // Gaps from seconds to hours; now and then a day.
        t += match r % 100 {
            0..=59 => (next() % 120_000) as i64,
            60..=94 => (next() % (40 * MIN as u64)) as i64,
            95..=98 => (next() % (6 * HOUR as u64)) as i64,
            _ => DAY + (next() % DAY as u64) as i64,
        };
        // 10% out of order: up to 3 minutes late (lateness bound: 1 minute).
        let ts = if next() % 10 == 0 {
            t - (next() % (3 * MIN as u64)) as i64
        } else {
            t
        };
        let channel =
            [Channel::Pos, Channel::Ecom, Channel::App, Channel::Atm][(next() % 4) as usize];
        let device = match channel {
            Channel::Ecom | Channel::App => 1 + next() % 6,
            _ => 0,
        };
        v.push(Ev {
            id: i as u64 + 1,
            card: 1 + next() % cards,
            merchant: if next() % 20 == 0 {
                0
            } else {
                1 + (next() % merchants as u64) as u32
            },
            device,
            ts,
            amount: if next() % 5 == 0 {
                1.0 + (next() % 400) as f64 / 100.0
            } else {
                5.0 + (next() % 50_000) as f64 / 100.0
            },
            channel,
            country: ["US", "GB", "DE", "NG"][(next() % 4) as usize],
        });
    }
    v
}
