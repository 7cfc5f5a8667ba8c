//! Seeded synthetic card transactions with labelled fraud scenarios (feature `synth`).
//!
//! Feeds tests, the quickstart, benchmarks and the training scripts. The same seed and
//! config give the same transactions on every platform.
//!
//! ## Normal traffic
//! Each card has a home country (and its currency), a typical amount (log-normal), a
//! preferred channel mix, one or two known devices and an activity rate. Transactions
//! follow a diurnal cycle (quiet at night, peaks around 12:00 and 19:00 UTC) and a
//! weekend lift. Legitimate look-alikes keep the task honest: about 2% of normal
//! transactions happen abroad (travel), 4% of online ones come from a new device, transit
//! taps produce bursts of small amounts, and occasional large purchases occur.
//!
//! ## Fraud scenarios (label `is_fraud = 1`, column `scenario`)
//! - **card_testing**: a burst of 5–15 tiny online charges ($0.50–$3, digital-goods
//!   merchants, new device) within minutes, often followed by one large charge.
//! - **account_takeover**: a new device in a foreign country placing 1–3 online/in-app
//!   purchases at 5–20× the card's typical amount within an hour.
//! - **compromised_terminal**: one terminal runs a burst of card-present charges on many
//!   different cards within an hour (terminal velocity), mid-to-high amounts.
//! - **velocity_spike**: a cloned card spree: 4–10 mid-amount purchases at different
//!   merchants within two hours, sometimes across two countries.
//!
//! About 2% of transactions are fraud by default ([`SynthConfig::fraud_rate`]).
//!
//! ## Text fields (for text tiers: `Transaction::text`)
//! Every transaction carries a **`merchant_descriptor`** (statement text: optional
//! facilitator prefix such as `SQ *`, a name typical of its MCC, a store number, a city);
//! online ones (e-commerce, in-app) also carry a **`user_agent`** (the card's usual
//! browser or app) and an **`email_domain`** (the account's provider). The signal is one
//! trees over the numeric features cannot see: fraud rows use a cash-out merchant
//! descriptor (gift cards, crypto top-ups, money transfer) 35% of the time against 0.6%
//! for legitimate ones, and online fraud comes from an automation / emulator / stale user
//! agent 40% of the time (1% legitimately) and from a disposable e-mail domain 40% of the
//! time (1.5%). Text is drawn from its own random stream, so every other value is what it
//! was before text existed.
//!
//! ## Features (see [`schema`])
//! The generator emits **raw** transactions ([`generate_raw`]): typed fields (card,
//! merchant terminal, device, time, amount, country, channel) and the context a caller
//! knows about the card itself: hour, foreign flag (against the card's home country),
//! new-device flag (missing for card-present channels), card age, high-risk country.
//! The velocity features (counts and sums over the last hour / day, small-amount count,
//! distinct countries, time since last, amount against the card's 30-day mean, the
//! terminal's count over the last hour) are **computed by the SDK's entity state** from
//! those raw transactions ([`state_config`]), in event order: [`generate`] runs the same
//! [`StateEngine`](crate::state::StateEngine) an engine built with `state_config()` runs
//! at serving time, so training data and serving see the same values. Missing values are
//! `NaN`.

mod csv;
mod rng;
mod text;
mod wide;

pub use csv::write_csv;
pub use rng::Rng;
pub use text::{EMAIL_DOMAIN, MERCHANT_DESCRIPTOR, USER_AGENT};
pub use wide::{wide_rows, wide_schema, DEVICE_OS, WIDE_NUMERIC};

