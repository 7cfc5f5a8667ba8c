//! The tiered decision engine.
//!
//! One [`Engine::decide`] call: validate input → rule tier inline (the fallback verdict,
//! ready before any model is called) → fast tier under its circuit breaker and hard
//! deadline (inline for bounded scorers, on the tier pool otherwise) → entity feedback →
//! combine ([`crate::policy`]) → gray-zone hand-off (non-blocking) → metrics.

mod async_decide;
mod builder;
pub(crate) mod circuit;
mod entity;
mod gray;
pub(crate) mod pool;
mod tier;

pub use async_decide::DecisionFuture;
pub use builder::EngineBuilder;
pub use circuit::{CircuitConfig, CircuitState};
pub use gray::VerdictCallback;

use crate::audit::{AuditEvent, AuditSink};
use crate::clock::Clock;
use crate::config::{EngineConfig, RawFile, ScorerRegistry};
use crate::decision::{
    Decision, EntityFeedback, Escalation, FallbackCause, ShedReason, Shutdown, ShutdownReport,
    StageTimings, Tier,
};
use crate::error::{ConfigError, DecideError};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::policy::Policy;
use crate::schema::FeatureSchema;
use crate::scorer::{Reasons, Score, Scorer, ScorerInfo};
use crate::txn::{EntityKey, Transaction};
use crate::version::Versions;
use entity::EntityStore;
use gray::GrayZone;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, OnceLock};
use tier::{guarded_batch, guarded_score, FastTier};

