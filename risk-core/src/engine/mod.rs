//! The tiered decision engine.
//!
//! One [`Engine::decide`] call: validate input → rule tier inline (the fallback verdict,
//! ready before any model is called) → fast tier under its circuit breaker and hard
//! deadline (inline for bounded scorers, on the tier pool otherwise) → entity feedback →
//! combine ([`crate::policy`]) → gray-zone hand-off (non-blocking) → metrics.

mod async_decide;
mod batch;
mod builder;
mod deploy;
mod deploy_build;
mod deploy_stage;
mod drill;
mod entity;
mod gray;
mod health;
mod monitor;
pub(crate) mod pool;
mod prom;
pub mod replay;
mod state;
pub(crate) mod tier;

pub use crate::circuit::{CircuitConfig, CircuitState};
pub use async_decide::DecisionFuture;
pub use builder::EngineBuilder;
pub use drill::{DrillPlan, DrillReport, Fault, Quality, SwitchTime};
pub use gray::VerdictCallback;
pub use health::{Health, HealthStatus, Switchable, TierHealth};

use crate::audit::{AuditEvent, AuditSink};
use crate::clock::Clock;
use crate::config::{EngineConfig, RawFile, ScorerRegistry};
use crate::decision::{
    Decision, EntityFeedback, Escalation, FallbackCause, ShedReason, Shutdown, ShutdownReport,
    StageTimings, Tier,
};
use crate::deploy::slot::{FastModel, Routing, Ver};
use crate::error::{ConfigError, DecideError};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::schema::FeatureSchema;
use crate::scorer::{Reasons, Score, Scorer, ScorerInfo};
use crate::txn::{EntityKey, Transaction};
use crate::version::Versions;
use arc_swap::ArcSwap;
use entity::EntityStore;
use gray::GrayZone;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, OnceLock};
use tier::{guarded_score, FastTier};

/// The tiered decision engine. Cheap to clone (an `Arc`); share one per process.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
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

/// Outcome of the rule stage.
type RuleOut = Option<Score>;

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
        let raw = RawFile::parse(text, origin)?;
        EngineBuilder::from_raw(&raw, base_dir, registry)?.build()
    }

    /// The engine's schema.
    pub fn schema(&self) -> &Arc<FeatureSchema> {
        &self.inner.schema
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.cfg
    }

    /// Decides on one transaction. `Err` only for bad input or after shutdown; every
    /// tier failure becomes a fallback on the returned [`Decision`].
    pub fn decide(&self, txn: &Transaction) -> Result<Decision, DecideError> {
        let t0 = self.inner.clock.now();
        self.decide_from(txn, t0)
    }

    /// [`decide`](Self::decide) whose deadline counts from `t0` (the time of a
    /// `decide_async` call, before it waited in the queue).
    pub(crate) fn decide_from(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        let inner = &*self.inner;
        inner.check(txn)?;
        match &inner.state {
            None => self.decide_checked(txn, t0),
            Some(st) => self.with_state(st, txn, |t| self.decide_checked(t, t0)),
        }
    }

    /// [`decide`](Self::decide) of a transaction whose state features are already in
    /// it (the batch path).
    pub(crate) fn decide_stateless(&self, txn: &Transaction) -> Result<Decision, DecideError> {
        let t0 = self.inner.clock.now();
        self.inner.check(txn)?;
        self.decide_checked(txn, t0)
    }

    /// The answer to a `decide_async` call shed by a full queue: the rules alone, at once.
    pub(crate) fn decide_shed(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        let inner = &*self.inner;
        inner.check(txn)?;
        inner.metrics.async_shed.fetch_add(1, Relaxed);
        match &inner.state {
            None => self.decide_shed_checked(txn, t0),
            Some(st) => self.with_state(st, txn, |t| self.decide_shed_checked(t, t0)),
        }
    }

    fn decide_shed_checked(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        let inner = &*self.inner;
        let routing = inner.routing.load();
        let ch = Chosen::pick(&routing, txn);
        let rules = inner.run_rules(&*ch.rules.body.scorer, txn);
        let t1 = inner.clock.now();
        let fast = match ch.fast {
            None => Err(FallbackCause::Absent),
            Some(_) => Err(FallbackCause::Saturated),
        };
        Ok(inner.finish(&ch, txn, rules, fast, t0, t1.saturating_sub(t0), 0))
    }

    fn decide_checked(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        let inner = &*self.inner;
        let clock = &*inner.clock;
        let routing = inner.routing.load();
        let ch = Chosen::pick(&routing, txn);
        let rules = inner.run_rules(&*ch.rules.body.scorer, txn);
        let t1 = clock.now();
        let f = &inner.fast;
        let (fast, t2) = match ch.fast {
            None => (Err(FallbackCause::Absent), t1),
            Some(m) => f.run(clock, &m.body, txn, t1, t0.saturating_add(f.deadline)),
        };
        Ok(inner.finish(
            &ch,
            txn,
            rules,
            fast,
            t0,
            t1.saturating_sub(t0),
            t2.saturating_sub(t1),
        ))
    }

    /// A future of [`decide`](Engine::decide) that runs on the engine's async workers
    /// and completes on any executor (it only uses the `Waker`). The fast tier's deadline
    /// counts from this call (queueing included); when the bounded queue
    /// (`pool.async_queue_capacity`) is full, the rules alone answer at once with
    /// [`FallbackCause::Saturated`].
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

    /// Stops the engine: later `decide` calls return [`DecideError::ShutDown`]; queued
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

