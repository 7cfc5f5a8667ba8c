//! Exact windows (`exact = true`): every feature equals the aggregate over the events
//! at `(t - W, t]` seen before it (pandas' `rolling(W, closed="right")` over the stream
//! so far), on generated streams with out-of-order events and delayed labels; past
//! `max_events` they answer from their buckets and say so; snapshots keep them.

use super::*;
use risk_core::state::{Agg, Current, FeatureDef, Filter, KeySource, StateEngine};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const LATE: i64 = 60_000;

fn h(n: u64) -> Duration {
    Duration::from_secs(n * 3_600)
}

fn small(e: &Ev) -> bool {
    (e.amount as f32) < 5.0
}
fn all(_: &Ev) -> bool {
    true
}

struct Ref {
    def: FeatureDef,
    merchant: bool,
    pass: fn(&Ev) -> bool,
}

fn features(max_events: u32) -> Vec<Ref> {
    let f = |name: &str, k: KeySource, agg: Agg, w: Duration, b: u32| {
        FeatureDef::new(name, k, agg).window(w, b).exact(max_events)
    };
    let card = |def: FeatureDef| Ref {
        def,
        merchant: false,
        pass: all,
    };
    let lt5 = Filter::Range {
        field: "amount".into(),
        gt: None,
        ge: None,
        lt: Some(5.0),
        le: None,
    };
    vec![
        card(f("c_count_1h", KeySource::Entity, Agg::Count, h(1), 12)),
        card(
            f("c_count_1h_inc", KeySource::Entity, Agg::Count, h(1), 12).current(Current::Include),
        ),
        card(f("c_sum_24h", KeySource::Entity, Agg::Sum, h(24), 24)),
        card(f("c_avg_24h", KeySource::Entity, Agg::Avg, h(24), 24)),
        card(f("c_min_24h", KeySource::Entity, Agg::Min, h(24), 24)),
        card(f("c_max_24h_inc", KeySource::Entity, Agg::Max, h(24), 24).current(Current::Include)),
        card(f("c_std_24h", KeySource::Entity, Agg::Stddev, h(24), 24)),
        card(f("c_ratio_7d", KeySource::Entity, Agg::Ratio, h(168), 7)),
        // 30 days at one-hour buckets: as exact as the others.
        card(f("c_sum_30d", KeySource::Entity, Agg::Sum, h(720), 720)),
        Ref {
            def: f("c_small_1h", KeySource::Entity, Agg::Count, h(1), 12).filter(lt5),
            merchant: false,
            pass: small,
        },
        Ref {
            def: f("m_count_1h", KeySource::Merchant, Agg::Count, h(1), 6),
            merchant: true,
            pass: all,
        },
        Ref {
            def: f(
                "m_fraud_2d",
                KeySource::Merchant,
                Agg::FraudCount,
                h(48),
                48,
            )
            .delay(h(24)),
            merchant: true,
            pass: all,
        },
        Ref {
            def: f("m_risk_2d", KeySource::Merchant, Agg::FraudRate, h(48), 48).delay(h(24)),
            merchant: true,
            pass: all,
        },
    ]
}

/// A key's clock and the events that entered it: (effective time, event index).
#[derive(Default)]
struct Hist {
    clock: i64,
    events: Vec<(i64, usize)>,
}