use crate::schema::FeatureSchema;
use crate::state::{Agg, Current, FeatureDef, Filter, KeySource, StateConfig, StateEngine};
use crate::txn::{Channel, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Countries, with weights for card home countries.
pub const COUNTRIES: [&str; 16] = [
    "US", "GB", "DE", "FR", "ES", "IT", "NL", "CA", "BR", "MX", "IN", "NG", "RU", "CN", "JP", "AU",
];
const HOME_WEIGHTS: [f64; 16] = [
    40.0, 10.0, 8.0, 7.0, 4.0, 4.0, 3.0, 5.0, 4.0, 3.0, 3.0, 1.0, 1.0, 2.0, 3.0, 2.0,
];
/// Countries used disproportionately by fraud in this data set.
pub const HIGH_RISK_COUNTRIES: [&str; 4] = ["NG", "RU", "BR", "CN"];

/// Currencies in the schema's vocabulary.
pub const CURRENCIES: [&str; 9] = [
    "USD", "GBP", "EUR", "CAD", "BRL", "MXN", "INR", "NGN", "RUB",
];

fn currency_of(country: &str) -> &'static str {
    match country {
        "US" => "USD",
        "GB" => "GBP",
        "DE" | "FR" | "ES" | "IT" | "NL" => "EUR",
        "CA" => "CAD",
        "BR" => "BRL",
        "MX" => "MXN",
        "IN" => "INR",
        "NG" => "NGN",
        "RU" => "RUB",
        _ => "USD",
    }
}

/// Merchant category codes with their share of normal traffic and typical-amount factor.
pub const MCCS: [(u16, f64, f64); 14] = [
    (5411, 20.0, 1.0), // grocery
    (5812, 14.0, 0.8), // restaurants
    (5541, 9.0, 1.0),  // fuel
    (5311, 7.0, 1.5),  // department stores
    (5999, 8.0, 1.0),  // misc retail
    (4111, 6.0, 0.1),  // transit
    (5814, 9.0, 0.3),  // fast food
    (5732, 3.0, 4.0),  // electronics
    (5944, 1.0, 6.0),  // jewelry
    (4511, 1.5, 8.0),  // airlines
    (7011, 2.0, 5.0),  // hotels
    (5815, 4.0, 0.3),  // digital media
    (5816, 2.0, 0.4),  // games
    (6011, 3.0, 2.0),  // ATM cash
];

/// Names of every feature slot, in schema order.
pub const FEATURES: [&str; 18] = [
    "amount",
    "currency",
    "mcc",
    "country",
    "channel",
    "hour",
    "is_foreign",
    "device_new",
    "txn_count_1h",
    "txn_count_24h",
    "amount_sum_24h",
    "small_count_1h",
    "distinct_countries_24h",
    "secs_since_last",
    "amount_ratio",
    "card_age_days",
    "merchant_txn_count_1h",
    "high_risk_country",
];

/// The schema of the synthetic data set.
pub fn schema() -> Arc<FeatureSchema> {
    let mccs: Vec<String> = MCCS.iter().map(|m| format!("{:04}", m.0)).collect();
    let channels: Vec<&str> = Channel::ALL.iter().map(|c| c.as_str()).collect();
    FeatureSchema::builder()
        .numeric_required("amount")
        .categorical("currency", &CURRENCIES)
        .categorical("mcc", &mccs)
        .categorical("country", &COUNTRIES)
        .categorical("channel", &channels)
        .numeric("hour")
        .numeric("is_foreign")
        .numeric("device_new")
        .numeric("txn_count_1h")
        .numeric("txn_count_24h")
        .numeric("amount_sum_24h")
        .numeric("small_count_1h")
        .numeric("distinct_countries_24h")
        .numeric("secs_since_last")
        .numeric("amount_ratio")
        .numeric("card_age_days")
        .numeric("merchant_txn_count_1h")
        .numeric("high_risk_country")
        .build()
        .expect("the synthetic schema is valid")
}

