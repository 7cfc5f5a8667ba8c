//! Legitimate traffic: cards drawn by their rate, diurnal and weekly cycles, channels,
//! devices and amounts by card and merchant category, transit taps in bursts.

use super::rng::Rng;
use super::{
    diurnal, merchant_for, Card, Event, Scenario, SynthConfig, COUNTRIES, DAY_MS, HOUR_MS, MCCS,
    NO_LABEL,
};
use crate::txn::Channel;

/// Fills `events` up to `cfg.transactions` with normal traffic.
pub(super) fn normal(rng: &mut Rng, cfg: &SynthConfig, cards: &[Card], events: &mut Vec<Event>) {
    let rate_sum: f64 = cards.iter().map(|c| c.rate).sum();
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
        let (channel, device) = channel_device(rng, c, mcc, 0.04);
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
            merchant: merchant_for(rng, mcc),
            scenario: Scenario::Normal,
            label_at: NO_LABEL,
            email: 0,
        };
        if MCCS[mcc].0 == 4111 && rng.chance(0.3) {
            transit_burst = 2 + rng.below(4);
        }
        events.push(e);
        last = Some(e);
    }
}

/// The channel and device of a legitimate transaction in category `mcc`: online with the
/// card's e-commerce share (never cash or transit), then app 30%; mail order 1% of the
/// rest; online ones from one of the card's devices, or a new one with `new_device`.
pub(super) fn channel_device(
    rng: &mut Rng,
    c: &Card,
    mcc: usize,
    new_device: f64,
) -> (Channel, u64) {
    let code = MCCS[mcc].0;
    let online = rng.chance(c.ecom_share) && code != 6011 && code != 4111;
    let channel = match (online, code) {
        (_, 6011) => Channel::Atm,
        (true, _) if rng.chance(0.3) => Channel::App,
        (true, _) => Channel::Ecom,
        (false, _) if rng.chance(0.01) => Channel::Moto,
        _ => Channel::Pos,
    };
    let device = match channel {
        Channel::Ecom | Channel::App if rng.chance(new_device) => rng.next_u64() | 1,
        Channel::Ecom | Channel::App => c.devices[rng.below(c.devices.len() as u64) as usize],
        _ => 0,
    };
    (channel, device)
}
