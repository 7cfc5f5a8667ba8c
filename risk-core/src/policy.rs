//! The combine policy: how rule and model outputs become an action. All of it is here.
//!
//! Inputs: the rule tier's [`Score`] (always computed first), the fast tier's score if it
//! answered validly, and the entity's feedback shift.
//!
//! 1. **Hard rules override.** If the rule score carries a directive (a hard rule fired)
//!    and `hard_rule_override` is on, the directive is the action, whatever the model says.
//!    Tier = [`Tier::Rules`]; the reported score is the model's if it answered, else the
//!    rules'.
//! 2. **Model thresholds.** Otherwise, if the fast tier answered, its probability `p` picks
//!    the action: `p < approve_below - shift` → approve; `p >= decline_at - shift` →
//!    decline; else review. Tier = [`Tier::Fast`].
//! 3. **Rule fallback.** Otherwise (fast tier absent, late, failed, skipped), the rule
//!    probability goes through the same thresholds. Tier = [`Tier::Rules`], and the
//!    decision carries the fallback cause.
//! 4. **Static.** If the rule tier itself failed (it should not: it is the answer that
//!    cannot fail) and the model did not answer, the configured `static_action` decides.
//!
//! `shift` is the entity's feedback: after a deep verdict `d`, the entity's next decisions
//! within `feedback.ttl` use `shift = clamp(gain * (d - 0.5), -max_shift, max_shift)`, so
//! a high deep score makes that entity's thresholds stricter and a low one more lenient.
//! Shifted thresholds are clamped to `[0, 1]`.

use crate::decision::{Action, Tier};
use crate::scorer::Score;

/// Thresholds and override switch (the `[thresholds]` table of `risk.toml`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Scores below this approve.
    pub approve_below: f32,
    /// Scores at or above this decline.
    pub decline_at: f32,
    /// Whether hard-rule directives override the model.
    pub hard_rule_override: bool,
    /// Action when even the rule tier failed.
    pub static_action: Action,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            approve_below: 0.3,
            decline_at: 0.7,
            hard_rule_override: true,
            static_action: Action::Review,
        }
    }
}

/// Result of combining.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Combined {
    /// The action.
    pub action: Action,
    /// The score it was taken on.
    pub score: f32,
    /// The deciding tier.
    pub tier: Tier,
    /// Whether a hard rule set it.
    pub hard_rule: bool,
}

impl Policy {
    /// Action for probability `p` with the entity's threshold shift.
    #[inline]
    pub fn threshold(&self, p: f32, shift: f32) -> Action {
        let approve = (self.approve_below - shift).clamp(0.0, 1.0);
        let decline = (self.decline_at - shift).clamp(0.0, 1.0);
        if p >= decline {
            Action::Decline
        } else if p < approve {
            Action::Approve
        } else {
            Action::Review
        }
    }

    /// Combines the tiers' outputs; see the module docs.
    #[inline]
    pub fn combine(&self, rules: Option<&Score>, model: Option<&Score>, shift: f32) -> Combined {
        if let Some(dir) = rules.and_then(|r| r.directive) {
            if self.hard_rule_override {
                let score = model.or(rules).map_or(f32::NAN, |s| s.probability);
                return Combined {
                    action: dir,
                    score,
                    tier: Tier::Rules,
                    hard_rule: true,
                };
            }
        }
        if let Some(m) = model {
            return Combined {
                action: self.threshold(m.probability, shift),
                score: m.probability,
                tier: Tier::Fast,
                hard_rule: false,
            };
        }
        match rules.filter(|r| r.is_valid()) {
            Some(r) => Combined {
                action: self.threshold(r.probability, shift),
                score: r.probability,
                tier: Tier::Rules,
                hard_rule: false,
            },
            None => Combined {
                action: self.static_action,
                score: f32::NAN,
                tier: Tier::Static,
                hard_rule: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_and_shift() {
        let p = Policy::default();
        assert_eq!(p.threshold(0.1, 0.0), Action::Approve);
        assert_eq!(p.threshold(0.3, 0.0), Action::Review);
        assert_eq!(p.threshold(0.69, 0.0), Action::Review);
        assert_eq!(p.threshold(0.7, 0.0), Action::Decline);
        // Stricter for an entity with a high deep score.
        assert_eq!(p.threshold(0.55, 0.2), Action::Decline);
        assert_eq!(p.threshold(0.25, -0.1), Action::Approve);
    }

    #[test]
    fn hard_rule_overrides_model() {
        let p = Policy::default();
        let mut r = Score::new(0.1);
        r.directive = Some(Action::Decline);
        let m = Score::new(0.01);
        let c = p.combine(Some(&r), Some(&m), 0.0);
        assert_eq!(
            (c.action, c.tier, c.hard_rule),
            (Action::Decline, Tier::Rules, true)
        );
        let off = Policy {
            hard_rule_override: false,
            ..p
        };
        let c = off.combine(Some(&r), Some(&m), 0.0);
        assert_eq!((c.action, c.tier), (Action::Approve, Tier::Fast));
    }

    #[test]
    fn fallbacks() {
        let p = Policy::default();
        let c = p.combine(Some(&Score::new(0.9)), None, 0.0);
        assert_eq!((c.action, c.tier), (Action::Decline, Tier::Rules));
        let c = p.combine(None, None, 0.0);
        assert_eq!((c.action, c.tier), (Action::Review, Tier::Static));
    }
}
