//! Fraud the fast features see in part: compromised cards over days, card testing,
//! skimming terminals over weeks, and the drift scenario (in-app enumeration).

use super::super::rng::Rng;
use super::super::{
    mcc_index, merchant_for, Event, Scenario, COUNTRIES, DAY_MS, HIGH_RISK_COUNTRIES, HOUR_MS,
    MCCS, MERCHANTS,
};
use super::habits::cents;
use super::{Ctx, Ring, CASH_OUT_BASE, CASH_OUT_MERCHANTS, DRIFT_FROM};
use crate::txn::Channel;

/// App with probability `app`, else e-commerce.
pub(super) fn online_channel(rng: &mut Rng, app: f64) -> Channel {
    if rng.chance(app) {
        Channel::App
    } else {
        Channel::Ecom
    }
}

/// A fraud event on `card` with its scenario (fields filled by the caller).
pub(super) fn fraud(card: usize, t: i64, scenario: Scenario) -> Event {
    Event {
        t,
        card,
        amount: 0.0,
        mcc: 0,
        country: 0,
        channel: Channel::Ecom,
        device: 0,
        merchant: 0,
        scenario,
        label_at: super::NO_LABEL,
        email: 0,
    }
}

fn country_index(code: &str) -> usize {
    COUNTRIES.iter().position(|c| *c == code).unwrap_or(0)
}

/// A cash-out merchant's terminal id.
pub(super) fn cash_out_merchant(rng: &mut Rng) -> u32 {
    CASH_OUT_BASE + rng.below(CASH_OUT_MERCHANTS as u64) as u32
}

/// Card details used for 1–4 days: a few charges at high, wide amounts.
pub(super) fn compromised_card(
    rng: &mut Rng,
    ctx: &Ctx,
    events: &mut Vec<Event>,
    ring: &mut Vec<Ring>,
    delay: i64,
) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let days = rng.range(1.0, 4.0);
    let t0 = ctx.episode_start(rng, days);
    let span = days * DAY_MS as f64;
    let device = rng.next_u64() | 1;
    let email = rng.next_u64() | 1;
    let abroad = rng.chance(0.55);
    let country = if !abroad {
        c.home
    } else if rng.chance(0.4) {
        country_index(HIGH_RISK_COUNTRIES[rng.below(4) as usize])
    } else {
        rng.below(COUNTRIES.len() as u64) as usize
    };
    // Electronics, jewellery, department stores, misc retail, digital, airlines, cash.
    const W: [(u16, f64); 7] = [
        (5732, 4.0),
        (5944, 1.5),
        (5311, 2.0),
        (5999, 2.0),
        (5815, 1.0),
        (4511, 1.0),
        (6011, 1.5),
    ];
    let mut last = t0;
    for _ in 0..2 + rng.below(7) {
        let t = t0 + (rng.f64() * span) as i64;
        last = last.max(t);
        let mcc = mcc_index(W[rng.weighted(&W.map(|w| w.1))].0);
        let channel = match MCCS[mcc].0 {
            6011 => Channel::Atm,
            _ if rng.chance(0.35) => Channel::Pos,
            _ if rng.chance(0.15) => Channel::App,
            _ => Channel::Ecom,
        };
        let online = matches!(channel, Channel::Ecom | Channel::App);
        let e = Event {
            amount: cents(c.typical * rng.lognormal(4.0, 0.7)),
            mcc,
            country,
            channel,
            device: if online { device } else { 0 },
            email: if online { email } else { 0 },
            merchant: merchant_for(rng, mcc),
            ..fraud(card, t, Scenario::CompromisedCard)
        };
        ctx.push(events, e, delay);
    }
    ring.push(Ring {
        device,
        email,
        t: last,
    });
}

/// Tiny charges on digital goods from a new device within minutes, half the time a
/// larger one (often at a cash-out merchant) within days.
pub(super) fn card_testing(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>, delay: i64) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let device = rng.next_u64() | 1;
    let email = rng.next_u64() | 1;
    let mut t = ctx.time_from(rng, 0.0, 1);
    let base = fraud(card, t, Scenario::CardTesting);
    for _ in 0..3 + rng.below(10) {
        t += rng.range(10_000.0, 300_000.0) as i64;
        let mcc = if rng.chance(0.6) { 11 } else { 12 };
        let e = Event {
            t,
            amount: cents(rng.range(0.5, 3.0)),
            mcc,
            country: c.home,
            device,
            email,
            merchant: merchant_for(rng, mcc),
            ..base
        };
        ctx.push(events, e, delay);
    }
    if rng.chance(0.5) {
        let mcc = mcc_index(if rng.chance(0.5) { 5732 } else { 5999 });
        let merchant = if rng.chance(0.4) {
            cash_out_merchant(rng)
        } else {
            merchant_for(rng, mcc)
        };
        let e = Event {
            t: t + rng.range(HOUR_MS as f64, 3.0 * DAY_MS as f64) as i64,
            amount: cents(c.typical * rng.lognormal(4.0, 0.6)),
            mcc,
            country: c.home,
            device,
            email,
            merchant,
            ..base
        };
        ctx.push(events, e, delay);
    }
}

/// A small terminal charging cloned cards for 1–4 weeks, 1–3 a day, late hours.
pub(super) fn terminal_skim(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>, delay: i64) {
    let mcc = mcc_index([5999, 5541, 5411, 5812][rng.below(4) as usize]);
    // Terminals high in their category's id range see little legitimate traffic.
    let per = MERCHANTS / MCCS.len() as u32;
    let merchant = mcc as u32 * per + per / 2 + rng.below(per as u64 / 2) as u32;
    let days = 7 + rng.below(22) as i64;
    let t0 = ctx.episode_start(rng, days as f64);
    for day in 0..days {
        // Cloned cards run through in one sitting, late.
        let hour = (21 + rng.below(8) as i64) % 24;
        let mut t = t0 + day * DAY_MS + hour * HOUR_MS;
        for _ in 0..rng.below(5) {
            let card = ctx.card(rng);
            t += rng.range(60_000.0, 1_200_000.0) as i64;
            let e = Event {
                amount: cents(rng.lognormal(300.0, 0.5)),
                mcc,
                country: ctx.cards[card].home,
                channel: Channel::Pos,
                merchant,
                ..fraud(card, t, Scenario::TerminalSkim)
            };
            ctx.push(events, e, delay);
        }
    }
}

/// Scripted in-app charges of $5–15 on a victim card within half an hour, from one
/// new device; only from [`DRIFT_FROM`] of the period on.
pub(super) fn app_enumeration(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>, delay: i64) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let device = rng.next_u64() | 1;
    let email = rng.next_u64() | 1;
    let mut t = ctx.time_from(rng, DRIFT_FROM, 0);
    for _ in 0..4 + rng.below(7) {
        t += rng.range(20_000.0, 400_000.0) as i64;
        let mcc = mcc_index([5816, 5815, 5999][rng.below(3) as usize]);
        let e = Event {
            amount: cents(rng.range(5.0, 15.0)),
            mcc,
            country: c.home,
            channel: Channel::App,
            device,
            email,
            merchant: merchant_for(rng, mcc),
            ..fraud(card, t, Scenario::AppEnumeration)
        };
        ctx.push(events, e, delay);
    }
}
