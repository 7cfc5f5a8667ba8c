//! A `/metrics` endpoint for an engine: what a host's HTTP stack would serve (the library
//! itself never starts a server). Used by `examples/metrics_server` and by the test that
//! lets a real Prometheus scrape it.

use risk_core::Engine;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running endpoint; stops (and joins) when dropped.
pub struct MetricsEndpoint {
    server: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Scrapes served.
    pub scrapes: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("addr", &self.server.server_addr().to_ip())
            .field("scrapes", &self.scrapes)
            .finish()
    }
}

impl MetricsEndpoint {
    /// Serves `engine.metrics_text()` at `http://{addr}/metrics` (OpenMetrics content
    /// type); anything else is a 404.
    pub fn start(
        engine: Engine,
        addr: &str,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let server = Arc::new(tiny_http::Server::http(addr)?);
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, st, n) = (Arc::clone(&server), Arc::clone(&stop), Arc::clone(&scrapes));
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    if st.load(Ordering::Relaxed) {
                        break;
                    }
                    let resp = if req.url() == "/metrics" {
                        n.fetch_add(1, Ordering::Relaxed);
                        let ct = tiny_http::Header::from_bytes(
                            "Content-Type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )
                        .expect("a valid header");
                        tiny_http::Response::from_string(engine.metrics_text()).with_header(ct)
                    } else {
                        tiny_http::Response::from_string("not found").with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })?;
        Ok(Self {
            server,
            stop,
            thread: Some(thread),
            scrapes,
        })
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
