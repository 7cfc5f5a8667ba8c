//! The answer's vocabulary: [`Action`] (approve / review / decline), used by scorers'
//! directives, the policy, entity state, deploy gates and rule files alike.

use std::fmt;

/// The action for a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Let it through.
    Approve,
    /// Hold for step-up authentication or manual review.
    Review,
    /// Refuse.
    Decline,
}

impl Action {
    /// Every action, in severity order.
    pub const ALL: [Action; 3] = [Action::Approve, Action::Review, Action::Decline];

    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Approve => "approve",
            Action::Review => "review",
            Action::Decline => "decline",
        }
    }

    /// Parses a lowercase name.
    pub fn parse(s: &str) -> Option<Self> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
