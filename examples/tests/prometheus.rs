//! A real Prometheus server (started by `tools/servers.sh`, scraping 127.0.0.1:9464 every
//! second) scrapes an engine's `/metrics` while it decides; the test queries Prometheus's
//! HTTP API until the decision counts it stored equal the engine's own, then checks the
//! latency histogram arrived with a p99 consistent with the engine's. Fails loudly when
//! the server is not there.

use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{Action, Engine};
use risk_examples::metrics_http::MetricsEndpoint;
use risk_gpu::trees::{XgbModel, XgbScorer};
use risk_rules::{RuleScorer, RuleSet, DEFAULT_RULES};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn query(base: &str, q: &str) -> Result<Value, String> {
    let r = ureq::get(&format!("{base}/api/v1/query"))
        .query("query", q)
        .timeout(Duration::from_secs(5))
        .call()
        .map_err(|e| e.to_string())?;
    let text = r.into_string().map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// The single value of an instant query, if the query returned one sample.
fn scalar(v: &Value) -> Option<f64> {
    let r = v["data"]["result"].as_array()?;
    if r.len() != 1 {
        return None;
    }
    r[0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_the_engines_counts_and_latency() {
    let base =
        std::env::var("RISK_PROMETHEUS_URL").unwrap_or_else(|_| "http://127.0.0.1:9095".into());
    let target =
        std::env::var("RISK_PROMETHEUS_TARGET").unwrap_or_else(|_| "127.0.0.1:9464".into());
    query(&base, "up").unwrap_or_else(|e| {
        panic!("no Prometheus at {base} ({e}): run `tools/servers.sh start prometheus` (apt-get install prometheus)")
    });
    let s = schema();
    let xgb = Arc::new(
        XgbModel::from_file(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/models/xgb_fraud.json"
        ))
        .unwrap(),
    );
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(RuleScorer::new(
            RuleSet::compile(DEFAULT_RULES, "default.rules", &s).unwrap(),
            s.clone(),
        )))
        .fast(Arc::new(XgbScorer::new(xgb, &s, 0.3, 3).unwrap()))
        .build()
        .unwrap();
    let endpoint = MetricsEndpoint::start(engine.clone(), &target)
        .unwrap_or_else(|e| panic!("cannot serve {target} for Prometheus to scrape: {e}"));
    for r in generate(&SynthConfig::new(3, 5_000)) {
        engine.decide(&r.txn).unwrap();
    }
    let m = engine.metrics();
    let want = m.decisions as f64;
    // Scrapes come every second; the first sample can take several. Bounded: a failure,
    // not a pace.
    let t0 = Instant::now();
    let got = loop {
        let v = query(&base, "sum(risk_decisions_total)").ok();
        let got = v.as_ref().and_then(scalar);
        if got == Some(want) || t0.elapsed() > Duration::from_secs(90) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(
        got,
        Some(want),
        "Prometheus holds {got:?} decisions, the engine made {want}"
    );
    assert!(endpoint.scrapes.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    for a in Action::ALL {
        let q = format!("risk_decisions_total{{action=\"{}\"}}", a.as_str());
        let v = scalar(&query(&base, &q).unwrap());
        assert_eq!(v, Some(m.action(a) as f64), "{q}");
    }
    let count =
        scalar(&query(&base, "risk_decide_latency_seconds_count{stage=\"total\"}").unwrap());
    assert_eq!(count, Some(m.total_latency.count as f64));
    let p99 = scalar(
        &query(
            &base,
            "histogram_quantile(0.99, sum by (le) (risk_decide_latency_seconds_bucket{stage=\"total\"}))",
        )
        .unwrap(),
    )
    .expect("a p99 from the histogram");
    let own = m.total_latency.p99_ns as f64 / 1e9;
    // Prometheus interpolates inside a bucket (bounds 2.5x apart at most).
    assert!(
        p99 > own / 3.0 && p99 < own * 3.0,
        "Prometheus p99 {p99} s, engine p99 {own} s"
    );
    println!(
        "Prometheus: {got:?} decisions, p99 {:.1} us (engine {:.1} us)",
        p99 * 1e6,
        own * 1e6
    );
}
