//! [`Rule`]: one compiled rule of a rule set, with what it does when it fires.

use crate::checker::TExpr;
use crate::parser::file::Outcome;
use risk_core::{Action, ReasonCode};

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Id (unique in the set).
    pub id: String,
    /// Description.
    pub description: String,
    /// Reason code reported when it fires.
    pub reason: ReasonCode,
    /// What it does when it fires.
    pub outcome: Outcome,
    /// Higher first.
    pub priority: i32,
    /// Evaluated at all.
    pub enabled: bool,
    /// Its action overrides the model.
    pub hard: bool,
    /// Evaluated and recorded apart
    /// ([`Hits::shadow`](crate::ruleset::Hits::shadow)), never counted in the score
    /// or the action.
    pub shadow: bool,
    /// The condition's source text.
    pub condition: String,
    /// Line of the rule in its file.
    pub line: usize,
    /// Column of its id.
    pub col: usize,
    /// The id, interned: what a decision's `rules_fired` holds.
    pub name: ReasonCode,
    /// Its segment of the linked program: entry and hit node (`u32::MAX`: not
    /// evaluated, or a condition that can never hold).
    pub(crate) seg: (u32, u32),
    pub(crate) texpr: TExpr,
}

impl Rule {
    /// Its segment of the linked program (entry, hit node); `None` when it is not
    /// evaluated or can never hold.
    pub(crate) fn segment(&self) -> Option<(u32, u32)> {
        (self.seg.0 != u32::MAX).then_some(self.seg)
    }

    /// The rule's contribution to the rule score when it fires.
    pub fn contribution(&self, review_score: f32) -> f32 {
        match self.outcome {
            Outcome::Score(s) => s,
            Outcome::Action(Action::Approve) => 0.0,
            Outcome::Action(Action::Review) => review_score,
            Outcome::Action(Action::Decline) => 1.0,
        }
    }
}
