//! How to reach a model over the Open Inference Protocol, and how hard to try.

use risk_core::secret::{redact_url, Secret};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Tensor element type of the feature input (`datatype` in the V2 protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datatype {
    /// `FP32`: four bytes per value (the default; what tree and ONNX models take).
    Fp32,
    /// `FP64`.
    Fp64,
}

impl Datatype {
    /// The protocol's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Datatype::Fp32 => "FP32",
            Datatype::Fp64 => "FP64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Datatype::Fp32 => 4,
            Datatype::Fp64 => 8,
        }
    }

    /// `FP32` or `FP64` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "FP32" => Some(Datatype::Fp32),
            "FP64" => Some(Datatype::Fp64),
            _ => None,
        }
    }
}

/// How tensors travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// The binary tensor data extension when the server's metadata lists
    /// `binary_tensor_data` (Triton does, MLServer 1.7 does not), JSON otherwise.
    Auto,
    /// JSON tensors always (missing features travel as `null`).
    Json,
    /// The binary extension always; the load fails if the server does not list it.
    Binary,
}

/// Hedged requests (Dean and Barroso, "The Tail at Scale"): when the first attempt has
/// not answered after `percentile` of recent attempts' latencies, a second one goes out
/// (to another healthy endpoint when there is one); the first answer wins and the other
/// is cancelled (its connection is dropped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgeConfig {
    /// Latency percentile of recent successful attempts after which to hedge, in (0, 1).
    pub percentile: f64,
    /// Never hedge sooner than this after the first attempt.
    pub min_delay: Duration,
    /// Most extra load: hedges may be at most this fraction of calls (a token bucket
    /// refilled by every call), in (0, 1].
    pub max_extra: f64,
    /// Successful attempts seen before hedging starts (the percentile needs samples).
    pub min_samples: usize,
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self {
            percentile: 0.95,
            min_delay: Duration::from_micros(500),
            max_extra: 0.05,
            min_samples: 50,
        }
    }
}

/// Retries after a failed attempt: only within the caller's budget, only for failures a
/// second attempt can fix (connection errors, HTTP 429 and 5xx, broken responses), never
/// for a 4xx that would fail again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryConfig {
    /// Retries per call (0: none).
    pub max: u32,
    /// A retry goes out only when at least this much of the budget is left.
    pub min_left: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max: 1,
            min_left: Duration::from_millis(1),
        }
    }
}

/// The circuit breaker every endpoint has: `failures` consecutive failed attempts open it;
/// while open the endpoint gets no traffic; after `open_for` one probe attempt goes out
/// (half-open) and its outcome closes or reopens it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (at least 1).
    pub failures: u32,
    /// How long an open breaker stays open before a probe.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            open_for: Duration::from_millis(1000),
        }
    }
}

