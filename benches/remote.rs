//! The remote fast tier's cost in `decide`: the engine with its fast tier on MLServer
//! (`tools/servers.sh start mlserver`; `RISK_MLSERVER_URL`, default
//! `http://127.0.0.1:8085`) against the same engine with the native XGBoost scorer, on
//! the same varied rows. The remote tier's own overhead over a raw socket, throughput and
//! hedging figures come from `cargo run --release --example remote_bench`.
//!
//! `kserve_mlserver_tls` is the same MLServer over HTTPS with mutual TLS, through the
//! stunnel proxy `tools/servers.sh` starts (`RISK_MLSERVER_TLS_URL`, default
//! `https://127.0.0.1:8443`; certificates in `RISK_TLS_DIR`, default
//! `<repo>/target/servers/tls`): its excess over `kserve_mlserver` is TLS on pooled
//! keep-alive connections plus the proxy's loopback hop.

use criterion::{black_box, Criterion};
use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{ConstantScorer, Engine, Scorer, Tier};
use risk_gpu::remote::{KServeConfig, RemoteScorer};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn engine(fast: Arc<dyn Scorer>) -> Engine {
    Engine::builder(schema())
        .rules(Arc::new(ConstantScorer::new(0.2)))
        .fast(fast)
        .fast_deadline(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// `decide` with a remote fast tier vs the native one.
pub fn decide(c: &mut Criterion) {
    let url = std::env::var("RISK_MLSERVER_URL").unwrap_or_else(|_| "http://127.0.0.1:8085".into());
    let mut cfg = KServeConfig::new(vec![url], "xgb-fraud");
    cfg.output = Some("predict_proba".into());
    let remote = RemoteScorer::load(&cfg, &schema())
        .unwrap_or_else(|e| panic!("{e}: start MLServer with tools/servers.sh start mlserver"));
    let tls_dir = std::env::var_os("RISK_TLS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/servers/tls"),
        PathBuf::from,
    );
    let tls_url =
        std::env::var("RISK_MLSERVER_TLS_URL").unwrap_or_else(|_| "https://127.0.0.1:8443".into());
    let mut tls = KServeConfig::new(vec![tls_url], "xgb-fraud");
    tls.output = Some("predict_proba".into());
    tls.ca_file = Some(tls_dir.join("ca.pem"));
    tls.client_cert = Some(tls_dir.join("client.pem"));
    tls.client_key = Some(tls_dir.join("client.key"));
    let remote_tls = RemoteScorer::load(&tls, &schema()).unwrap_or_else(|e| {
        panic!("{e}: start MLServer and its TLS proxy with tools/servers.sh start mlserver")
    });
    let model = XgbModel::from_file(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/xgb_fraud.json"),
    )
    .unwrap();
    let native = XgbScorer::new(Arc::new(model), &schema(), 0.3, 3).unwrap();
    let rows: Vec<_> = generate(&SynthConfig::new(42, 1024))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    let mut g = c.benchmark_group("remote/decide");
    for (name, e) in [
        ("native_xgboost", engine(Arc::new(native))),
        ("kserve_mlserver", engine(Arc::new(remote))),
        ("kserve_mlserver_tls", engine(Arc::new(remote_tls))),
    ] {
        let mut i = 0;
        assert_eq!(e.decide(&rows[0]).unwrap().tier, Tier::Fast, "{name}");
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                black_box(e.decide(&rows[i]).unwrap())
            })
        });
    }
    g.finish();
}