/// The velocity features of [`schema`] as entity-state definitions: what an engine
/// computes from raw transactions (`EngineBuilder::state(synth::state_config())`).
pub fn state_config() -> StateConfig {
    let h = |n: u64| Duration::from_secs(n * 3_600);
    let small = Filter::Range {
        field: "amount".into(),
        gt: None,
        ge: None,
        lt: Some(5.0),
        le: None,
    };
    StateConfig {
        features: vec![
            FeatureDef::new("txn_count_1h", KeySource::Entity, Agg::Count).window(h(1), 12),
            FeatureDef::new("txn_count_24h", KeySource::Entity, Agg::Count).window(h(24), 24),
            FeatureDef::new("amount_sum_24h", KeySource::Entity, Agg::Sum).window(h(24), 24),
            FeatureDef::new("small_count_1h", KeySource::Entity, Agg::Count)
                .window(h(1), 12)
                .filter(small),
            FeatureDef::new("distinct_countries_24h", KeySource::Entity, Agg::Distinct)
                .of("country")
                .window(h(24), 24)
                .current(Current::Include),
            FeatureDef::new("secs_since_last", KeySource::Entity, Agg::SinceLast),
            FeatureDef::new("amount_ratio", KeySource::Entity, Agg::Ratio).window(h(720), 30),
            FeatureDef::new("merchant_txn_count_1h", KeySource::Merchant, Agg::Count)
                .window(h(1), 12),
        ],
        ..StateConfig::default()
    }
}

/// The merchant terminal id a transaction carries (`Transaction::merchant` hashes it).
pub fn terminal_id(merchant: u32) -> String {
    format!("T{merchant:05}")
}

/// Fraud scenario of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Legitimate.
    Normal,
    /// Small-amount card testing burst.
    CardTesting,
    /// New device + foreign country + high amount.
    AccountTakeover,
    /// Terminal charging many cards in a burst.
    CompromisedTerminal,
    /// Cloned-card spree.
    VelocitySpike,
}

impl Scenario {
    /// Snake-case name (CSV column `scenario`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Normal => "normal",
            Scenario::CardTesting => "card_testing",
            Scenario::AccountTakeover => "account_takeover",
            Scenario::CompromisedTerminal => "compromised_terminal",
            Scenario::VelocitySpike => "velocity_spike",
        }
    }
}

/// Generator settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthConfig {
    /// Seed.
    pub seed: u64,
    /// Transactions to generate (exactly).
    pub transactions: usize,
    /// Cards; default `transactions / 20`.
    pub cards: usize,
    /// Days covered.
    pub days: u32,
    /// Start time, ms since the epoch (default 2026-01-05T00:00Z, a Monday).
    pub start_ms: i64,
    /// Target share of fraudulent transactions.
    pub fraud_rate: f64,
}

impl SynthConfig {
    /// Defaults for `n` transactions.
    pub fn new(seed: u64, n: usize) -> Self {
        Self {
            seed,
            transactions: n,
            cards: (n / 20).max(10),
            days: 30,
            start_ms: 1_767_571_200_000,
            fraud_rate: 0.02,
        }
    }
}

/// One generated transaction with its label.
#[derive(Debug, Clone)]
pub struct Labeled {
    /// The transaction, features filled.
    pub txn: Transaction,
    /// Ground truth.
    pub is_fraud: bool,
    /// Scenario.
    pub scenario: Scenario,
    /// Merchant terminal id.
    pub merchant: u32,
}

struct Card {
    home: usize,
    typical: f64,
    ecom_share: f64,
    devices: Vec<u64>,
    rate: f64,
    opened_days_ago: f64,
}