/// Default largest response body: 4 MiB (an infer answer of 1,024 rows is ~40 KiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Whether `host_port` (`host[:port]`, `[v6][:port]`) names the loopback interface.
fn loopback(host_port: &str) -> bool {
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A model served over KServe V2 REST (`POST /v2/models/{model}[/versions/{v}]/infer`).
#[derive(Debug, Clone, PartialEq)]
pub struct KServeConfig {
    /// Base URLs of the replicas serving the model, e.g. `https://10.0.0.5:8443` or
    /// `http://10.0.0.5:8080`. Credentials in a URL (`user:pass@`) are refused: give a
    /// token as [`bearer_token`](Self::bearer_token).
    pub endpoints: Vec<String>,
    /// PEM file of the CA certificate(s) that sign the servers' certificates. When set,
    /// `https://` endpoints are trusted only if signed by these (the system's roots are
    /// not used); when `None`, the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (chain) presented to servers that require one
    /// (mutual TLS); with [`client_key`](Self::client_key).
    pub client_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key (PKCS#8, SEC1 or PKCS#1,
    /// unencrypted); with [`client_cert`](Self::client_cert).
    pub client_key: Option<PathBuf>,
    /// Sent as `Authorization: Bearer <token>` on every request (marked sensitive, never
    /// printed). Refused over `http://` to a host other than loopback.
    pub bearer_token: Option<Secret>,
    /// Model name.
    pub model: String,
    /// Model version (`None`: the server's default).
    pub version: Option<String>,
    /// Feature input name (default `input-0`, MLServer's).
    pub input: String,
    /// Feature input element type.
    pub datatype: Datatype,
    /// Probability output name (`None`: `predict_proba` when the metadata lists it, else
    /// the metadata's first output, else whatever the server returns first).
    pub output: Option<String>,
    /// Column of the positive class when the output is `[N, K]`, K > 1.
    pub positive_class: usize,
    /// Schema fields sent in order (default: every schema field in order).
    pub features: Option<Vec<String>>,
    /// JSON or the binary extension.
    pub wire: Wire,
    /// Idle keep-alive connections kept per endpoint.
    pub pool_idle: usize,
    /// Idle connections are closed after this (keep it under the server's keep-alive
    /// timeout: uvicorn's, MLServer's server, is 5 s).
    pub pool_idle_timeout: Duration,
    /// Longest the load's readiness, metadata and warm-up requests may take, each.
    pub load_timeout: Duration,
    /// Warm-up requests per endpoint (they also open pooled connections).
    pub warmup_requests: usize,
    /// Rows per infer request; a larger batch is split.
    pub max_batch: usize,
    /// Largest response body read, of every request (readiness, metadata, warm-up and
    /// infer); a larger one is refused (`response body over N bytes`) without reading on.
    pub max_response_bytes: usize,
    /// Hedging (`None`: off).
    pub hedge: Option<HedgeConfig>,
    /// Retries.
    pub retry: RetryConfig,
    /// Per-endpoint circuit breaker.
    pub breaker: BreakerConfig,
}

impl KServeConfig {
    /// Defaults for `model` on `endpoints`: JSON or binary by the server's metadata,
    /// hedging at p95 with at most 5% extra load, one retry, breakers at 5 failures.
    pub fn new(endpoints: Vec<String>, model: impl Into<String>) -> Self {
        Self {
            endpoints,
            ca_file: None,
            client_cert: None,
            client_key: None,
            bearer_token: None,
            model: model.into(),
            version: None,
            input: "input-0".into(),
            datatype: Datatype::Fp32,
            output: None,
            positive_class: 1,
            features: None,
            wire: Wire::Auto,
            pool_idle: 32,
            pool_idle_timeout: Duration::from_secs(4),
            load_timeout: Duration::from_secs(10),
            warmup_requests: 8,
            max_batch: 1024,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            hedge: Some(HedgeConfig::default()),
            retry: RetryConfig::default(),
            breaker: BreakerConfig::default(),
        }
    }

    /// Checks every value; the error names the field.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.endpoints.is_empty() {
            return Err(("endpoints", "at least one endpoint".into()));
        }
        if self.endpoints.len() > 64 {
            return Err((
                "endpoints",
                format!("{} endpoints (at most 64)", self.endpoints.len()),
            ));
        }
        for e in &self.endpoints {
            let shown = redact_url(e);
            let (scheme, rest) = e
                .split_once("://")
                .filter(|(s, _)| *s == "http" || *s == "https")
                .ok_or_else(|| {
                    (
                        "endpoints",
                        format!("{shown:?}: expected http://host:port or https://host:port"),
                    )
                })?;
            let host = rest.trim_end_matches('/');
            if host.contains('@') {
                return Err((
                    "endpoints",
                    format!(
                        "{shown:?}: credentials in the URL are refused (they would travel and \
                         print with it); give a token as bearer_token"
                    ),
                ));
            }
            if host.is_empty() || host.contains(['/', '?', '#', ' ']) {
                return Err((
                    "endpoints",
                    format!("{shown:?}: expected {scheme}://host:port"),
                ));
            }
            if scheme == "http" && self.bearer_token.is_some() && !loopback(host) {
                return Err((
                    "bearer_token",
                    format!(
                        "would travel in clear text to {shown:?}: use https:// (plain http \
                         only to a loopback host)"
                    ),
                ));
            }
        }
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => return Err(("client_key", "client_cert needs client_key".into())),
            (None, Some(_)) => return Err(("client_cert", "client_key needs client_cert".into())),
            _ => {}
        }
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 256
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        if !name_ok(&self.model) {
            return Err((
                "model",
                format!("{:?}: 1-256 of [A-Za-z0-9-_.]", self.model),
            ));
        }
        if let Some(v) = &self.version {
            if !name_ok(v) {
                return Err(("version", format!("{v:?}: 1-256 of [A-Za-z0-9-_.]")));
            }
        }
        if self.input.is_empty() || self.input.len() > 256 {
            return Err(("input", "1-256 bytes".into()));
        }
        if self
            .output
            .as_ref()
            .is_some_and(|o| o.is_empty() || o.len() > 256)
        {
            return Err(("output", "1-256 bytes".into()));
        }
        if self.max_batch == 0 || self.max_batch > 1 << 20 {
            return Err(("max_batch", format!("{} (1..=1048576)", self.max_batch)));
        }
        if self.max_response_bytes < 1024 {
            return Err(("max_response_bytes", "at least 1024".into()));
        }
        if let Some(h) = &self.hedge {
            if !(h.percentile > 0.0 && h.percentile < 1.0) {
                return Err(("hedge.percentile", format!("{} (in (0, 1))", h.percentile)));
            }
            if !(h.max_extra > 0.0 && h.max_extra <= 1.0) {
                return Err(("hedge.max_extra", format!("{} (in (0, 1])", h.max_extra)));
            }
        }
        if self.breaker.failures == 0 {
            return Err(("breaker.failures", "at least 1".into()));
        }
        if self.retry.max > 16 {
            return Err(("retry.max", format!("{} (at most 16)", self.retry.max)));
        }
        Ok(())
    }

    /// The infer path, e.g. `/v2/models/m/versions/2/infer`.
    pub(crate) fn model_path(&self) -> String {
        match &self.version {
            Some(v) => format!("/v2/models/{}/versions/{v}", self.model),
            None => format!("/v2/models/{}", self.model),
        }
    }
}
