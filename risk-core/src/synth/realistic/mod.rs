//! The realistic preset ([`Preset::Realistic`](super::Preset)): fraud a fast model
//! sees only in part, among legitimate look-alikes, labelled late, with drift.
//!
//! Built so that tiered inference has something to earn: on the easy preset every
//! fraud is a short burst the velocity features catch on one row. Defaults
//! ([`SynthConfig::realistic`](super::SynthConfig::realistic)): 120 days, a card per 40
//! transactions, fraud 0.3% of transactions (`fraud_rate`; 0.1–3.5% keeps the shape).
//! Same schema, entity state and text fields as the easy preset: models and engines
//! run on either.
//!
//! **Realism check** (`risk-ffi/python/tests/test_realism.py`): XGBoost on the
//! SDK-computed features, trained on days 0–60 and tested from day 67, must land at
//! AUPRC 0.2–0.5 and recall at 1% FPR 0.4–0.7, where published card data puts such
//! models; the test fails outside. Figures in BENCHMARKS.md.
//!
//! ## Legitimate traffic (`habits.rs`)
//! Each card keeps its own habits: a merchant-category mix (about a third of the
//! categories never used, the rest weighted around the population's mix), a daily
//! rhythm shifted by a normal number of hours (σ 3; 6% are night owls with a flatter
//! one), one or two devices, a typical amount and an account e-mail. Occasional large
//! purchases (1%), new devices (3% of online), single foreign transactions (0.5%) and
//! transit bursts.
//!
//! ## Fraud visible on one row, in part (`episodes.rs`; 67% of fraud rows)
//! - **compromised_card** (33%): card details used over 1–4 days, 2–8 charges around 4×
//!   the card's typical amount (log-normal, σ 0.7), resellable categories and cash; 55%
//!   abroad; online ones from the fraudster's device and e-mail.
//! - **card_testing** (13%): 3–12 charges of $0.50–3 on digital goods within minutes
//!   from a new device, half followed by a larger charge within days (often at a
//!   cash-out merchant).
//! - **terminal_skim** (14%): a little-used terminal runs cloned cards for 1–4 weeks,
//!   0–4 a night in one sitting, around $300.
//! - **app_enumeration** (7%): scripted in-app charges of $5–15 (above the
//!   small-amount filter) on a victim card within half an hour; **drift**: it only
//!   starts at [`DRIFT_FROM`] of the period, after any training cut before it.
//!
//! ## Fraud only history reveals (`hidden.rs`; 33% of fraud rows)
//! - **low_slow_takeover** (12%): a taken-over account shops for 30–90 days, one to a
//!   few times a week, from one new device (new on its first row only), at hours
//!   ordinary for the population but not for the card, in resellable categories the
//!   card rarely used, amounts creeping to 1.6× its usual ones; the cardholder's own
//!   traffic goes on beside it.
//! - **mule_chain** (8%): the cardholder, scammed, pays a new beneficiary (one of 40
//!   mule accounts, which receive from many victims) 3–7 times over up to two weeks,
//!   each transfer about 1.25× the one before, from their own device.
//! - **cash_out** (7%): stolen credentials (the card's own device 85% of the time: a
//!   hijacked session) buy at cash-out merchants (gift cards, reloads, crypto
//!   on-ramps): ordinary categories, amounts and hours; only what the descriptor means,
//!   and that the card never shopped there, tell.
//! - **shared_identity** (6%): a device and e-mail seen in an earlier fraud on another
//!   card come back 2–30 days later on a new victim: a few ordinary online purchases.
//!
//! ## Legitimate look-alikes (`lookalikes.rs`)
//! At 6–15× each pattern's fraud volume: trips abroad of 2–10 days, sometimes on a new
//! device (10× compromised_card); in-app purchase bursts (8× card_testing); a new
//! device buying digital goods at hours unusual for the card, with no creep (6×
//! low_slow_takeover); new payees paid about the same amount a week to a month apart
//! (rent, family; 15× mule_chain); gift cards and reloads bought by their cardholders,
//! three times as many in a season in the middle of the period (12× cash_out).
//!
//! Episodes start uniformly over the period extended back by their length, so fraud
//! and look-alikes are as dense at its start as at its end.
//!
//! ## Labels (`labels.rs`)
//! Fraud is labelled when its episode is reported: a delay drawn per episode,
//! log-normal with median 7 days and σ 1.14 (90% by 30 days), capped at 120 days; 7%
//! of episodes are never reported (`label_time_ms = None`, like legitimate rows). An
//! episode ends when its first label arrives: the card is blocked, the account
//! secured, the terminal shut.

mod episodes;
mod habits;
mod hidden;
mod labels;
mod lookalikes;

use super::rng::Rng;
use super::{Card, Event, Scenario, SynthConfig, DAY_MS, NO_LABEL};
use habits::Habits;

/// Fraction of the period after which `app_enumeration` (the drift scenario) starts.
pub const DRIFT_FROM: f64 = 0.7;

/// Share of fraud rows by scenario (sums to 1).
pub const SHARES: [(Scenario, f64); 8] = [
    (Scenario::CompromisedCard, 0.33),
    (Scenario::CardTesting, 0.13),
    (Scenario::TerminalSkim, 0.14),
    (Scenario::AppEnumeration, 0.07),
    (Scenario::LowSlowTakeover, 0.12),
    (Scenario::MuleChain, 0.08),
    (Scenario::CashOut, 0.07),
    (Scenario::SharedIdentity, 0.06),
];