/// The tiered decision engine. Cheap to clone (an `Arc`); share one per process.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    schema: Arc<FeatureSchema>,
    cfg: EngineConfig,
    policy: Policy,
    rules: Arc<dyn Scorer>,
    rules_info: ScorerInfo,
    /// Versions as built; a score that names its own version (a reloaded rule set)
    /// overrides its tier's entry per decision.
    versions: Versions,
    audit: Option<Arc<dyn AuditSink>>,
    audit_log: Option<Arc<crate::audit::SegmentLog>>,
    #[cfg(feature = "kafka")]
    kafka: Option<crate::audit::KafkaForwarder>,
    fast: Option<FastTier>,
    gray: Option<GrayZone>,
    entities: Arc<EntityStore>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    shut: AtomicBool,
    async_pool: OnceLock<async_decide::AsyncPool>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("schema", &self.schema)
            .field("rules", &self.rules_info)
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
        let inner = &*self.inner;
        inner.check(txn)?;
        self.decide_checked(txn, inner.clock.now())
    }

    /// [`decide`](Self::decide) whose deadline counts from `t0` (the time of a
    /// `decide_async` call, before it waited in the queue).
    pub(crate) fn decide_from(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        self.inner.check(txn)?;
        self.decide_checked(txn, t0)
    }

    /// The answer to a `decide_async` call shed by a full queue: the rules alone, at once.
    pub(crate) fn decide_shed(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        let inner = &*self.inner;
        inner.check(txn)?;
        inner.metrics.async_shed.fetch_add(1, Relaxed);
        let rules = inner.run_rules(txn);
        let t1 = inner.clock.now();
        let fast = match inner.fast {
            None => Err(FallbackCause::Absent),
            Some(_) => Err(FallbackCause::Saturated),
        };
        Ok(inner.finish(txn, rules, fast, t0, t1.saturating_sub(t0), 0))
    }

    fn decide_checked(&self, txn: &Transaction, t0: u64) -> Result<Decision, DecideError> {
        let inner = &*self.inner;
        let clock = &*inner.clock;
        let rules = inner.run_rules(txn);
        let t1 = clock.now();
        let (fast, t2) = match &inner.fast {
            None => (Err(FallbackCause::Absent), t1),
            Some(f) => f.run(clock, txn, t1, t0.saturating_add(f.deadline)),
        };
        Ok(inner.finish(
            txn,
            rules,
            fast,
            t0,
            t1.saturating_sub(t0),
            t2.saturating_sub(t1),
        ))
    }

    /// Decides on several transactions. A bounded fast tier scores them in chunks of
    /// [`BATCH_CHUNK`](Self::BATCH_CHUNK), one `score_batch` call per chunk under that
    /// chunk's own deadline (measured from the chunk's start, as for one `decide`), so a
    /// large batch never turns into one deadline for all; otherwise each goes through
    /// [`decide`]. Results are in input order and equal what `decide` would answer.
    ///
    /// [`decide`]: Engine::decide
    pub fn decide_batch(&self, txns: &[Transaction]) -> Vec<Result<Decision, DecideError>> {
        let inner = &*self.inner;
        match &inner.fast {
            Some(f) if f.is_inline() && txns.len() > 1 => txns
                .chunks(Self::BATCH_CHUNK)
                .flat_map(|c| self.decide_chunk(f, c))
                .collect(),
            _ => txns.iter().map(|t| self.decide(t)).collect(),
        }
    }

    /// Transactions per `score_batch` call (and per deadline) in [`decide_batch`](Self::decide_batch).
    pub const BATCH_CHUNK: usize = 64;

    fn decide_chunk(
        &self,
        fast: &FastTier,
        txns: &[Transaction],
    ) -> Vec<Result<Decision, DecideError>> {
        let inner = &*self.inner;
        let clock = &*inner.clock;
        let t0 = clock.now();
        let checked: Vec<Result<(), DecideError>> = txns.iter().map(|t| inner.check(t)).collect();
        let rules: Vec<RuleOut> = txns
            .iter()
            .zip(&checked)
            .map(|(t, c)| if c.is_ok() { inner.run_rules(t) } else { None })
            .collect();
        let t1 = clock.now();
        let ok: Vec<&Transaction> = txns
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(t, _)| t)
            .collect();
        let fast_out = fast.run_batch(clock, &ok, t0.saturating_add(fast.deadline));
        let t2 = clock.now();
        let n = ok.len().max(1) as u64;
        let (rules_ns, fast_ns) = ((t1 - t0) / n, (t2 - t1) / n);
        let mut k = 0;
        txns.iter()
            .zip(checked)
            .zip(rules)
            .map(|((t, c), r)| {
                c?;
                let f = fast_out
                    .as_ref()
                    .map_err(|c| *c)
                    .map(|v| v[k])
                    .and_then(|s| s);
                k += 1;
                Ok(inner.finish(t, r, f, t0, rules_ns, fast_ns))
            })
            .collect()
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
    pub fn subscribe(&self) -> Receiver<crate::DeepVerdict> {
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
        let mut v = vec![("rules", self.inner.rules.info())];
        if let Some(f) = &self.inner.fast {
            v.push(("fast", f.scorer.info()));
        }
        if let Some(g) = &self.inner.gray {
            v.push(("deep", g.scorer_info()));
        }
        v
    }

    /// The versions serving now: what the next decision records (the rule tier's
    /// entry follows hot reloads).
    pub fn versions(&self) -> Versions {
        let mut v = self.inner.versions;
        v.rules = self.inner.rules.info().version_id();
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
        let circuit = i
            .fast
            .as_ref()
            .map_or("absent", |f| f.circuit.state(i.clock.now()).as_str());
        let busy = i
            .fast
            .as_ref()
            .and_then(|f| f.pool.as_ref())
            .map_or(0, |p| p.busy());
        let deep = i
            .gray
            .as_ref()
            .map_or("absent", |g| g.circuit_state().as_str());
        i.metrics.snapshot(q, circuit, deep, busy)
    }

    /// State of the fast tier's circuit breaker (`None` without a fast tier).
    pub fn fast_circuit(&self) -> Option<CircuitState> {
        let i = &*self.inner;
        i.fast.as_ref().map(|f| f.circuit.state(i.clock.now()))
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
        if let Some(p) = i.fast.as_ref().and_then(|f| f.pool.as_ref()) {
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
    fn run_rules(&self, txn: &Transaction) -> RuleOut {
        match guarded_score(&*self.rules, txn) {
            Ok(s) => Some(s),
            Err(_) => {
                self.metrics.rules_failed.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Everything after the tiers ran: feedback, combine, escalation, metrics.
    #[inline]
    fn finish(
        &self,
        txn: &Transaction,
        rules: RuleOut,
        fast: Result<Score, FallbackCause>,
        t0: u64,
        rules_ns: u64,
        fast_ns: u64,
    ) -> Decision {
        let model = fast.ok();
        let shift = self.entities.on_decide(txn, model.map(|m| m.probability));
        let c = self.policy.combine(rules.as_ref(), model.as_ref(), shift);
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
                            Escalation::Shed(why)
                        }
                    },
                }
            }
            _ => Escalation::None,
        };
        let fallback = fast.err();
        let mut versions = self.versions;
        if let Some(v) = rules.as_ref().and_then(|r| r.version) {
            versions.rules = v;
        }
        if let Some(v) = model.as_ref().and_then(|m| m.version) {
            versions.fast = Some(v);
        }
        let m = &self.metrics;
        m.by_action[c.action as usize].fetch_add(1, Relaxed);
        m.by_tier[c.tier as usize].fetch_add(1, Relaxed);
        if let Some(cause) = fallback {
            m.by_cause[cause.index()].fetch_add(1, Relaxed);
        }
        if c.hard_rule {
            m.hard_rule.fetch_add(1, Relaxed);
        }
        let t3 = self.clock.now();
        let total = t3.saturating_sub(t0);
        m.rules.record(rules_ns);
        if self.fast.is_some() {
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
            versions,
            decided_at_ms: self.clock.unix_ms(),
        };
        if let Some(a) = &self.audit {
            // Never blocks beyond the sink's policy; a shed record is counted by the sink.
            let _ = a.offer(&AuditEvent::Decision {
                decision: &d,
                txn,
                policy: &self.policy,
            });
        }
        d
    }
}

