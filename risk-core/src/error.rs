//! Errors.
//!
//! Errors reach the caller only for bad input ([`DecideError`], [`SchemaError`]) and bad
//! configuration ([`ConfigError`]). A failing tier never produces an error to the caller:
//! its [`ScoreError`] stays inside the engine and becomes a
//! [`FallbackCause`](crate::FallbackCause) on the decision.
//!
//! Every error has a stable numeric `code()` that the C ABI maps to its result codes.

use std::path::PathBuf;

pub use crate::schema::SchemaError;

/// A transaction the engine cannot decide on. Names the field that was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// A typed field with a bad value.
    #[error("invalid {field}: {reason}")]
    InvalidField {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A feature vector that does not satisfy its schema.
    #[error("invalid features: {0}")]
    Features(#[source] SchemaError),
    /// Features built for another schema than the engine's.
    #[error("transaction features use schema {got:016x}, the engine expects {expected:016x}")]
    SchemaMismatch {
        /// Fingerprint of the engine's schema.
        expected: u64,
        /// Fingerprint of the transaction's schema.
        got: u64,
    },
    /// The engine was shut down.
    #[error("the engine is shut down")]
    ShutDown,
}

impl DecideError {
    /// Stable numeric code.
    pub fn code(&self) -> u32 {
        match self {
            DecideError::InvalidField { .. } => 201,
            DecideError::Features(_) => 202,
            DecideError::SchemaMismatch { .. } => 203,
            DecideError::ShutDown => 204,
        }
    }
}

/// A failure inside a scorer. Never returned to `decide`'s caller: the engine turns it
/// into a [`FallbackCause`](crate::FallbackCause).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScoreError {
    /// The model could not score (backend error, bad input for the model).
    #[error("scorer failed: {0}")]
    Failed(String),
    /// A batch call produced a different number of scores than inputs.
    #[error("batch returned {got} scores for {expected} inputs")]
    BatchLength {
        /// Inputs.
        expected: usize,
        /// Outputs.
        got: usize,
    },
    /// The scorer's own cancellation (e.g. ONNX Runtime terminate) fired.
    #[error("scorer run was cancelled")]
    Cancelled,
}

impl ScoreError {
    /// Stable numeric code.
    pub fn code(&self) -> u32 {
        match self {
            ScoreError::Failed(_) => 301,
            ScoreError::BatchLength { .. } => 302,
            ScoreError::Cancelled => 303,
        }
    }
}

/// Invalid configuration: names the key (dotted path as in `risk.toml`) and the reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value out of range or inconsistent with another.
    #[error("invalid config `{key}`: {reason}")]
    Invalid {
        /// Dotted key, e.g. `gray.band`.
        key: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The config file could not be read.
    #[error("cannot read config {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TOML did not parse or named an unknown key.
    #[error("config {path}: {message}")]
    Parse {
        /// The file (`<string>` for in-memory text).
        path: PathBuf,
        /// The parser's message with line and column.
        message: String,
    },
    /// A tier names a scorer kind nobody registered.
    #[error("config `{key}`: unknown scorer kind {kind:?} (registered: {known})")]
    UnknownKind {
        /// The key, e.g. `fast.scorer.kind`.
        key: String,
        /// The kind.
        kind: String,
        /// Kinds that are registered.
        known: String,
    },
    /// A scorer factory failed to build its scorer.
    #[error("config `{key}`: {message}")]
    Scorer {
        /// The tier table, e.g. `fast.scorer`.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// A schema in the config is invalid.
    #[error("config `schema`: {0}")]
    Schema(#[from] SchemaError),
}

impl ConfigError {
    /// Builds an [`ConfigError::Invalid`].
    pub fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The dotted key at fault, when there is one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. }
            | ConfigError::UnknownKind { key, .. }
            | ConfigError::Scorer { key, .. } => Some(key),
            ConfigError::Schema(_) => Some("schema"),
            _ => None,
        }
    }

    /// Stable numeric code.
    pub fn code(&self) -> u32 {
        match self {
            ConfigError::Invalid { .. } => 401,
            ConfigError::Io { .. } => 402,
            ConfigError::Parse { .. } => 403,
            ConfigError::UnknownKind { .. } => 404,
            ConfigError::Scorer { .. } => 405,
            ConfigError::Schema(_) => 406,
        }
    }
}
