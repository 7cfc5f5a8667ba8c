//! [`RemoteScorer`]: a model on a KServe V2 server as a tier.

use super::attempt::{chain, AttemptError};
use super::call::{attempt, call, CallError, Req, Shared};
use super::config::{Datatype, KServeConfig, Wire};
use super::endpoint::{Endpoint, HedgeBudget, LatencyWindow};
use super::http;
use super::stats::{Counters, EndpointStatus, RemoteStats};
use super::v2::{self, ModelMetadata, ServerMetadata};
use super::RemoteError;
use bytes::Bytes;
use risk_core::secret::redact_url;
use risk_core::{FeatureSchema, Latency, Score, ScoreError, Scorer, ScorerInfo, Slot, Transaction};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The extension name servers list in their metadata for binary tensor data.
pub const BINARY_EXTENSION: &str = "binary_tensor_data";

/// A binary classifier served over the Open Inference Protocol (MLServer, KServe,
/// Triton) as a tier: pooled keep-alive HTTP/1.1, the budget as the request deadline,
/// hedging, retries within the budget, a breaker per endpoint. Latency unbounded: it runs
/// on the engine's pool. Its requests run on a small Tokio runtime of its own (one I/O
/// thread); the caller's thread waits for the answer, so the engine stays runtime-free.
pub struct RemoteScorer {
    shared: Arc<Shared>,
    rt: Option<tokio::runtime::Runtime>,
    slots: Vec<Slot>,
    input: String,
    datatype: Datatype,
    binary: bool,
    next_id: AtomicU64,
    server: ServerMetadata,
    metadata: ModelMetadata,
    metadata_checked: bool,
    version: String,
    content_hash: u64,
    default_budget: Duration,
    warmup_requests: usize,
    max_batch: usize,
}

impl std::fmt::Debug for RemoteScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteScorer")
            .field("model", &self.metadata.name)
            .field("version", &self.version)
            .field("endpoints", &self.shared.endpoints.len())
            .field("binary", &self.binary)
            .finish()
    }
}

/// A load-time GET: no redirect followed, the body bounded like every other.
async fn get(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
    max: usize,
) -> Result<Vec<u8>, String> {
    let fail = |e: AttemptError| format!("GET {}: {e}", redact_url(url));
    let mut r = client
        .get(url)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("GET {}: {}", redact_url(url), chain(&e)))?;
    let status = r.status();
    let body = http::read_body(&mut r, max).await.map_err(fail)?;
    if !status.is_success() {
        return Err(fail(http::status_error(status, &body)));
    }
    Ok(body)
}

/// What one endpoint said at load.
struct Probe {
    server: ServerMetadata,
    model: ModelMetadata,
    model_bytes: Vec<u8>,
}

async fn probe(client: &reqwest::Client, base: &str, cfg: &KServeConfig) -> Result<Probe, String> {
    let (t, max) = (cfg.load_timeout, cfg.max_response_bytes);
    get(client, &format!("{base}/v2/health/ready"), t, max).await?;
    let model_url = format!("{base}{}", cfg.model_path());
    get(client, &format!("{model_url}/ready"), t, max).await?;
    let server = get(client, &format!("{base}/v2"), t, max).await?;
    let server: ServerMetadata = serde_json::from_slice(&server)
        .map_err(|e| format!("GET {}/v2: not server metadata: {e}", redact_url(base)))?;
    let model_bytes = get(client, &model_url, t, max).await?;
    let model: ModelMetadata = serde_json::from_slice(&model_bytes)
        .map_err(|e| format!("GET {}: not model metadata: {e}", redact_url(&model_url)))?;
    Ok(Probe {
        server,
        model,
        model_bytes,
    })
}