/// The sliding window over the events seen, as pandas would compute it.
fn want(r: &Ref, evs: &[Ev], i: usize, te: i64, hist: &Hist, frauds: &HashSet<usize>) -> f64 {
    let d = &r.def;
    let w = d.window.as_millis() as i64;
    let dl = d.delay.as_millis() as i64;
    let (s, e) = (te - dl - w, te - dl);
    let mut win: Vec<usize> = hist
        .events
        .iter()
        .filter(|&&(t, k)| t > s && t <= e && (r.pass)(&evs[k]))
        .map(|&(_, k)| k)
        .collect();
    if d.current == Current::Include && (r.pass)(&evs[i]) {
        win.push(i);
    }
    let vals: Vec<f64> = win.iter().map(|&k| evs[k].amount as f32 as f64).collect();
    let n = vals.len() as f64;
    let sum: f64 = vals.iter().sum();
    let nan = f64::NAN;
    match d.agg {
        Agg::Count => n,
        Agg::Sum => sum,
        Agg::Avg if n > 0.0 => sum / n,
        Agg::Min if n > 0.0 => vals.iter().cloned().fold(f64::INFINITY, f64::min),
        Agg::Max if n > 0.0 => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        Agg::Stddev if n > 0.0 => {
            let m = sum / n;
            (vals.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n).sqrt()
        }
        Agg::Ratio if n > 0.0 => evs[i].amount as f32 as f64 / (sum / n),
        Agg::FraudCount => win.iter().filter(|k| frauds.contains(k)).count() as f64,
        Agg::FraudRate if n > 0.0 => win.iter().filter(|k| frauds.contains(k)).count() as f64 / n,
        _ => nan,
    }
}

fn same(agg: Agg, got: f32, want: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    let w = want as f32;
    match agg {
        Agg::Count | Agg::Min | Agg::Max | Agg::FraudCount => got == w,
        Agg::Stddev => (got - w).abs() <= 1e-3 * w.abs().max(1.0),
        _ => (got - w).abs() <= 1e-5 * w.abs().max(1.0),
    }
}

