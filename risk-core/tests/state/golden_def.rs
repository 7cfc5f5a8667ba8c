// The definitions and stream of the format-7 golden snapshot (`testdata/state/rskstat7.snap`),
// included verbatim by its generator (`tools/golden_rskstat7.sh`, run at the version that
// wrote it) and by the test that reads it (`snapshot_golden.rs`).
fn golden_schema(cfg: &StateConfig) -> Arc<FeatureSchema> {
    let b = FeatureSchema::builder()
        .numeric_required("amount")
        .categorical("channel", &["pos", "ecom", "atm", "moto", "app"])
        .categorical("country", &["US", "GB", "DE", "NG"]);
    cfg.extend_schema(b).build().unwrap()
}

/// Every kind of group: counts, sums, full stats, min / max, a 30-day ring of hourly
/// buckets, distinct, since_last, a delayed fraud rate, exact windows (one that
/// overflows its bound), a filtered count and a merchant source.
fn golden_config() -> StateConfig {
    let h = |n: u64| Duration::from_secs(n * 3_600);
    let card = |n: &str, agg: Agg| FeatureDef::new(n, KeySource::Entity, agg);
    let small = Filter::Range {
        field: "amount".into(),
        gt: None,
        ge: None,
        lt: Some(20.0),
        le: None,
    };
    StateConfig {
        features: vec![
            card("n_1h", Agg::Count).window(h(1), 12),
            card("sum_24h", Agg::Sum).window(h(24), 24),
            card("std_24h", Agg::Stddev).window(h(24), 24),
            card("max_6h", Agg::Max).window(h(6), 12),
            card("n_30d", Agg::Count).window(h(720), 720),
            card("ratio_7d", Agg::Ratio).window(h(168), 7),
            card("small_1h", Agg::Count).window(h(1), 12).filter(small),
            card("countries_24h", Agg::Distinct)
                .of("country")
                .window(h(24), 24),
            card("since", Agg::SinceLast),
            card("fraud_rate", Agg::FraudRate)
                .window(h(48), 48)
                .delay(h(24)),
            card("x_sum_24h", Agg::Sum).window(h(24), 24).exact(3),
            card("x_n_24h", Agg::Count).window(h(24), 24).exact(1_024),
            FeatureDef::new("m_n_1h", KeySource::Merchant, Agg::Count).window(h(1), 6),
        ],
        ..StateConfig::default()
    }
}

/// Transaction `i` of the stream: 40 cards, 15 merchants, minutes apart, now and then
/// a few minutes out of order.
fn golden_txn(s: &Arc<FeatureSchema>, i: u64) -> Transaction {
    let r = |k: u64| {
        let mut x =
            (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 31;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 29)
    };
    let late = if r(1) % 10 == 0 {
        (r(2) % 180_000) as i64
    } else {
        0
    };
    Transaction::builder(s)
        .id(i + 1)
        .entity(1 + r(3) % 40)
        .merchant(&format!("m{}", r(4) % 15))
        .timestamp_ms(1_767_571_200_000 + i as i64 * 170_000 - late)
        .amount(1.0 + (r(5) % 30_000) as f64 / 100.0, "USD")
        .channel([Channel::Pos, Channel::Ecom, Channel::App][(r(6) % 3) as usize])
        .country(["US", "GB", "DE", "NG"][(r(7) % 4) as usize])
        .build()
        .unwrap()
}

/// An engine of [`golden_config`], its clock far after every event.
fn golden_engine() -> (StateEngine, Arc<FeatureSchema>) {
    let cfg = golden_config();
    let s = golden_schema(&cfg);
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(1_767_571_200_000 + 400 * 86_400_000);
    (StateEngine::new(cfg, Arc::clone(&s), clock).unwrap(), s)
}

/// Applies transaction `i`, then (from `labels_from` on, every 7th) reports transaction
/// `i - 39` fraudulent; returns the transaction's features, their bits in hex.
fn golden_step(st: &StateEngine, s: &Arc<FeatureSchema>, i: u64, labels_from: u64) -> String {
    let mut t = golden_txn(s, i);
    st.apply(&mut t);
    if i.is_multiple_of(7) && i >= labels_from {
        st.report_label(TxnId(i - 39), true, t.timestamp_ms)
            .unwrap();
    }
    let bits: Vec<String> = t
        .features
        .values()
        .iter()
        .map(|v| format!("{:08x}", v.to_bits()))
        .collect();
    bits.join(" ")
}
