//! Fraud injected into the synthetic stream: four labelled scenarios, each a short burst
//! on one card or one terminal. The draws are in a fixed order: the same seed gives the
//! same stream.

use super::rng::Rng;
use super::{
    mcc_index, merchant_for, Card, Event, Scenario, SynthConfig, COUNTRIES, DAY_MS,
    HIGH_RISK_COUNTRIES, MCCS, NO_LABEL,
};
use crate::txn::Channel;

/// Adds scenarios at random times until `cfg.fraud_rate` of `cfg.transactions` are fraud.
pub(super) fn inject(rng: &mut Rng, cfg: &SynthConfig, cards: &[Card], events: &mut Vec<Event>) {
    let span = cfg.days as i64 * DAY_MS;
    let n_fraud_target = (cfg.transactions as f64 * cfg.fraud_rate).round() as usize;
    let mut n_fraud = 0;
    while n_fraud < n_fraud_target {
        let card = rng.below(cfg.cards as u64) as usize;
        let t0 = cfg.start_ms + DAY_MS + rng.below((span - 2 * DAY_MS) as u64) as i64;
        let before = events.len();
        match rng.weighted(&[35.0, 25.0, 20.0, 20.0]) {
            0 => card_testing(rng, &cards[card], card, t0, events),
            1 => account_takeover(rng, &cards[card], card, t0, events),
            2 => compromised_terminal(rng, cfg, cards, t0, events),
            _ => velocity_spike(rng, &cards[card], card, t0, events),
        }
        n_fraud += events.len() - before;
    }
}

/// Small e-commerce charges in quick succession, often followed by one large one.
fn card_testing(rng: &mut Rng, c: &Card, card: usize, t0: i64, events: &mut Vec<Event>) {
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
            merchant: merchant_for(rng, mcc),
            scenario: Scenario::CardTesting,
            label_at: NO_LABEL,
            email: 0,
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
            merchant: merchant_for(rng, mcc),
            scenario: Scenario::CardTesting,
            label_at: NO_LABEL,
            email: 0,
        });
    }
}

/// A new device buys expensive goods, often from a high-risk country.
fn account_takeover(rng: &mut Rng, c: &Card, card: usize, t0: i64, events: &mut Vec<Event>) {
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
        let mcc = [mcc_index(5732), mcc_index(5944), mcc_index(4511)][rng.below(3) as usize];
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
            merchant: merchant_for(rng, mcc),
            scenario: Scenario::AccountTakeover,
            label_at: NO_LABEL,
            email: 0,
        });
        t += rng.range(60_000.0, 1_200_000.0) as i64;
    }
}

/// One terminal skims many cards.
fn compromised_terminal(
    rng: &mut Rng,
    cfg: &SynthConfig,
    cards: &[Card],
    t0: i64,
    events: &mut Vec<Event>,
) {
    let mcc = [mcc_index(5999), mcc_index(5311), mcc_index(5541)][rng.below(3) as usize];
    let merchant = merchant_for(rng, mcc);
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
            label_at: NO_LABEL,
            email: 0,
        });
    }
}

/// Many ordinary-looking purchases in a short time, sometimes in a second country.
fn velocity_spike(rng: &mut Rng, c: &Card, card: usize, t0: i64, events: &mut Vec<Event>) {
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
            merchant: merchant_for(rng, mcc),
            scenario: Scenario::VelocitySpike,
            label_at: NO_LABEL,
            email: 0,
        });
    }
}
