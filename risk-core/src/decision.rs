//! What the engine answers: [`Decision`], and what the deep tier answers later: [`DeepVerdict`].

pub use crate::action::Action;
use crate::reason::{FiredRules, Reasons};
use crate::txn::{EntityKey, TxnId};
use crate::version::{VersionId, Versions};
use std::time::Duration;

/// Which tier produced the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Tier {
    /// The rule tier: by a hard rule, or as the fallback when the fast tier could not answer.
    Rules,
    /// The fast model tier.
    Fast,
    /// The configured last-resort action: even the rule tier failed.
    Static,
}

impl Tier {
    /// Every tier that can decide.
    pub const ALL: [Tier; 3] = [Tier::Rules, Tier::Fast, Tier::Static];

    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Rules => "rules",
            Tier::Fast => "fast",
            Tier::Static => "static",
        }
    }
}

/// Why the fast tier did not decide (the rules did).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FallbackCause {
    /// The deadline passed before the model answered.
    Timeout,
    /// The model returned an error (including a wrong-length batch).
    Error,
    /// The model panicked; the panic was caught.
    Panic,
    /// The model returned NaN or a probability outside `[0, 1]`.
    InvalidScore,
    /// The tier's circuit breaker is open: the model was not called.
    CircuitOpen,
    /// No fast tier is configured.
    Absent,
    /// Every tier worker is busy (stalled calls): the call was not queued.
    Saturated,
}

impl FallbackCause {
    /// Every cause.
    pub const ALL: [FallbackCause; 7] = [
        FallbackCause::Timeout,
        FallbackCause::Error,
        FallbackCause::Panic,
        FallbackCause::InvalidScore,
        FallbackCause::CircuitOpen,
        FallbackCause::Absent,
        FallbackCause::Saturated,
    ];

    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackCause::Timeout => "timeout",
            FallbackCause::Error => "error",
            FallbackCause::Panic => "panic",
            FallbackCause::InvalidScore => "invalid_score",
            FallbackCause::CircuitOpen => "circuit_open",
            FallbackCause::Absent => "absent",
            FallbackCause::Saturated => "saturated",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Per-stage wall time of one decision, nanoseconds (as read from the engine's clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimings {
    /// Rule tier.
    pub rules_ns: u64,
    /// Fast tier, including any wait for the deadline.
    pub fast_ns: u64,
    /// Entity state read, combine, escalation.
    pub combine_ns: u64,
    /// The whole `decide` call.
    pub total_ns: u64,
}

/// Id of a gray-zone escalation; echoed in the [`DeepVerdict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// Why a gray-zone transaction was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShedReason {
    /// The deep queue was full.
    QueueFull,
    /// No deep tier is configured.
    NoDeepTier,
    /// The engine is shutting down.
    ShuttingDown,
}

/// What happened to the gray-zone hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Escalation {
    /// The score was outside the gray band (or a hard rule decided).
    #[default]
    None,
    /// Queued to the deep tier.
    Enqueued(Ticket),
    /// In the gray band but not queued.
    Shed(ShedReason),
}

/// The engine's answer for one transaction. `#[non_exhaustive]`: fields are added
/// without a breaking change (only the engine builds one).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Decision {
    /// The transaction.
    pub txn: TxnId,
    /// Its entity.
    pub entity: EntityKey,
    /// Approve, review or decline.
    pub action: Action,
    /// The score the action was taken on, in `[0, 1]`.
    pub score: f32,
    /// Which tier decided.
    pub tier: Tier,
    /// Why the fast tier did not decide, if it did not.
    pub fallback: Option<FallbackCause>,
    /// Whether a hard rule's directive set the action.
    pub hard_rule: bool,
    /// The rule tier's probability (`NaN` if the rule tier itself failed).
    pub rule_score: f32,
    /// The fast tier's probability, when it answered validly.
    pub model_score: Option<f32>,
    /// Threshold shift applied from the entity's deep-tier feedback (0 when none).
    pub threshold_shift: f32,
    /// Reasons of the deciding tier first, then the other tier's.
    pub reasons: Reasons,
    /// Per-stage timings.
    pub timings: StageTimings,
    /// Gray-zone hand-off.
    pub escalation: Escalation,
    /// The rules that fired (names, in evaluation order; empty when the rule tier failed).
    pub rules_fired: FiredRules,
    /// Shadow rules that fired (evaluated and recorded; they never shape the decision).
    pub rules_shadow: FiredRules,
    /// The rule set, models, configuration and schema that produced this decision.
    pub versions: Versions,
    /// When the engine decided, milliseconds since the Unix epoch (by its clock).
    pub decided_at_ms: i64,
    /// Whether entity state computed this decision's features (see [`StateStatus`]).
    pub state: StateStatus,
    /// Whether the lists are shared through Redis (`[state.redis]`) and it could not be
    /// reached: the list memberships this decision read are the last known ones
    /// (`Engine::health()` says so too). Always `false` for lists kept per host.
    pub lists_stale: bool,
}

