//! The [`Scorer`] trait every tier implements, and what it returns.

use crate::decision::Action;
use crate::error::ScoreError;
use crate::txn::Transaction;
use crate::version::VersionId;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

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
        let mut h = crate::schema::Fnv::new();
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

// ===== Reason codes =====

/// An interned reason code such as `RULE_VELOCITY_1H` or `model:amount`.
///
/// Codes are interned process-wide, so a code is a `u32`, copying one is free and
/// [`Reasons`] never allocates. The number of distinct codes is bounded by what rule files
/// and models declare; interning the same text twice returns the same code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReasonCode(u32);

struct Interner {
    ids: HashMap<&'static str, u32>,
    names: Vec<&'static str>,
}

fn interner() -> &'static RwLock<Interner> {
    static I: OnceLock<RwLock<Interner>> = OnceLock::new();
    I.get_or_init(|| {
        RwLock::new(Interner {
            ids: HashMap::new(),
            names: Vec::new(),
        })
    })
}

impl ReasonCode {
    /// A placeholder that names no reason (its name is empty); for fixed-size buffers.
    pub const UNSET: ReasonCode = ReasonCode(u32::MAX);

    /// Interns `name` (leaks one copy of each distinct name, once).
    pub fn intern(name: &str) -> Self {
        if let Some(&id) = interner().read().ids.get(name) {
            return Self(id);
        }
        let mut w = interner().write();
        if let Some(&id) = w.ids.get(name) {
            return Self(id);
        }
        let id = w.names.len() as u32;
        let s: &'static str = Box::leak(name.to_owned().into_boxed_str());
        w.names.push(s);
        w.ids.insert(s, id);
        Self(id)
    }

    /// The code's text.
    pub fn name(self) -> &'static str {
        interner()
            .read()
            .names
            .get(self.0 as usize)
            .copied()
            .unwrap_or("")
    }

    /// The numeric id (stable within a process only).
    pub fn id(self) -> u32 {
        self.0
    }

    /// The code with numeric id `id`, if one was interned (for codes that crossed an
    /// FFI boundary as numbers).
    pub fn from_id(id: u32) -> Option<Self> {
        ((id as usize) < interner().read().names.len()).then_some(Self(id))
    }
}

impl fmt::Debug for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One reason: a code and its weight (rule score contribution, SHAP value, ...).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reason {
    /// The code.
    pub code: ReasonCode,
    /// Its weight; larger magnitude = more important.
    pub weight: f32,
}

/// Up to [`Reasons::CAPACITY`] reasons, inline, no allocation. When full, a new reason
/// replaces the one with the smallest `|weight|` if it is larger.
#[derive(Clone, Copy, PartialEq)]
pub struct Reasons {
    len: u8,
    items: [Reason; Reasons::CAPACITY],
}

impl Default for Reasons {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Reasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Reasons {
    /// How many reasons fit.
    pub const CAPACITY: usize = 8;

    /// No reasons.
    pub const fn new() -> Self {
        Self {
            len: 0,
            items: [Reason {
                code: ReasonCode::UNSET,
                weight: 0.0,
            }; Self::CAPACITY],
        }
    }

    /// Adds a reason (see the type docs for the full case).
    pub fn push(&mut self, code: ReasonCode, weight: f32) {
        let r = Reason { code, weight };
        if (self.len as usize) < Self::CAPACITY {
            self.items[self.len as usize] = r;
            self.len += 1;
            return;
        }
        let (i, min) = self
            .items
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.weight.abs().total_cmp(&b.1.weight.abs()))
            .map(|(i, r)| (i, r.weight.abs()))
            .unwrap_or((0, 0.0));
        if weight.abs() > min {
            self.items[i] = r;
        }
    }

    /// Sorts by decreasing `|weight|`.
    pub fn sort(&mut self) {
        self.items[..self.len as usize].sort_by(|a, b| b.weight.abs().total_cmp(&a.weight.abs()));
    }

    /// The reasons.
    pub fn iter(&self) -> impl Iterator<Item = &Reason> {
        self.items[..self.len as usize].iter()
    }

    /// The reasons as a slice.
    pub fn as_slice(&self) -> &[Reason] {
        &self.items[..self.len as usize]
    }

    /// Number of reasons.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// ===== Fired rules =====

/// The names of the rules that fired, in evaluation order, inline (no allocation): the
/// first [`FiredRules::CAPACITY`] are kept and [`total`](Self::total) counts them all,
/// so an audit record says when the list was cut.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FiredRules {
    len: u8,
    total: u32,
    names: [ReasonCode; FiredRules::CAPACITY],
}

impl Default for FiredRules {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FiredRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FiredRules {
    /// How many names are kept.
    pub const CAPACITY: usize = 16;

    /// None fired.
    pub const fn new() -> Self {
        Self {
            len: 0,
            total: 0,
            names: [ReasonCode::UNSET; Self::CAPACITY],
        }
    }

    /// Records a fired rule (its interned name).
    #[inline]
    pub fn push(&mut self, name: ReasonCode) {
        if (self.len as usize) < Self::CAPACITY {
            self.names[self.len as usize] = name;
            self.len += 1;
        }
        self.total = self.total.saturating_add(1);
    }

    /// The kept names' codes.
    pub fn codes(&self) -> &[ReasonCode] {
        &self.names[..self.len as usize]
    }

    /// The kept names.
    pub fn iter(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.codes().iter().map(|c| c.name())
    }

    /// How many fired (kept or not).
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Whether none fired.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Whether `name` is among the kept names.
    pub fn contains(&self, name: &str) -> bool {
        self.iter().any(|n| n == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable() {
        let a = ReasonCode::intern("R_TEST_A");
        let b = ReasonCode::intern("R_TEST_A");
        assert_eq!(a, b);
        assert_eq!(a.name(), "R_TEST_A");
        assert_ne!(a, ReasonCode::intern("R_TEST_B"));
    }

    #[test]
    fn reasons_keep_the_largest() {
        let mut r = Reasons::new();
        for i in 0..20 {
            r.push(ReasonCode::intern(&format!("R{i}")), i as f32);
        }
        assert_eq!(r.len(), Reasons::CAPACITY);
        r.sort();
        let w: Vec<f32> = r.iter().map(|x| x.weight).collect();
        assert_eq!(w, vec![19.0, 18.0, 17.0, 16.0, 15.0, 14.0, 13.0, 12.0]);
    }

    #[test]
    fn validity() {
        assert!(Score::new(0.0).is_valid());
        assert!(Score::new(1.0).is_valid());
        assert!(!Score::new(f32::NAN).is_valid());
        assert!(!Score::new(1.01).is_valid());
        assert!(!Score::new(-0.1).is_valid());
    }
}