impl FastTier {
    /// One `score_batch` call for a bounded (inline) tier, under the circuit breaker.
    /// A failure is the row's, not the chunk's: per-item invalid scores become per-item
    /// failures, and a batch call that errs or panics is retried row by row (while the
    /// deadline allows) so that only the rows that fail alone fall back. The breaker
    /// counts rows, not calls.
    fn run_batch(
        &self,
        clock: &dyn Clock,
        txns: &[&Transaction],
        until: u64,
    ) -> Result<Vec<Result<Score, FallbackCause>>, FallbackCause> {
        use circuit::Permit;
        let now = clock.now();
        if now >= until {
            // The rule stage used up the deadline (see `FastTier::run`).
            self.skipped.fetch_add(txns.len() as u64, Relaxed);
            return Err(FallbackCause::Timeout);
        }
        let permit = self.circuit.acquire(now);
        if permit == Permit::Denied {
            return Err(FallbackCause::CircuitOpen);
        }
        let mut out = Vec::with_capacity(txns.len());
        let valid = |s: Score| {
            if s.is_valid() {
                Ok(s)
            } else {
                Err(FallbackCause::InvalidScore)
            }
        };
        let r: Vec<Result<Score, FallbackCause>> =
            match guarded_batch(&*self.scorer, txns, &mut out) {
                Ok(()) => out.into_iter().map(valid).collect(),
                Err(_) => txns
                    .iter()
                    .map(|t| {
                        if clock.now() > until {
                            return Err(FallbackCause::Timeout);
                        }
                        guarded_score(&*self.scorer, t).map_err(tier::Failure::cause)
                    })
                    .collect(),
            };
        let end = clock.now();
        let (oks, fails) = if end > until {
            (0, txns.len())
        } else {
            let oks = r.iter().filter(|x| x.is_ok()).count();
            (oks, r.len() - oks)
        };
        self.circuit.record_n(
            permit,
            u32::try_from(oks).unwrap_or(u32::MAX),
            u32::try_from(fails).unwrap_or(u32::MAX),
            end,
        );
        if end > until {
            return Err(FallbackCause::Timeout);
        }
        Ok(r)
    }
}
