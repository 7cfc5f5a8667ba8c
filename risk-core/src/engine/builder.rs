//! [`EngineBuilder`]: every `risk.toml` option as a method.

use super::deploy::policy_id;
use super::deploy::DeployCtl;
use super::entity::EntityStore;
use super::gray::{GrayZone, VerdictCallback};
use super::tier::FastTier;
use super::{Engine, Inner};
use crate::audit::{AuditSink, KafkaSpec, SegmentLog};
use crate::calibrate::Calibration;
use crate::circuit::{Circuit, CircuitConfig};
use crate::clock::{nanos, Clock, SystemClock};
use crate::config::{
    DeepConfig, EngineConfig, FeedbackConfig, PoolConfig, RawFile, ScorerRegistry, ScorerSpec,
};
use crate::decision::{Action, DeepVerdict};
use crate::deploy::slot::{FastModel, PolicyModel, Routing, RulesModel, SlotState, Ver};
use crate::deploy::{DeployConfig, ModelDirectory};
use crate::error::ConfigError;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::schema::FeatureSchema;
use crate::scorer::Scorer;
use crate::version::VersionId;
use crate::version::Versions;
use arc_swap::ArcSwap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Builds an [`Engine`]. Options map 1:1 onto `risk.toml` keys (named in each method).
pub struct EngineBuilder {
    schema: Arc<FeatureSchema>,
    cfg: EngineConfig,
    rules: Option<Arc<dyn Scorer>>,
    fast: Option<Arc<dyn Scorer>>,
    deep: Option<Arc<dyn Scorer>>,
    clock: Arc<dyn Clock>,
    callback: Option<VerdictCallback>,
    audit: Option<Arc<dyn AuditSink>>,
    audit_log: Option<Arc<SegmentLog>>,
    kafka: Option<KafkaSpec>,
    /// Built by [`EngineBuilder::for_replay`]: entity state kept off every shared store.
    replay: bool,
    registry: ScorerRegistry,
    deploy: DeployConfig,
    fast_calibration: Option<Calibration>,
    monitor: Option<crate::monitor::MonitorConfig>,
    on_alert: Option<super::monitor::AlertCallback>,
    state: Option<crate::state::StateConfig>,
    /// `[privacy] key`: pseudonyms of identifiers written or sent.
    pseudonymiser: Option<crate::pseudo::Pseudonymiser>,
    /// `[privacy] file_mode`: modes of the files state writes.
    file_mode: crate::files::FileMode,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("cfg", &self.cfg)
            .field("rules", &self.rules.as_ref().map(|s| s.info()))
            .field("fast", &self.fast.as_ref().map(|s| s.info()))
            .field("deep", &self.deep.as_ref().map(|s| s.info()))
            .finish()
    }
}

impl EngineBuilder {
    pub(crate) fn new(schema: Arc<FeatureSchema>) -> Self {
        Self {
            schema,
            cfg: EngineConfig::default(),
            rules: None,
            fast: None,
            deep: None,
            clock: Arc::new(SystemClock::new()),
            callback: None,
            audit: None,
            audit_log: None,
            kafka: None,
            replay: false,
            registry: ScorerRegistry::default(),
            deploy: DeployConfig::default(),
            fast_calibration: None,
            monitor: None,
            on_alert: None,
            state: None,
            pseudonymiser: None,
            file_mode: crate::files::FileMode::Private,
        }
    }

