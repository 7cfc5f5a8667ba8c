//! Seeded synthetic card transactions with labelled fraud scenarios (feature `synth`).
//!
//! Feeds tests, the quickstart, benchmarks and the training scripts. The same seed and
//! config give the same transactions on every platform.
//!
//! Two presets ([`Preset`]): **easy** (below; [`SynthConfig::new`]), where every fraud
//! is a short burst the velocity features catch on one row and labels are known at
//! once, which the committed models, tests and benchmarks use; and **realistic**
//! ([`realistic`]; [`SynthConfig::realistic`]): 0.3% fraud over 120 days, a third of
//! it visible only in the entity's history, legitimate look-alikes, label delay and
//! drift, calibrated so that XGBoost on these features scores as on published card
//! data. The rest of this page describes the easy preset.
//!
//! **History features** ([`history_config`], [`compute_history`], [`HISTORY`]): twelve
//! entity-state aggregates beyond the velocity windows (links to confirmed fraud
//! through a device, e-mail or merchant, fed with each label when it arrived; cards
//! per device and merchant; devices and categories per card; hour and amount against
//! the card's own), what `examples/evaluate.py` measures against the fast tier.
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
mod featurize;
mod fraud;
mod history;
pub mod realistic;
mod rng;
mod text;
mod traffic;
mod wide;

pub use csv::write_csv;
pub use history::{compute_history, history_config, history_schema, HISTORY};
pub use rng::Rng;
pub use text::{EMAIL_DOMAIN, MERCHANT_DESCRIPTOR, USER_AGENT};
pub use wide::{wide_rows, wide_schema, DEVICE_OS, WIDE_NUMERIC};

use crate::schema::FeatureSchema;
use crate::state::{
    Agg, Current, FeatureDef, Filter, KeySource, SequenceDef, StateConfig, StateEngine,
};
use crate::txn::{Channel, Transaction};
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
    schema_builder()
        .build()
        .expect("the synthetic schema is valid")
}

/// [`schema`]'s fields, for schemas that extend it ([`history_schema`]).
fn schema_builder() -> crate::schema::SchemaBuilder {
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

/// Rows of [`sequence_def`]'s sequence.
pub const SEQUENCE_LEN: u32 = 32;

/// The card's last [`SEQUENCE_LEN`] transactions, the current one last, for sequence
/// models (`card_seq`): amount, seconds since the card's previous transaction, merchant
/// category, channel and country ids, foreign and new-device flags, hour of day and the
/// card's transaction count over the hour before; a missing value reads -1.
pub fn sequence_def() -> SequenceDef {
    let mut d = SequenceDef::new(
        "card_seq",
        KeySource::Entity,
        SEQUENCE_LEN,
        &[
            "amount",
            "dt",
            "mcc",
            "channel",
            "country",
            "is_foreign",
            "device_new",
            "hour",
            "txn_count_1h",
        ],
    );
    d.missing = -1.0;
    d
}

/// [`state_config`] with [`sequence_def`]'s sequence: what a sequence-model tier reads.
pub fn sequence_config() -> StateConfig {
    let mut c = state_config();
    c.sequences.push(sequence_def());
    c
}

/// Computes the velocity features and the `card_seq` sequence of `rows` (in their
/// order) with a fresh [`StateEngine`] over [`sequence_config`]: each transaction's
/// `sequences` then holds it, as an engine built with that configuration fills them.
pub fn compute_sequences(rows: &mut [Labeled]) {
    let clock = crate::clock::ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    let st = StateEngine::new(sequence_config(), schema(), clock)
        .expect("the synthetic state definitions are valid");
    for r in rows {
        st.apply(&mut r.txn);
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
    /// Realistic preset: a compromised card used over days (see [`realistic`]).
    CompromisedCard,
    /// Realistic preset: a terminal charging cloned cards over weeks.
    TerminalSkim,
    /// Realistic preset: scripted in-app enumeration, only after the drift start.
    AppEnumeration,
    /// Realistic preset, history only: a taken-over account shopping low and slow.
    LowSlowTakeover,
    /// Realistic preset, history only: transfers to a new beneficiary, escalating.
    MuleChain,
    /// Realistic preset, history only: cash-out merchants known by their descriptor.
    CashOut,
    /// Realistic preset, history only: a device and e-mail seen in confirmed fraud.
    SharedIdentity,
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
            Scenario::CompromisedCard => "compromised_card",
            Scenario::TerminalSkim => "terminal_skim",
            Scenario::AppEnumeration => "app_enumeration",
            Scenario::LowSlowTakeover => "low_slow_takeover",
            Scenario::MuleChain => "mule_chain",
            Scenario::CashOut => "cash_out",
            Scenario::SharedIdentity => "shared_identity",
        }
    }

    /// Whether the scenario is one the fast features cannot see on one row: only the
    /// entity's history (merchant mix, hours, beneficiaries), text meaning or a link to
    /// confirmed fraud reveals it.
    pub fn history_only(self) -> bool {
        matches!(
            self,
            Scenario::LowSlowTakeover
                | Scenario::MuleChain
                | Scenario::CashOut
                | Scenario::SharedIdentity
        )
    }
}

