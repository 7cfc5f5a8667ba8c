//! [`EnsembleScorer`]: several fast-tier scorers (XGBoost + BERT, say) combined into one
//! tier.
//!
//! **Rule.** Each member's probability is first mapped through its own calibration (when
//! it has one), then the tier's probability is the weighted average of the calibrated
//! probabilities of the members that answered: `Σ wᵢ·pᵢ / Σ wᵢ` over survivors. Reasons
//! are the members' reasons, merged by weight (each scaled by its member's share).
//!
//! **Failures.** Members run one after another, bounded (inline-class) members first,
//! each with what is left of the tier's budget (`score_within`). A member that errs,
//! panics, is cancelled, returns a probability outside `[0, 1]` (NaN included) or finds
//! no budget left is *dropped for that decision* and counted ([`EnsembleScorer::stats`]);
//! the tier fails only when every member is dropped (then the rules decide, as for any
//! fast-tier failure).

use crate::calibrate::Calibration;
use crate::error::ScoreError;
use crate::scorer::{Latency, Score, Scorer, ScorerInfo};
use crate::txn::Transaction;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One member of an ensemble.
#[derive(Clone)]
pub struct Member {
    /// The scorer.
    pub scorer: Arc<dyn Scorer>,
    /// Its weight (finite, > 0).
    pub weight: f32,
    /// Maps its raw probability to a calibrated one before averaging.
    pub calibration: Option<Calibration>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("scorer", &self.scorer.info().name)
            .field("weight", &self.weight)
            .field("calibrated", &self.calibration.is_some())
            .finish()
    }
}

impl Member {
    /// A member with weight `weight` and no calibration.
    pub fn new(scorer: Arc<dyn Scorer>, weight: f32) -> Self {
        Self {
            scorer,
            weight,
            calibration: None,
        }
    }

    /// Sets the member's calibration.
    pub fn calibrated(mut self, c: Calibration) -> Self {
        self.calibration = Some(c);
        self
    }
}

/// Why a member was dropped from a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// It returned an error.
    Error,
    /// It was cancelled at its budget, or no budget was left for it.
    Timeout,
    /// It panicked.
    Panic,
    /// Its probability was not a number in `[0, 1]`.
    Invalid,
}

#[derive(Debug, Default)]
struct Counters {
    scored: AtomicU64,
    error: AtomicU64,
    timeout: AtomicU64,
    panic: AtomicU64,
    invalid: AtomicU64,
}

/// Counters of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStats {
    /// The member's name ([`ScorerInfo::name`]).
    pub name: String,
    /// Decisions it contributed to.
    pub scored: u64,
    /// Dropped: error.
    pub error: u64,
    /// Dropped: timeout or cancelled.
    pub timeout: u64,
    /// Dropped: panic.
    pub panic: u64,
    /// Dropped: invalid probability.
    pub invalid: u64,
}

impl MemberStats {
    /// Every drop, whatever the cause.
    pub fn dropped(&self) -> u64 {
        self.error + self.timeout + self.panic + self.invalid
    }
}

/// Several scorers as one tier (see the module docs for the rule).
pub struct EnsembleScorer {
    members: Vec<(Member, ScorerInfo, Counters)>,
    info: ScorerInfo,
}

impl std::fmt::Debug for EnsembleScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnsembleScorer")
            .field("version", &self.info.version)
            .finish()
    }
}

/// Most members of one ensemble.
pub const MAX_MEMBERS: usize = 8;

