//! What produced a decision: [`VersionId`] of each tier and [`Versions`] of the engine.
//!
//! A decision records the exact rule set, fast model and deep model it used, and
//! fingerprints of the configuration and schema, so that an audit months later can say
//! which versions declined a payment. Names and versions are interned process-wide (like
//! [`ReasonCode`]s), so a [`VersionId`] is `Copy` and [`Decision`](crate::Decision)
//! stays `Copy`; the set of distinct names is bounded by the scorers built and the rule
//! files reloaded.

use crate::reason::ReasonCode;
use std::fmt;

/// Identity of one scorer: name, human version and a content hash.
///
/// The hash is what tells two artifacts apart: the FNV-1a 64 of the model or rule file's
/// bytes where the backend knows them (XGBoost JSON, rule source), otherwise of the name
/// and version strings (see [`ScorerInfo::content_hash`](crate::ScorerInfo::content_hash)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct VersionId {
    name: ReasonCode,
    version: ReasonCode,
    hash: u64,
}

impl VersionId {
    /// A version id (interns `name` and `version`).
    pub fn new(name: &str, version: &str, hash: u64) -> Self {
        Self {
            name: ReasonCode::intern(name),
            version: ReasonCode::intern(version),
            hash,
        }
    }

    /// The scorer's name, e.g. `xgboost` or `rules:default.rules`.
    pub fn name(&self) -> &'static str {
        self.name.name()
    }

    /// The human version (a rule file's `version`, a model's version string).
    pub fn version(&self) -> &'static str {
        self.version.name()
    }

    /// The content hash.
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

impl fmt::Debug for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for VersionId {
    /// `name@version#hash` (hash as 16 hex digits).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}#{:016x}", self.name(), self.version(), self.hash)
    }
}

/// The versions that produced a decision.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Versions {
    /// The rule set that ran (the one serving at the call, across hot reloads).
    pub rules: VersionId,
    /// The fast model, when a fast tier is configured.
    pub fast: Option<VersionId>,
    /// The deep model, when a deep tier is configured.
    pub deep: Option<VersionId>,
    /// Fingerprint of the effective engine configuration (FNV-1a 64 of its canonical
    /// rendering; equal for equal settings within one build of the library).
    pub config: u64,
    /// The feature schema's fingerprint ([`FeatureSchema::fingerprint`](crate::FeatureSchema::fingerprint)).
    pub schema: u64,
}