/// Compares a model's metadata with what will be sent and read. Servers that do not
/// list tensors (MLServer without declared `inputs`) pass; `Ok(false)` says so.
fn check(m: &ModelMetadata, cfg: &KServeConfig, width: usize) -> Result<bool, String> {
    if m.name != cfg.model {
        return Err(format!("serves model {:?}, not {:?}", m.name, cfg.model));
    }
    if let Some(v) = &cfg.version {
        if !m.versions.is_empty() && !m.versions.contains(v) {
            return Err(format!("has versions {:?}, not {v:?}", m.versions));
        }
    }
    let mut checked = false;
    if !m.inputs.is_empty() {
        let i = m
            .inputs
            .iter()
            .find(|i| i.name == cfg.input)
            .ok_or_else(|| {
                format!(
                    "has no input {:?} (inputs: {:?})",
                    cfg.input,
                    m.inputs.iter().map(|i| &i.name).collect::<Vec<_>>()
                )
            })?;
        if !i.datatype.eq_ignore_ascii_case(cfg.datatype.name()) {
            return Err(format!(
                "input {:?} is {}, the tier sends {}",
                i.name,
                i.datatype,
                cfg.datatype.name()
            ));
        }
        let fits = match i.shape.as_slice() {
            [_, f] => *f == -1 || *f == width as i64,
            _ => false,
        };
        if !fits {
            return Err(format!(
                "input {:?} has shape {:?}, the tier sends [N, {width}]",
                i.name, i.shape
            ));
        }
        checked = true;
    }
    if !m.outputs.is_empty() {
        if let Some(o) = &cfg.output {
            let t = m.outputs.iter().find(|t| &t.name == o).ok_or_else(|| {
                format!(
                    "has no output {o:?} (outputs: {:?})",
                    m.outputs.iter().map(|t| &t.name).collect::<Vec<_>>()
                )
            })?;
            if let [_, k] = t.shape.as_slice() {
                if *k > 1 && cfg.positive_class as i64 >= *k {
                    return Err(format!(
                        "output {o:?} has {k} columns, no positive class {}",
                        cfg.positive_class
                    ));
                }
            }
        }
    } else {
        checked = false;
    }
    Ok(checked)
}