impl EnsembleScorer {
    /// An ensemble of `members` (1 to [`MAX_MEMBERS`], weights finite and positive, none
    /// that [defers its reasons](Scorer::defers_reasons)).
    pub fn new(members: Vec<Member>) -> Result<Self, String> {
        if members.is_empty() || members.len() > MAX_MEMBERS {
            return Err(format!(
                "{} members (an ensemble has 1 to {MAX_MEMBERS})",
                members.len()
            ));
        }
        if let Some(m) = members
            .iter()
            .find(|m| !(m.weight.is_finite() && m.weight > 0.0))
        {
            return Err(format!(
                "member {} has weight {} (finite and > 0)",
                m.scorer.info().name,
                m.weight
            ));
        }
        // Its members' reasons are weighted by the members that scored, which an
        // explanation after the decision could not reproduce.
        if let Some(m) = members.iter().find(|m| m.scorer.defers_reasons()) {
            return Err(format!(
                "member {} defers its reasons (explain = \"decision\"): an ensemble's \
                 members give their reasons with their scores",
                m.scorer.info().name
            ));
        }
        let mut list: Vec<(Member, ScorerInfo, Counters)> = members
            .into_iter()
            .map(|m| {
                let info = m.scorer.info();
                (m, info, Counters::default())
            })
            .collect();
        // Bounded members first: they cost microseconds and leave the budget to the rest.
        list.sort_by_key(|(_, i, _)| i.latency == Latency::Unbounded);
        let mut h = crate::hash::Fnv::new();
        let mut version = String::new();
        for (m, i, _) in &list {
            h.write(&i.content_hash.to_le_bytes());
            h.write(&m.weight.to_le_bytes());
            if !version.is_empty() {
                version.push('+');
            }
            version.push_str(&format!("{}={}@{}", i.name, i.version, m.weight));
        }
        let latency = if list.iter().any(|(_, i, _)| i.latency == Latency::Unbounded) {
            Latency::Unbounded
        } else {
            Latency::Bounded
        };
        let info = ScorerInfo::new("ensemble", version, latency).with_content_hash(h.finish());
        Ok(Self {
            members: list,
            info,
        })
    }

    /// Per-member counters, in evaluation order.
    pub fn stats(&self) -> Vec<MemberStats> {
        self.members
            .iter()
            .map(|(_, i, c)| MemberStats {
                name: i.name.clone(),
                scored: c.scored.load(Ordering::Relaxed),
                error: c.error.load(Ordering::Relaxed),
                timeout: c.timeout.load(Ordering::Relaxed),
                panic: c.panic.load(Ordering::Relaxed),
                invalid: c.invalid.load(Ordering::Relaxed),
            })
            .collect()
    }

    fn drop_member(c: &Counters, cause: DropCause) {
        match cause {
            DropCause::Error => &c.error,
            DropCause::Timeout => &c.timeout,
            DropCause::Panic => &c.panic,
            DropCause::Invalid => &c.invalid,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    fn one(&self, txn: &Transaction, deadline: Option<Instant>) -> Result<Score, ScoreError> {
        let mut sum = 0f64;
        let mut weights = 0f64;
        let mut parts: Vec<(f32, Score)> = Vec::with_capacity(self.members.len());
        let mut last_err = None;
        for (m, _, c) in &self.members {
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => {
                        Self::drop_member(c, DropCause::Timeout);
                        continue;
                    }
                },
            };
            let r = catch_unwind(AssertUnwindSafe(|| match left {
                Some(l) => m.scorer.score_within(txn, l),
                None => m.scorer.score(txn),
            }));
            let cause = match r {
                Ok(Ok(s)) if s.is_valid() => {
                    let p = m
                        .calibration
                        .as_ref()
                        .map_or(s.probability, |cal| cal.apply(s.probability));
                    c.scored.fetch_add(1, Ordering::Relaxed);
                    sum += m.weight as f64 * p as f64;
                    weights += m.weight as f64;
                    parts.push((m.weight, s));
                    continue;
                }
                Ok(Ok(_)) => DropCause::Invalid,
                Ok(Err(ScoreError::Cancelled)) => DropCause::Timeout,
                Ok(Err(e)) => {
                    last_err = Some(e);
                    DropCause::Error
                }
                Err(_) => DropCause::Panic,
            };
            Self::drop_member(c, cause);
        }
        if parts.is_empty() {
            return Err(match last_err {
                Some(e) => ScoreError::Failed(format!("every ensemble member failed (last: {e})")),
                None => ScoreError::Failed("every ensemble member was dropped".into()),
            });
        }
        let mut out = Score::new((sum / weights).clamp(0.0, 1.0) as f32);
        for (w, s) in &parts {
            let share = *w / weights as f32;
            for r in s.reasons.iter() {
                out.reasons.push(r.code, r.weight * share);
            }
            if out.directive.is_none() {
                out.directive = s.directive;
            }
        }
        out.reasons.sort();
        Ok(out)
    }
}

impl Scorer for EnsembleScorer {
    fn info(&self) -> ScorerInfo {
        self.info.clone()
    }

    fn score(&self, txn: &Transaction) -> Result<Score, ScoreError> {
        self.one(txn, None)
    }

    fn score_within(&self, txn: &Transaction, budget: Duration) -> Result<Score, ScoreError> {
        self.one(txn, Instant::now().checked_add(budget))
    }

    fn warmup(&self) -> Result<(), ScoreError> {
        for (m, _, _) in &self.members {
            m.scorer.warmup()?;
        }
        Ok(())
    }

