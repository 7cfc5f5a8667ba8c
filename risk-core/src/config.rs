//! Engine configuration: [`EngineConfig`] (typed, what the builder sets) and its TOML form
//! (`risk.toml`), mapped 1:1. Scorers named in the file are built by a [`ScorerRegistry`].
//!
//! ```toml
//! [schema]
//! fields = [
//!   { name = "amount", kind = "numeric", required = true },
//!   { name = "country", kind = "categorical", vocab = ["US", "GB"] },
//! ]
//!
//! [rules.scorer]            # required: the tier that cannot fail
//! kind = "constant"
//! probability = 0.1
//!
//! [fast]
//! deadline_ms = 15          # hard deadline from the start of decide()
//! [fast.scorer]
//! kind = "constant"
//! probability = 0.2
//!
//! [thresholds]
//! approve_below = 0.3
//! decline_at = 0.7
//! hard_rule_override = true
//! static_action = "review"  # when even the rule tier fails
//!
//! [gray]
//! band = [0.3, 0.7]
//! queue_capacity = 4096
//!
//! [deep]
//! budget_ms = 500
//! max_batch = 8
//! max_wait_ms = 2
//! workers = 1
//! global_prior = 0.5
//! subscriber_capacity = 1024
//!
//! [pool]
//! fast_workers = 4
//! spin_us = 20
//! async_workers = 2
//! async_queue_capacity = 1024
//!
//! [circuit]
//! window_ms = 10000
//! min_calls = 20
//! failure_rate = 0.5
//! open_ms = 5000
//! half_open_probes = 3
//!
//! [feedback]
//! gain = 0.5
//! max_shift = 0.2
//! ttl_ms = 86400000
//! max_entities = 1000000
//! max_future_ms = 300000
//! ```

use crate::decision::Action;
use crate::engine::circuit::CircuitConfig;
use crate::error::{ConfigError, ScoreError};
use crate::policy::Policy;
use crate::schema::FeatureSchema;
use crate::scorer::{Latency, Score, Scorer, ScorerInfo};
use crate::txn::Transaction;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Deep-tier settings (`[deep]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepConfig {
    /// Time from enqueue within which the model must answer.
    pub budget: Duration,
    /// Largest batch handed to the deep scorer.
    pub max_batch: usize,
    /// How long the first queued item waits for others to join its batch.
    pub max_wait: Duration,
    /// Deep worker threads (each runs one batch at a time).
    pub workers: usize,
    /// Score used when the model is late or fails and the entity has no history.
    pub global_prior: f32,
    /// Capacity of each [`Engine::subscribe`](crate::Engine::subscribe) channel.
    pub subscriber_capacity: usize,
}

impl Default for DeepConfig {
    fn default() -> Self {
        Self {
            budget: Duration::from_millis(500),
            max_batch: 8,
            max_wait: Duration::from_millis(2),
            workers: 1,
            global_prior: 0.5,
            subscriber_capacity: 1024,
        }
    }
}

/// Thread pools (`[pool]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolConfig {
    /// Workers for a fast tier whose latency is unbounded.
    pub fast_workers: usize,
    /// How long a pool worker spins for new work, and a caller for its result, before
    /// parking. Trades CPU for a cheaper thread hop.
    pub spin: Duration,
    /// Threads serving [`Engine::decide_async`](crate::Engine::decide_async).
    pub async_workers: usize,
    /// Calls waiting for an async worker; beyond it `decide_async` sheds: the call is
    /// answered at once by the rules alone (`FallbackCause::Saturated`).
    pub async_queue_capacity: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            fast_workers: 4,
            spin: Duration::from_micros(20),
            async_workers: 2,
            async_queue_capacity: 1024,
        }
    }
}

/// Deep-verdict feedback into later decisions (`[feedback]`); see [`crate::policy`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeedbackConfig {
    /// Threshold shift per unit of `deep_score - 0.5`.
    pub gain: f32,
    /// Largest shift either way.
    pub max_shift: f32,
    /// How long (event time) a verdict keeps affecting the entity.
    pub ttl: Duration,
    /// Entities kept in memory (beyond it, the entities least recently or frequently
    /// seen are evicted: S3-FIFO, see the engine's entity store).
    pub max_entities: usize,
    /// How far ahead of the clock's wall time an event time may be (`feedback.max_future_ms`):
    /// a later one is taken as `now + max_future` in entity state, so one terminal with a
    /// skewed clock cannot make an entity's feedback never expire. `None`: no bound (for
    /// replays of synthetic future data).
    pub max_future: Option<Duration>,
}

