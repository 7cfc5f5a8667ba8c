//! The remote tier (issue [14]) against a real MLServer serving the committed XGBoost
//! model (`tools/servers.sh start mlserver`; `RISK_MLSERVER_URL`, default
//! `http://127.0.0.1:8085`), faults injected by `risk_gpu::remote::FaultProxy`. A server
//! that is not there fails these tests; it never skips them. The TLS tests (`tls.rs`) go
//! through the mutual-TLS proxy in front of it (`RISK_MLSERVER_TLS_URL`, default
//! `https://127.0.0.1:8443`, certificates in `RISK_TLS_DIR`).

mod canned;
mod config;
mod equality;
mod faults;
mod kill;
mod load;
mod tls;

use crate::common::*;
use risk_core::synth::schema;
use risk_core::{Scorer, Transaction};
use risk_gpu::remote::{KServeConfig, RemoteScorer};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

pub const MODEL: &str = "xgb-fraud";

pub fn mlserver_url() -> String {
    std::env::var("RISK_MLSERVER_URL").unwrap_or_else(|_| "http://127.0.0.1:8085".to_owned())
}

pub fn mlserver_addr() -> SocketAddr {
    let url = mlserver_url();
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    host.to_socket_addrs()
        .unwrap_or_else(|e| panic!("RISK_MLSERVER_URL={url}: {e}"))
        .next()
        .unwrap()
}

/// Defaults for `endpoints`, hedging off (tests turn it on), generous load timeout.
pub fn cfg(endpoints: &[String]) -> KServeConfig {
    let mut c = KServeConfig::new(endpoints.to_vec(), MODEL);
    c.output = Some("predict_proba".into());
    c.load_timeout = Duration::from_secs(60);
    c.hedge = None;
    c.warmup_requests = 2;
    c
}

/// Loads and warms up; a missing server fails here, naming how to start it.
pub fn load(c: &KServeConfig) -> Arc<RemoteScorer> {
    let s = RemoteScorer::load(c, &schema()).unwrap_or_else(|e| {
        panic!("{e} (is MLServer running? tools/servers.sh start mlserver; RISK_MLSERVER_URL)")
    });
    s.warmup().unwrap();
    Arc::new(s)
}

pub fn native() -> XgbScorer {
    let model = XgbModel::from_file(models().join("xgb_fraud.json")).unwrap();
    XgbScorer::new(Arc::new(model), &schema(), 0.3, 3).unwrap()
}

/// The first `n` reference rows as transactions with ids 1..=n.
pub fn txns(r: &Reference, n: usize) -> Vec<Transaction> {
    (0..n.min(r.rows))
        .map(|i| {
            let mut t = ref_txn(r, i);
            t.id = risk_core::TxnId(i as u64 + 1);
            t
        })
        .collect()
}

/// The native scorer's probability of `t`.
pub fn want(native: &XgbScorer, t: &Transaction) -> f32 {
    native.score(t).unwrap().probability
}
