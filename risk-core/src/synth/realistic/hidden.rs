//! Fraud only the entity's history, a descriptor's meaning or a link to confirmed
//! fraud reveals: each row on its own looks like the card's ordinary traffic.

use super::super::rng::Rng;
use super::super::{mcc_index, merchant_for, Event, Scenario, DAY_MS, HOUR_MS, MCCS};
use super::episodes::{cash_out_merchant, fraud, online_channel};
use super::habits::{cents, time_on};
use super::{Ctx, Ring, MULES, P2P_BASE};
use crate::txn::Channel;

/// The resellable categories a takeover shops in: electronics, misc retail, department
/// stores, digital media, games.
const RESELLABLE: [u16; 5] = [5732, 5999, 5311, 5815, 5816];

/// A taken-over account shopping for 30–90 days, one to a few times a week, at hours
/// unusual for the card (not for the population), in resellable categories the card rarely uses, amounts creeping from
/// the card's usual ones to about twice them.
pub(super) fn low_slow_takeover(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>, delay: i64) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let h = &ctx.habits[card];
    let total: f64 = h.mcc_w.iter().sum();
    // Categories the card rarely uses weigh most.
    let w: Vec<f64> = RESELLABLE
        .iter()
        .map(|&m| 1.0 / (1.0 + 20.0 * h.mcc_w[mcc_index(m)] / total))
        .collect();
    let device = rng.next_u64() | 1;
    let days = rng.range(30.0, 90.0);
    let t0 = ctx.episode_start(rng, days);
    let per_day = rng.range(0.1, 0.35);
    let n = (days * per_day).round().max(3.0) as usize;
    let base = fraud(card, t0, Scenario::LowSlowTakeover);
    for k in 0..n {
        let progress = k as f64 / n as f64;
        let day = (progress * days + rng.range(0.0, 1.0)) as i64;
        let t = t0 - t0.rem_euclid(DAY_MS)
            + day * DAY_MS
            + h.off_hour(rng) * HOUR_MS
            + rng.below(HOUR_MS as u64) as i64;
        let mcc = mcc_index(RESELLABLE[rng.weighted(&w)]);
        let e = Event {
            t,
            amount: cents(c.typical * MCCS[mcc].2 * rng.lognormal(1.0 + 0.6 * progress, 0.4)),
            mcc,
            country: c.home,
            channel: online_channel(rng, 0.5),
            device,
            merchant: merchant_for(rng, mcc),
            ..base
        };
        ctx.push(events, e, delay);
    }
}

/// The scammed cardholder pays a mule account (one of [`MULES`], shared across
/// victims) 3–7 times within two weeks, each transfer about 1.5× the previous.
pub(super) fn mule_chain(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>, delay: i64) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let payee = P2P_BASE + rng.below(MULES as u64) as u32;
    let device = c.devices[0];
    let span = rng.range(2.0, 14.0);
    let day0 = (ctx.episode_start(rng, span) - ctx.start).div_euclid(DAY_MS);
    let n = 3 + rng.below(5);
    let mut amount = c.typical * rng.lognormal(1.0, 0.3);
    let mcc = mcc_index(5999);
    for k in 0..n {
        let day = day0 + (k as f64 / n as f64 * span) as i64;
        let e = Event {
            amount: cents(amount),
            mcc,
            country: c.home,
            channel: Channel::App,
            device,
            merchant: payee,
            ..fraud(card, time_on(ctx, rng, card, day), Scenario::MuleChain)
        };
        ctx.push(events, e, delay);
        amount *= rng.lognormal(1.25, 0.1);
    }
}

/// Stolen credentials buy at cash-out merchants: ordinary categories (misc retail,
/// digital media), amounts and hours; the card's own device 60% of the time (a
/// hijacked session).
pub(super) fn cash_out(
    rng: &mut Rng,
    ctx: &Ctx,
    events: &mut Vec<Event>,
    ring: &mut Vec<Ring>,
    delay: i64,
) {
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let device = if rng.chance(0.85) {
        c.devices[0]
    } else {
        rng.next_u64() | 1
    };
    let email = rng.next_u64() | 1;
    let day0 = (ctx.time_from(rng, 0.0, 1) - ctx.start) / DAY_MS;
    let mut last = 0;
    for k in 0..1 + rng.below(3) {
        let mcc = mcc_index(if rng.chance(0.6) { 5999 } else { 5815 });
        let t = time_on(ctx, rng, card, day0 + k as i64 / 2);
        last = last.max(t);
        let e = Event {
            amount: cents(c.typical * rng.lognormal(1.6, 0.5)),
            mcc,
            country: c.home,
            channel: online_channel(rng, 0.5),
            device,
            merchant: cash_out_merchant(rng),
            ..fraud(card, t, Scenario::CashOut)
        };
        ctx.push(events, e, delay);
    }
    if device != c.devices[0] {
        ring.push(Ring {
            device,
            email,
            t: last,
        });
    }
}

/// A device and e-mail from an earlier fraud come back 2–30 days later on a new
/// victim card: 1–3 ordinary online purchases.
pub(super) fn shared_identity(
    rng: &mut Rng,
    ctx: &Ctx,
    events: &mut Vec<Event>,
    ring: &[Ring],
    delay: i64,
) {
    if ring.is_empty() {
        return;
    }
    let r = ring[rng.below(ring.len() as u64) as usize];
    let card = ctx.card(rng);
    let c = &ctx.cards[card];
    let day0 = (r.t - ctx.start) / DAY_MS + 2 + rng.below(29) as i64;
    for k in 0..1 + rng.below(3) {
        let mcc = rng.weighted(&MCCS.map(|m| if m.0 == 6011 || m.0 == 4111 { 0.0 } else { m.1 }));
        let e = Event {
            amount: cents(c.typical * MCCS[mcc].2 * rng.lognormal(1.5, 0.6)),
            mcc,
            country: c.home,
            channel: online_channel(rng, 0.5),
            device: r.device,
            email: r.email,
            merchant: merchant_for(rng, mcc),
            ..fraud(
                card,
                time_on(ctx, rng, card, day0 + k as i64),
                Scenario::SharedIdentity,
            )
        };
        ctx.push(events, e, delay);
    }
}
