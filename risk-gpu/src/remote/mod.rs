//! Remote tiers over the Open Inference Protocol ("KServe V2": MLServer, KServe, Triton).
//!
//! [`RemoteScorer`] sends a tier's features to a model server as one `[N, F]` FP32 (or
//! FP64) tensor, `POST /v2/models/{model}[/versions/{v}]/infer`, and reads the positive
//! class's probability back. It keeps the engine's semantics over the network:
//! - the request deadline is the budget the engine gives ([`Scorer::score_within`],
//!   [`Scorer::score_batch_within`]), never more; a batch is one infer request;
//! - connections are pooled keep-alive HTTP/1.1 (reqwest on a one-thread Tokio runtime
//!   owned by the scorer; the engine itself stays runtime-free);
//! - **hedging**: when the first attempt has not answered after a percentile of recent
//!   latencies, a second goes out, to another healthy endpoint when there is one; the
//!   first answer wins and the loser is aborted (its connection dropped); hedges are
//!   bounded to a fraction of calls by a token bucket;
//! - **retries** only for failures another attempt can fix, and only within the budget;
//! - a **circuit breaker per endpoint** and health-based selection (lower smoothed
//!   latency times attempts in flight, of two candidates);
//! - **TLS** (rustls) for `https://` endpoints, trusting the configured CA only
//!   (`ca_file`) or the system's roots, with a client identity for mutual TLS
//!   (`client_cert`, `client_key`) and a bearer token (`bearer_token`, an `env:`/`file:`
//!   secret, sent as a sensitive header); credentials in a URL are refused, redirects are
//!   never followed (a 3xx is an error naming its status), and every response body,
//!   load-time GETs included, is read under `max_response_bytes`;
//! - at load, server and model readiness (`/v2/health/ready`, `.../ready`) and the
//!   model's metadata compared with the schema; warm-up requests in [`Scorer::warmup`].
//!
//! Tensors travel as JSON (missing features as `null`) or, where every server lists the
//! `binary_tensor_data` extension (Triton; MLServer 1.7 does not), as raw little-endian
//! bytes after the JSON header. gRPC is not built: the REST path is what MLServer,
//! KServe and Triton all serve, and on loopback its cost is a small part of a remote
//! call (BENCHMARKS.md [14]).
//!
//! `FaultProxy` (feature `test-util`, off by default) is a loopback HTTP/1.1 proxy that
//! delays, drops or corrupts responses, for testing a deployment's fallback (the
//! integration tests and the benchmark turn the feature on).
//!
//! [`Scorer::score_within`]: risk_core::Scorer::score_within
//! [`Scorer::score_batch_within`]: risk_core::Scorer::score_batch_within
//! [`Scorer::warmup`]: risk_core::Scorer::warmup

mod attempt;
mod call;
mod config;
mod endpoint;
mod http;
#[cfg(feature = "test-util")]
mod proxy;
mod scorer;
mod stats;
mod toml;
pub mod v2;

pub use attempt::AttemptError;
pub use config::{
    BreakerConfig, Datatype, HedgeConfig, KServeConfig, RetryConfig, Wire,
    DEFAULT_MAX_RESPONSE_BYTES,
};
pub use endpoint::BreakerState;
#[cfg(feature = "test-util")]
pub use proxy::{Fault, FaultProxy};
pub use scorer::{RemoteScorer, BINARY_EXTENSION};
pub use stats::{AttemptFailures, EndpointStatus, RemoteStats};
pub use toml::config as config_from_spec;
pub(crate) use toml::scorer as scorer_from_spec;

/// A remote tier that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// A configuration value is out of range.
    #[error("kserve config `{field}`: {reason}")]
    Config {
        /// The field, as in `risk.toml`.
        field: String,
        /// Why.
        reason: String,
    },
    /// A feature named for the model is not in the schema.
    #[error("kserve features: {0}")]
    Feature(String),
    /// No endpoint was ready (each endpoint's failure, `; `-separated).
    #[error("kserve: no endpoint is ready: {0}")]
    Unavailable(String),
    /// An endpoint serves a model that does not fit the tier.
    #[error("kserve {endpoint}: model does not fit: {message}")]
    Metadata {
        /// The endpoint.
        endpoint: String,
        /// What differs.
        message: String,
    },
    /// The HTTP client or its runtime could not be built.
    #[error("kserve runtime: {0}")]
    Runtime(String),
}
