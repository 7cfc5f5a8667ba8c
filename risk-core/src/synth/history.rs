//! History features: what the entity's and its neighbours' past say about a
//! transaction, beyond the fast tier's velocity windows. Computed by the SDK's own
//! entity state (the aggregates an engine built with [`history_config`] computes at
//! serving), with each fraud label fed to it when it arrived (`label_time_ms`), so no
//! row sees a label from its future.
//!
//! They are the inputs of a history-aware scorer (a non-LLM deep option): links to
//! confirmed fraud through a shared device, e-mail or merchant; how many cards a device
//! or a merchant serves; how many devices and categories a card uses; how far the
//! hour and amount sit from the card's own.

use super::{schema_builder, state_config, Labeled};
use crate::schema::FeatureSchema;
use crate::state::{Agg, FeatureDef, KeySource, StateConfig, StateEngine};
use std::sync::Arc;
use std::time::Duration;

/// The history features, in [`history_schema`] order after [`super::FEATURES`].
pub const HISTORY: [&str; 12] = [
    "device_fraud_90d",
    "email_fraud_90d",
    "merchant_fraud_90d",
    "merchant_fraud_rate_90d",
    "device_cards_30d",
    "card_devices_30d",
    "merchant_cards_7d",
    "card_mccs_90d",
    "card_hour_ratio_90d",
    "card_amount_std_30d",
    "card_count_90d",
    "device_since_last",
];

/// [`state_config`] plus the [`HISTORY`] features.
pub fn history_config() -> StateConfig {
    let d = |n: u64| Duration::from_secs(n * 86_400);
    let mut c = state_config();
    c.features.extend([
        FeatureDef::new(HISTORY[0], KeySource::Device, Agg::FraudCount).window(d(90), 30),
        FeatureDef::new(HISTORY[1], KeySource::Email, Agg::FraudCount).window(d(90), 30),
        FeatureDef::new(HISTORY[2], KeySource::Merchant, Agg::FraudCount).window(d(90), 30),
        FeatureDef::new(HISTORY[3], KeySource::Merchant, Agg::FraudRate).window(d(90), 30),
        FeatureDef::new(HISTORY[4], KeySource::Device, Agg::Distinct)
            .of("entity")
            .window(d(30), 30),
        FeatureDef::new(HISTORY[5], KeySource::Entity, Agg::Distinct)
            .of("device")
            .window(d(30), 30),
        FeatureDef::new(HISTORY[6], KeySource::Merchant, Agg::Distinct)
            .of("entity")
            .window(d(7), 7),
        FeatureDef::new(HISTORY[7], KeySource::Entity, Agg::Distinct)
            .of("mcc")
            .window(d(90), 30),
        FeatureDef::new(HISTORY[8], KeySource::Entity, Agg::Ratio)
            .of("hour")
            .window(d(90), 30),
        FeatureDef::new(HISTORY[9], KeySource::Entity, Agg::Stddev)
            .of("amount")
            .window(d(30), 30),
        FeatureDef::new(HISTORY[10], KeySource::Entity, Agg::Count).window(d(90), 30),
        FeatureDef::new(HISTORY[11], KeySource::Device, Agg::SinceLast),
    ]);
    c
}

/// [`super::schema`] with the [`HISTORY`] features appended.
pub fn history_schema() -> Arc<FeatureSchema> {
    HISTORY
        .iter()
        .fold(schema_builder(), |b, n| b.numeric(n))
        .build()
        .expect("the synthetic history schema is valid")
}

/// The [`HISTORY`] features of `rows` (in their order; row-major, `rows × HISTORY.len()`,
/// `NaN` = missing), computed by a fresh [`StateEngine`] over [`history_config`]. Each
/// fraud label is reported when it arrived: before the first transaction after its
/// `label_time_ms`. Returns the values and how many labels entity state took.
pub fn compute_history(rows: &[Labeled]) -> (Vec<f32>, usize) {
    let clock = crate::clock::ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    let hs = history_schema();
    let mut cfg = history_config();
    cfg.max_pending_labels = rows.len().max(1);
    let st = StateEngine::new(cfg, hs.clone(), clock)
        .expect("the synthetic history definitions are valid");
    let mut labels: Vec<(i64, crate::txn::TxnId)> = rows
        .iter()
        .filter_map(|r| r.label_time_ms.map(|l| (l, r.txn.id)))
        .collect();
    labels.sort_unstable_by_key(|l| l.0);
    let base = hs.len() - HISTORY.len();
    let (mut next, mut fed) = (0, 0);
    let mut out = Vec::with_capacity(rows.len() * HISTORY.len());
    for r in rows {
        let t = r.txn.timestamp_ms;
        while next < labels.len() && labels[next].0 < t {
            let (at, id) = labels[next];
            fed += st
                .report_label(id, true, at)
                .map_or(0, |n| (n > 0) as usize);
            next += 1;
        }
        let mut txn = r.txn.clone();
        let mut f = hs.features();
        f.values_mut()[..base].copy_from_slice(&r.txn.features.values()[..base]);
        txn.features = f;
        st.apply(&mut txn);
        out.extend_from_slice(&txn.features.values()[base..]);
    }
    (out, fed)
}

#[cfg(test)]
mod tests {
    use super::super::{generate_raw, Scenario, SynthConfig};
    use super::*;

    fn col(v: &[f32], k: usize) -> impl Iterator<Item = f32> + '_ {
        v.chunks(HISTORY.len()).map(move |r| r[k])
    }

    #[test]
    fn links_to_confirmed_fraud_come_from_labels_that_arrived() {
        let rows = generate_raw(&SynthConfig::realistic(2, 150_000));
        let (h, fed) = compute_history(&rows);
        assert_eq!(h.len(), rows.len() * HISTORY.len());
        assert!(fed > 0);
        // Shared identities reuse a device from an earlier, often already labelled fraud.
        let linked = |s: Scenario| {
            let (mut n, mut hit) = (0, 0);
            for (r, v) in rows.iter().zip(col(&h, 0)) {
                if r.scenario == s {
                    n += 1;
                    hit += (v > 0.0) as usize;
                }
            }
            hit as f64 / n.max(1) as f64
        };
        assert!(
            linked(Scenario::SharedIdentity) > 0.3,
            "{}",
            linked(Scenario::SharedIdentity)
        );
        assert!(
            linked(Scenario::Normal) < 0.01,
            "{}",
            linked(Scenario::Normal)
        );
        // No label arrived: no link at all.
        let mut blind = rows.clone();
        blind.iter_mut().for_each(|r| r.label_time_ms = None);
        let (h, fed) = compute_history(&blind);
        assert_eq!(fed, 0);
        for (k, name) in HISTORY.iter().enumerate().take(4) {
            assert!(col(&h, k).all(|v| v.is_nan() || v == 0.0), "{name}");
        }
        // The non-label features do not depend on labels.
        assert!(col(&h, 10).any(|v| v > 5.0));
    }
}