fn engine(refs: &[Ref], max_keys: usize) -> (StateEngine, Arc<FeatureSchema>) {
    let cfg = StateConfig {
        features: refs.iter().map(|r| r.def.clone()).collect(),
        max_lateness: Duration::from_millis(LATE as u64),
        max_keys,
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    (st, s)
}

fn merchant_key(e: &Ev) -> Option<u32> {
    (e.merchant != 0).then_some(e.merchant)
}

/// Drives `evs` through `st`, checking every exact feature against the sliding window;
/// a quarter of the transactions are reported fraudulent 40 events later. Returns the
/// values checked.
fn check(st: &StateEngine, s: &Arc<FeatureSchema>, refs: &[Ref], evs: &[Ev]) -> usize {
    let mut cards: HashMap<u64, Hist> = HashMap::new();
    let mut merchants: HashMap<u32, Hist> = HashMap::new();
    let mut frauds = HashSet::new();
    let mut checked = 0;
    for i in 0..evs.len() {
        if i >= 40 && evs[i - 40].id.is_multiple_of(4) {
            st.report_label(TxnId(evs[i - 40].id), true, evs[i].ts)
                .unwrap();
            frauds.insert(i - 40);
        }
        let e = &evs[i];
        let mut t = e.txn(s);
        st.apply(&mut t);
        let te_of = |h: &Hist| {
            let clock = h.clock.max(e.ts);
            if clock - e.ts <= LATE {
                e.ts
            } else {
                clock
            }
        };
        let ct = te_of(cards.entry(e.card).or_default());
        let mt = merchant_key(e).map(|m| te_of(merchants.entry(m).or_default()));
        for r in refs {
            let got = t.features.by_name(&r.def.name).unwrap_or(f32::NAN);
            let (hist, te) = if r.merchant {
                match mt {
                    Some(te) => (&merchants[&e.merchant], te),
                    None => {
                        assert!(got.is_nan(), "{}: no merchant, got {got}", r.def.name);
                        continue;
                    }
                }
            } else {
                (&cards[&e.card], ct)
            };
            let w = want(r, evs, i, te, hist, &frauds);
            assert!(
                same(r.def.agg, got, w),
                "event {i} ({e:?}): {} = {got}, the sliding window says {w}",
                r.def.name
            );
            checked += 1;
        }
        let c = cards.get_mut(&e.card).unwrap();
        c.clock = c.clock.max(e.ts);
        c.events.push((ct, i));
        if let (Some(m), Some(te)) = (merchant_key(e), mt) {
            let h = merchants.get_mut(&m).unwrap();
            h.clock = h.clock.max(e.ts);
            h.events.push((te, i));
        }
    }
    checked
}

#[test]
fn exact_windows_equal_the_sliding_window_on_out_of_order_streams_with_labels() {
    let refs = features(65_536);
    let (st, s) = engine(&refs, 1_000_000);
    let evs = stream(11, 5_000, 30, 12);
    let n = check(&st, &s, &refs, &evs);
    assert!(n > 60_000, "{n}");
    let stats = st.stats();
    assert_eq!(stats.exact_fallback, 0, "nothing past max_events");
    assert!(
        stats.late > 0,
        "the stream must have events past the lateness bound"
    );
    assert!(stats.labels > 500, "{}", stats.labels);
}

#[test]
fn past_max_events_a_window_answers_from_its_buckets_and_counts_it() {
    let exact = FeatureDef::new("exact", KeySource::Entity, Agg::Count)
        .window(h(24), 24)
        .exact(8);
    let buckets = FeatureDef::new("buckets", KeySource::Entity, Agg::Count).window(h(24), 24);
    let cfg = StateConfig {
        features: vec![exact, buckets],
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let mut fell_back = 0;
    for i in 0..40 {
        let e = Ev {
            id: i + 1,
            card: 1,
            merchant: 0,
            device: 0,
            // One every 10 minutes: the first 8 fit, then the window holds more.
            ts: T0 + i as i64 * 10 * MIN,
            amount: 10.0,
            channel: Channel::Pos,
            country: "US",
        };
        let mut t = e.txn(&s);
        st.apply(&mut t);
        let (x, b) = (
            t.features.by_name("exact").unwrap(),
            t.features.by_name("buckets").unwrap(),
        );
        if i <= 8 {
            assert_eq!(x, i as f32, "exact while the key holds everything");
        } else {
            assert_eq!(x, b, "past the bound: the buckets' value");
            fell_back += 1;
        }
    }
    assert_eq!(st.stats().exact_fallback, fell_back);
}

#[test]
fn a_snapshot_keeps_exact_windows() {
    let refs = features(65_536);
    let evs = stream(12, 3_000, 20, 8);
    let (a, s) = engine(&refs, 1_000_000);
    for e in &evs[..1_500] {
        a.apply(&mut e.txn(&s));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    a.snapshot(&path).unwrap();
    let (b, _) = engine(&refs, 1_000_000);
    assert!(b.restore(&path).unwrap() > 0);
    for e in &evs[1_500..] {
        let (mut x, mut y) = (e.txn(&s), e.txn(&s));
        a.apply(&mut x);
        b.apply(&mut y);
        for r in &refs {
            let (p, q) = (
                x.features.by_name(&r.def.name),
                y.features.by_name(&r.def.name),
            );
            assert!(
                p == q || p.is_some_and(f32::is_nan) && q.is_some_and(f32::is_nan),
                "{}: {p:?} live, {q:?} restored",
                r.def.name
            );
        }
    }
}

#[test]
fn exact_definitions_out_of_bounds_are_refused_by_name() {
    let base = |agg| FeatureDef::new("x", KeySource::Entity, agg).window(h(1), 12);
    let cases = [
        (base(Agg::Distinct).of("device").exact(10), "exact"),
        (base(Agg::SinceLast).exact(10), "exact"),
        (base(Agg::Count).exact(0), "max_events"),
        (base(Agg::Count).exact(70_000), "max_events"),
    ];
    for (def, what) in cases {
        let cfg = StateConfig {
            features: vec![def.clone()],
            ..StateConfig::default()
        };
        let s = schema(&cfg);
        let e = StateEngine::new(cfg, s, clock(T0)).expect_err("refused");
        let m = e.to_string();
        assert!(m.contains("(x)") && m.contains(what), "{def:?}: {m}");
    }
}

/// From risk.toml, with an outcome filter: declined transactions enter after the
/// decision, at their own times.
#[test]
fn risk_toml_takes_exact_windows_and_refuses_max_events_alone() {
    let toml = r#"
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]

[rules.scorer]
kind = "constant"
probability = 0.9

[thresholds]
approve_below = 0.3
decline_at = 0.7

[[state.features]]
name = "card_declines_2h"
key = "card"
agg = "count"
window = "2h"
buckets = 2
outcome = ["decline"]
exact = true
max_events = 500
"#;
    let load = |t: &str| {
        Engine::from_toml_str(
            t,
            std::path::Path::new("."),
            std::path::Path::new("risk.toml"),
            &ScorerRegistry::default(),
        )
    };
    let e = load(toml).unwrap();
    let f = &e.state().unwrap().config().features[0];
    assert!(f.exact && f.max_events == 500);
    let txn = |id: u64, ts: i64| {
        Transaction::builder(e.schema())
            .id(id)
            .entity(5)
            .timestamp_ms(ts)
            .amount(10.0, "USD")
            .build()
            .unwrap()
    };
    let mut seen = Vec::new();
    for i in 0..6u64 {
        let ts = T0 + i as i64 * 50 * MIN;
        assert_eq!(e.decide(&txn(i + 1, ts)).unwrap().action, Action::Decline);
        // A probe a millisecond later reads the declines so far (it is no decline).
        let mut probe = txn(100 + i, ts + 1);
        e.state().unwrap().apply(&mut probe);
        seen.push(probe.features.by_name("card_declines_2h").unwrap());
    }
    // Declines 50 minutes apart: (t - 2h, t] holds three at most (buckets of one hour
    // would hold four).
    assert_eq!(seen, vec![1.0, 2.0, 3.0, 3.0, 3.0, 3.0]);
    let bad = toml.replace("exact = true\n", "");
    let err = load(&bad).expect_err("refused").to_string();
    assert!(
        err.contains("max_events") && err.contains("exact = true"),
        "{err}"
    );
}

/// The engine's exact windows equal pandas' `rolling(W, closed="right")` on every
/// transaction of `testdata/state/exact_windows.csv` (written by
/// `tools/exact_windows.py`: a stream with out-of-order events, each transaction's
/// features over the transactions seen before it).
#[test]
fn exact_windows_equal_pandas_rolling() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/state/exact_windows.csv"
    );
    let text = std::fs::read_to_string(path).expect("testdata/state/exact_windows.csv");
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let feats: [(&str, Agg, u64, bool); 7] = [
        ("c_count_1h", Agg::Count, 1, false),
        ("c_sum_1h", Agg::Sum, 1, false),
        ("c_avg_24h", Agg::Avg, 24, false),
        ("c_min_24h", Agg::Min, 24, false),
        ("c_max_24h", Agg::Max, 24, true),
        ("c_std_24h", Agg::Stddev, 24, true),
        ("c_sum_7d", Agg::Sum, 168, true),
    ];
    let cfg = StateConfig {
        features: feats
            .iter()
            .map(|&(name, agg, hours, inc)| {
                let cur = if inc {
                    Current::Include
                } else {
                    Current::Exclude
                };
                FeatureDef::new(name, KeySource::Entity, agg)
                    .window(h(hours), hours as u32)
                    .current(cur)
                    .exact(4_096)
            })
            .collect(),
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let mut checked = 0;
    for line in lines {
        let v: Vec<&str> = line.split(',').collect();
        let num = |n: &str| v[col(n)].parse::<f64>().unwrap();
        let mut t = Transaction::builder(&s)
            .id(num("id") as u64)
            .entity(num("card") as u64)
            .timestamp_ms(num("ts") as i64)
            .amount(num("amount"), "USD")
            .build()
            .unwrap();
        st.apply(&mut t);
        for &(name, agg, ..) in &feats {
            let got = t.features.by_name(name).unwrap_or(f32::NAN);
            let want = num(name);
            assert!(
                same(agg, got, want),
                "transaction {}: {name} = {got}, pandas {want}",
                v[0]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 3_000 * feats.len());
    assert_eq!(st.stats().late, 0, "every event within the lateness bound");
}
