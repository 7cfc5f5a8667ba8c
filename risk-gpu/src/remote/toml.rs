//! `kind = "kserve"` in `risk.toml`, for the fast or the deep tier:
//!
//! ```toml
//! [fast.scorer]
//! kind = "kserve"
//! endpoints = ["https://10.0.0.5:8443", "https://10.0.0.6:8443"]  # or http://
//! ca_file = "tls/ca.pem"        # optional: trust only this CA (else the system's roots)
//! client_cert = "tls/client.pem"  # optional, with client_key: mutual TLS
//! client_key = "tls/client.key"
//! bearer_token = "env:KSERVE_TOKEN"  # optional: or file:PATH; sent as Authorization: Bearer
//! model = "xgb-fraud"
//! version = "1"                 # optional: the server's default version
//! input = "input-0"             # default input-0
//! datatype = "FP32"             # or FP64
//! output = "predict_proba"      # optional: predict_proba if listed, else the first output
//! positive_class = 1            # column of an [N, K] output
//! features = ["amount", "mcc"]  # optional: every schema field in order
//! wire = "auto"                 # auto (binary where every server lists it), json, binary
//! pool_idle = 32                # idle keep-alive connections per endpoint
//! pool_idle_timeout_ms = 4000   # under the server's keep-alive timeout (uvicorn: 5 s)
//! load_timeout_ms = 10000       # each readiness, metadata and warm-up request
//! warmup_requests = 8           # per endpoint, concurrent
//! max_batch = 1024              # rows per infer request
//! max_response_kb = 4096       # every response body, load-time GETs included
//! hedge = true                  # false: no hedging; or a table:
//! [fast.scorer.hedge]
//! percentile = 0.95             # hedge after this percentile of recent latencies
//! min_delay_us = 500
//! max_extra = 0.05              # hedges at most 5% of calls
//! min_samples = 50
//! [fast.scorer.retry]
//! max = 1                       # retries per call, within the budget
//! min_left_us = 1000            # only with this much budget left
//! [fast.scorer.breaker]
//! failures = 5                  # consecutive failures open an endpoint's breaker
//! open_ms = 1000                # then one probe
//! ```

//!
//! Paths are relative to the config file's directory. `user:pass@` in an endpoint is
//! refused; `bearer_token` must be `env:NAME` or `file:PATH` (an inline token would be
//! stored with the table in the model directory's `meta.json`).

use super::config::{BreakerConfig, Datatype, HedgeConfig, KServeConfig, RetryConfig, Wire};
use super::RemoteScorer;
use risk_core::secret::SecretSpec;
use risk_core::{ConfigError, ScorerSpec};
use std::path::PathBuf;
use std::time::Duration;

const KEYS: [&str; 23] = [
    "kind",
    "endpoints",
    "ca_file",
    "client_cert",
    "client_key",
    "bearer_token",
    "model",
    "version",
    "input",
    "datatype",
    "output",
    "positive_class",
    "features",
    "wire",
    "pool_idle",
    "pool_idle_timeout_ms",
    "load_timeout_ms",
    "warmup_requests",
    "max_batch",
    "max_response_kb",
    "hedge",
    "retry",
    "breaker",
];

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::invalid(key, reason)
}

/// A non-negative integer at `key` of `table`, at most `max`.
fn uint(table: &toml::Table, at: &str, key: &str, max: u64) -> Result<Option<u64>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(v) => match v.as_integer() {
            Some(i) if i >= 0 && i as u64 <= max => Ok(Some(i as u64)),
            _ => Err(invalid(
                &format!("{at}.{key}"),
                format!("expected an integer in 0..={max}"),
            )),
        },
    }
}

fn float(table: &toml::Table, at: &str, key: &str) -> Result<Option<f64>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_float()
            .or_else(|| v.as_integer().map(|i| i as f64))
            .map(Some)
            .ok_or_else(|| invalid(&format!("{at}.{key}"), "expected a number")),
    }
}

fn string<'a>(table: &'a toml::Table, at: &str, key: &str) -> Result<Option<&'a str>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| invalid(&format!("{at}.{key}"), "expected a string")),
    }
}

fn strings(table: &toml::Table, at: &str, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(v) => {
            let err = || invalid(&format!("{at}.{key}"), "expected an array of strings");
            v.as_array()
                .ok_or_else(err)?
                .iter()
                .map(|s| s.as_str().map(str::to_owned).ok_or_else(err))
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        }
    }
}

fn sub<'a>(
    table: &'a toml::Table,
    at: &str,
    key: &str,
    known: &[&str],
) -> Result<Option<&'a toml::Table>, ConfigError> {
    let Some(v) = table.get(key) else {
        return Ok(None);
    };
    let t = v
        .as_table()
        .ok_or_else(|| invalid(&format!("{at}.{key}"), "expected a table"))?;
    if let Some(k) = t.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(invalid(
            &format!("{at}.{key}.{k}"),
            format!("unknown key (known: {})", known.join(", ")),
        ));
    }
    Ok(Some(t))
}