#[derive(Clone, Copy)]
struct Event {
    t: i64,
    card: usize,
    amount: f64,
    mcc: usize,
    country: usize,
    channel: Channel,
    device: u64,
    merchant: u32,
    scenario: Scenario,
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
const MERCHANTS: u32 = 20_000;

fn diurnal(h: usize) -> f64 {
    const W: [f64; 24] = [
        0.2, 0.1, 0.1, 0.1, 0.1, 0.2, 0.4, 0.7, 1.0, 1.1, 1.2, 1.4, 1.6, 1.4, 1.2, 1.1, 1.2, 1.4,
        1.6, 1.7, 1.5, 1.1, 0.7, 0.4,
    ];
    W[h]
}

fn mcc_index(code: u16) -> usize {
    MCCS.iter().position(|m| m.0 == code).unwrap_or(0)
}

fn merchant_for(rng: &mut Rng, mcc: usize) -> u32 {
    // Popularity skew: squares of uniforms favour low ids within the category's range.
    let per = MERCHANTS / MCCS.len() as u32;
    let u = rng.f64();
    mcc as u32 * per + (u * u * per as f64) as u32
}

/// Generates the data set with the velocity features computed by entity state
/// ([`state_config`], in event order), as an engine computes them at serving time.
pub fn generate(cfg: &SynthConfig) -> Vec<Labeled> {
    let mut rows = generate_raw(cfg);
    compute_state(&mut rows);
    rows
}

/// Computes the velocity features of `rows` (in their order) with a fresh
/// [`StateEngine`] over [`state_config`].
pub fn compute_state(rows: &mut [Labeled]) {
    let clock = crate::clock::ManualClock::new();
    // Wall time after every event: the future bound never clamps generated times.
    clock.set_unix_origin_ms(i64::MAX / 4);
    let st = StateEngine::new(state_config(), schema(), clock)
        .expect("the synthetic state definitions are valid");
    for r in rows {
        st.apply(&mut r.txn);
    }
}

/// Generates raw transactions: typed fields and card context, velocity features missing.
pub fn generate_raw(cfg: &SynthConfig) -> Vec<Labeled> {
    let mut rng = Rng::new(cfg.seed);
    let span = cfg.days as i64 * DAY_MS;
    let cards: Vec<Card> = (0..cfg.cards)
        .map(|_| Card {
            home: rng.weighted(&HOME_WEIGHTS),
            typical: rng.lognormal(35.0, 0.6),
            ecom_share: rng.range(0.05, 0.6),
            devices: (0..1 + rng.below(2)).map(|_| rng.next_u64() | 1).collect(),
            rate: rng.lognormal(1.0, 0.8),
            opened_days_ago: rng.range(20.0, 3000.0),
        })
        .collect();
    let rate_sum: f64 = cards.iter().map(|c| c.rate).sum();
    let n_fraud_target = (cfg.transactions as f64 * cfg.fraud_rate).round() as usize;
    let mut events: Vec<Event> = Vec::with_capacity(cfg.transactions + 32);

    // ----- fraud -----
    let mut n_fraud = 0;
    while n_fraud < n_fraud_target {
        let card = rng.below(cfg.cards as u64) as usize;
        let t0 = cfg.start_ms + DAY_MS + rng.below((span - 2 * DAY_MS) as u64) as i64;
        let c = &cards[card];
        let before = events.len();
        match rng.weighted(&[35.0, 25.0, 20.0, 20.0]) {
            0 => {
                let device = rng.next_u64() | 1;
                let mut t = t0;
                for _ in 0..5 + rng.below(11) {
                    t += rng.range(5_000.0, 60_000.0) as i64;
                    let mcc = if rng.chance(0.6) { 11 } else { 12 };
                    events.push(Event {
                        t,
                        card,
                        amount: (rng.range(0.5, 3.0) * 100.0).round() / 100.0,
                        mcc,
                        country: c.home,
                        channel: Channel::Ecom,
                        device,
                        merchant: merchant_for(&mut rng, mcc),
                        scenario: Scenario::CardTesting,
                    });
                }
                if rng.chance(0.6) {
                    let mcc = mcc_index(5732);
                    events.push(Event {
                        t: t + rng.range(60_000.0, 900_000.0) as i64,
                        card,
                        amount: rng.lognormal(400.0, 0.5),
                        mcc,
                        country: c.home,
                        channel: Channel::Ecom,
                        device,
                        merchant: merchant_for(&mut rng, mcc),
                        scenario: Scenario::CardTesting,
                    });
                }
            }
            1 => {
                let device = rng.next_u64() | 1;
                let country = if rng.chance(0.6) {
                    COUNTRIES
                        .iter()
                        .position(|x| *x == HIGH_RISK_COUNTRIES[rng.below(4) as usize])
                        .unwrap_or(0)
                } else {
                    rng.below(COUNTRIES.len() as u64) as usize
                };
                let mut t = t0;
                for _ in 0..1 + rng.below(3) {
                    let mcc =
                        [mcc_index(5732), mcc_index(5944), mcc_index(4511)][rng.below(3) as usize];
                    events.push(Event {
                        t,
                        card,
                        amount: c.typical * rng.range(5.0, 20.0),
                        mcc,
                        country,
                        channel: if rng.chance(0.7) {
                            Channel::Ecom
                        } else {
                            Channel::App
                        },
                        device,
                        merchant: merchant_for(&mut rng, mcc),
                        scenario: Scenario::AccountTakeover,
                    });
                    t += rng.range(60_000.0, 1_200_000.0) as i64;
                }
            }
            2 => {
                let mcc =
                    [mcc_index(5999), mcc_index(5311), mcc_index(5541)][rng.below(3) as usize];
                let merchant = merchant_for(&mut rng, mcc);
                let mut t = t0;
                for _ in 0..6 + rng.below(10) {
                    let victim = rng.below(cfg.cards as u64) as usize;
                    t += rng.range(30_000.0, 400_000.0) as i64;
                    events.push(Event {
                        t,
                        card: victim,
                        amount: rng.lognormal(180.0, 0.5),
                        mcc,
                        country: cards[victim].home,
                        channel: Channel::Pos,
                        device: 0,
                        merchant,
                        scenario: Scenario::CompromisedTerminal,
                    });
                }
            }
            _ => {
                let first = c.home;
                let second = rng.below(COUNTRIES.len() as u64) as usize;
                let mut t = t0;
                for k in 0..4 + rng.below(7) {
                    let mcc = rng.weighted(&MCCS.map(|m| m.1));
                    t += rng.range(120_000.0, 1_500_000.0) as i64;
                    events.push(Event {
                        t,
                        card,
                        amount: rng.lognormal(120.0, 0.6),
                        mcc,
                        country: if k >= 3 && rng.chance(0.5) {
                            second
                        } else {
                            first
                        },
                        channel: if rng.chance(0.5) {
                            Channel::Pos
                        } else {
                            Channel::Ecom
                        },
                        device: 0,
                        merchant: merchant_for(&mut rng, mcc),
                        scenario: Scenario::VelocitySpike,
                    });
                }
            }
        }
        n_fraud += events.len() - before;
    }

    // ----- normal traffic -----
    let n_normal = cfg.transactions.saturating_sub(events.len());
    let card_weights: Vec<f64> = cards.iter().map(|c| c.rate / rate_sum).collect();
    let mut cum = Vec::with_capacity(cards.len());
    let mut acc = 0.0;
    for w in &card_weights {
        acc += w;
        cum.push(acc);
    }
    let hour_w: Vec<f64> = (0..24).map(diurnal).collect();
    let mut transit_burst = 0;
    let mut last: Option<Event> = None;
    for _ in 0..n_normal {
        // Transit taps come in small bursts on the same card.
        if transit_burst > 0 {
            if let Some(mut e) = last {
                transit_burst -= 1;
                e.t += rng.range(60_000.0, 1_800_000.0) as i64;
                e.amount = (rng.range(1.0, 4.0) * 100.0).round() / 100.0;
                events.push(e);
                last = Some(e);
                continue;
            }
        }
        let x = rng.f64() * acc;
        let card = cum.partition_point(|&c| c < x).min(cards.len() - 1);
        let c = &cards[card];
        let mut day = rng.below(cfg.days as u64) as i64;
        // Weekend lift: re-draw a weekday once with some probability.
        if (day % 7) < 5 && rng.chance(0.15) {
            day = rng.below(cfg.days as u64) as i64;
        }
        let hour = rng.weighted(&hour_w) as i64;
        let t = cfg.start_ms + day * DAY_MS + hour * HOUR_MS + rng.below(HOUR_MS as u64) as i64;
        let mcc = rng.weighted(&MCCS.map(|m| m.1));
        let online = rng.chance(c.ecom_share) && MCCS[mcc].0 != 6011 && MCCS[mcc].0 != 4111;
        let channel = match (online, MCCS[mcc].0) {
            (_, 6011) => Channel::Atm,
            (true, _) if rng.chance(0.3) => Channel::App,
            (true, _) => Channel::Ecom,
            (false, _) if rng.chance(0.01) => Channel::Moto,
            _ => Channel::Pos,
        };
        let device = match channel {
            Channel::Ecom | Channel::App if rng.chance(0.04) => rng.next_u64() | 1,
            Channel::Ecom | Channel::App => c.devices[rng.below(c.devices.len() as u64) as usize],
            _ => 0,
        };
        let country = if rng.chance(0.02) {
            rng.below(COUNTRIES.len() as u64) as usize
        } else {
            c.home
        };
        let mut amount = c.typical * MCCS[mcc].2 * rng.lognormal(1.0, 0.5);
        if rng.chance(0.01) {
            amount *= rng.range(4.0, 12.0);
        }
        let e = Event {
            t,
            card,
            amount: (amount.max(0.5) * 100.0).round() / 100.0,
            mcc,
            country,
            channel,
            device,
            merchant: merchant_for(&mut rng, mcc),
            scenario: Scenario::Normal,
        };
        if MCCS[mcc].0 == 4111 && rng.chance(0.3) {
            transit_burst = 2 + rng.below(4);
        }
        events.push(e);
        last = Some(e);
    }
    events.truncate(cfg.transactions);
    events.sort_by_key(|e| (e.t, e.card));
    featurize(cfg, &cards, &events)
}

fn featurize(cfg: &SynthConfig, cards: &[Card], events: &[Event]) -> Vec<Labeled> {
    let schema = schema();
    // Devices each card has used so far (the caller's device-binding knowledge).
    let mut devices: HashMap<usize, HashSet<u64>> = HashMap::new();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        let c = &cards[e.card];
        let known = devices
            .entry(e.card)
            .or_insert_with(|| c.devices.iter().copied().collect());
        let device_new = match e.channel {
            Channel::Ecom | Channel::App => (!known.contains(&e.device)) as u8 as f32,
            _ => f32::NAN,
        };
        let country = COUNTRIES[e.country];
        let b = Transaction::builder(&schema)
            .id(i as u64 + 1)
            .entity(e.card as u64 + 1)
            .timestamp_ms(e.t)
            .amount(e.amount, currency_of(country))
            .mcc(MCCS[e.mcc].0)
            .country(country)
            .channel(e.channel)
            .device(e.device)
            .merchant(&terminal_id(e.merchant))
            .numeric("hour", ((e.t.rem_euclid(DAY_MS)) / HOUR_MS) as f32)
            .numeric("is_foreign", (e.country != c.home) as u8 as f32)
            .numeric(
                "card_age_days",
                (c.opened_days_ago + (e.t - cfg.start_ms) as f64 / DAY_MS as f64) as f32,
            )
            .numeric(
                "high_risk_country",
                HIGH_RISK_COUNTRIES.contains(&country) as u8 as f32,
            );
        let mut b = if device_new.is_nan() {
            b
        } else {
            b.numeric("device_new", device_new)
        };
        for (name, value) in text::text_fields(&text::TextInput {
            seed: cfg.seed,
            row: i as u64,
            card: e.card as u64,
            merchant: e.merchant,
            mcc: e.mcc,
            channel: e.channel,
            scenario: e.scenario,
        }) {
            b = b.text(name, &value);
        }
        let txn = b.build().expect("generated transactions are valid");
        out.push(Labeled {
            txn,
            is_fraud: e.scenario != Scenario::Normal,
            scenario: e.scenario,
            merchant: e.merchant,
        });
        if e.device != 0 {
            known.insert(e.device);
        }
    }
    out
}

#[cfg(test)]
mod tests;
