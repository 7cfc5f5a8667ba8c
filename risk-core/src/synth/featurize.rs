//! Raw events to labelled transactions: typed fields, the caller-known card context
//! (hour, foreign and new-device flags, card age), text fields and the label's arrival.

use super::text::{self, TextInput};
use super::{
    currency_of, schema, terminal_id, Card, Event, Labeled, Preset, Scenario, SynthConfig,
    COUNTRIES, DAY_MS, HIGH_RISK_COUNTRIES, HOUR_MS, MCCS, NO_LABEL,
};
use crate::txn::{Channel, Transaction};
use std::collections::{HashMap, HashSet};

/// Turns events (in time order) into transactions with their labels.
pub(super) fn featurize(cfg: &SynthConfig, cards: &[Card], events: &[Event]) -> Vec<Labeled> {
    let schema = schema();
    let realistic = cfg.preset == Preset::Realistic;
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
        let email = (realistic && matches!(e.channel, Channel::Ecom | Channel::App)).then(|| {
            // The account's e-mail: the card's own unless a fraud ring brings theirs.
            let id = if e.email != 0 {
                e.email
            } else {
                e.card as u64 + 1
            };
            format!("acct-{id:016x}@mail.test")
        });
        if let Some(email) = &email {
            b = b.email(email);
        }
        for (name, value) in text::text_fields(&TextInput {
            seed: cfg.seed,
            row: i as u64,
            card: e.card as u64,
            merchant: e.merchant,
            mcc: e.mcc,
            channel: e.channel,
            scenario: e.scenario,
            realistic,
        }) {
            b = b.text(name, &value);
        }
        let txn = b.build().expect("generated transactions are valid");
        out.push(Labeled {
            txn,
            is_fraud: e.scenario != Scenario::Normal,
            scenario: e.scenario,
            merchant: e.merchant,
            email,
            label_time_ms: match (cfg.preset, e.scenario) {
                (_, Scenario::Normal) => None,
                (Preset::Easy, _) => Some(e.t),
                (Preset::Realistic, _) => (e.label_at != NO_LABEL).then_some(e.label_at),
            },
        });
        if e.device != 0 {
            known.insert(e.device);
        }
    }
    out
}
