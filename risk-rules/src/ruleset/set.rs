//! The [`RuleSet`] itself: what a compiled file holds, and what it tells about itself.

use crate::exec::branch::Branches;
#[cfg(feature = "jit")]
use crate::exec::jit::Native;
use crate::lint::RuleWarning;
use crate::parser::file::HitPolicy;
use crate::rule::Rule;
use risk_core::VersionId;
use std::sync::Arc;

/// A compiled rule file: immutable, `Send + Sync`, share it with `Arc`.
#[derive(Debug)]
pub struct RuleSet {
    pub(super) rules: Vec<Rule>,
    /// Enabled live rules in evaluation order (priority desc, then file order).
    pub(super) plan: Vec<u32>,
    /// Enabled shadow rules, in the same order.
    pub(super) shadow_plan: Vec<u32>,
    /// Every enabled rule's condition, linked into one program (see
    /// [`crate::exec::branch`]).
    pub(super) branches: Branches,
    pub(super) start: u32,
    /// The same program as native code, once [`native`](Self::native) built it (or
    /// failed: the reason).
    #[cfg(feature = "jit")]
    pub(super) native: std::sync::OnceLock<Result<Native, String>>,
    /// Hits of each shadow rule served through [`RuleScorer`](crate::scorer::RuleScorer).
    pub(super) shadow_counts: Vec<std::sync::atomic::AtomicU64>,
    pub(super) policy: HitPolicy,
    pub(super) review_score: f32,
    pub(super) version: String,
    pub(super) file: String,
    pub(super) schema_fingerprint: u64,
    pub(super) version_id: VersionId,
    pub(super) source: Arc<str>,
    pub(super) warnings: Vec<RuleWarning>,
}

impl RuleSet {
    /// Every rule, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The hit policy.
    pub fn policy(&self) -> HitPolicy {
        self.policy
    }

    /// The file's `version` (or `unversioned`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Probability given to a fired non-hard `review` rule.
    pub fn review_score(&self) -> f32 {
        self.review_score
    }

    /// Identity recorded on decisions: `rules:<file>`, the file's `version`, and the
    /// FNV-1a 64 of its source text.
    pub fn version_id(&self) -> VersionId {
        self.version_id
    }

    /// The static checks' warnings (rules that can never fire, are redundant or
    /// duplicate), each with `file:line:col`; the set compiles and serves regardless.
    pub fn warnings(&self) -> &[RuleWarning] {
        &self.warnings
    }

    /// The source text it was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The file name it was compiled from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Fingerprint of the schema it was compiled against.
    pub fn schema_fingerprint(&self) -> u64 {
        self.schema_fingerprint
    }

    /// Enabled rules in evaluation order: live, then shadow.
    pub(crate) fn plan_order(&self) -> Vec<u32> {
        self.plan.iter().chain(&self.shadow_plan).copied().collect()
    }

    /// The linked program.
    pub(crate) fn program(&self) -> &Branches {
        &self.branches
    }

    /// Number of tests and stack instructions (all rules).
    pub fn code_len(&self) -> usize {
        self.branches.nodes.len() + self.branches.em.code.len()
    }
}
