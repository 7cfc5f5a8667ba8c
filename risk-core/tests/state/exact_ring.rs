//! Exact windows past `max_events`: the ring their reads fall back to is kept from a
//! key's first dropped event on, built then from the log (events and label marks), and
//! answers what a bucketed twin of the feature answers.

use super::*;
use risk_core::state::{Agg, FeatureDef, KeySource, StateEngine};
use std::time::Duration;

fn h(n: u64) -> Duration {
    Duration::from_secs(n * 3_600)
}

/// Past `max_events` every kind of exact window answers what its bucketed twin answers,
/// over 90 days: a 30-day window at one-hour buckets (a ring of several occupancy words)
/// whose slots are reused with the words of events that left (an exact ring writes a
/// slot afresh instead of clearing it), sums of amounts exact in binary (quarters), so
/// the fold of the buckets and the twin's running total agree bit for bit.
#[test]
fn past_max_events_every_kind_answers_its_buckets() {
    let kinds = [
        ("count", Agg::Count),
        ("sum", Agg::Sum),
        ("avg", Agg::Avg),
        ("min", Agg::Min),
        ("max", Agg::Max),
    ];
    let mut features = Vec::new();
    for (name, agg) in kinds {
        for (w, b, tag, max) in [(h(720), 720, "30d", 6), (h(1), 12, "1h", 2)] {
            let def = |p: &str| {
                FeatureDef::new(&format!("{p}_{name}_{tag}"), KeySource::Entity, agg).window(w, b)
            };
            features.push(def("x").exact(max));
            features.push(def("b"));
        }
    }
    let cfg = StateConfig {
        features,
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let mut ts = T0;
    let (mut checked, mut both) = (0, 0);
    for i in 0..2_000u64 {
        // Bursts of a few minutes apart, then gaps of up to two days.
        ts += if i % 9 < 6 {
            (i % 5 + 1) as i64 * MIN
        } else {
            ((i * 7_919) % 48) as i64 * 60 * MIN
        };
        let e = Ev {
            id: i + 1,
            card: 1,
            merchant: 0,
            device: 0,
            ts,
            amount: ((i * 37) % 400) as f64 * 0.25,
            channel: Channel::Pos,
            country: "US",
        };
        let mut t = e.txn(&s);
        let before = st.stats().exact_fallback;
        st.apply(&mut t);
        // Two exact groups (one per window, every column); a 1-hour window whose log
        // answered covers exactly its hour, which its buckets need not.
        let tags: &[&str] = if st.stats().exact_fallback - before == 2 {
            both += 1;
            &["30d", "1h"]
        } else {
            &["30d"]
        };
        for (name, _) in kinds {
            for &tag in tags {
                // `None`: missing (no event in the window for min / max / avg).
                let x = t.features.by_name(&format!("x_{name}_{tag}"));
                let b = t.features.by_name(&format!("b_{name}_{tag}"));
                assert_eq!(
                    x.map(f32::to_bits),
                    b.map(f32::to_bits),
                    "event {i}: {name} {tag}: exact {x:?} against buckets {b:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0 && both > 100, "{checked} {both}");
    assert!(
        st.stats().exact_fallback > 1_000,
        "the 30-day windows must fall back: {}",
        st.stats().exact_fallback
    );
}

/// The ring built at the first drop holds the events of its oldest bucket that are older
/// than every window a read can ask for (the log keeps them until then): the bucketed
/// fallback equals its twin's. 1-hour window of 5-minute buckets, `max_events` 3; the
/// first two events (bucket 0) are an hour old when the third comes, still folded by
/// a read at 1:04:40.
#[test]
fn a_ring_built_at_the_first_drop_holds_its_oldest_bucket() {
    let def = |n: &str, agg| FeatureDef::new(n, KeySource::Entity, agg).window(h(1), 12);
    let cfg = StateConfig {
        features: vec![
            def("x_count", Agg::Count).exact(3),
            def("x_sum", Agg::Sum).exact(3),
            def("b_count", Agg::Count),
            def("b_sum", Agg::Sum),
        ],
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let sec = 1_000;
    let times = [
        0,
        3 * MIN,
        64 * MIN,
        64 * MIN + 10 * sec,
        64 * MIN + 20 * sec,
    ];
    let times = times
        .into_iter()
        .chain([64 * MIN + 30 * sec, 64 * MIN + 40 * sec]);
    let mut fell = 0;
    let mut last = (0.0, 0.0);
    for (i, dt) in times.enumerate() {
        let e = Ev {
            id: i as u64 + 1,
            card: 1,
            merchant: 0,
            device: 0,
            ts: T0 + dt,
            amount: (1u64 << i) as f64,
            channel: Channel::Pos,
            country: "US",
        };
        let mut t = e.txn(&s);
        let before = st.stats().exact_fallback;
        st.apply(&mut t);
        let f = |n: &str| t.features.by_name(n).unwrap();
        if st.stats().exact_fallback > before {
            fell += 1;
            assert_eq!(f("x_count").to_bits(), f("b_count").to_bits(), "event {i}");
            assert_eq!(f("x_sum").to_bits(), f("b_sum").to_bits(), "event {i}");
        }
        last = (f("x_count"), f("x_sum"));
    }
    assert_eq!(fell, 1, "only the last read falls back");
    // Bucket 0 (1 + 2) and bucket 12 (4 + 8 + 16 + 32).
    assert_eq!(last, (6.0, 63.0));
}

/// Labels that came while the log answered every read reach the ring built at the
/// first drop (from the log's marks), and labels after it reach both: a delayed fraud
/// count past `max_events` equals its bucketed twin's.
#[test]
fn labels_before_the_first_drop_reach_the_ring_built_there() {
    let def = |n: &str| {
        FeatureDef::new(n, KeySource::Merchant, Agg::FraudCount)
            .window(h(2), 24)
            .delay(h(1))
    };
    let cfg = StateConfig {
        features: vec![def("x").exact(4), def("b")],
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let (mut fell, mut last) = (0, 0.0);
    for i in 0..20u64 {
        let ts = T0 + i as i64 * 10 * MIN;
        // Transactions 1 and 2 marked before the log drops anything (at the fifth
        // event), transaction 4 after.
        if i == 3 {
            assert_eq!(st.report_label(TxnId(1), true, ts).unwrap(), 2);
            assert_eq!(st.report_label(TxnId(2), true, ts).unwrap(), 2);
        }
        if i == 6 {
            assert_eq!(st.report_label(TxnId(4), true, ts).unwrap(), 2);
        }
        let e = Ev {
            id: i + 1,
            card: i + 1,
            merchant: 1,
            device: 0,
            ts,
            amount: 10.0,
            channel: Channel::Pos,
            country: "US",
        };
        let mut t = e.txn(&s);
        let before = st.stats().exact_fallback;
        st.apply(&mut t);
        let (x, b) = (
            t.features.by_name("x").unwrap(),
            t.features.by_name("b").unwrap(),
        );
        if st.stats().exact_fallback > before {
            fell += 1;
            assert_eq!(
                x.to_bits(),
                b.to_bits(),
                "event {i}: exact {x} against buckets {b}"
            );
        }
        if i == 9 {
            last = x;
        }
    }
    assert!(fell >= 14, "{fell}");
    // At 1:30 the window is the buckets up to 0:30: transactions 1, 2 and 4 marked.
    assert_eq!(last, 3.0);
}
