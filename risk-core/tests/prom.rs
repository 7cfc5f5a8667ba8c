//! The OpenMetrics exposition: every counter and histogram with the engine's own values,
//! histograms cumulative and closed by `+Inf`, registered into a registry the host owns,
//! and nothing (no panic, no stale values) once the engine is gone.

use crate::common::*;
use prometheus_client::registry::Registry;
use risk_core::*;
use std::sync::Arc;

/// The value of the sample line `name` (labels included, exactly as exposed).
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn exposition_matches_the_engines_counters_and_histograms() {
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(rules(0.9))
        .fast(Arc::new(ConstantScorer::new(0.1)))
        .build()
        .unwrap();
    for i in 0..1000 {
        e.decide(&txn(&s, i, i % 10)).unwrap();
    }
    let m = e.metrics();
    let t = e.metrics_text();
    assert!(
        t.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );
    assert_eq!(
        sample(&t, r#"risk_decisions_total{action="approve"}"#),
        Some(m.action(Action::Approve) as f64)
    );
    assert_eq!(
        sample(&t, r#"risk_decisions_by_tier_total{tier="fast"}"#),
        Some(1000.0)
    );
    assert_eq!(
        sample(&t, r#"risk_fallbacks_total{cause="timeout"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(&t, r#"risk_circuit_state{tier="fast",state="closed"}"#),
        Some(1.0)
    );
    assert!(
        t.contains(r#"risk_serving_version{target="fast",name="constant",version="0.1""#),
        "{t}"
    );
    // Histogram: cumulative buckets, +Inf equals the count, the sum in seconds.
    let count = sample(&t, r#"risk_decide_latency_seconds_count{stage="total"}"#).unwrap();
    assert_eq!(count, m.total_latency.count as f64);
    let inf = sample(
        &t,
        r#"risk_decide_latency_seconds_bucket{le="+Inf",stage="total"}"#,
    )
    .unwrap();
    assert_eq!(inf, count);
    let mut last = 0.0;
    for l in t
        .lines()
        .filter(|l| l.starts_with(r#"risk_decide_latency_seconds_bucket{stage="total""#))
    {
        let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v >= last, "buckets are cumulative: {l}");
        last = v;
    }
    let sum = sample(&t, r#"risk_decide_latency_seconds_sum{stage="total"}"#).unwrap();
    assert!((sum - m.total_latency.mean_ns * count / 1e9).abs() < 1e-6 * count.max(1.0));
}

#[test]
fn the_host_owns_the_registry_and_a_dropped_engine_reports_nothing() {
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(rules(0.1))
        .build()
        .unwrap();
    e.decide(&txn(&s, 1, 1)).unwrap();
    let mut reg = Registry::default();
    let host = prometheus_client::metrics::counter::Counter::<u64>::default();
    host.inc();
    reg.register("host_requests", "The host's own counter.", host);
    e.register_metrics(&mut reg);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    assert_eq!(sample(&out, "host_requests_total"), Some(1.0));
    assert_eq!(
        sample(&out, r#"risk_decisions_by_tier_total{tier="rules"}"#),
        Some(1.0)
    );
    drop(e);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    assert_eq!(sample(&out, "host_requests_total"), Some(1.0));
    assert!(!out.contains("risk_decisions"), "{out}");
}