/// What entity state did for a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateStatus {
    /// No `[state]`, or the transaction has no event time.
    #[default]
    Off,
    /// The features were computed.
    Fresh,
    /// The store failed within the budget: the features are missing (`NaN`).
    Degraded(StateFault),
}

/// Why the state store could not serve a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFault {
    /// The store did not answer within its timeout.
    Timeout,
    /// The store failed (connection refused, an error reply, a malformed reply).
    Error,
    /// The store failed recently and is skipped until its retry time.
    Unavailable,
}

impl StateStatus {
    /// `off`, `fresh`, `timeout`, `error` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            StateStatus::Off => "off",
            StateStatus::Fresh => "fresh",
            StateStatus::Degraded(StateFault::Timeout) => "timeout",
            StateStatus::Degraded(StateFault::Error) => "error",
            StateStatus::Degraded(StateFault::Unavailable) => "unavailable",
        }
    }
}

/// Where a deep verdict's score came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeepSource {
    /// The deep model answered within budget.
    Model,
    /// The entity's last completed day's average fast score (deep tier late or failed).
    CachedAverage,
    /// The configured global prior (deep tier late or failed, entity without history).
    GlobalPrior,
}

impl DeepSource {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeepSource::Model => "model",
            DeepSource::CachedAverage => "cached_average",
            DeepSource::GlobalPrior => "global_prior",
        }
    }
}

/// Why a deep verdict did not come from the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeepFailure {
    /// The budget (from enqueue) passed first, in the queue or while scoring.
    Timeout,
    /// The model errored, panicked, or returned an invalid score or batch.
    Error,
    /// Every deep worker was busy with stalled calls.
    Saturated,
    /// The deep tier's circuit breaker was open (the model failed or timed out too often).
    CircuitOpen,
}

/// The deep tier's asynchronous answer for a gray-zone transaction.
/// `#[non_exhaustive]`: only the engine builds one.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct DeepVerdict {
    /// The escalation ticket from the [`Decision`].
    pub ticket: Ticket,
    /// The transaction.
    pub txn: TxnId,
    /// Its entity (the feedback store key).
    pub entity: EntityKey,
    /// Score in `[0, 1]`.
    pub score: f32,
    /// Where it came from.
    pub source: DeepSource,
    /// Why not from the model, when not.
    pub failure: Option<DeepFailure>,
    /// The fast-tier score that triggered the escalation.
    pub fast_score: f32,
    /// Enqueue to verdict.
    pub latency: Duration,
    /// The deep model that was asked (also when its answer was replaced by a fallback).
    pub deep: VersionId,
    /// When the verdict was delivered, milliseconds since the Unix epoch (engine clock).
    pub decided_at_ms: i64,
}

/// What a deep verdict left in the entity's feedback store, read by the next decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EntityFeedback {
    /// The latest deep score.
    pub deep_score: f32,
    /// Its source.
    pub source: DeepSource,
    /// Event time of the escalated transaction.
    pub at_ms: i64,
    /// Amount subtracted from both thresholds for this entity's next decisions while the
    /// feedback is fresh (positive = stricter). See [`crate::policy`].
    pub threshold_shift: f32,
}

/// How to shut the engine down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Keep scoring queued gray-zone work until the queue is empty or `timeout` passes
    /// (by the engine's clock); abandon what is left then.
    Drain {
        /// Longest wait.
        timeout: Duration,
    },
    /// Drop queued gray-zone work now.
    Abandon,
}

/// What shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Gray-zone items that received a verdict during the drain.
    pub drained: u64,
    /// Gray-zone items dropped without a verdict.
    pub abandoned: u64,
}
