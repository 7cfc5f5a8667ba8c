//! How a tree model's output becomes the fast tier's probability: a binary model's output
//! is one already; a regression's (a loss amount, a risk index) needs the mapping the
//! policy states in `risk.toml` (`score_transform`).

use super::ensemble::Link;
use super::TreeError;

/// The mapping from a model's output to the tier's probability.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ScoreTransform {
    /// The output is the probability (binary objectives; the only choice for them).
    Probability,
    /// The output clamped to `[0, 1]` (a regression trained on 0/1 or a rate).
    Clamp,
    /// The logistic of the output (a regression on a log-odds scale).
    Logistic,
    /// `(output - lo) / (hi - lo)`, clamped to `[0, 1]` (an amount or an index: `hi` is
    /// where the score reaches 1).
    Linear {
        /// Output mapped to 0.
        lo: f64,
        /// Output mapped to 1.
        hi: f64,
    },
}

impl ScoreTransform {
    /// Parses `"clamp"`, `"logistic"`, `"probability"` or `"linear:LO:HI"`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?} (one of \"probability\", \"clamp\", \"logistic\", \"linear:LO:HI\" with \
                 finite LO < HI)"
            )
        };
        match s {
            "probability" => Ok(Self::Probability),
            "clamp" => Ok(Self::Clamp),
            "logistic" => Ok(Self::Logistic),
            _ => {
                let rest = s.strip_prefix("linear:").ok_or_else(bad)?;
                let (lo, hi) = rest.split_once(':').ok_or_else(bad)?;
                let lo: f64 = lo.trim().parse().map_err(|_| bad())?;
                let hi: f64 = hi.trim().parse().map_err(|_| bad())?;
                if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                    return Err(bad());
                }
                Ok(Self::Linear { lo, hi })
            }
        }
    }

    /// Checks the transform against the model's link: a probability model takes none, a
    /// regression needs one.
    pub fn check(self, link: Link) -> Result<(), TreeError> {
        match (link.is_probability(), self == Self::Probability) {
            (true, true) | (false, false) => Ok(()),
            (true, false) => Err(TreeError::Unsupported(format!(
                "score_transform {self:?} on a model whose output is a probability already"
            ))),
            (false, true) => Err(TreeError::Unsupported(format!(
                "the model is a regression ({link:?} link): its output is not a probability; \
                 state score_transform = \"clamp\", \"logistic\" or \"linear:LO:HI\""
            ))),
        }
    }

    /// The probability for an output.
    #[inline]
    pub fn apply(self, y: f32) -> f32 {
        match self {
            Self::Probability => y,
            Self::Clamp => y.clamp(0.0, 1.0),
            Self::Logistic => super::ensemble::sigmoid(y as f64) as f32,
            Self::Linear { lo, hi } => (((y as f64 - lo) / (hi - lo)).clamp(0.0, 1.0)) as f32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_parse_map_and_match_their_links() {
        assert_eq!(ScoreTransform::parse("clamp"), Ok(ScoreTransform::Clamp));
        let l = ScoreTransform::parse("linear:0:5000").unwrap();
        assert_eq!(l.apply(2500.0), 0.5);
        assert_eq!(l.apply(-3.0), 0.0);
        assert_eq!(l.apply(9e9), 1.0);
        assert_eq!(ScoreTransform::Clamp.apply(1.7), 1.0);
        assert_eq!(ScoreTransform::Logistic.apply(0.0), 0.5);
        for bad in [
            "linear:5:5",
            "linear:1",
            "linear:a:b",
            "linear:0:inf",
            "sqrt",
            "",
        ] {
            assert!(ScoreTransform::parse(bad).is_err(), "{bad}");
        }
        assert!(ScoreTransform::Probability.check(Link::Logistic).is_ok());
        assert!(ScoreTransform::Clamp.check(Link::Logistic).is_err());
        assert!(ScoreTransform::Probability.check(Link::Identity).is_err());
        assert!(l.check(Link::Exp).is_ok());
    }
}