impl Default for FeedbackConfig {
    fn default() -> Self {
        Self {
            gain: 0.5,
            max_shift: 0.2,
            ttl: Duration::from_secs(24 * 3600),
            max_entities: 1_000_000,
            max_future: Some(Duration::from_secs(300)),
        }
    }
}

impl FeedbackConfig {
    /// The threshold shift for a deep score.
    pub fn shift(&self, deep_score: f32) -> f32 {
        (self.gain * (deep_score - 0.5)).clamp(-self.max_shift, self.max_shift)
    }
}

/// Every engine option. `Default` is the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Fast-tier deadline measured from the start of `decide` (`fast.deadline_ms`).
    pub fast_deadline: Duration,
    /// Thresholds and override (`[thresholds]`).
    pub policy: Policy,
    /// Fast scores in `[lo, hi]` escalate to the deep tier (`gray.band`).
    pub gray_band: (f32, f32),
    /// Bound of the deep queue (`gray.queue_capacity`).
    pub gray_queue_capacity: usize,
    /// `[deep]`.
    pub deep: DeepConfig,
    /// `[pool]`.
    pub pool: PoolConfig,
    /// `[circuit]` (fast tier).
    pub circuit: CircuitConfig,
    /// `[feedback]`.
    pub feedback: FeedbackConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            fast_deadline: Duration::from_millis(15),
            policy: Policy::default(),
            gray_band: (0.3, 0.7),
            gray_queue_capacity: 4096,
            deep: DeepConfig::default(),
            pool: PoolConfig::default(),
            circuit: CircuitConfig::default(),
            feedback: FeedbackConfig::default(),
        }
    }
}

fn unit(key: &str, v: f32) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&v) {
        return Err(ConfigError::invalid(key, format!("{v} is not in [0, 1]")));
    }
    Ok(())
}

fn at_least_one(key: &str, v: usize) -> Result<(), ConfigError> {
    if v == 0 {
        return Err(ConfigError::invalid(key, "must be at least 1"));
    }
    Ok(())
}

impl EngineConfig {
    /// Checks every value; the error names the `risk.toml` key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.fast_deadline.is_zero() {
            return Err(ConfigError::invalid("fast.deadline_ms", "must be positive"));
        }
        if self.fast_deadline > Duration::from_secs(60) {
            return Err(ConfigError::invalid(
                "fast.deadline_ms",
                "must be at most 60000",
            ));
        }
        let p = &self.policy;
        unit("thresholds.approve_below", p.approve_below)?;
        unit("thresholds.decline_at", p.decline_at)?;
        if p.approve_below > p.decline_at {
            return Err(ConfigError::invalid(
                "thresholds",
                format!(
                    "approve_below {} is above decline_at {}",
                    p.approve_below, p.decline_at
                ),
            ));
        }
        let (lo, hi) = self.gray_band;
        unit("gray.band", lo)?;
        unit("gray.band", hi)?;
        if lo >= hi {
            return Err(ConfigError::invalid(
                "gray.band",
                format!("[{lo}, {hi}] is empty or inverted (need lo < hi)"),
            ));
        }
        at_least_one("gray.queue_capacity", self.gray_queue_capacity)?;
        let d = &self.deep;
        if d.budget.is_zero() {
            return Err(ConfigError::invalid("deep.budget_ms", "must be positive"));
        }
        at_least_one("deep.max_batch", d.max_batch)?;
        at_least_one("deep.workers", d.workers)?;
        at_least_one("deep.subscriber_capacity", d.subscriber_capacity)?;
        if d.max_wait >= d.budget {
            return Err(ConfigError::invalid(
                "deep.max_wait_ms",
                "must be below deep.budget_ms",
            ));
        }
        unit("deep.global_prior", d.global_prior)?;
        at_least_one("pool.fast_workers", self.pool.fast_workers)?;
        at_least_one("pool.async_workers", self.pool.async_workers)?;
        at_least_one("pool.async_queue_capacity", self.pool.async_queue_capacity)?;
        if self.pool.spin > Duration::from_millis(10) {
            return Err(ConfigError::invalid(
                "pool.spin_us",
                "must be at most 10000",
            ));
        }
        self.circuit.validate()?;
        let f = &self.feedback;
        if !(f.gain.is_finite() && f.gain >= 0.0) {
            return Err(ConfigError::invalid(
                "feedback.gain",
                "must be finite and >= 0",
            ));
        }
        unit("feedback.max_shift", f.max_shift)?;
        if f.ttl.is_zero() {
            return Err(ConfigError::invalid("feedback.ttl_ms", "must be positive"));
        }
        at_least_one("feedback.max_entities", f.max_entities)?;
        Ok(())
    }
}