/// Which generator [`generate`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preset {
    /// Short bursts the velocity features catch directly; labels known at once
    /// (tests, benchmarks and the committed models are trained on it).
    #[default]
    Easy,
    /// Fraud a fast model only partly sees, look-alikes, label delay and drift
    /// ([`realistic`]).
    Realistic,
}

impl Preset {
    /// Parses `easy` or `realistic`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "easy" => Some(Preset::Easy),
            "realistic" => Some(Preset::Realistic),
            _ => None,
        }
    }

    /// `easy` or `realistic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Easy => "easy",
            Preset::Realistic => "realistic",
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
    /// Which generator runs.
    pub preset: Preset,
    /// Realistic preset: whether the scenarios only history reveals
    /// ([`Scenario::history_only`]) make fraud. Off, their share of the fraud goes to
    /// the other scenarios (same fraud rate, same legitimate traffic and look-alikes):
    /// the evaluation's control under which what history adds must vanish.
    pub history_scenarios: bool,
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
            preset: Preset::Easy,
            history_scenarios: true,
        }
    }

    /// Defaults of the [`realistic`] preset for `n` transactions: 120 days, a card per
    /// 40 transactions (about one every three days), fraud 0.3% of transactions.
    pub fn realistic(seed: u64, n: usize) -> Self {
        Self {
            cards: (n / 40).max(50),
            days: 120,
            fraud_rate: 0.003,
            preset: Preset::Realistic,
            ..Self::new(seed, n)
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
    /// When the fraud label arrives (a chargeback or the cardholder's report), ms since
    /// the epoch: at the transaction itself in the easy preset, after a delay in the
    /// realistic one; `None` for legitimate rows and for fraud never reported.
    pub label_time_ms: Option<i64>,
    /// The account e-mail the caller passed (`TransactionBuilder::email`, hashed into
    /// `txn.email`): online rows of the realistic preset; `None` otherwise.
    pub email: Option<String>,
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
    /// When the label arrives; [`NO_LABEL`] for none.
    label_at: i64,
    /// Account e-mail key (realistic preset); 0 = the card's own.
    email: u64,
}

/// `Event::label_at` of a row whose label never arrives.
const NO_LABEL: i64 = i64::MIN;

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
    let mut events: Vec<Event> = Vec::with_capacity(cfg.transactions + 32);
    match cfg.preset {
        Preset::Easy => {
            fraud::inject(&mut rng, cfg, &cards, &mut events);
            traffic::normal(&mut rng, cfg, &cards, &mut events);
        }
        Preset::Realistic => realistic::events(&mut rng, cfg, &cards, &mut events),
    }
    events.truncate(cfg.transactions);
    events.sort_by_key(|e| (e.t, e.card));
    featurize::featurize(cfg, &cards, &events)
}

#[cfg(test)]
mod tests;