impl RemoteScorer {
    /// Connects to the endpoints, checks readiness and the model's metadata against
    /// `schema`, and builds the tier (warm-up runs in [`Scorer::warmup`]). Endpoints that
    /// are not ready start with their breaker open; none ready, or one serving a model
    /// that does not fit, fails the load.
    pub fn load(cfg: &KServeConfig, schema: &FeatureSchema) -> Result<Self, RemoteError> {
        cfg.validate()
            .map_err(|(field, reason)| RemoteError::Config {
                field: field.to_string(),
                reason,
            })?;
        let slots = crate::slots::feature_slots(schema, cfg.features.as_deref())
            .map_err(RemoteError::Feature)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("risk-kserve")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Runtime(e.to_string()))?;
        let client = http::client(cfg)?;
        let endpoints: Vec<Endpoint> = cfg
            .endpoints
            .iter()
            .map(|b| Endpoint::new(b, &cfg.model_path(), cfg.breaker))
            .collect();
        let probes: Vec<Result<Probe, String>> = rt.block_on(async {
            let mut out = Vec::new();
            for e in &endpoints {
                out.push(probe(&client, &e.base, cfg).await);
            }
            out
        });
        let mut first: Option<&Probe> = None;
        let mut checked = true;
        let mut down = Vec::new();
        let now = Instant::now();
        for (e, p) in endpoints.iter().zip(&probes) {
            match p {
                Ok(p) => {
                    checked &=
                        check(&p.model, cfg, slots.len()).map_err(|m| RemoteError::Metadata {
                            endpoint: redact_url(&e.base),
                            message: m,
                        })?;
                    first.get_or_insert(p);
                }
                Err(m) => {
                    down.push(m.clone());
                    e.breaker.force_open(now);
                }
            }
        }
        let Some(p0) = first else {
            return Err(RemoteError::Unavailable(down.join("; ")));
        };
        let all_binary = probes
            .iter()
            .flatten()
            .all(|p| p.server.extensions.iter().any(|x| x == BINARY_EXTENSION));
        let binary = match cfg.wire {
            Wire::Json => false,
            Wire::Auto => all_binary,
            Wire::Binary if all_binary => true,
            Wire::Binary => {
                return Err(RemoteError::Metadata {
                    endpoint: cfg
                        .endpoints
                        .iter()
                        .map(|e| redact_url(e))
                        .collect::<Vec<_>>()
                        .join(", "),
                    message: format!(
                        "wire = binary, but not every server lists {BINARY_EXTENSION:?}"
                    ),
                })
            }
        };
        let output = cfg.output.clone().or_else(|| {
            let o = &p0.model.outputs;
            o.iter()
                .find(|t| t.name == "predict_proba")
                .or(o.first())
                .map(|t| t.name.clone())
        });
        let version = cfg
            .version
            .clone()
            .or_else(|| p0.model.versions.first().cloned())
            .unwrap_or_else(|| "default".into());
        let content_hash = risk_core::schema::Fnv::hash(&p0.model_bytes);
        let hedge = cfg.hedge;
        let shared = Arc::new(Shared {
            client,
            endpoints,
            window: LatencyWindow::new(hedge.map_or(0.95, |h| h.percentile)),
            hedge_budget: HedgeBudget::new(hedge.map_or(0.0, |h| h.max_extra)),
            hedge,
            retry: cfg.retry,
            max_response_bytes: cfg.max_response_bytes,
            output,
            positive: cfg.positive_class,
            counters: Counters::default(),
            next: AtomicUsize::new(0),
        });
        Ok(Self {
            server: p0.server.clone(),
            metadata: p0.model.clone(),
            metadata_checked: checked,
            version: format!("{}:{version}:{content_hash:016x}", cfg.model),
            content_hash,
            shared,
            rt: Some(rt),
            slots,
            input: cfg.input.clone(),
            datatype: cfg.datatype,
            binary,
            next_id: AtomicU64::new(1),
            default_budget: cfg.load_timeout,
            warmup_requests: cfg.warmup_requests,
            max_batch: cfg.max_batch,
        })
    }

    /// The model's metadata as the first ready endpoint reported it.
    pub fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// The first ready endpoint's server metadata.
    pub fn server(&self) -> &ServerMetadata {
        &self.server
    }

    /// Whether the servers listed the model's tensors, so that input name, type and width
    /// were compared with the schema at load (MLServer lists them only when its
    /// `model-settings.json` declares them).
    pub fn metadata_checked(&self) -> bool {
        self.metadata_checked
    }

    /// Whether tensors travel with the binary extension.
    pub fn binary(&self) -> bool {
        self.binary
    }

    /// The output read (`None`: whatever the server returns first).
    pub fn output(&self) -> Option<&str> {
        self.shared.output.as_deref()
    }

    /// Counters since load.
    pub fn stats(&self) -> RemoteStats {
        self.shared.counters.snapshot()
    }

    /// Every endpoint's breaker and counters.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.shared
            .endpoints
            .iter()
            .map(|e| EndpointStatus {
                url: redact_url(&e.base),
                breaker: e.breaker.state(),
                opens: e.breaker.opens(),
                attempts: e.attempts.load(Ordering::Relaxed),
                failures: e.failures.load(Ordering::Relaxed),
                latency: e.ewma(),
            })
            .collect()
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime lives until drop")
    }

    /// Runs `f` on the tier's runtime and waits. From inside another Tokio runtime (a
    /// caller's async code), the future is spawned and a channel waited on instead of
    /// `block_on`, which would panic there.
    fn wait<T: Send + 'static>(
        &self,
        f: impl Future<Output = Result<T, ScoreError>> + Send + 'static,
    ) -> Result<T, ScoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.rt().block_on(f);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt().spawn(async move {
            let _ = tx.send(f.await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(ScoreError::Failed("remote call task ended".into())))
    }

    fn encode(&self, rows: &[f32], n: usize, id: u64) -> Req {
        let mut buf = Vec::with_capacity(64 + rows.len() * 12);
        let hl = v2::encode(
            &v2::Request {
                id,
                input: &self.input,
                datatype: self.datatype,
                rows: n,
                cols: self.slots.len(),
                data: rows,
                output: self.shared.output.as_deref(),
                binary: self.binary,
            },
            &mut buf,
        );
        Req {
            body: Bytes::from(buf),
            header_len: hl,
            id,
            rows: n,
        }
    }

    fn gather(&self, t: &Transaction, out: &mut Vec<f32>) {
        out.extend(self.slots.iter().map(|s| t.features.get(*s)));
    }

    /// One call for `n` rows within `budget`.
    fn run(&self, rows: &[f32], n: usize, budget: Duration) -> Result<Vec<f32>, ScoreError> {
        let c = &self.shared.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.rows.fetch_add(n as u64, Ordering::Relaxed);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let req = self.encode(rows, n, id);
        let sh = self.shared.clone();
        let r = self.wait(async move {
            call(sh, req, budget).await.map_err(|e| match e {
                CallError::Deadline => ScoreError::Cancelled,
                CallError::NoEndpoint => {
                    ScoreError::Failed("kserve: every endpoint's circuit breaker is open".into())
                }
                CallError::Attempt(ep, e) => {
                    ScoreError::Failed(format!("kserve {}: {e}", redact_url(&ep)))
                }
            })
        });
        match &r {
            Ok(_) => c.ok.fetch_add(1, Ordering::Relaxed),
            Err(_) => c.failed.fetch_add(1, Ordering::Relaxed),
        };
        r
    }
}

