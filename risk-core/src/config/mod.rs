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
//! # budget = 0.02           # instead of the fixed band: the 2% of scored traffic scored
//! #                         # highest below thresholds.decline_at (the fixed band serves
//! #                         # until 1,000 scores are seen)
//! # budget_half_life = 100000   # the window's half-life, in scores
//! # budget_refresh_ms = 1000    # how often the band is recomputed (off the decide path)
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
//! deadline_spin_us = 200
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
//! centre = 0.5              # the deep score that shifts nothing
//! max_shift = 0.2
//! ttl_ms = 86400000
//! max_entities = 1000000
//! max_future_ms = 300000
//!
//! [audit]                   # a local segment log of every decision and verdict
//! dir = "audit"             # relative to this file
//! durability = "batch"      # "batch" (fsync per batch) | "interval" | "none"
//! fsync_interval_ms = 100   # for "interval"
//! queue_capacity = 65536
//! on_full = "drop"          # or "backpressure" (wait up to backpressure_max_wait_us)
//! segment_bytes = 67108864
//! segment_age_ms = 3600000
//! retention_days = 400     # default 400 (a year of history, PCI DSS 10.5.1)
//! retention_bytes = 0       # 0: no byte bound
//! features = "all"          # "all" | "none" | ["amount", "country", ...]
//!
//! [privacy]                 # see SECURITY.md
//! key = "env:RISK_PSEUDONYM_KEY"  # keyed pseudonyms of identifiers written or sent, keyed audit chain
//! file_mode = "private"     # files 0600, dirs 0700; "group": 0640 / 0750
//! ```

use crate::circuit::CircuitConfig;
use crate::error::ConfigError;
use crate::policy::Policy;
use crate::setting::{at_least_one, unit};
use std::time::Duration;

pub(crate) mod privacy;
pub(crate) mod raw;
pub use crate::scorer::constant::ConstantScorer;
pub use crate::scorer::registry::{ScorerRegistry, ScorerSpec};
pub(crate) use raw::RawFile;

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
    /// The last stretch before the fast tier's deadline that a waiting caller polls on
    /// the CPU instead of sleeping, so that a late timer or vCPU wake-up does not make
    /// the answer late (`pool.deadline_spin_us`, default 200 µs). Costs this much CPU per
    /// call that runs that close to its deadline; raise it on machines whose wake-ups are
    /// late by more (RELIABILITY.md "Soak").
    pub deadline_spin: Duration,
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
            deadline_spin: crate::clock::SPIN_MARGIN,
            async_workers: 2,
            async_queue_capacity: 1024,
        }
    }
}

/// The gray band set by a traffic budget (`gray.budget`, `gray.budget_half_life`,
/// `gray.budget_refresh_ms`): the `share` of scored traffic whose fast scores are highest
/// below the decline threshold escalates, read off a window of recent scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GrayBudget {
    /// Share of scored traffic in the band, in `(0, 0.5]`.
    pub share: f64,
    /// The window's half-life in scores (at least 1,000).
    pub half_life: u64,
    /// How often the band is recomputed (10 ms to 60 s).
    pub refresh: Duration,
}

impl GrayBudget {
    /// A budget with the default half-life (100,000 scores) and refresh (1 s).
    pub fn new(share: f64) -> Self {
        Self {
            share,
            half_life: 100_000,
            refresh: Duration::from_secs(1),
        }
    }
}

/// Deep-verdict feedback into later decisions (`[feedback]`); see [`crate::policy`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeedbackConfig {
    /// Threshold shift per unit of `deep_score - centre`.
    pub gain: f32,
    /// The deep score that shifts nothing (`feedback.centre`, default 0.5): a deep tier
    /// whose verdicts run low (a probe fitted at a low fraud rate) sets it where its
    /// verdicts separate fraud from the rest on validation data, so that a typical
    /// legitimate verdict does not loosen the thresholds.
    pub centre: f32,
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
            centre: 0.5,
            max_shift: 0.2,
            ttl: Duration::from_secs(24 * 3600),
            max_entities: 1_000_000,
            max_future: Some(Duration::from_secs(300)),
        }
    }
}

impl FeedbackConfig {
    /// The threshold shift for a deep score: `gain · (deep_score − centre)`, at most
    /// `max_shift` either way.
    pub fn shift(&self, deep_score: f32) -> f32 {
        (self.gain * (deep_score - self.centre)).clamp(-self.max_shift, self.max_shift)
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
    /// The band set by a traffic budget instead (`gray.budget`); the fixed band serves
    /// until its window is warm.
    pub gray_budget: Option<GrayBudget>,
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
            gray_budget: None,
            gray_queue_capacity: 4096,
            deep: DeepConfig::default(),
            pool: PoolConfig::default(),
            circuit: CircuitConfig::default(),
            feedback: FeedbackConfig::default(),
        }
    }
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
        if let Some(b) = &self.gray_budget {
            if !(b.share > 0.0 && b.share <= 0.5) {
                return Err(ConfigError::invalid(
                    "gray.budget",
                    format!("{} is not a share of traffic in (0, 0.5]", b.share),
                ));
            }
            if b.half_life < 1000 {
                return Err(ConfigError::invalid(
                    "gray.budget_half_life",
                    "must be at least 1000 scores",
                ));
            }
            if b.refresh < Duration::from_millis(10) || b.refresh > Duration::from_secs(60) {
                return Err(ConfigError::invalid(
                    "gray.budget_refresh_ms",
                    "must be between 10 and 60000",
                ));
            }
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
        for (key, spin) in [
            ("pool.spin_us", self.pool.spin),
            ("pool.deadline_spin_us", self.pool.deadline_spin),
        ] {
            if spin > Duration::from_millis(10) {
                return Err(ConfigError::invalid(key, "must be at most 10000"));
            }
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
        unit("feedback.centre", f.centre)?;
        if f.ttl.is_zero() {
            return Err(ConfigError::invalid("feedback.ttl_ms", "must be positive"));
        }
        at_least_one("feedback.max_entities", f.max_entities)?;
        Ok(())
    }

    /// Fingerprint of these settings: FNV-1a 64 of their canonical (`Debug`) rendering,
    /// recorded on every decision ([`Versions::config`](crate::Versions::config)).
    pub fn fingerprint(&self) -> u64 {
        crate::hash::Fnv::hash(format!("{self:?}").as_bytes())
    }
}
