//! Generator tests: determinism, labels, order, state features, CSV.

use super::*;

#[test]
fn deterministic_labelled_and_ordered() {
    let cfg = SynthConfig::new(7, 5_000);
    let a = generate(&cfg);
    let b = generate(&cfg);
    assert_eq!(a.len(), 5_000);
    assert!(a.iter().zip(&b).all(|(x, y)| x
        .txn
        .features
        .values()
        .iter()
        .zip(y.txn.features.values())
        .all(|(p, q)| p.to_bits() == q.to_bits())));
    assert!(a
        .windows(2)
        .all(|w| w[0].txn.timestamp_ms <= w[1].txn.timestamp_ms));
    let fraud = a.iter().filter(|r| r.is_fraud).count() as f64 / a.len() as f64;
    assert!((0.01..=0.03).contains(&fraud), "fraud rate {fraud}");
    for s in [
        Scenario::CardTesting,
        Scenario::AccountTakeover,
        Scenario::CompromisedTerminal,
        Scenario::VelocitySpike,
    ] {
        assert!(a.iter().any(|r| r.scenario == s), "{s:?} missing");
    }
}

#[test]
fn scenarios_have_their_signatures() {
    let rows = generate(&SynthConfig::new(3, 20_000));
    let mean = |s: Scenario, f: &str| {
        let v: Vec<f32> = rows
            .iter()
            .filter(|r| r.scenario == s)
            .filter_map(|r| r.txn.features.by_name(f))
            .collect();
        v.iter().sum::<f32>() / v.len().max(1) as f32
    };
    assert!(mean(Scenario::CardTesting, "small_count_1h") > 2.0);
    assert!(mean(Scenario::Normal, "small_count_1h") < 0.5);
    assert!(mean(Scenario::AccountTakeover, "device_new") > 0.5);
    assert!(mean(Scenario::Normal, "device_new") < 0.1);
    assert!(mean(Scenario::AccountTakeover, "amount_ratio") > 3.0);
    assert!(
        mean(Scenario::CompromisedTerminal, "merchant_txn_count_1h")
            > 2.0 * mean(Scenario::Normal, "merchant_txn_count_1h") + 1.0
    );
    assert!(
        mean(Scenario::VelocitySpike, "txn_count_1h")
            > mean(Scenario::Normal, "txn_count_1h") + 1.0
    );
    // Card-present rows have a missing device flag.
    assert!(rows
        .iter()
        .filter(|r| r.txn.channel == Channel::Pos)
        .all(|r| r.txn.features.by_name("device_new").is_none()));
}

/// Raw rows carry no velocity feature; `generate` is raw + the state engine.
#[test]
fn raw_rows_leave_velocity_to_the_state_engine() {
    let cfg = SynthConfig::new(5, 2_000);
    let raw = generate_raw(&cfg);
    let names: Vec<String> = state_config()
        .features
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert!(raw
        .iter()
        .all(|r| names.iter().all(|n| r.txn.features.by_name(n).is_none())));
    assert!(raw.iter().all(|r| r.txn.merchant != 0));
    let full = generate(&cfg);
    assert!(full
        .iter()
        .skip(100)
        .any(|r| r.txn.features.by_name("txn_count_24h").unwrap_or(0.0) > 0.0));
    let mut again = raw.clone();
    compute_state(&mut again);
    for (a, b) in again.iter().zip(&full) {
        let (x, y) = (a.txn.features.values(), b.txn.features.values());
        assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
}

#[test]
fn csv_has_header_and_rows() {
    let rows = generate(&SynthConfig::new(1, 200));
    let mut buf = Vec::new();
    write_csv(&rows, &mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("id,entity,timestamp_ms,device,merchant,amount,currency"));
    assert!(header.ends_with("is_fraud,scenario"));
    let cols = header.split(',').count();
    assert_eq!(lines.clone().count(), 200);
    assert!(lines.all(|l| l.split(',').count() == cols));
}
