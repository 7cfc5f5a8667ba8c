//! Evaluating a [`RuleSet`] over one transaction's features: native code when built, else
//! the branch-program interpreter; the reference interpreter for tests; shadow counts.

use super::set::RuleSet;
use crate::checker::interpret;
use crate::parser::file::{HitPolicy, Outcome};
use risk_core::{Action, Features};

/// The rule tier's answer for one transaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Rule score in `[0, 1]` under the hit policy.
    pub score: f32,
    /// The most severe action among fired hard rules.
    pub directive: Option<Action>,
    /// Number of rules that fired.
    pub hits: usize,
}

/// Reusable buffer receiving the indices of fired rules, in evaluation order.
/// Keep one per thread: after its first use, evaluation allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct Hits {
    idx: Vec<u32>,
    shadow: Vec<u32>,
}

impl Hits {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }
    /// Indices (into [`RuleSet::rules`]) of the live rules that fired.
    pub fn indices(&self) -> &[u32] {
        &self.idx
    }
    /// Indices of the shadow rules that fired (they count in neither score nor action).
    pub fn shadow(&self) -> &[u32] {
        &self.shadow
    }
}

impl RuleSet {
    /// Evaluates every enabled rule (or up to the first hit) over `f`, filling `hits`.
    /// Allocates nothing once `hits` has grown to the number of rules.
    #[inline]
    pub fn evaluate(&self, f: &Features, hits: &mut Hits) -> Verdict {
        #[cfg(feature = "jit")]
        if let Some(Ok(n)) = self.native.get() {
            let (live, shadow) = (self.plan.len(), self.shadow_plan.len());
            let x = f.values();
            if n.run(
                &self.branches,
                x,
                &mut hits.idx,
                &mut hits.shadow,
                live,
                shadow,
            )
            .is_some()
            {
                return self.verdict(hits);
            }
        }
        self.evaluate_interpreted(f, hits)
    }

    /// The same evaluation on the branch-program interpreter (what runs where native
    /// code is not available; for tests and comparisons).
    pub fn evaluate_interpreted(&self, f: &Features, hits: &mut Hits) -> Verdict {
        hits.idx.clear();
        hits.shadow.clear();
        self.branches
            .run_linked(self.start, f.values(), &mut hits.idx, &mut hits.shadow);
        self.verdict(hits)
    }

    fn verdict(&self, hits: &Hits) -> Verdict {
        let mut score = 0.0f32;
        let mut directive: Option<Action> = None;
        for &i in &hits.idx {
            let r = &self.rules[i as usize];
            let c = r.contribution(self.review_score);
            score = match self.policy {
                HitPolicy::CollectSum { cap } => (score + c).min(cap),
                HitPolicy::CollectMax | HitPolicy::FirstHit => score.max(c),
            };
            if let (true, Outcome::Action(a)) = (r.hard, r.outcome) {
                directive = Some(directive.map_or(a, |d| d.max(a)));
            }
        }
        Verdict {
            score,
            directive,
            hits: hits.idx.len(),
        }
    }

    /// The same evaluation by the reference interpreter over the typed trees (slow; for
    /// tests and audits of the compiler).
    pub fn evaluate_reference(&self, f: &Features, hits: &mut Hits) -> Verdict {
        hits.idx.clear();
        hits.shadow.clear();
        let holds = |i: u32| interpret(&self.rules[i as usize].texpr, f.values()) != 0.0;
        for &i in &self.plan {
            if holds(i) {
                hits.idx.push(i);
                if self.policy == HitPolicy::FirstHit {
                    break;
                }
            }
        }
        hits.shadow
            .extend(self.shadow_plan.iter().copied().filter(|&i| holds(i)));
        self.verdict(hits)
    }

    /// Counts one hit of shadow rule `i` (the rule tier does, per scored transaction).
    pub fn count_shadow(&self, i: u32) {
        if let Some(c) = self.shadow_counts.get(i as usize) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Each shadow rule (id) with its hits counted since this set was compiled.
    pub fn shadow_hits(&self) -> Vec<(&str, u64)> {
        self.rules
            .iter()
            .zip(&self.shadow_counts)
            .filter(|(r, _)| r.shadow)
            .map(|(r, c)| (r.id.as_str(), c.load(std::sync::atomic::Ordering::Relaxed)))
            .collect()
    }
}