    fn schema_fingerprint(&self) -> Option<u64> {
        self.members
            .iter()
            .find_map(|(m, _, _)| m.scorer.schema_fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FeatureSchema;
    use crate::scorer::constant::ConstantScorer;

    struct Fails(ScoreError);
    impl Scorer for Fails {
        fn info(&self) -> ScorerInfo {
            ScorerInfo::new("fails", "1", Latency::Unbounded)
        }
        fn score(&self, _: &Transaction) -> Result<Score, ScoreError> {
            Err(self.0.clone())
        }
    }
    struct Panics;
    impl Scorer for Panics {
        fn info(&self) -> ScorerInfo {
            ScorerInfo::new("panics", "1", Latency::Unbounded)
        }
        fn score(&self, _: &Transaction) -> Result<Score, ScoreError> {
            panic!("member bug")
        }
    }

    fn schema() -> Arc<FeatureSchema> {
        FeatureSchema::builder().numeric("amount").build().unwrap()
    }

    fn txn() -> Transaction {
        Transaction::builder(&schema())
            .amount(5.0, "USD")
            .build()
            .unwrap()
    }

    fn c(p: f32) -> Arc<dyn Scorer> {
        Arc::new(ConstantScorer::new(p))
    }

    #[test]
    fn weighted_average_of_calibrated_members() {
        let e =
            EnsembleScorer::new(vec![Member::new(c(0.2), 3.0), Member::new(c(0.6), 1.0)]).unwrap();
        let p = e.score(&txn()).unwrap().probability;
        assert!((p - 0.3).abs() < 1e-6, "{p}");
        assert_eq!(e.info().latency, Latency::Bounded);
        let cal = crate::calibrate::Calibration::Platt { a: 2.0, b: -0.5 };
        let want = (cal.apply(0.6) + 0.2 * 3.0) / 4.0;
        let e = EnsembleScorer::new(vec![
            Member::new(c(0.2), 3.0),
            Member::new(c(0.6), 1.0).calibrated(cal),
        ])
        .unwrap();
        assert!((e.score(&txn()).unwrap().probability - want).abs() < 1e-6);
        assert!(EnsembleScorer::new(vec![]).is_err());
        assert!(EnsembleScorer::new(vec![Member::new(c(0.2), f32::NAN)]).is_err());
        assert!(EnsembleScorer::new(vec![Member::new(c(0.2), 0.0)]).is_err());
    }

    #[test]
    fn failing_members_are_dropped_and_counted() {
        let e = EnsembleScorer::new(vec![
            Member::new(Arc::new(Fails(ScoreError::Failed("down".into()))), 5.0),
            Member::new(Arc::new(Panics), 5.0),
            Member::new(Arc::new(Fails(ScoreError::Cancelled)), 5.0),
            Member::new(c(f32::NAN), 5.0),
            Member::new(c(0.4), 1.0),
        ])
        .unwrap();
        for _ in 0..3 {
            let p = e
                .score_within(&txn(), Duration::from_secs(60))
                .unwrap()
                .probability;
            assert_eq!(p, 0.4, "only the healthy member counts");
        }
        let s = e.stats();
        let by = |n: &str| {
            s.iter().filter(|m| m.name == n).fold((0, 0, 0), |a, m| {
                (a.0 + m.error, a.1 + m.timeout, a.2 + m.panic)
            })
        };
        // Bounded members (constants) run first.
        assert_eq!(s[0].name, "constant");
        assert_eq!(by("fails"), (3, 3, 0));
        assert_eq!(by("panics"), (0, 0, 3));
        assert_eq!(s.iter().map(|m| m.invalid).sum::<u64>(), 3);
        assert_eq!(s.iter().map(|m| m.scored).sum::<u64>(), 3);
        // Every member down: the tier fails (and the rules decide).
        let all = EnsembleScorer::new(vec![
            Member::new(Arc::new(Fails(ScoreError::Failed("down".into()))), 1.0),
            Member::new(Arc::new(Panics), 1.0),
        ])
        .unwrap();
        let err = all.score(&txn()).unwrap_err();
        assert!(
            err.to_string().contains("every ensemble member failed"),
            "{err}"
        );
        // No budget left: every member is dropped as a timeout.
        let e = EnsembleScorer::new(vec![Member::new(c(0.4), 1.0)]).unwrap();
        assert!(e.score_within(&txn(), Duration::ZERO).is_err());
        assert_eq!(e.stats()[0].timeout, 1);
    }
}