    pub(crate) fn from_raw(
        raw: &RawFile,
        base_dir: &Path,
        registry: &ScorerRegistry,
    ) -> Result<Self, ConfigError> {
        let schema = raw.schema()?;
        let cfg = raw.engine_config()?;
        let spec = |key: &str, table: &toml::Table| ScorerSpec {
            key: key.to_owned(),
            table: table.clone(),
            schema: Arc::clone(&schema),
            base_dir: base_dir.to_path_buf(),
        };
        let mut b = Self::new(Arc::clone(&schema)).config(cfg);
        b.registry = registry.clone();
        b.deploy = raw.deploy_config(base_dir)?;
        b.fast_calibration = raw.fast_calibration()?;
        b.monitor = raw.monitor_config()?;
        b.pseudonymiser = raw.privacy.pseudonymiser()?;
        b.file_mode = raw.privacy.file_mode();
        if let Some(st) = &raw.state {
            b.state = Some(st.to_config(base_dir)?);
        }
        b.rules = Some(registry.build(&spec("rules.scorer", &raw.rules.scorer))?);
        if let Some(f) = &raw.fast {
            b.fast = Some(registry.build(&spec("fast.scorer", &f.scorer))?);
        }
        if let Some(d) = &raw.deep {
            b.deep = Some(registry.build(&spec("deep.scorer", &d.scorer))?);
        }
        if let Some(a) = raw.audit_options(base_dir)? {
            let log = SegmentLog::open(a)
                .map_err(|e| ConfigError::invalid("audit.dir", e.to_string()))?;
            b = b.audit_log(Arc::new(log));
        }
        b.kafka = raw.kafka_spec()?;
        #[cfg(not(feature = "kafka"))]
        if b.kafka.is_some() {
            return Err(ConfigError::invalid(
                "audit.kafka",
                "this build of risk-core lacks the `kafka` feature",
            ));
        }
        Ok(b)
    }

    /// Entity state (`[state]`): velocity features, lists, labels. The schema must have
    /// a numeric field for each ([`StateConfig::extend_schema`](crate::state::StateConfig::extend_schema)).
    pub fn state(mut self, cfg: crate::state::StateConfig) -> Self {
        self.state = Some(cfg);
        self
    }

    /// The `[privacy] key`'s pseudonymiser: identifiers this engine writes or sends are
    /// replaced by keyed pseudonyms (see [`crate::pseudo`]). An audit log opened by the
    /// caller takes its own ([`LogOptions::pseudonymiser`](crate::audit::LogOptions)).
    pub fn pseudonymiser(mut self, p: crate::pseudo::Pseudonymiser) -> Self {
        self.pseudonymiser = Some(p);
        self
    }