// ===== TOML form =====

/// A scorer table from `risk.toml` (`[rules.scorer]`, `[fast.scorer]`, `[deep.scorer]`),
/// handed to the factory registered for its `kind`.
#[derive(Debug, Clone)]
pub struct ScorerSpec {
    /// The table's dotted key, for error messages.
    pub key: String,
    /// Every key of the table, `kind` included.
    pub table: toml::Table,
    /// The engine's schema.
    pub schema: Arc<FeatureSchema>,
    /// Directory of the config file: relative paths in the table resolve against it.
    pub base_dir: PathBuf,
}

impl ScorerSpec {
    /// A string value, or an error naming the key.
    pub fn str(&self, name: &str) -> Result<&str, ConfigError> {
        self.table
            .get(name)
            .and_then(|v| v.as_str())
            .ok_or_else(|| ConfigError::invalid(format!("{}.{name}", self.key), "missing string"))
    }

    /// A path value resolved against the config's directory.
    pub fn path(&self, name: &str) -> Result<PathBuf, ConfigError> {
        let p = Path::new(self.str(name)?);
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        })
    }

    /// A number value, if present.
    pub fn f64(&self, name: &str) -> Result<Option<f64>, ConfigError> {
        match self.table.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_float()
                .or_else(|| v.as_integer().map(|i| i as f64))
                .map(Some)
                .ok_or_else(|| {
                    ConfigError::invalid(format!("{}.{name}", self.key), "must be a number")
                }),
        }
    }
}

