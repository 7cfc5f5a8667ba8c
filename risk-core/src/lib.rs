//! # risk-core
//!
//! Core types and the tiered decision engine of **risk**, an embeddable SDK for real-time
//! payment risk decisions: approve / review / decline inside a hard latency budget, even
//! when every model is down.
//!
//! - A rule tier always runs first, inline; its verdict is the fallback.
//! - A fast model tier runs under a hard deadline and a circuit breaker; timeout, error,
//!   panic, NaN or an open circuit hand the decision to the rules, and the
//!   [`Decision`] says why ([`FallbackCause`]).
//! - Fast scores in the gray band go, without blocking, to a bounded queue served by a
//!   batched deep tier with a budget; its verdicts feed back into the entity's next
//!   decisions ([`policy`]).
//!
//! No ML crate is a dependency: model backends implement [`Scorer`] in other crates.
//!
//! ## Layout
//!
//! Modules stand on floors and import only from their own floor and the ones below
//! (`tests/layering.rs` keeps it so, naming file and line of any import that runs upward,
//! goes through these re-exports, or closes a cycle):
//!
//! 1. [`clock`], [`hash`], [`action`], [`reason`], [`calibrate`]: vocabulary with no
//!    dependencies inside the crate;
//! 2. [`schema`], [`version`], [`error`], [`text`], [`circuit`], the `risk.toml` value
//!    helpers;
//! 3. [`txn`];
//! 4. [`scorer`], [`decision`], [`monitor`]: what tiers answer;
//! 5. [`state`], [`policy`], [`metrics`], [`ensemble`], the scorer registry;
//! 6. [`audit`], [`deploy`], `synth`: around decisions;
//! 7. [`config`]: `risk.toml`, calling each subsystem's own table reader;
//! 8. the engine (`decide` top to bottom in `engine/decide.rs`, the control plane in
//!    `engine/deploy/`) and [`replay`];
//! 9. this file: declarations and re-exports only.
//!
//! ```
//! use risk_core::{Engine, FeatureSchema, Transaction, Channel, Action, Tier, ConstantScorer};
//! use std::sync::Arc;
//!
//! let schema = FeatureSchema::builder()
//!     .numeric_required("amount")
//!     .categorical("country", &["US", "GB", "NG"])
//!     .build()?;
//! let engine = Engine::builder(schema.clone())
//!     .rules(Arc::new(ConstantScorer::new(0.1)))   // the tier that cannot fail
//!     .fast(Arc::new(ConstantScorer::new(0.05)))   // any Scorer: trees, ONNX, ...
//!     .build()?;
//! let txn = Transaction::builder(&schema)
//!     .id(1).entity(42).amount(25.0, "USD").country("GB").channel(Channel::Ecom)
//!     .build()?;
//! let d = engine.decide(&txn)?;
//! assert_eq!((d.action, d.tier), (Action::Approve, Tier::Fast));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
// No unsafe code but the entity store's slab (`state/slab.rs`, one `SAFETY:` comment per
// block): records handed out under their index set's lock.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod action;
pub mod audit;
pub mod calibrate;
pub mod circuit;
pub mod clock;
pub mod config;
pub mod decision;
pub mod deploy;
mod engine;
pub mod ensemble;
pub mod error;
pub mod files;
pub mod hash;
pub mod metrics;
mod metrics_json;
pub mod monitor;
pub mod policy;
pub mod pseudo;
pub mod reason;
pub mod schema;
pub mod scorer;
pub mod secret;
pub mod seq;
mod setting;
pub mod state;
mod stripe;
#[cfg(feature = "synth")]
pub mod synth;
pub mod text;
pub mod txn;
pub mod version;

pub use clock::{Clock, ManualClock, Nanos, Notify, SystemClock};
pub use config::{
    ConstantScorer, DeepConfig, EngineConfig, FeedbackConfig, GrayBudget, PoolConfig,
    ScorerRegistry, ScorerSpec,
};
pub use decision::{
    Action, Decision, DeepFailure, DeepSource, DeepVerdict, EntityFeedback, Escalation,
    FallbackCause, ShedReason, Shutdown, ShutdownReport, StageTimings, StateFault, StateStatus,
    Ticket, Tier,
};
pub use engine::replay;
pub use engine::{
    CircuitConfig, CircuitState, DecisionFuture, DeepReplayStats, DrillPlan, DrillReport, Engine,
    EngineBuilder, EventReplay, EventReplayStats, Fault, GrayBandView, Health, HealthStatus,
    Quality, ReplayLabel, SwitchTime, Switchable, TierHealth, VerdictCallback,
};
pub use error::{ConfigError, DecideError, SchemaError, ScoreError};
pub use metrics::{GrayStats, Histogram, LatencySummary, MetricsSnapshot};
pub use policy::Policy;
pub use schema::{FeatureSchema, Features, Field, FieldKind, SchemaBuilder, Slot};
pub use scorer::{FiredRules, Latency, Reason, ReasonCode, Reasons, Score, Scorer, ScorerInfo};
pub use seq::{Sequence, Sequences};
pub use text::TextFields;
pub use txn::{Channel, Country, Currency, DeviceId, EntityKey, Transaction, TxnId};
pub use version::{VersionId, Versions};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
