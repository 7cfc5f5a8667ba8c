//! Model lifecycle: versioned slots, the deploy pipeline (load → warm-up → validation
//! gate → shadow → canary by a sticky entity hash → promote), automatic rollback on
//! guards, and a model directory that survives restarts.
//!
//! The engine holds the rule set, the fast model, the deep model and the thresholds as
//! versioned slots ([`Target`]); `decide` reads them without a lock (one `ArcSwap` load
//! per call) and records which versions decided. [`Engine::deploy`](crate::Engine::deploy)
//! runs the gate on the caller's thread and returns once the candidate is shadowing,
//! in canary, or promoted; a supervisor thread then advances the stages and judges the
//! guards ([`RolloutPlan`]). A rollback swaps the slot back: in-flight decisions finish on
//! the version they started with, so none is lost or delayed.

pub(crate) mod candidate;
pub(crate) mod config;
pub(crate) mod directory;
pub(crate) mod gate;
pub mod judge;
mod plan;
pub(crate) mod recent;
pub(crate) mod shadow;
pub(crate) mod slot;
pub(crate) mod stats;

pub use candidate::Candidate;
pub use directory::{ArtifactMeta, ModelDirectory, StateChange, VersionMeta};
pub use gate::{auprc, GateReport};
pub use judge::psi;
pub use plan::{CanaryStage, Gate, Guards, RolloutPlan, ShadowStage, MAX_SAMPLE};
pub use stats::{StatsSnap, SCORE_BINS};

use crate::version::VersionId;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// Canary shares and shadow samples are in basis points of this.
pub(crate) const SHARE_SCALE: u32 = 10_000;

/// A swappable part of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The rule set.
    Rules,
    /// The fast model.
    Fast,
    /// The deep model (gate and promote; no shadow or canary: its batches mix entities).
    Deep,
    /// The thresholds and override switch.
    Policy,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 4] = [Target::Rules, Target::Fast, Target::Deep, Target::Policy];

    /// `rules`, `fast`, `deep`, `policy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Rules => "rules",
            Target::Fast => "fast",
            Target::Deep => "deep",
            Target::Policy => "policy",
        }
    }

    /// The target named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which gate check refused a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateCheck {
    /// Too few transactions to validate on.
    Sample,
    /// An error, panic, NaN or out-of-range score.
    InvalidScores,
    /// Scores too far from the serving version's.
    Disagreement,
    /// Actions too often different from the serving version's.
    ActionAgreement,
    /// Latency p99 above the budget.
    Latency,
    /// AUPRC below the plan's minimum.
    Auprc,
}

/// Why a deploy, promote or rollback was refused. A refused candidate never serves.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// Another deploy of this target is in progress.
    #[error("a deploy of {target} is in progress (deploy {id}); roll it back or promote it first")]
    InProgress {
        /// The target.
        target: Target,
        /// The deploy in progress.
        id: u64,
    },
    /// Nothing to promote or roll back.
    #[error("{target}: {what}")]
    Nothing {
        /// The target.
        target: Target,
        /// What is missing.
        what: &'static str,
    },
    /// The candidate could not be built or read.
    #[error("candidate failed to load: {0}")]
    Load(String),
    /// The candidate's warm-up failed.
    #[error("candidate warm-up failed: {0}")]
    Warmup(String),
    /// The candidate was built for another feature schema.
    #[error("candidate schema {got:016x} differs from the engine's {expected:016x}")]
    Schema {
        /// The engine's schema fingerprint.
        expected: u64,
        /// The candidate's.
        got: u64,
    },
    /// The validation gate refused the candidate.
    #[error("validation gate ({check:?}): {detail}")]
    Gate {
        /// Which check.
        check: GateCheck,
        /// What it measured.
        detail: String,
        /// Everything the gate measured.
        report: Box<GateReport>,
    },
    /// The candidate does not fit the target (a policy for a model slot, ...).
    #[error("{target}: {what}")]
    Unsupported {
        /// The target.
        target: Target,
        /// Why.
        what: String,
    },
    /// The plan is malformed.
    #[error("invalid rollout plan: {0}")]
    Plan(String),
    /// The model directory could not be read or written.
    #[error("model directory: {0}")]
    Directory(String),
    /// A stored artifact whose BLAKE3 is not the one its `meta.json` recorded at save
    /// (changed on disk since): refused, nothing is built from it.
    #[error("model directory: {path} has BLAKE3 {got}, its meta.json recorded {expected}; refusing a changed artifact")]
    ArtifactMismatch {
        /// The artifact.
        path: std::path::PathBuf,
        /// The hash recorded at save (hex).
        expected: String,
        /// The hash of the file now (hex).
        got: String,
    },
    /// A `meta.json` naming a path that is absolute or climbs out (`..`) of its version's
    /// directory.
    #[error("model directory: {meta}: path {path:?} {why}; refusing it")]
    UnsafePath {
        /// The `meta.json`.
        meta: std::path::PathBuf,
        /// The path it names.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The engine is shut down.
    #[error("the engine is shut down")]
    ShutDown,
}