const CASH_OUT_BASE: u32 = 20_000;
const CASH_OUT_MERCHANTS: u32 = 400;
const P2P_BASE: u32 = 30_000;
const P2P_PAYEES: u32 = 60_000;
/// Mule accounts: the first payees of the transfer range.
const MULES: u32 = 40;

/// Whether a terminal id is one of the realistic preset's cash-out merchants.
pub fn is_cash_out(merchant: u32) -> bool {
    (CASH_OUT_BASE..CASH_OUT_BASE + CASH_OUT_MERCHANTS).contains(&merchant)
}

/// Whether a terminal id is a transfer beneficiary of the realistic preset.
pub fn is_p2p(merchant: u32) -> bool {
    (P2P_BASE..P2P_BASE + P2P_PAYEES).contains(&merchant)
}

/// What every part of the generator reads.
struct Ctx<'a> {
    cfg: &'a SynthConfig,
    cards: &'a [Card],
    habits: Vec<Habits>,
    start: i64,
    end: i64,
}

impl Ctx<'_> {
    /// A time uniform in `[start + from·span, end)`, at least `margin_days` after start.
    fn time_from(&self, rng: &mut Rng, from: f64, margin_days: i64) -> i64 {
        let lo = (self.start + ((self.end - self.start) as f64 * from) as i64)
            .max(self.start + margin_days * DAY_MS)
            .min(self.end - 1);
        lo + rng.below((self.end - lo).max(1) as u64) as i64
    }

    /// The start of an episode lasting `days`: uniform in `[start − days, end)`, so that
    /// long episodes cover every part of the period alike (their rows before the start
    /// are dropped).
    fn episode_start(&self, rng: &mut Rng, days: f64) -> i64 {
        let lo = self.start - (days * DAY_MS as f64) as i64;
        lo + rng.below((self.end - lo) as u64) as i64
    }

    fn card(&self, rng: &mut Rng) -> usize {
        rng.below(self.cards.len() as u64) as usize
    }

    /// Pushes `e` if it falls inside the period, its label `delay` after it.
    fn push(&self, events: &mut Vec<Event>, mut e: Event, delay: i64) {
        if e.t < self.start || e.t >= self.end {
            return;
        }
        e.label_at = if delay == NO_LABEL || e.scenario == Scenario::Normal {
            NO_LABEL
        } else {
            e.t + delay
        };
        events.push(e);
    }
}

/// A fraud ring's identity, for `shared_identity` to reuse later.
#[derive(Clone, Copy)]
struct Ring {
    device: u64,
    email: u64,
    t: i64,
}

/// Generates the realistic preset's events: fraud by [`SHARES`], look-alikes, then
/// legitimate traffic up to `cfg.transactions`.
pub(super) fn events(rng: &mut Rng, cfg: &SynthConfig, cards: &[Card], events: &mut Vec<Event>) {
    let ctx = Ctx {
        cfg,
        cards,
        habits: habits::draw(rng, cards),
        start: cfg.start_ms,
        end: cfg.start_ms + cfg.days as i64 * DAY_MS,
    };
    let target = (cfg.transactions as f64 * cfg.fraud_rate).round() as usize;
    let mut ring: Vec<Ring> = Vec::new();
    let on = |s: Scenario| cfg.history_scenarios || !s.history_only();
    let total: f64 = SHARES.iter().filter(|s| on(s.0)).map(|s| s.1).sum();
    for (scenario, share) in SHARES {
        let share = if on(scenario) { share / total } else { 0.0 };
        let goal = (target as f64 * share).round() as usize;
        let (mut made, mut idle) = (0, 0);
        // An episode can fall outside the period (dropped): give up after many in a row.
        while made < goal && idle < 1_000 {
            let before = events.len();
            let delay = labels::delay(rng);
            match scenario {
                Scenario::CompromisedCard => {
                    episodes::compromised_card(rng, &ctx, events, &mut ring, delay)
                }
                Scenario::CardTesting => episodes::card_testing(rng, &ctx, events, delay),
                Scenario::TerminalSkim => episodes::terminal_skim(rng, &ctx, events, delay),
                Scenario::AppEnumeration => episodes::app_enumeration(rng, &ctx, events, delay),
                Scenario::LowSlowTakeover => hidden::low_slow_takeover(rng, &ctx, events, delay),
                Scenario::MuleChain => hidden::mule_chain(rng, &ctx, events, delay),
                Scenario::CashOut => hidden::cash_out(rng, &ctx, events, &mut ring, delay),
                _ => hidden::shared_identity(rng, &ctx, events, &ring, delay),
            }
            stop_at_first_label(events, before);
            let added = events.len() - before;
            made += added;
            idle = if added == 0 { idle + 1 } else { 0 };
        }
    }
    lookalikes::add(rng, &ctx, target, events);
    habits::fill(rng, &ctx, events);
}

/// Drops the rows of the episode at `events[from..]` from its first label's arrival on:
/// a reported card is blocked, a reported account secured, a reported terminal shut.
fn stop_at_first_label(events: &mut Vec<Event>, from: usize) {
    let first = events[from..]
        .iter()
        .filter(|e| e.label_at != NO_LABEL)
        .map(|e| e.label_at)
        .min();
    if let Some(first) = first {
        let kept: Vec<Event> = events.drain(from..).filter(|e| e.t < first).collect();
        events.extend(kept);
    }
}

#[cfg(test)]
mod tests;