    /// Replaces every option at once.
    pub fn config(mut self, cfg: EngineConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// The rule tier (`[rules.scorer]`): required; always runs, inline.
    pub fn rules(mut self, s: Arc<dyn Scorer>) -> Self {
        self.rules = Some(s);
        self
    }

    /// The fast tier (`[fast.scorer]`).
    pub fn fast(mut self, s: Arc<dyn Scorer>) -> Self {
        self.fast = Some(s);
        self
    }

    /// The deep tier for gray-zone transactions (`[deep.scorer]`).
    pub fn deep(mut self, s: Arc<dyn Scorer>) -> Self {
        self.deep = Some(s);
        self
    }

    /// Fast-tier deadline from the start of `decide` (`fast.deadline_ms`, default 15 ms).
    pub fn fast_deadline(mut self, d: Duration) -> Self {
        self.cfg.fast_deadline = d;
        self
    }

    /// Approve below / decline at (`thresholds.approve_below`, `thresholds.decline_at`).
    pub fn thresholds(mut self, approve_below: f32, decline_at: f32) -> Self {
        self.cfg.policy.approve_below = approve_below;
        self.cfg.policy.decline_at = decline_at;
        self
    }

    /// Whether hard rules override the model (`thresholds.hard_rule_override`).
    pub fn hard_rule_override(mut self, on: bool) -> Self {
        self.cfg.policy.hard_rule_override = on;
        self
    }

    /// Action when even the rule tier fails (`thresholds.static_action`).
    pub fn static_action(mut self, a: Action) -> Self {
        self.cfg.policy.static_action = a;
        self
    }

    /// The whole policy.
    pub fn policy(mut self, p: Policy) -> Self {
        self.cfg.policy = p;
        self
    }

    /// Gray band (`gray.band`, default `[0.3, 0.7]`).
    pub fn gray_band(mut self, lo: f32, hi: f32) -> Self {
        self.cfg.gray_band = (lo, hi);
        self
    }

    /// The gray band set by a traffic budget (`gray.budget`): with a deep tier, the
    /// `budget.share` of scored traffic scored highest below the decline threshold
    /// escalates (the fixed band until 1,000 scores are seen).
    pub fn gray_budget(mut self, budget: crate::config::GrayBudget) -> Self {
        self.cfg.gray_budget = Some(budget);
        self
    }

    /// Deep queue bound (`gray.queue_capacity`).
    pub fn gray_queue_capacity(mut self, n: usize) -> Self {
        self.cfg.gray_queue_capacity = n;
        self
    }

    /// Deep-tier settings (`[deep]`).
    pub fn deep_config(mut self, d: DeepConfig) -> Self {
        self.cfg.deep = d;
        self
    }

    /// Pool settings (`[pool]`).
    pub fn pool_config(mut self, p: PoolConfig) -> Self {
        self.cfg.pool = p;
        self
    }

    /// Fast-tier circuit breaker (`[circuit]`).
    pub fn circuit(mut self, c: CircuitConfig) -> Self {
        self.cfg.circuit = c;
        self
    }

    /// Feedback settings (`[feedback]`).
    pub fn feedback_config(mut self, f: FeedbackConfig) -> Self {
        self.cfg.feedback = f;
        self
    }

    /// The clock (tests inject [`ManualClock`](crate::ManualClock)).
    pub fn clock(mut self, c: Arc<dyn Clock>) -> Self {
        self.clock = c;
        self
    }

    /// Makes this an engine that replays history (a backtest): time is `clock`, which the
    /// caller sets to each transaction's event time (with a clock that does not move while
    /// a decision runs, no deadline expires: every tier answers); the deep tier is dropped
    /// (its verdicts arrive asynchronously, so they could not shape the next decision as
    /// they would have), and so are the audit trail and the Kafka forwarder (a replay's
    /// decisions were never made). Entity state is the replay's own: computed in process
    /// (never on `[state.redis]`, whose keys serve live traffic), list changes not
    /// journalled, and `state.snapshot` only read: the replay starts from it when the file
    /// exists and never writes it (the live engine's restart state stays as it was). From
    /// a `risk.toml`, use [`Engine::replay_builder_from_toml_str`](crate::Engine::replay_builder_from_toml_str),
    /// which also leaves out what opens before this is called (the audit log, rule history).
    pub fn for_replay(mut self, clock: Arc<dyn Clock>) -> Self {
        self.deep = None;
        self.replay_keeping_deep(clock)
    }

    /// [`for_replay`](Self::for_replay), keeping the deep tier: for a replay that waits
    /// for each escalated row's verdict before the next row (the clock standing still),
    /// so verdicts shape the entities' next decisions at the event time they would have
    /// live (`risk.backtest(..., deep=True)`, [`EventReplay`](crate::EventReplay)). The
    /// deep tier's `max_wait` is set to 0: a batch would wait for it on a clock that
    /// stands still.
    pub fn replay_keeping_deep(mut self, clock: Arc<dyn Clock>) -> Self {
        self.replay = true;
        self.clock = clock;
        self.audit = None;
        self.audit_log = None;
        self.kafka = None;
        self
    }

    /// A callback for every deep verdict (runs on a deep worker thread).
    pub fn on_verdict(mut self, f: impl Fn(&DeepVerdict) + Send + Sync + 'static) -> Self {
        self.callback = Some(Arc::new(f));
        self
    }

    /// Records every decision and deep verdict to `sink` (`[audit]` builds a
    /// [`SegmentLog`]). The sink's `offer` runs on the caller's thread and must not block
    /// beyond its own policy.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Records to a local [`SegmentLog`] (`[audit]`), reachable later through
    /// [`Engine::audit_log`].
    pub fn audit_log(mut self, log: Arc<SegmentLog>) -> Self {
        self.audit = Some(Arc::clone(&log) as Arc<dyn AuditSink>);
        self.audit_log = Some(log);
        self
    }

    /// Scorer kinds that deploys of [`Candidate::Spec`](crate::deploy::Candidate::Spec)
    /// (and restores from the model directory) build through; `risk.toml` engines use
    /// the registry they were built with.
    pub fn registry(mut self, r: ScorerRegistry) -> Self {
        self.registry = r;
        self
    }

    /// Deploy settings (`[deploy]`): model directory, supervisor cadence, gate sample.
    pub fn deploy_config(mut self, d: DeployConfig) -> Self {
        self.deploy = d;
        self
    }

    /// Calibration of the fast model's scores (`fast.calibration`), applied before the
    /// thresholds.
    pub fn fast_calibration(mut self, c: Calibration) -> Self {
        self.fast_calibration = Some(c);
        self
    }

    /// Turns the monitors on (`[monitor]`): model-vs-rules agreement, feature and score
    /// drift, deep-tier health.
    pub fn monitor(mut self, m: crate::monitor::MonitorConfig) -> Self {
        self.monitor = Some(m);
        self
    }

    /// A callback for every monitor alert (firing and resolved), called on the thread that
    /// judged the monitors.
    pub fn on_alert(mut self, f: impl Fn(&crate::monitor::Alert) + Send + Sync + 'static) -> Self {
        self.on_alert = Some(Arc::new(f));
        self
    }

    /// Validates, warms every scorer up, starts the pools, and returns the engine.
    /// With a model directory, each target's last promoted version replaces the
    /// configured one.
    pub fn build(mut self) -> Result<Engine, ConfigError> {
        let dir = match &self.deploy.dir {
            None => None,
            Some(d) => Some(
                ModelDirectory::open_with_mode(d, self.file_mode)
                    .map_err(|e| ConfigError::invalid("deploy.dir", e.to_string()))?,
            ),
        };
        let keys = match &dir {
            None => Default::default(),
            Some(d) => restore(&mut self, d)?,
        };
        let mut cfg = self.cfg;
        if self.replay {
            // The replay's clock stands still while a caller waits for a verdict: a
            // batch waiting `max_wait` on it for a second item would wait for ever.
            cfg.deep.max_wait = std::time::Duration::ZERO;
        }
        cfg.validate()?;
        if let Some(m) = &self.monitor {
            m.validate()?;
        }
        if let Some(c) = &self.fast_calibration {
            c.validate()
                .map_err(|e| ConfigError::invalid("fast.calibration", e.to_string()))?;
        }
        let rules = self
            .rules
            .ok_or_else(|| ConfigError::invalid("rules.scorer", "a rule tier is required"))?;
        let warm = |key: &str, s: &Arc<dyn Scorer>| {
            s.warmup().map_err(|e| ConfigError::Scorer {
                key: key.to_owned(),
                message: format!("warm-up failed: {e}"),
            })
        };
        warm("rules.scorer", &rules)?;
        if let Some(l) = &self.audit_log {
            l.check_schema(&self.schema)
                .map_err(|e| ConfigError::invalid("audit.features", e.to_string()))?;
        }
        let rules_info = rules.info();
        let deep_id = self.deep.as_ref().map(|s| s.info().version_id());
        let config_fp = cfg.fingerprint();
        let versions = Versions {
            rules: rules_info.version_id(),
            fast: None,
            deep: deep_id,
            config: config_fp,
            schema: self.schema.fingerprint(),
        };
        let metrics = Arc::new(Metrics::default());
        let io = |key: &str| {
            let key = key.to_owned();
            move |e: std::io::Error| ConfigError::invalid(key, format!("cannot start threads: {e}"))
        };
        let fast = FastTier {
            forced_open: std::sync::atomic::AtomicBool::new(false),
            fault: std::sync::atomic::AtomicU8::new(0),
            fault_delay_ns: std::sync::atomic::AtomicU64::new(0),
            pool: OnceLock::new(),
            deadline: nanos(cfg.fast_deadline),
            skipped: Arc::clone(&metrics.fast_skipped),
            late: Arc::clone(&metrics.late_discarded),
            workers: cfg.pool.fast_workers,
            spin: cfg.pool.spin,
            deadline_spin: cfg.pool.deadline_spin,
        };
        let fast_slot = match self.fast {
            None => None,
            Some(s) => {
                warm("fast.scorer", &s)?;
                let info = s.info();
                fast.ensure_pool(info.latency)
                    .map_err(io("pool.fast_workers"))?;
                let mut hash = info.content_hash;
                if let Some(c) = &self.fast_calibration {
                    hash ^= crate::hash::Fnv::hash(c.to_json().as_bytes()).rotate_left(1);
                }
                Some(SlotState::serving(Ver::new(
                    VersionId::new(&info.name, &info.version, hash),
                    FastModel {
                        scorer: s,
                        latency: info.latency,
                        calibration: self.fast_calibration.take().map(Arc::new),
                        circuit: Arc::new(Circuit::new(cfg.circuit, "fast")),
                    },
                )))
            }
        };
        let routing = Routing {
            epoch: 0,
            rules: SlotState::serving(Ver::new(
                rules_info.version_id(),
                RulesModel {
                    scorer: Arc::clone(&rules),
                },
            )),
            fast: fast_slot,
            policy: SlotState::serving(Ver::new(
                policy_id(&cfg.policy),
                PolicyModel {
                    policy: cfg.policy,
                    config_fp,
                },
            )),
            deep: deep_id,
        };
        #[cfg(feature = "kafka")]
        let kafka = match (&self.kafka, &self.audit_log) {
            (Some(k), Some(log)) => {
                let mut o = crate::audit::KafkaOptions::new(&k.brokers, &k.topic);
                o.max_in_flight = k.max_in_flight;
                o.message_timeout = k.message_timeout;
                o.security = k.security.clone();
                o.properties = k.properties.clone();
                Some(
                    crate::audit::KafkaForwarder::start(log, o)
                        .map_err(|e| ConfigError::invalid("audit.kafka", e.to_string()))?,
                )
            }
            _ => None,
        };
        let entities = Arc::new(EntityStore::new(cfg.feedback, Arc::clone(&self.clock)));
        let gray = match self.deep {
            None => None,
            Some(s) => {
                warm("deep.scorer", &s)?;
                Some(
                    GrayZone::start(
                        cfg.deep,
                        cfg.gray_queue_capacity,
                        s,
                        Arc::clone(&self.clock),
                        Arc::clone(&entities),
                        Arc::clone(&metrics),
                        self.callback,
                        cfg.pool.spin,
                        cfg.circuit,
                        self.audit.clone(),
                    )
                    .map_err(io("deep.workers"))?,
                )
            }
        };
        let state_writes_ids = !self.replay
            && self
                .state
                .as_ref()
                .is_some_and(|c| c.redis.is_some() || c.dir.is_some() || c.snapshot.is_some());
        let state = match self.state {
            None => None,
            Some(mut c) => {
                // A replay reads the snapshot once, here, and writes no shared store.
                let restore_from = if self.replay {
                    c.redis = None;
                    c.dir = None;
                    c.snapshot.take().filter(|p| p.exists())
                } else {
                    None
                };
                // `[privacy] key` reaches every place state writes or sends identifiers:
                // Redis key names and values, list journals.
                if let Some(r) = c.redis.as_mut() {
                    if r.pseudonymiser.is_none() {
                        r.pseudonymiser = self.pseudonymiser.clone();
                    }
                }
                let st = crate::state::StateEngine::with_privacy(
                    c,
                    Arc::clone(&self.schema),
                    Arc::clone(&self.clock),
                    crate::state::StatePrivacy {
                        pseudonymiser: self.pseudonymiser.clone(),
                        file_mode: self.file_mode,
                    },
                )?;
                if let Some(p) = restore_from {
                    st.restore(&p)
                        .map_err(|e| ConfigError::invalid("state.snapshot", e.to_string()))?;
                }
                Some(Arc::new(st))
            }
        };
        let writes_ids = self.audit_log.is_some() || self.audit.is_some() || state_writes_ids;
        let pseudonymised = self.pseudonymiser.is_some()
            && self.audit_log.as_ref().is_none_or(|l| l.pseudonymised());
        if writes_ids && !pseudonymised {
            tracing::warn!(
                target: "risk::privacy",
                "identifiers written or sent (audit trail, Redis, list journals) are not pseudonymised: set [privacy] key (see SECURITY.md)"
            );
        }
        if cfg.gray_budget.is_some() && gray.is_none() && !self.replay {
            tracing::warn!(
                target: "risk::gray",
                "gray.budget is set but there is no deep tier: nothing escalates, the budget does nothing"
            );
        }
        let gray_band = cfg
            .gray_budget
            .filter(|_| gray.is_some())
            .map(|b| Arc::new(super::gray_band::BudgetBand::new(b)));
        let inner = Arc::new(Inner {
            pseudonymised,
            state,
            schema: self.schema,
            deploy: DeployCtl::new(self.deploy, dir, self.registry, keys),
            cfg,
            routing: ArcSwap::from_pointee(routing),
            versions,
            audit: self.audit,
            audit_log: self.audit_log,
            #[cfg(feature = "kafka")]
            kafka,
            fast,
            gray_band,
            gray,
            entities,
            metrics,
            clock: self.clock,
            shut: AtomicBool::new(false),
            async_pool: OnceLock::new(),
            monitor: self
                .monitor
                .map(|m| super::monitor::MonitorCtl::new(m, self.on_alert)),
        });
        Inner::start_monitor(&inner).map_err(io("monitor.interval_ms"))?;
        Inner::start_gray_band(&inner).map_err(io("gray.budget"))?;
        Ok(Engine { inner })
    }
}

/// Replaces each target the model directory has a promoted version of with that version;
/// returns their keys. A promoted caller-built scorer (no spec) cannot be rebuilt: the
/// configured one serves, and the key is not returned.
fn restore(b: &mut EngineBuilder, d: &ModelDirectory) -> Result<[Option<String>; 4], ConfigError> {
    use crate::deploy::Target;
    let err = |e: crate::deploy::DeployError| ConfigError::invalid("deploy.dir", e.to_string());
    let mut keys: [Option<String>; 4] = Default::default();
    for t in Target::ALL {
        let Some(m) = d.promoted(t).map_err(err)? else {
            continue;
        };
        let what = format!("deploy.dir: promoted {t} version {}", m.key);
        if t == Target::Policy {
            let p = m
                .policy
                .ok_or_else(|| ConfigError::invalid(&what, "holds no thresholds"))?;
            b.cfg.policy = Policy {
                approve_below: p.approve_below,
                decline_at: p.decline_at,
                hard_rule_override: p.hard_rule_override,
                static_action: Action::parse(&p.static_action)
                    .ok_or_else(|| ConfigError::invalid(&what, "bad static_action"))?,
            };
            keys[t as usize] = Some(m.key);
            continue;
        }
        let Some(text) = &m.spec else { continue };
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| ConfigError::invalid(&what, format!("spec: {}", e.message())))?;
        let spec = ScorerSpec {
            key: what.clone(),
            table,
            schema: Arc::clone(&b.schema),
            base_dir: d.version_dir(t, &m.key),
        };
        let s = b.registry.build(&spec)?;
        match t {
            Target::Rules => b.rules = Some(s),
            Target::Fast => {
                b.fast = Some(s);
                b.fast_calibration = m.calibration.clone();
            }
            Target::Deep => b.deep = Some(s),
            Target::Policy => {}
        }
        keys[t as usize] = Some(m.key);
    }
    Ok(keys)
}
