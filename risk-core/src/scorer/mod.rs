//! The [`Scorer`] trait every tier implements, and what it returns.

use crate::action::Action;
use crate::error::ScoreError;
pub use crate::reason::{FiredRules, Reason, ReasonCode, Reasons};
use crate::txn::Transaction;
use crate::version::VersionId;

pub mod constant;
pub mod registry;

/// Whether a scorer's latency is bounded (it may run inline on the caller's thread) or not
/// (it runs on a tier worker pool so the engine's deadline is hard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// Finishes in a known small time (compiled rules, native trees).
    Bounded,
    /// May stall (external runtimes, remote calls, large models).
    Unbounded,
}

/// Identity and latency class of a scorer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScorerInfo {
    /// Name, e.g. `xgboost` or `rules:default`.
    pub name: String,
    /// Version of the model or rule set.
    pub version: String,
    /// Latency class.
    pub latency: Latency,
    /// Hash of the artifact's content (see [`content_hash`](Self::content_hash)).
    pub content_hash: u64,
}

impl ScorerInfo {
    /// A new info record. Its content hash is the FNV-1a 64 of `name`, a NUL and
    /// `version` until [`with_content_hash`](Self::with_content_hash) sets the artifact's.
    pub fn new(name: impl Into<String>, version: impl Into<String>, latency: Latency) -> Self {
        let (name, version) = (name.into(), version.into());
        let mut h = crate::hash::Fnv::new();
        h.write(name.as_bytes());
        h.write(&[0]);
        h.write(version.as_bytes());
        Self {
            content_hash: h.finish(),
            name,
            version,
            latency,
        }
    }

    /// Sets the content hash: backends that load a file pass the hash of its bytes.
    pub fn with_content_hash(mut self, hash: u64) -> Self {
        self.content_hash = hash;
        self
    }

    /// The artifact's content hash: the FNV-1a 64 of the model or rule file's bytes
    /// where the backend set it, otherwise of the name and version.
    pub fn content_hash(&self) -> u64 {
        self.content_hash
    }

    /// The identity recorded on decisions.
    pub fn version_id(&self) -> VersionId {
        VersionId::new(&self.name, &self.version, self.content_hash)
    }
}

/// A model or rule tier. Implementations must be `Send + Sync`: one scorer serves every
/// thread. Calls are synchronous; the engine enforces the deadline.
pub trait Scorer: Send + Sync {
    /// Name, version and latency class. Read once when the engine is built.
    fn info(&self) -> ScorerInfo;

    /// Scores one transaction.
    fn score(&self, txn: &Transaction) -> Result<Score, ScoreError>;

    /// Scores one transaction with `budget` left before the engine's deadline. Backends
    /// that can cancel work (ONNX Runtime's terminate, a remote call's timeout) override
    /// this so a late run stops instead of finishing unread; the default calls
    /// [`score`](Self::score). The engine calls it for tiers that run on its pool.
    fn score_within(
        &self,
        txn: &Transaction,
        budget: std::time::Duration,
    ) -> Result<Score, ScoreError> {
        let _ = budget;
        self.score(txn)
    }

    /// Scores several transactions, appending exactly one score per input to `out`
    /// (after clearing it). A different count is a tier failure.
    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        for t in txns {
            out.push(self.score(t)?);
        }
        Ok(())
    }

    /// Scores several transactions with `budget` left before the deadline (the deep tier
    /// calls this with the time left of its budget). Backends that can stop part-way (an
    /// LLM between layers) override it and return [`ScoreError::Cancelled`] when the
    /// budget passes, so a late batch frees its worker; the default calls
    /// [`score_batch`](Self::score_batch). Like `score_within`'s, the budget is a
    /// duration from the call: backends measure it on the real clock, whatever clock the
    /// engine was given (a test on a manual clock gives a budget a real run outlasts).
    fn score_batch_within(
        &self,
        txns: &[&Transaction],
        budget: std::time::Duration,
        out: &mut Vec<Score>,
    ) -> Result<(), ScoreError> {
        let _ = budget;
        self.score_batch(txns, out)
    }

    /// Prepares the scorer for serving (allocations, caches, JIT). Called once before the
    /// engine serves; a failure fails the build.
    fn warmup(&self) -> Result<(), ScoreError> {
        Ok(())
    }

    /// Fingerprint of the feature schema this scorer was built for, when it binds to one
    /// (rule sets, tree models): a deploy refuses a candidate whose schema differs from
    /// the engine's. `None`: the scorer does not say.
    fn schema_fingerprint(&self) -> Option<u64> {
        None
    }

    /// Whether this scorer leaves its reasons out of [`score`](Self::score) until a
    /// decision needs them: the engine then asks [`explain`](Self::explain) for review
    /// and decline decisions only (a tree model's `explain = "decision"`: exact SHAP
    /// costs several times the prediction, and an approval shows no reasons). Default
    /// `false`: reasons, if any, come with the score.
    fn defers_reasons(&self) -> bool {
        false
    }

    /// Appends the reasons for `txn`'s score to `out`, most important first, whatever
    /// this scorer does in [`score`](Self::score). Called by the engine for the review
    /// and decline decisions of a scorer that [`defers_reasons`](Self::defers_reasons),
    /// and by [`Engine::explain`](crate::Engine::explain) on request. The default adds
    /// none.
    fn explain(&self, txn: &Transaction, out: &mut Reasons) -> Result<(), ScoreError> {
        let _ = (txn, out);
        Ok(())
    }
}

/// A scorer's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Probability of fraud in `[0, 1]`; anything else (NaN included) is a tier failure.
    pub probability: f32,
    /// Why, most important first.
    pub reasons: Reasons,
    /// Set by hard rules: overrides the model (when the engine allows hard overrides).
    pub directive: Option<Action>,
    /// The rules that fired (rule tier only; empty for models).
    pub fired: FiredRules,
    /// Shadow rules that fired: recorded, never counted in the score or directive.
    pub shadow_fired: FiredRules,
    /// The version that produced this score, for scorers whose version changes while
    /// serving (a hot-reloaded rule set); `None`: the version the scorer reported in
    /// [`Scorer::info`] when the engine was built.
    pub version: Option<VersionId>,
}

impl Score {
    /// A score with no reasons, no directive, no fired rules.
    pub fn new(probability: f32) -> Self {
        Self {
            probability,
            reasons: Reasons::new(),
            directive: None,
            fired: FiredRules::new(),
            shadow_fired: FiredRules::new(),
            version: None,
        }
    }

    /// Whether the probability is a usable number in `[0, 1]`.
    #[inline]
    pub fn is_valid(&self) -> bool {
        (0.0..=1.0).contains(&self.probability)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity() {
        assert!(Score::new(0.0).is_valid());
        assert!(Score::new(1.0).is_valid());
        assert!(!Score::new(f32::NAN).is_valid());
        assert!(!Score::new(1.01).is_valid());
        assert!(!Score::new(-0.1).is_valid());
    }
}