/// A version as status reports show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionView {
    /// `name@version#hash`.
    pub id: String,
    /// Scorer name.
    pub name: String,
    /// Human version.
    pub version: String,
    /// Content hash, 16 hex digits (the model directory's key).
    pub hash: String,
}

impl From<VersionId> for VersionView {
    fn from(v: VersionId) -> Self {
        Self {
            id: v.to_string(),
            name: v.name().to_owned(),
            version: v.version().to_owned(),
            hash: format!("{:016x}", v.hash()),
        }
    }
}

/// Where an active deploy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Scoring a copy of live traffic.
    Shadow,
    /// Deciding for a share of entities.
    Canary,
}

/// A deploy in progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActiveDeploy {
    /// Deploy id.
    pub id: u64,
    /// The candidate.
    pub candidate: VersionView,
    /// Shadow or canary.
    pub phase: Phase,
    /// Canary stage index (0 in shadow).
    pub stage: usize,
    /// Share of entities the candidate decides for (0 in shadow).
    pub share: f64,
    /// When the deploy started (Unix ms, engine clock).
    pub started_ms: i64,
    /// What the gate measured.
    pub gate: GateReport,
    /// The candidate's counters since the phase began (shadow: its would-be outcomes).
    pub candidate_stats: StatsSnap,
    /// The serving version's over the same window (shadow: of the same transactions).
    pub serving_stats: StatsSnap,
    /// Shadow copies shed because its queue was full.
    pub shadow_shed: u64,
    /// Looks the guards have judged so far ([`judge`]); the next one spends less.
    pub guard_looks: u32,
}

/// What happened to a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The gate passed and the deploy started (shadow or canary next).
    Started,
    /// Refused (gate, load, warm-up, schema).
    Refused,
    /// A canary stage began.
    Stage,
    /// The candidate became the serving version.
    Promoted,
    /// A deploy was ended or a serving version replaced by its predecessor.
    RolledBack,
}

/// One entry of a target's history, also sent to [`Engine::deploy_events`](crate::Engine::deploy_events).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeployEvent {
    /// The target.
    pub target: Target,
    /// Deploy id (0 for a rollback of a serving version outside a deploy).
    pub deploy: u64,
    /// The routing epoch after the change.
    pub epoch: u64,
    /// When (Unix ms, engine clock).
    pub at_ms: i64,
    /// What happened.
    pub kind: EventKind,
    /// The version concerned (the candidate; for a rollback, the version restored).
    pub version: VersionView,
    /// Share of entities after the change (canary stages).
    pub share: f64,
    /// Why (the broken guard, the gate's finding, the operator's reason).
    pub detail: String,
    /// Decisions the candidate made (or shadow scores) before this event.
    pub candidate_decisions: u64,
    /// Whether the supervisor (a guard) caused it rather than a call.
    pub automatic: bool,
}

/// A target's state: what serves, what is deploying, what happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeployStatus {
    /// The target.
    pub target: Target,
    /// The routing epoch now.
    pub epoch: u64,
    /// The serving version (`None`: the target has no tier, e.g. no fast model).
    pub serving: Option<VersionView>,
    /// Versions a rollback returns to, most recent first.
    pub previous: Vec<VersionView>,
    /// The deploy in progress.
    pub active: Option<ActiveDeploy>,
    /// The latest events, oldest first (at most 64).
    pub history: Vec<DeployEvent>,
}

impl DeployStatus {
    /// The JSON form (the C ABI's `risk_engine_deploy_status_json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Deploy settings (the `[deploy]` table of `risk.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeployConfig {
    /// The model directory; `None`: versions live in memory only.
    pub dir: Option<std::path::PathBuf>,
    /// How often the supervisor judges guards and stages, at most.
    pub check_interval: Duration,
    /// Wake the supervisor every this many candidate decisions (0: on the interval only).
    pub check_every: u64,
    /// Keep every this-many-th decision's transaction as the gate's recent sample.
    pub sample_every: u64,
    /// Recent transactions kept for the gate.
    pub sample_capacity: usize,
}

impl Default for DeployConfig {
    fn default() -> Self {
        Self {
            dir: None,
            check_interval: Duration::from_millis(100),
            check_every: 256,
            sample_every: 16,
            sample_capacity: 1024,
        }
    }
}
