//! [`ConstantScorer`]: a tier that always answers the same probability.

use super::{Latency, Score, Scorer, ScorerInfo};
use crate::error::ScoreError;
use crate::txn::Transaction;

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
