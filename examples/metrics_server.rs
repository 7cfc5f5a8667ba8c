//! Serves an engine's Prometheus metrics at `http://ADDR/metrics` while it decides
//! synthetic transactions at a steady rate: point a Prometheus scrape job at it.
//!
//! ```text
//! cargo run --release --example metrics_server -- [--addr 127.0.0.1:9464] [--rate 2000] [--seconds 0]
//! ```
//! Tiers: the default rule set and the native XGBoost model (`testdata/models/xgb_fraud.json`).
//! `--seconds 0` runs until killed. The library starts no server; this example is the host.

use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::Engine;
use risk_examples::metrics_http::MetricsEndpoint;
use risk_gpu::trees::{XgbModel, XgbScorer};
use risk_rules::{RuleScorer, RuleSet, DEFAULT_RULES};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str, default: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
            .unwrap_or_else(|| default.to_owned())
    };
    let addr = opt("--addr", "127.0.0.1:9464");
    let rate: f64 = opt("--rate", "2000").parse()?;
    let seconds: f64 = opt("--seconds", "0").parse()?;
    let s = schema();
    let xgb = Arc::new(XgbModel::from_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/xgb_fraud.json"
    ))?);
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(RuleScorer::new(
            RuleSet::compile(DEFAULT_RULES, "default.rules", &s)?,
            s.clone(),
        )))
        .fast(Arc::new(XgbScorer::new(xgb, &s, 0.3, 3)?))
        .build()?;
    let _endpoint = MetricsEndpoint::start(engine.clone(), &addr)?;
    println!("serving http://{addr}/metrics; deciding {rate} transactions/s");
    let rows = generate(&SynthConfig::new(42, 50_000));
    let t0 = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut next = t0;
    for (k, r) in rows.iter().cycle().enumerate() {
        if seconds > 0.0 && t0.elapsed().as_secs_f64() >= seconds {
            break;
        }
        engine.decide(&r.txn)?;
        next += gap;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if k % 100_000 == 99_999 {
            let m = engine.metrics();
            println!(
                "{} decisions, p99 {} ns",
                m.decisions, m.total_latency.p99_ns
            );
        }
    }
    Ok(())
}