impl Inner {
    #[inline]
    fn check(&self, txn: &Transaction) -> Result<(), DecideError> {
        if self.shut.load(Relaxed) {
            return Err(DecideError::ShutDown);
        }
        let s = txn.features.schema();
        if !Arc::ptr_eq(s, &self.schema) && s.fingerprint() != self.schema.fingerprint() {
            return Err(DecideError::SchemaMismatch {
                expected: self.schema.fingerprint(),
                got: s.fingerprint(),
            });
        }
        txn.validate()
    }

    #[inline]
    fn run_rules(&self, rules: &dyn Scorer, txn: &Transaction) -> RuleOut {
        match guarded_score(rules, txn) {
            Ok(s) => Some(s),
            Err(_) => {
                self.metrics.rules_failed.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Everything after the tiers ran: feedback, combine, escalation, metrics.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        ch: &Chosen<'_>,
        txn: &Transaction,
        rules: RuleOut,
        fast: Result<Score, FallbackCause>,
        t0: u64,
        rules_ns: u64,
        fast_ns: u64,
    ) -> Decision {
        let model = fast.ok();
        let shift = self.entities.on_decide(txn, model.map(|m| m.probability));
        let c = ch
            .policy
            .body
            .policy
            .combine(rules.as_ref(), model.as_ref(), shift);
        // Reasons: the deciding tier's first, then the other's.
        let mut reasons = Reasons::new();
        let (first, second) = match c.tier {
            Tier::Fast => (model.as_ref(), rules.as_ref()),
            _ => (rules.as_ref(), model.as_ref()),
        };
        for s in [first, second].into_iter().flatten() {
            for r in s.reasons.iter() {
                if reasons.len() < Reasons::CAPACITY {
                    reasons.push(r.code, r.weight);
                }
            }
        }
        let (lo, hi) = self.cfg.gray_band;
        let escalation = match model {
            Some(m) if !c.hard_rule && m.probability >= lo && m.probability <= hi => {
                match &self.gray {
                    None => Escalation::Shed(ShedReason::NoDeepTier),
                    Some(g) => match g.try_push(txn, m.probability) {
                        Ok(t) => {
                            self.metrics.gray.enqueued.fetch_add(1, Relaxed);
                            Escalation::Enqueued(t)
                        }
                        Err(why) => {
                            self.metrics.gray.shed.fetch_add(1, Relaxed);
                            tracing::debug!(target: "risk::gray", txn = txn.id.0, reason = ?why, "gray-zone transaction shed");
                            Escalation::Shed(why)
                        }
                    },
                }
            }
            _ => Escalation::None,
        };
        let fallback = fast.err();
        let mut versions = self.versions;
        versions.rules = rules
            .as_ref()
            .and_then(|r| r.version)
            .unwrap_or(ch.rules.id);
        versions.fast = ch
            .fast
            .map(|f| model.as_ref().and_then(|m| m.version).unwrap_or(f.id));
        versions.config = ch.policy.body.config_fp;
        versions.deep = ch.routing.deep;
        let m = &self.metrics;
        ch.rules.decided.fetch_add(1, Relaxed);
        if let (Some(f), Some(_)) = (ch.fast, model.as_ref()) {
            f.decided.fetch_add(1, Relaxed);
        }
        m.by_action[c.action as usize].fetch_add(1, Relaxed);
        m.by_tier[c.tier as usize].fetch_add(1, Relaxed);
        if let Some(cause) = fallback {
            m.by_cause[cause.index()].fetch_add(1, Relaxed);
            if cause != FallbackCause::Absent {
                tracing::debug!(target: "risk::decide", txn = txn.id.0, cause = cause.as_str(), "the rules decided: fast tier fell back");
            }
        }
        if c.hard_rule {
            m.hard_rule.fetch_add(1, Relaxed);
        }
        let t3 = self.clock.now();
        let total = t3.saturating_sub(t0);
        m.rules.record(rules_ns);
        if ch.fast.is_some() {
            m.fast.record(fast_ns);
        }
        m.total.record(total);
        let d = Decision {
            txn: txn.id,
            entity: txn.entity,
            action: c.action,
            score: c.score,
            tier: c.tier,
            fallback,
            hard_rule: c.hard_rule,
            rule_score: rules.map_or(f32::NAN, |r| r.probability),
            model_score: model.map(|m| m.probability),
            threshold_shift: shift,
            reasons,
            timings: StageTimings {
                rules_ns,
                fast_ns,
                combine_ns: total.saturating_sub(rules_ns + fast_ns),
                total_ns: total,
            },
            escalation,
            rules_fired: rules.map(|r| r.fired).unwrap_or_default(),
            rules_shadow: rules.map(|r| r.shadow_fired).unwrap_or_default(),
            versions,
            decided_at_ms: self.clock.unix_ms(),
            state: crate::decision::StateStatus::Off,
        };
        self.deploy.recent.offer(txn);
        if let Some(mc) = &self.monitor {
            mc.observe(
                txn,
                rules.as_ref(),
                model.as_ref(),
                &ch.policy.body.policy,
                shift,
            );
        }
        if ch.canary || ch.routing.watched() {
            self.observe(ch, &d, rules.as_ref(), model.as_ref(), rules_ns, fast_ns);
        }
        if ch.routing.shadowed() {
            self.offer_shadows(
                ch.routing,
                txn,
                rules.as_ref(),
                model.as_ref(),
                shift,
                d.action,
            );
        }
        if let Some(a) = &self.audit {
            // Never blocks beyond the sink's policy; a shed record is counted by the sink.
            let _ = a.offer(&AuditEvent::Decision {
                decision: &d,
                txn,
                policy: &ch.policy.body.policy,
            });
        }
        d
    }
}
