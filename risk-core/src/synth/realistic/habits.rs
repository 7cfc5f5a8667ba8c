//! Per-card habits and the legitimate traffic drawn from them: each card its own
//! merchant-category mix and daily rhythm, so that what is unusual for a card is not
//! unusual for the population (what only history can tell).

use super::super::rng::Rng;
use super::super::traffic::channel_device;
use super::super::{
    diurnal, merchant_for, Card, Event, Scenario, COUNTRIES, DAY_MS, HOUR_MS, MCCS,
};
use super::Ctx;
use crate::txn::Channel;

/// One card's habits.
pub(super) struct Habits {
    /// Weight of each merchant category ([`MCCS`] order); 0 = never used.
    pub mcc_w: [f64; 14],
    /// Weight of each hour of the day (UTC).
    pub hour_w: [f64; 24],
}

impl Habits {
    /// An hour ordinary for the population but unusual for this card: drawn from the
    /// population's rhythm weighted by how far the card's own weight there is below its
    /// peak (mornings and late evenings of a shifted card, say).
    pub fn off_hour(&self, rng: &mut Rng) -> i64 {
        let peak = self.hour_w.iter().copied().fold(0.0, f64::max);
        let w: Vec<f64> = (0..24)
            .map(|h| diurnal(h) * (1.0 - self.hour_w[h] / peak).powi(2))
            .collect();
        rng.weighted(&w) as i64
    }

    /// An hour drawn from the card's rhythm.
    pub fn hour(&self, rng: &mut Rng) -> i64 {
        rng.weighted(&self.hour_w) as i64
    }
}

/// Draws every card's habits.
pub(super) fn draw(rng: &mut Rng, cards: &[Card]) -> Vec<Habits> {
    cards
        .iter()
        .map(|_| {
            let shift = (3.0 * rng.normal()).round().clamp(-8.0, 8.0) as i64;
            let night_owl = rng.chance(0.06);
            let mut hour_w = [0.0; 24];
            for (h, w) in hour_w.iter_mut().enumerate() {
                let base = diurnal((h as i64 - shift).rem_euclid(24) as usize);
                *w = if night_owl { 0.5 * base + 0.6 } else { base };
            }
            let mut mcc_w = [0.0; 14];
            for (k, (w, m)) in mcc_w.iter_mut().zip(MCCS.iter()).enumerate() {
                *w = if k != 0 && rng.chance(0.35) {
                    0.0
                } else {
                    m.1 * rng.lognormal(1.0, 0.9)
                };
            }
            Habits { mcc_w, hour_w }
        })
        .collect()
}

/// A time on `day` (days since the start) at an hour of the card's rhythm.
pub(super) fn time_on(ctx: &Ctx, rng: &mut Rng, card: usize, day: i64) -> i64 {
    ctx.start
        + day * DAY_MS
        + ctx.habits[card].hour(rng) * HOUR_MS
        + rng.below(HOUR_MS as u64) as i64
}

/// A legitimate event with the card's own e-mail and no label.
pub(super) fn legit(card: usize, t: i64, mcc: usize, country: usize) -> Event {
    Event {
        t,
        card,
        amount: 0.0,
        mcc,
        country,
        channel: Channel::Pos,
        device: 0,
        merchant: 0,
        scenario: Scenario::Normal,
        label_at: super::NO_LABEL,
        email: 0,
    }
}

/// Rounds to cents, at least $0.50.
pub(super) fn cents(x: f64) -> f64 {
    (x.max(0.5) * 100.0).round() / 100.0
}

/// Fills `events` up to `cfg.transactions` with everyday traffic from the cards' habits.
pub(super) fn fill(rng: &mut Rng, ctx: &Ctx, events: &mut Vec<Event>) {
    let cards = ctx.cards;
    let mut cum = Vec::with_capacity(cards.len());
    let mut acc = 0.0;
    for c in cards {
        acc += c.rate;
        cum.push(acc);
    }
    let days = ctx.cfg.days as u64;
    let mut transit_burst = 0;
    let mut last: Option<Event> = None;
    while events.len() < ctx.cfg.transactions {
        if transit_burst > 0 {
            if let Some(mut e) = last {
                transit_burst -= 1;
                e.t += rng.range(60_000.0, 1_800_000.0) as i64;
                e.amount = cents(rng.range(1.0, 4.0));
                if e.t < ctx.end {
                    events.push(e);
                }
                last = Some(e);
                continue;
            }
        }
        let x = rng.f64() * acc;
        let card = cum.partition_point(|&c| c < x).min(cards.len() - 1);
        let c = &cards[card];
        let mut day = rng.below(days) as i64;
        if (day % 7) < 5 && rng.chance(0.15) {
            day = rng.below(days) as i64;
        }
        let t = time_on(ctx, rng, card, day);
        let mcc = rng.weighted(&ctx.habits[card].mcc_w);
        let (channel, device) = channel_device(rng, c, mcc, 0.03);
        let country = if rng.chance(0.005) {
            rng.below(COUNTRIES.len() as u64) as usize
        } else {
            c.home
        };
        let mut amount = c.typical * MCCS[mcc].2 * rng.lognormal(1.0, 0.5);
        if rng.chance(0.01) {
            amount *= rng.range(4.0, 12.0);
        }
        let e = Event {
            amount: cents(amount),
            channel,
            device,
            merchant: merchant_for(rng, mcc),
            ..legit(card, t, mcc, country)
        };
        if MCCS[mcc].0 == 4111 && rng.chance(0.3) {
            transit_burst = 2 + rng.below(4);
        }
        events.push(e);
        last = Some(e);
    }
}