impl Drop for RemoteScorer {
    fn drop(&mut self) {
        // Dropping a runtime blocks on its threads, which panics inside another runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Scorer for RemoteScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(
            format!("kserve:{}", self.metadata.name),
            &self.version,
            Latency::Unbounded,
        )
        .with_content_hash(self.content_hash)
    }

    /// Scores within the configured `load_timeout` (the engine calls
    /// [`score_within`](Scorer::score_within) with its budget instead).
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        self.score_within(t, self.default_budget)
    }

    fn score_within(&self, t: &Transaction, budget: Duration) -> Result<Score, ScoreError> {
        let mut row = Vec::with_capacity(self.slots.len());
        self.gather(t, &mut row);
        let p = self.run(&row, 1, budget)?;
        Ok(Score::new(p[0]))
    }

    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        self.score_batch_within(txns, self.default_budget, out)
    }

    /// One infer request per `max_batch` rows, each within what is left of `budget`.
    fn score_batch_within(
        &self,
        txns: &[&Transaction],
        budget: Duration,
        out: &mut Vec<Score>,
    ) -> Result<(), ScoreError> {
        out.clear();
        let deadline = Instant::now() + budget;
        let mut rows = Vec::with_capacity(self.slots.len() * txns.len().min(self.max_batch));
        for chunk in txns.chunks(self.max_batch) {
            rows.clear();
            for t in chunk {
                self.gather(t, &mut rows);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ScoreError::Cancelled);
            }
            let p = self.run(&rows, chunk.len(), left)?;
            out.extend(p.into_iter().map(Score::new));
        }
        Ok(())
    }

    /// `warmup_requests` concurrent requests of one all-zero row to every endpoint whose
    /// breaker is closed (this also opens that many pooled connections). Every answer
    /// must be a probability; an endpoint that fails has its breaker opened, and the
    /// warm-up fails when no endpoint passes.
    fn warmup(&self) -> Result<(), ScoreError> {
        let n = self.warmup_requests;
        if n == 0 {
            return Ok(());
        }
        let row = vec![0f32; self.slots.len()];
        let now = Instant::now();
        let mut passed = 0;
        let mut errors = Vec::new();
        for (i, e) in self.shared.endpoints.iter().enumerate() {
            if !e.breaker.available(now) {
                continue;
            }
            let jobs: Vec<_> = (0..n)
                .map(|_| {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let req = self.encode(&row, 1, id);
                    let deadline = Instant::now() + self.default_budget;
                    attempt(self.shared.clone(), i, req, deadline, false)
                })
                .collect();
            let results = self.wait(async move {
                let mut set = tokio::task::JoinSet::new();
                for j in jobs {
                    set.spawn(j);
                }
                Ok(set.join_all().await)
            })?;
            let bad = results.into_iter().find_map(|r| match r {
                Ok(p) if p.len() == 1 && (0.0..=1.0).contains(&p[0]) => None,
                Ok(p) => Some(format!("warm-up answered {p:?}, not a probability")),
                Err(err) => Some(err.to_string()),
            });
            match bad {
                None => passed += 1,
                Some(m) => {
                    e.breaker.force_open(Instant::now());
                    errors.push(format!("{}: {m}", redact_url(&e.base)));
                }
            }
        }
        if passed == 0 {
            return Err(ScoreError::Failed(format!(
                "kserve warm-up: no endpoint answered ({})",
                errors.join("; ")
            )));
        }
        Ok(())
    }

    fn schema_fingerprint(&self) -> Option<u64> {
        None
    }
}