/// The [`KServeConfig`] a `kind = "kserve"` table describes.
pub fn config(spec: &ScorerSpec) -> Result<KServeConfig, ConfigError> {
    let (t, at) = (&spec.table, spec.key.as_str());
    if let Some(k) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(invalid(
            &format!("{at}.{k}"),
            format!("unknown key (known: {})", KEYS.join(", ")),
        ));
    }
    let endpoints = strings(t, at, "endpoints")?
        .ok_or_else(|| invalid(&format!("{at}.endpoints"), "missing array of URLs"))?;
    let model =
        string(t, at, "model")?.ok_or_else(|| invalid(&format!("{at}.model"), "missing string"))?;
    let mut c = KServeConfig::new(endpoints, model);
    let path = |key: &str| -> Result<Option<PathBuf>, ConfigError> {
        Ok(string(t, at, key)?.map(|p| spec.base_dir.join(p)))
    };
    c.ca_file = path("ca_file")?;
    c.client_cert = path("client_cert")?;
    c.client_key = path("client_key")?;
    if let Some(s) = string(t, at, "bearer_token")? {
        let key = format!("{at}.bearer_token");
        if !(s.starts_with("env:") || s.starts_with("file:")) {
            return Err(invalid(
                &key,
                "give the token as env:NAME or file:PATH, not inline (the table is stored \
                 in the model directory's meta.json)",
            ));
        }
        let token = SecretSpec::new(s).resolve(&key).map_err(|e| {
            let m = e.to_string();
            let m = m.strip_prefix(&format!("{key}: ")).unwrap_or(&m).to_owned();
            invalid(&key, m)
        })?;
        c.bearer_token = Some(token);
    }
    c.version = string(t, at, "version")?.map(str::to_owned);
    if let Some(s) = string(t, at, "input")? {
        c.input = s.to_owned();
    }
    if let Some(s) = string(t, at, "datatype")? {
        c.datatype = Datatype::parse(s)
            .ok_or_else(|| invalid(&format!("{at}.datatype"), format!("{s:?} (FP32, FP64)")))?;
    }
    c.output = string(t, at, "output")?.map(str::to_owned);
    if let Some(v) = uint(t, at, "positive_class", 1 << 16)? {
        c.positive_class = v as usize;
    }
    c.features = strings(t, at, "features")?;
    if let Some(s) = string(t, at, "wire")? {
        c.wire = match s {
            "auto" => Wire::Auto,
            "json" => Wire::Json,
            "binary" => Wire::Binary,
            o => {
                return Err(invalid(
                    &format!("{at}.wire"),
                    format!("{o:?} (auto, json, binary)"),
                ))
            }
        };
    }
    let ms = Duration::from_millis;
    if let Some(v) = uint(t, at, "pool_idle", 4096)? {
        c.pool_idle = v as usize;
    }
    if let Some(v) = uint(t, at, "pool_idle_timeout_ms", 3_600_000)? {
        c.pool_idle_timeout = ms(v);
    }
    if let Some(v) = uint(t, at, "load_timeout_ms", 600_000)? {
        c.load_timeout = ms(v.max(1));
    }
    if let Some(v) = uint(t, at, "warmup_requests", 1024)? {
        c.warmup_requests = v as usize;
    }
    if let Some(v) = uint(t, at, "max_batch", 1 << 20)? {
        c.max_batch = v as usize;
    }
    if let Some(v) = uint(t, at, "max_response_kb", 1 << 22)? {
        c.max_response_bytes = (v as usize) << 10;
    }
    match t.get("hedge") {
        Some(toml::Value::Boolean(false)) => c.hedge = None,
        Some(toml::Value::Boolean(true)) | None => {}
        Some(_) => {
            let at_h = format!("{at}.hedge");
            let h = sub(
                t,
                at,
                "hedge",
                &["percentile", "min_delay_us", "max_extra", "min_samples"],
            )?
            .expect("present");
            let d = HedgeConfig::default();
            c.hedge = Some(HedgeConfig {
                percentile: float(h, &at_h, "percentile")?.unwrap_or(d.percentile),
                min_delay: uint(h, &at_h, "min_delay_us", 60_000_000)?
                    .map_or(d.min_delay, Duration::from_micros),
                max_extra: float(h, &at_h, "max_extra")?.unwrap_or(d.max_extra),
                min_samples: uint(h, &at_h, "min_samples", 1 << 20)?
                    .map_or(d.min_samples, |v| v as usize),
            });
        }
    }
    if let Some(r) = sub(t, at, "retry", &["max", "min_left_us"])? {
        let at_r = format!("{at}.retry");
        let d = RetryConfig::default();
        c.retry = RetryConfig {
            max: uint(r, &at_r, "max", 16)?.map_or(d.max, |v| v as u32),
            min_left: uint(r, &at_r, "min_left_us", 60_000_000)?
                .map_or(d.min_left, Duration::from_micros),
        };
    }
    if let Some(b) = sub(t, at, "breaker", &["failures", "open_ms"])? {
        let at_b = format!("{at}.breaker");
        let d = BreakerConfig::default();
        c.breaker = BreakerConfig {
            failures: uint(b, &at_b, "failures", 1 << 20)?.map_or(d.failures, |v| v as u32),
            open_for: uint(b, &at_b, "open_ms", 3_600_000)?.map_or(d.open_for, ms),
        };
    }
    c.validate()
        .map_err(|(field, reason)| invalid(&format!("{at}.{field}"), reason))?;
    Ok(c)
}

/// Builds the tier a `kind = "kserve"` table describes.
pub fn scorer(spec: &ScorerSpec) -> Result<RemoteScorer, ConfigError> {
    let c = config(spec)?;
    RemoteScorer::load(&c, &spec.schema).map_err(|e| ConfigError::Scorer {
        key: spec.key.clone(),
        message: e.to_string(),
    })
}
