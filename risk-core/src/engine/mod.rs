//! The tiered decision engine.
//!
//! One [`Engine::decide`] call (`decide.rs`, top to bottom): check the input → entity
//! state → rule tier inline (the fallback verdict, ready before any model is called) →
//! fast tier under its circuit breaker and hard deadline (inline for bounded scorers, on
//! the tier pool otherwise) → combine ([`crate::policy`], with the entity's feedback) →
//! gray-zone hand-off (non-blocking) → observe (metrics, monitors, deploys, audit).
//!
//! Beside it: the batch and async paths, the builder, the deep tier's gray zone, the
//! control plane (`deploy/`: gates, canaries, shadows, rollback; drills; health), the
//! Prometheus glue, and [`replay`] (a client of the engine and the audit log).

mod async_decide;
mod batch;
mod builder;
mod decide;
mod deploy;
mod drill;
mod entity;
mod event_time;
mod explain;
mod gray;
mod gray_band;
mod health;
mod monitor;
mod offline;
pub(crate) mod pool;
mod prom;
pub mod replay;
mod state;
pub(crate) mod tier;

pub use crate::circuit::{CircuitConfig, CircuitState};
pub use async_decide::DecisionFuture;
pub use builder::EngineBuilder;
pub use drill::{DrillPlan, DrillReport, Fault, Quality, SwitchTime};
pub use event_time::{DeepReplayStats, EventReplay, EventReplayStats, ReplayLabel};
pub use gray::VerdictCallback;
pub use gray_band::GrayBandView;
pub use health::{Health, HealthStatus, Switchable, TierHealth};

use crate::audit::AuditSink;
use crate::clock::Clock;
use crate::config::{EngineConfig, RawFile, ScorerRegistry};
use crate::decision::{EntityFeedback, Shutdown, ShutdownReport};
use crate::deploy::slot::{FastModel, Routing, Ver};
use crate::error::ConfigError;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::schema::FeatureSchema;
use crate::scorer::ScorerInfo;
use crate::txn::{EntityKey, Transaction};
use crate::version::Versions;
use arc_swap::ArcSwap;
use entity::EntityStore;
use gray::GrayZone;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, OnceLock};
use tier::FastTier;

/// The tiered decision engine. Cheap to clone (an `Arc`); share one per process.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    /// Whether a `[privacy] key` pseudonymises what this engine writes (`health()`).
    pseudonymised: bool,
    schema: Arc<FeatureSchema>,
    cfg: EngineConfig,
    /// The versioned slots (rules, fast, policy), loaded once per decision.
    routing: ArcSwap<Routing>,
    /// Deploy control: state machine, supervisor, model directory, recent sample.
    deploy: deploy::DeployCtl,
    /// Fingerprints as built (config, schema); the tiers' entries come from the routing.
    versions: Versions,
    audit: Option<Arc<dyn AuditSink>>,
    audit_log: Option<Arc<crate::audit::SegmentLog>>,
    /// Agreement, drift and deep-health monitors (`[monitor]`).
    monitor: Option<monitor::MonitorCtl>,
    #[cfg(feature = "kafka")]
    kafka: Option<crate::audit::KafkaForwarder>,
    fast: FastTier,
    gray: Option<GrayZone>,
    /// The band set by `gray.budget` (with a deep tier only).
    gray_band: Option<Arc<gray_band::BudgetBand>>,
    entities: Arc<EntityStore>,
    /// Entity state (`[state]`): velocity features, lists, labels.
    state: Option<Arc<crate::state::StateEngine>>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    shut: AtomicBool,
    async_pool: OnceLock<async_decide::AsyncPool>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("schema", &self.schema)
            .field("rules", &self.routing.load().rules.serving.id)
            .field("fast", &self.fast)
            .field("gray", &self.gray)
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// The least a shutdown waits for the audit sink to make accepted records durable.
const AUDIT_CLOSE: std::time::Duration = std::time::Duration::from_secs(5);

/// The versions one decision used, from one routing snapshot.
pub(crate) struct Chosen<'a> {
    pub routing: &'a Routing,
    pub rules: &'a Ver<crate::deploy::slot::RulesModel>,
    pub fast: Option<&'a Ver<FastModel>>,
    pub policy: &'a Ver<crate::deploy::slot::PolicyModel>,
    /// Whether any of them is a canary.
    pub canary: bool,
}