type Factory = Arc<dyn Fn(&ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> + Send + Sync>;

/// Maps scorer `kind`s in `risk.toml` to factories. Backends register their kinds
/// (`risk-rules` registers `rules`, `risk-gpu` its model kinds); the core registers
/// `constant`.
#[derive(Clone)]
pub struct ScorerRegistry {
    kinds: BTreeMap<String, Factory>,
}

impl fmt::Debug for ScorerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl Default for ScorerRegistry {
    fn default() -> Self {
        let mut r = Self {
            kinds: BTreeMap::new(),
        };
        r.register("constant", |spec| {
            let p = spec.f64("probability")?.ok_or_else(|| {
                ConfigError::invalid(format!("{}.probability", spec.key), "missing number")
            })? as f32;
            unit(&format!("{}.probability", spec.key), p)?;
            Ok(Arc::new(ConstantScorer::new(p)))
        });
        r
    }
}

impl ScorerRegistry {
    /// Registers (or replaces) a kind.
    pub fn register(
        &mut self,
        kind: &str,
        f: impl Fn(&ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> + Send + Sync + 'static,
    ) {
        self.kinds.insert(kind.to_owned(), Arc::new(f));
    }

    /// Builds the scorer a spec describes.
    pub fn build(&self, spec: &ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> {
        let key = format!("{}.kind", spec.key);
        let kind = spec
            .table
            .get("kind")
            .and_then(|k| k.as_str())
            .ok_or_else(|| ConfigError::invalid(&key, "missing string"))?;
        let f = self
            .kinds
            .get(kind)
            .ok_or_else(|| ConfigError::UnknownKind {
                key,
                kind: kind.to_owned(),
                known: self.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        f(spec)
    }
}

/// A scorer that always answers the same probability: for tests, drills and a
/// deliberately static tier. Latency bounded.
#[derive(Debug, Clone, Copy)]
pub struct ConstantScorer {
    p: f32,
}

impl ConstantScorer {
    /// Always `p`.
    pub fn new(p: f32) -> Self {
        Self { p }
    }
}

impl Scorer for ConstantScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("constant", format!("{}", self.p), Latency::Bounded)
    }
    fn score(&self, _txn: &Transaction) -> Result<Score, ScoreError> {
        Ok(Score::new(self.p))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub schema: RawSchema,
    pub rules: RawTier,
    #[serde(default)]
    pub fast: Option<RawFast>,
    #[serde(default)]
    pub thresholds: RawThresholds,
    #[serde(default)]
    pub gray: RawGray,
    #[serde(default)]
    pub deep: Option<RawDeep>,
    #[serde(default)]
    pub pool: RawPool,
    #[serde(default)]
    pub circuit: RawCircuit,
    #[serde(default)]
    pub feedback: RawFeedback,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchema {
    pub fields: Vec<RawField>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawField {
    pub name: String,
    pub kind: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub vocab: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTier {
    pub scorer: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFast {
    pub deadline_ms: Option<f64>,
    pub scorer: toml::Table,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawThresholds {
    pub approve_below: Option<f32>,
    pub decline_at: Option<f32>,
    pub hard_rule_override: Option<bool>,
    pub static_action: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGray {
    pub band: Option<Vec<f32>>,
    pub queue_capacity: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeep {
    pub budget_ms: Option<f64>,
    pub max_batch: Option<i64>,
    pub max_wait_ms: Option<f64>,
    pub workers: Option<i64>,
    pub global_prior: Option<f32>,
    pub subscriber_capacity: Option<i64>,
    pub scorer: toml::Table,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPool {
    pub fast_workers: Option<i64>,
    pub spin_us: Option<f64>,
    pub async_workers: Option<i64>,
    pub async_queue_capacity: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCircuit {
    pub window_ms: Option<f64>,
    pub min_calls: Option<i64>,
    pub failure_rate: Option<f32>,
    pub open_ms: Option<f64>,
    pub half_open_probes: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFeedback {
    pub gain: Option<f32>,
    pub max_shift: Option<f32>,
    pub ttl_ms: Option<f64>,
    pub max_entities: Option<i64>,
    /// 0 disables the bound.
    pub max_future_ms: Option<f64>,
}

fn ms(key: &str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(x) if (0.0..=1e12).contains(&x) => Ok(Duration::from_secs_f64(x / 1e3)),
        Some(x) => Err(ConfigError::invalid(
            key,
            format!("{x} is not a non-negative number of milliseconds"),
        )),
    }
}

fn us(key: &str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    ms(key, v.map(|x| x / 1e3), default)
}

fn count(key: &str, v: Option<i64>, default: usize) -> Result<usize, ConfigError> {
    match v {
        None => Ok(default),
        Some(x) if x >= 0 => {
            usize::try_from(x).map_err(|_| ConfigError::invalid(key, format!("{x} is too large")))
        }
        Some(x) => Err(ConfigError::invalid(key, format!("{x} is negative"))),
    }
}

impl RawFile {
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    pub(crate) fn schema(&self) -> Result<Arc<FeatureSchema>, ConfigError> {
        let mut b = FeatureSchema::builder();
        for (i, f) in self.schema.fields.iter().enumerate() {
            b = match (f.kind.as_str(), f.required) {
                ("numeric", false) => b.numeric(&f.name),
                ("numeric", true) => b.numeric_required(&f.name),
                ("categorical", _) => b.categorical(&f.name, &f.vocab),
                (other, _) => {
                    return Err(ConfigError::invalid(
                        format!("schema.fields[{i}].kind"),
                        format!("{other:?} is not \"numeric\" or \"categorical\""),
                    ))
                }
            };
        }
        Ok(b.build()?)
    }

    pub(crate) fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let d = EngineConfig::default();
        let t = &self.thresholds;
        let static_action = match &t.static_action {
            None => d.policy.static_action,
            Some(s) => Action::parse(s).ok_or_else(|| {
                ConfigError::invalid(
                    "thresholds.static_action",
                    format!("{s:?} is not approve, review or decline"),
                )
            })?,
        };
        let gray_band = match &self.gray.band {
            None => d.gray_band,
            Some(v) if v.len() == 2 => (v[0], v[1]),
            Some(v) => {
                return Err(ConfigError::invalid(
                    "gray.band",
                    format!("needs exactly two numbers, got {}", v.len()),
                ))
            }
        };
        let deadline = match self.fast.as_ref().and_then(|f| f.deadline_ms) {
            Some(x) if x.is_nan() || x <= 0.0 => {
                return Err(ConfigError::invalid(
                    "fast.deadline_ms",
                    format!("{x} is not a positive number of milliseconds"),
                ))
            }
            v => ms("fast.deadline_ms", v, d.fast_deadline)?,
        };
        let deep = match &self.deep {
            None => d.deep,
            Some(r) => DeepConfig {
                budget: ms("deep.budget_ms", r.budget_ms, d.deep.budget)?,
                max_batch: count("deep.max_batch", r.max_batch, d.deep.max_batch)?,
                max_wait: ms("deep.max_wait_ms", r.max_wait_ms, d.deep.max_wait)?,
                workers: count("deep.workers", r.workers, d.deep.workers)?,
                global_prior: r.global_prior.unwrap_or(d.deep.global_prior),
                subscriber_capacity: count(
                    "deep.subscriber_capacity",
                    r.subscriber_capacity,
                    d.deep.subscriber_capacity,
                )?,
            },
        };
        let c = &self.circuit;
        let f = &self.feedback;
        Ok(EngineConfig {
            fast_deadline: deadline,
            policy: Policy {
                approve_below: t.approve_below.unwrap_or(d.policy.approve_below),
                decline_at: t.decline_at.unwrap_or(d.policy.decline_at),
                hard_rule_override: t.hard_rule_override.unwrap_or(d.policy.hard_rule_override),
                static_action,
            },
            gray_band,
            gray_queue_capacity: count(
                "gray.queue_capacity",
                self.gray.queue_capacity,
                d.gray_queue_capacity,
            )?,
            deep,
            pool: PoolConfig {
                fast_workers: count(
                    "pool.fast_workers",
                    self.pool.fast_workers,
                    d.pool.fast_workers,
                )?,
                spin: us("pool.spin_us", self.pool.spin_us, d.pool.spin)?,
                async_workers: count(
                    "pool.async_workers",
                    self.pool.async_workers,
                    d.pool.async_workers,
                )?,
                async_queue_capacity: count(
                    "pool.async_queue_capacity",
                    self.pool.async_queue_capacity,
                    d.pool.async_queue_capacity,
                )?,
            },
            circuit: CircuitConfig {
                window: ms("circuit.window_ms", c.window_ms, d.circuit.window)?,
                min_calls: count(
                    "circuit.min_calls",
                    c.min_calls,
                    d.circuit.min_calls as usize,
                )?
                .try_into()
                .map_err(|_| ConfigError::invalid("circuit.min_calls", "too large"))?,
                failure_rate: c.failure_rate.unwrap_or(d.circuit.failure_rate),
                open_for: ms("circuit.open_ms", c.open_ms, d.circuit.open_for)?,
                half_open_probes: count(
                    "circuit.half_open_probes",
                    c.half_open_probes,
                    d.circuit.half_open_probes as usize,
                )?
                .try_into()
                .map_err(|_| ConfigError::invalid("circuit.half_open_probes", "too large"))?,
            },
            feedback: FeedbackConfig {
                gain: f.gain.unwrap_or(d.feedback.gain),
                max_shift: f.max_shift.unwrap_or(d.feedback.max_shift),
                ttl: ms("feedback.ttl_ms", f.ttl_ms, d.feedback.ttl)?,
                max_entities: count(
                    "feedback.max_entities",
                    f.max_entities,
                    d.feedback.max_entities,
                )?,
                max_future: match f.max_future_ms {
                    Some(0.0) => None,
                    Some(v) => Some(ms("feedback.max_future_ms", Some(v), Duration::ZERO)?),
                    None => d.feedback.max_future,
                },
            },
        })
    }
}
