//! Realistic preset tests: shares, label delays, drift, look-alikes, determinism.

use super::super::{generate, generate_raw, Scenario, SynthConfig};
use super::{is_cash_out, is_p2p, DRIFT_FROM, SHARES};
use std::collections::HashMap;

fn rows() -> Vec<super::super::Labeled> {
    generate_raw(&SynthConfig::realistic(11, 200_000))
}

#[test]
fn fraud_rate_and_scenario_shares() {
    let rows = rows();
    assert_eq!(rows.len(), 200_000);
    let fraud: Vec<_> = rows.iter().filter(|r| r.is_fraud).collect();
    let rate = fraud.len() as f64 / rows.len() as f64;
    assert!((0.0027..0.0036).contains(&rate), "fraud rate {rate}");
    let mut by: HashMap<Scenario, usize> = HashMap::new();
    for r in &fraud {
        *by.entry(r.scenario).or_default() += 1;
    }
    for (s, share) in SHARES {
        let got = by.get(&s).copied().unwrap_or(0) as f64 / fraud.len() as f64;
        assert!(
            (got - share).abs() < 0.05,
            "{s:?}: {got} of fraud, meant {share}"
        );
    }
    let hidden = fraud.iter().filter(|r| r.scenario.history_only()).count() as f64;
    let hidden = hidden / fraud.len() as f64;
    assert!(
        (0.25..=0.40).contains(&hidden),
        "history-only share {hidden}"
    );
}

#[test]
fn history_scenarios_switched_off_give_their_share_to_the_others() {
    let cfg = SynthConfig {
        history_scenarios: false,
        ..SynthConfig::realistic(11, 200_000)
    };
    let rows = generate_raw(&cfg);
    assert_eq!(rows.len(), 200_000);
    let fraud: Vec<_> = rows.iter().filter(|r| r.is_fraud).collect();
    let rate = fraud.len() as f64 / rows.len() as f64;
    assert!((0.0027..0.0036).contains(&rate), "fraud rate {rate}");
    assert!(fraud.iter().all(|r| !r.scenario.history_only()));
    let visible: f64 = SHARES
        .iter()
        .filter(|s| !s.0.history_only())
        .map(|s| s.1)
        .sum();
    let n = |s: Scenario| fraud.iter().filter(|r| r.scenario == s).count() as f64;
    let share = n(Scenario::CompromisedCard) / fraud.len() as f64;
    assert!(
        (share - 0.33 / visible).abs() < 0.05,
        "compromised cards {share} of fraud"
    );
    // The same legitimate look-alikes: mule-like transfers to new payees stay.
    let payees = |rows: &[super::super::Labeled]| {
        rows.iter()
            .filter(|r| !r.is_fraud && is_p2p(r.merchant))
            .count() as f64
    };
    let (off, on) = (payees(&rows), payees(&self::rows()));
    assert!(
        (off / on - 1.0).abs() < 0.1,
        "legitimate transfers {off} off vs {on} on"
    );
}

#[test]
fn labels_arrive_late_and_some_never() {
    let rows = rows();
    assert!(rows
        .iter()
        .filter(|r| !r.is_fraud)
        .all(|r| r.label_time_ms.is_none()));
    let fraud: Vec<_> = rows.iter().filter(|r| r.is_fraud).collect();
    let never = fraud.iter().filter(|r| r.label_time_ms.is_none()).count() as f64;
    let never = never / fraud.len() as f64;
    assert!((0.02..0.15).contains(&never), "never labelled {never}");
    let mut days: Vec<f64> = fraud
        .iter()
        .filter_map(|r| {
            r.label_time_ms
                .map(|l| (l - r.txn.timestamp_ms) as f64 / 86.4e6)
        })
        .collect();
    days.sort_by(f64::total_cmp);
    let q = |p: f64| days[(p * (days.len() - 1) as f64) as usize];
    assert!(days[0] >= 0.0 && *days.last().unwrap() <= 120.0);
    assert!(
        (4.0..11.0).contains(&q(0.5)),
        "median delay {} days",
        q(0.5)
    );
    assert!((18.0..45.0).contains(&q(0.9)), "90% by {} days", q(0.9));
}

#[test]
fn drift_scenario_only_after_its_start() {
    let cfg = SynthConfig::realistic(11, 200_000);
    let rows = rows();
    let from = cfg.start_ms + (cfg.days as f64 * DRIFT_FROM * 86.4e6) as i64;
    let drift: Vec<_> = rows
        .iter()
        .filter(|r| r.scenario == Scenario::AppEnumeration)
        .collect();
    assert!(!drift.is_empty());
    assert!(drift.iter().all(|r| r.txn.timestamp_ms >= from));
}

#[test]
fn look_alikes_outnumber_their_patterns() {
    let rows = rows();
    let cash_out = |fraud: bool| {
        rows.iter()
            .filter(|r| r.is_fraud == fraud && is_cash_out(r.merchant))
            .count()
    };
    // Card testing's follow-ups also land at cash-out merchants.
    assert!(
        cash_out(false) >= 5 * cash_out(true),
        "{} vs {}",
        cash_out(false),
        cash_out(true)
    );
    let p2p = |fraud: bool| {
        rows.iter()
            .filter(|r| r.is_fraud == fraud && is_p2p(r.merchant))
            .count()
    };
    assert!(
        p2p(false) >= 5 * p2p(true),
        "{} vs {}",
        p2p(false),
        p2p(true)
    );
    let foreign_new = |fraud: bool| {
        rows.iter()
            .filter(|r| r.is_fraud == fraud)
            .filter(|r| r.txn.features.by_name("is_foreign") == Some(1.0))
            .count()
    };
    assert!(foreign_new(false) >= 5 * foreign_new(true));
}

#[test]
fn deterministic_ordered_and_easy_untouched() {
    let cfg = SynthConfig::realistic(5, 20_000);
    let (a, b) = (generate(&cfg), generate(&cfg));
    assert!(a
        .iter()
        .zip(&b)
        .all(|(x, y)| x.txn.timestamp_ms == y.txn.timestamp_ms
            && x.txn.amount == y.txn.amount
            && x.scenario == y.scenario
            && x.label_time_ms == y.label_time_ms));
    assert!(a
        .windows(2)
        .all(|w| w[0].txn.timestamp_ms <= w[1].txn.timestamp_ms));
    // Online rows carry the account e-mail; shared identities bring the ring's.
    assert!(a
        .iter()
        .filter(|r| matches!(
            r.txn.channel,
            crate::txn::Channel::Ecom | crate::txn::Channel::App
        ))
        .all(|r| r.txn.email != 0));
    let easy = generate(&SynthConfig::new(5, 2_000));
    assert!(easy.iter().all(|r| r.txn.email == 0));
    assert!(easy
        .iter()
        .all(|r| r.label_time_ms == r.is_fraud.then_some(r.txn.timestamp_ms)));
}
