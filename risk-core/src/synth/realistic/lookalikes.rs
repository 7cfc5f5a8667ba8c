//! Legitimate traffic that resembles each fraud pattern, at 5–20× its volume: what
//! keeps a model from learning "foreign", "new device", "night" or "new payee" alone.

use super::super::rng::Rng;
use super::super::traffic::channel_device;
use super::super::{mcc_index, merchant_for, Event, Scenario, COUNTRIES, DAY_MS, MCCS};
use super::episodes::{cash_out_merchant, online_channel};
use super::habits::{cents, legit, time_on};
use super::{Ctx, P2P_BASE, P2P_PAYEES, SHARES};
use crate::txn::Channel;

/// Look-alike volume per fraud pattern, as a multiple of that pattern's fraud rows.
pub const VOLUME: [(Scenario, f64); 5] = [
    (Scenario::CompromisedCard, 10.0),
    (Scenario::CardTesting, 8.0),
    (Scenario::LowSlowTakeover, 6.0),
    (Scenario::MuleChain, 15.0),
    (Scenario::CashOut, 12.0),
];

/// Adds every look-alike for `fraud_rows` fraud rows in all.
pub(super) fn add(rng: &mut Rng, ctx: &Ctx, fraud_rows: usize, events: &mut Vec<Event>) {
    for (scenario, times) in VOLUME {
        let share = SHARES.iter().find(|s| s.0 == scenario).map_or(0.0, |s| s.1);
        let goal = (fraud_rows as f64 * share * times).round() as usize;
        let (mut made, mut idle) = (0, 0);
        while made < goal && idle < 1_000 && events.len() < ctx.cfg.transactions {
            let before = events.len();
            match scenario {
                Scenario::CompromisedCard => travel(rng, ctx, events),
                Scenario::CardTesting => in_app_burst(rng, ctx, events),
                Scenario::LowSlowTakeover => new_habit(rng, ctx, events),
                Scenario::MuleChain => new_payee(rng, ctx, events),
                _ => gift_cards(rng, ctx, events),
            }
            let added = events.len() - before;
            made += added;
            idle = if added == 0 { idle + 1 } else { 0 };
        }
    }
}

/// A trip abroad of 2–10 days: restaurants, hotels, transport, shops, cash; online
/// purchases from a new device 30% of the time.
fn travel(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let country = loop {
        let k = rng.below(COUNTRIES.len() as u64) as usize;
        if k != c.home {
            break k;
        }
    };
    const W: [(u16, f64); 8] = [
        (5812, 4.0),
        (7011, 2.0),
        (4511, 1.0),
        (4111, 1.5),
        (5814, 2.0),
        (5999, 1.5),
        (5311, 1.0),
        (6011, 1.0),
    ];
    let days = 2 + rng.below(9) as i64;
    let day0 = (ctx.episode_start(rng, days as f64) - ctx.start).div_euclid(DAY_MS);
    let trip_device = rng.chance(0.3).then(|| rng.next_u64() | 1);
    for _ in 0..3 + rng.below(10) {
        let mcc = mcc_index(W[rng.weighted(&W.map(|w| w.1))].0);
        let (channel, device) = channel_device(rng, c, mcc, 0.0);
        let device = match (device, trip_device) {
            (0, _) | (_, None) => device,
            (_, Some(d)) => d,
        };
        let day = day0 + rng.below(days as u64) as i64;
        let t = time_on(ctx, rng, card, day);
        let e = Event {
            amount: cents(c.typical * MCCS[mcc].2 * rng.lognormal(1.3, 0.6)),
            channel,
            device,
            merchant: merchant_for(rng, mcc),
            ..legit(card, t, mcc, country)
        };
        ctx.push(events, e, 0);
    }
}

/// 2–8 in-app purchases of $0.99–4.99 within an hour, on a known device (new 10%).
fn in_app_burst(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let device = if rng.chance(0.1) {
        rng.next_u64() | 1
    } else {
        c.devices[rng.below(c.devices.len() as u64) as usize]
    };
    let day = (ctx.time_from(rng, 0.0, 0) - ctx.start) / DAY_MS;
    let mut t = time_on(ctx, rng, card, day);
    for _ in 0..2 + rng.below(7) {
        t += rng.range(30_000.0, 600_000.0) as i64;
        let mcc = if rng.chance(0.6) { 12 } else { 11 };
        let e = Event {
            amount: cents(rng.range(0.99, 4.99)),
            channel: Channel::App,
            device,
            merchant: merchant_for(rng, mcc),
            ..legit(card, t, mcc, c.home)
        };
        ctx.push(events, e, 0);
    }
}

/// A new device (a new phone, a teenager's console) buying digital goods and games at
/// hours unusual for the card for 30–90 days, at the card's usual amounts.
fn new_habit(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let h = &ctx.habits[card];
    let device = rng.next_u64() | 1;
    let days = rng.range(30.0, 90.0);
    let t0 = ctx.episode_start(rng, days);
    let n = (days * rng.range(0.2, 0.5)).round().max(3.0) as usize;
    for _ in 0..n {
        let day = rng.range(0.0, days) as i64;
        let t = t0 - t0.rem_euclid(DAY_MS)
            + day * DAY_MS
            + h.off_hour(rng) * super::super::HOUR_MS
            + rng.below(super::super::HOUR_MS as u64) as i64;
        let mcc = mcc_index([5815, 5816, 5816, 5732][rng.below(4) as usize]);
        let e = Event {
            amount: cents(c.typical * MCCS[mcc].2 * rng.lognormal(1.0, 0.5)),
            channel: online_channel(rng, 0.6),
            device,
            merchant: merchant_for(rng, mcc),
            ..legit(card, t, mcc, c.home)
        };
        ctx.push(events, e, 0);
    }
}

/// A new payee (rent, family) paid 1–5 times, a week to a month apart, the same
/// large-ish amount each time.
fn new_payee(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let payee = P2P_BASE + super::MULES + rng.below((P2P_PAYEES - super::MULES) as u64) as u32;
    let amount = cents(c.typical * rng.lognormal(2.0, 0.8));
    let gap = 7 + rng.below(24) as i64;
    let mut day = (ctx.episode_start(rng, 4.0 * gap as f64) - ctx.start).div_euclid(DAY_MS);
    let mcc = mcc_index(5999);
    for _ in 0..1 + rng.below(5) {
        let e = Event {
            amount: if rng.chance(0.7) {
                amount
            } else {
                cents(amount * rng.lognormal(1.0, 0.3))
            },
            channel: Channel::App,
            device: c.devices[0],
            merchant: payee,
            ..legit(card, time_on(ctx, rng, card, day), mcc, c.home)
        };
        ctx.push(events, e, 0);
        day += gap;
    }
}

/// Gift cards, reloads and crypto bought by their cardholders; three times as likely
/// in the season from 50% to 65% of the period.
fn gift_cards(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let days = ctx.cfg.days as f64;
    let day = if rng.chance(0.5) {
        rng.range(0.5 * days, 0.65 * days)
    } else {
        rng.range(0.0, days)
    } as i64;
    let mcc = mcc_index(if rng.chance(0.6) { 5999 } else { 5815 });
    let (channel, device) = channel_device(rng, c, mcc, 0.03);
    let e = Event {
        amount: cents(c.typical * rng.lognormal(1.5, 0.6)),
        channel,
        device,
        merchant: cash_out_merchant(rng),
        ..legit(card, time_on(ctx, rng, card, day), mcc, c.home)
    };
    ctx.push(events, e, 0);
}