impl<'a> Chosen<'a> {
    #[inline]
    fn pick(routing: &'a Routing, txn: &Transaction) -> Self {
        let (rules, c1) = routing.rules.pick(txn);
        let (policy, c2) = routing.policy.pick(txn);
        let (fast, c3) = match &routing.fast {
            None => (None, false),
            Some(f) => {
                let (v, c) = f.pick(txn);
                (Some(v), c)
            }
        };
        Self {
            routing,
            rules,
            fast,
            policy,
            canary: c1 || c2 || c3,
        }
    }
}

impl Engine {
    /// Starts building an engine over `schema`.
    pub fn builder(schema: Arc<FeatureSchema>) -> EngineBuilder {
        EngineBuilder::new(schema)
    }

    /// Builds an engine from a `risk.toml` file with the core's scorer kinds only.
    /// Backends add theirs through [`Engine::from_config_with`].
    pub fn from_config(path: impl AsRef<Path>) -> Result<Engine, ConfigError> {
        Self::from_config_with(path, &ScorerRegistry::default())
    }

    /// Builds an engine from a `risk.toml` file, building scorers through `registry`.
    pub fn from_config_with(
        path: impl AsRef<Path>,
        registry: &ScorerRegistry,
    ) -> Result<Engine, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::from_toml_str(&text, dir, path, registry)
    }

    /// Builds an engine from TOML text; relative paths resolve against `base_dir`;
    /// `origin` names the text in errors.
    pub fn from_toml_str(
        text: &str,
        base_dir: &Path,
        origin: &Path,
        registry: &ScorerRegistry,
    ) -> Result<Engine, ConfigError> {
        Self::builder_from_toml_str(text, base_dir, origin, registry)?.build()
    }

    /// The builder [`from_toml_str`](Self::from_toml_str) would build, for a caller that
    /// changes it first: an event-time clock for a backtest
    /// ([`EngineBuilder::for_replay`]), a verdict callback.
    pub fn builder_from_toml_str(
        text: &str,
        base_dir: &Path,
        origin: &Path,
        registry: &ScorerRegistry,
    ) -> Result<EngineBuilder, ConfigError> {
        let raw = RawFile::parse(text, origin)?;
        EngineBuilder::from_raw(&raw, base_dir, registry)
    }

    /// The engine's schema.
    pub fn schema(&self) -> &Arc<FeatureSchema> {
        &self.inner.schema
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.cfg
    }

    /// A future of [`decide`](Engine::decide) that runs on the engine's async workers
    /// and completes on any executor (it only uses the `Waker`). The fast tier's deadline
    /// counts from this call (queueing included); when the bounded queue
    /// (`pool.async_queue_capacity`) is full, the rules alone answer at once with
    /// [`FallbackCause::Saturated`](crate::decision::FallbackCause::Saturated).
    pub fn decide_async(&self, txn: Transaction) -> DecisionFuture {
        let called = self.inner.clock.now();
        let cfg = &self.inner.cfg.pool;
        let pool = self.inner.async_pool.get_or_init(|| {
            async_decide::AsyncPool::new(cfg.async_workers, cfg.async_queue_capacity)
        });
        pool.submit(self.clone(), txn, called)
    }

    /// A channel receiving every deep verdict from now on. A slow reader misses verdicts
    /// (counted in `gray.subscriber_dropped`) rather than slowing the deep tier.
    /// Without a deep tier the channel never receives anything.
    pub fn subscribe(&self) -> Receiver<crate::decision::DeepVerdict> {
        match &self.inner.gray {
            Some(g) => g.subscribe(),
            None => std::sync::mpsc::sync_channel(1).1,
        }
    }

    /// The entity's current deep-tier feedback.
    pub fn feedback(&self, entity: EntityKey) -> Option<EntityFeedback> {
        self.inner.entities.feedback(entity)
    }

    /// Name, version and latency class of each configured tier's scorer, as
    /// `("rules" | "fast" | "deep", info)`: what is serving, for logs and audits.
    pub fn scorers(&self) -> Vec<(&'static str, ScorerInfo)> {
        let r = self.inner.routing.load();
        let mut v = vec![("rules", r.rules.serving.body.scorer.info())];
        if let Some(f) = &r.fast {
            v.push(("fast", f.serving.body.scorer.info()));
        }
        if let Some(g) = &self.inner.gray {
            v.push(("deep", g.scorer_info()));
        }
        v
    }

    /// The versions serving now (outside any canary): what the next decision records
    /// (the rule tier's entry follows hot reloads and deploys).
    pub fn versions(&self) -> Versions {
        let i = &*self.inner;
        let r = i.routing.load();
        let mut v = i.versions;
        v.rules = r.rules.serving.body.scorer.info().version_id();
        v.fast = r.fast.as_ref().map(|f| f.serving.id);
        v.deep = r.deep;
        v.config = r.policy.serving.body.config_fp;
        v
    }

    /// The engine's audit sink, if one is configured.
    pub fn audit_sink(&self) -> Option<&Arc<dyn AuditSink>> {
        self.inner.audit.as_ref()
    }

    /// The engine's segment log, when its audit sink is one (`[audit]` in `risk.toml`,
    /// or [`EngineBuilder::audit_log`]): read, flush, and inspect it.
    pub fn audit_log(&self) -> Option<&Arc<crate::audit::SegmentLog>> {
        self.inner.audit_log.as_ref()
    }

    /// The Kafka forwarder of `[audit.kafka]` (feature `kafka`).
    #[cfg(feature = "kafka")]
    pub fn kafka_forwarder(&self) -> Option<&crate::audit::KafkaForwarder> {
        self.inner.kafka.as_ref()
    }

    /// A snapshot of every metric.
    pub fn metrics(&self) -> MetricsSnapshot {
        let i = &*self.inner;
        let q = i.gray.as_ref().map_or(0, |g| g.len() as u64);
        let r = i.routing.load();
        let circuit = r.fast.as_ref().map_or("absent", |f| {
            f.serving.body.circuit.state(i.clock.now()).as_str()
        });
        let busy = i.fast.pool.get().map_or(0, |p| p.busy());
        let deep = i
            .gray
            .as_ref()
            .map_or("absent", |g| g.circuit_state().as_str());
        i.metrics.snapshot(q, circuit, deep, busy)
    }

    /// State of the fast tier's circuit breaker (`None` without a fast tier).
    pub fn fast_circuit(&self) -> Option<CircuitState> {
        let i = &*self.inner;
        let r = i.routing.load();
        r.fast
            .as_ref()
            .map(|f| f.serving.body.circuit.state(i.clock.now()))
    }

    /// State of the deep tier's circuit breaker (`None` without a deep tier).
    pub fn deep_circuit(&self) -> Option<CircuitState> {
        self.inner.gray.as_ref().map(|g| g.circuit_state())
    }

    /// Stops the engine: later `decide` calls return [`DecideError::ShutDown`](crate::error::DecideError::ShutDown); queued
    /// gray-zone work is drained or abandoned as asked. Idempotent.
    pub fn shutdown(&self, mode: Shutdown) -> ShutdownReport {
        let i = &*self.inner;
        if i.shut.swap(true, Relaxed) {
            return ShutdownReport::default();
        }
        let report = match &i.gray {
            None => ShutdownReport::default(),
            Some(g) => g.shutdown(match mode {
                Shutdown::Drain { timeout } => Some(timeout),
                Shutdown::Abandon => None,
            }),
        };
        i.deploy.shutdown(&i.routing);
        if let Some(b) = &i.gray_band {
            b.wake();
        }
        if let Some(p) = i.fast.pool.get() {
            p.shutdown();
        }
        if let Some(a) = &i.audit {
            // After the last verdict: what was accepted is made durable (bounded wait;
            // `Abandon` drops gray-zone work, not recorded decisions).
            a.close(match mode {
                Shutdown::Drain { timeout } => timeout.max(AUDIT_CLOSE),
                Shutdown::Abandon => AUDIT_CLOSE,
            });
        }
        if let Some(st) = &i.state {
            if let Some(p) = &st.config().snapshot {
                // After the last decision: the state a restart restores.
                if let Err(e) = st.snapshot(p) {
                    tracing::error!(target: "risk::state", error = %e, "state snapshot at shutdown failed");
                }
            }
        }
        #[cfg(feature = "kafka")]
        if let (Some(k), Some(log), Shutdown::Drain { timeout }) = (&i.kafka, &i.audit_log, mode) {
            // Bounded: what is not delivered now stays in the log and is sent on restart.
            let _ = k.wait_delivered(log.stats().written_seq, timeout);
        }
        report
    }
}
