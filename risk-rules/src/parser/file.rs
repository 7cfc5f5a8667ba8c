//! Rule files.
//!
//! ```text
//! version "2026-11-29.1"                       # optional, shown in ScorerInfo and audit
//! policy collect_all sum cap 1.0              # or: collect_all max | first_hit
//! review_score 0.5                            # probability of a non-hard `review` rule
//!
//! const HIGH_RISK = ["NG", "RU"]               # named values, defined once
//!
//! rule R_CARD_TESTING {
//!   description "Three or more tiny charges in the last hour"
//!   when small_count_1h >= 3 && channel == "ecom"
//!   score 0.6                                 # or: approve | review | decline
//!   reason "CARD_TESTING"                     # default: the rule id
//!   priority 10                               # higher first (first_hit order)
//!   hard                                      # its action overrides the model
//!   disabled                                  # kept in the file, not evaluated
//!   shadow                                    # evaluated and recorded, never counts
//! }
//! ```

use super::{Expr, Parser};
use crate::error::{err, ErrorKind, Result, Span};
use crate::lexer::{Tok, Token};
use risk_core::Action;

/// How hits combine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HitPolicy {
    /// The highest-priority rule that matches decides alone.
    FirstHit,
    /// Every rule is evaluated; scores add up to `cap`.
    CollectSum {
        /// Upper bound of the sum (≤ 1).
        cap: f32,
    },
    /// Every rule is evaluated; the largest score wins.
    CollectMax,
}

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Contributes a score.
    Score(f32),
    /// Names an action.
    Action(Action),
}

/// One parsed rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleAst {
    /// Id.
    pub id: String,
    /// Span of the id.
    pub id_span: Span,
    /// Description.
    pub description: String,
    /// Condition.
    pub when: Option<Expr>,
    /// Outcome and its span.
    pub outcome: Option<(Outcome, Span)>,
    /// Reason code.
    pub reason: Option<String>,
    /// Priority.
    pub priority: i32,
    /// Evaluated at all.
    pub enabled: bool,
    /// Overrides the model.
    pub hard: bool,
    /// Evaluated and recorded, but never contributes to the score or the action.
    pub shadow: bool,
}

/// A parsed rule file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileAst {
    /// `version`.
    pub version: Option<String>,
    /// `policy`.
    pub policy: HitPolicy,
    /// `review_score`.
    pub review_score: f32,
    /// `const` definitions in order.
    pub consts: Vec<(String, Span, Expr)>,
    /// Rules in file order.
    pub rules: Vec<RuleAst>,
}

fn number(p: &mut Parser<'_>, what: &str) -> Result<(f64, Span)> {
    let neg = if p.at_punct("-") {
        p.next();
        true
    } else {
        false
    };
    match p.peek().tok.clone() {
        Tok::Num(n) => {
            let s = p.next().span;
            Ok((if neg { -n } else { n }, s))
        }
        _ => p.expected(what),
    }
}

fn string(p: &mut Parser<'_>, what: &str) -> Result<String> {
    match p.peek().tok.clone() {
        Tok::Str(s) => {
            p.next();
            Ok(s)
        }
        _ => p.expected(what),
    }
}

fn ident(p: &mut Parser<'_>, what: &str) -> Result<(String, Span)> {
    match p.peek().tok.clone() {
        Tok::Ident(s) => {
            let sp = p.next().span;
            Ok((s, sp))
        }
        _ => p.expected(what),
    }
}

fn unit(v: f64, span: Span, what: &str) -> Result<f32> {
    if !(0.0..=1.0).contains(&v) {
        return err(
            ErrorKind::InvalidValue(format!("{what} {v} is not in [0, 1]")),
            span,
        );
    }
    Ok(v as f32)
}

/// Parses a whole rule file.
pub fn parse_file(toks: &[Token]) -> Result<FileAst> {
    let mut p = Parser::new(toks);
    let mut f = FileAst {
        version: None,
        policy: HitPolicy::CollectSum { cap: 1.0 },
        review_score: 0.5,
        consts: Vec::new(),
        rules: Vec::new(),
    };
    loop {
        let t = p.peek().clone();
        let Tok::Ident(word) = &t.tok else {
            if t.tok == Tok::Eof {
                return Ok(f);
            }
            return p.expected("`rule`, `const`, `policy`, `review_score` or `version`");
        };
        match word.as_str() {
            "version" => {
                p.next();
                f.version = Some(string(&mut p, "a version string")?);
            }
            "review_score" => {
                p.next();
                let (v, s) = number(&mut p, "a number")?;
                f.review_score = unit(v, s, "review_score")?;
            }
            "policy" => {
                p.next();
                let (kind, ks) = ident(&mut p, "`first_hit` or `collect_all`")?;
                f.policy = match kind.as_str() {
                    "first_hit" => HitPolicy::FirstHit,
                    "collect_all" => {
                        let (agg, aspan) = ident(&mut p, "`sum` or `max`")?;
                        match agg.as_str() {
                            "max" => HitPolicy::CollectMax,
                            "sum" => {
                                let mut cap = 1.0;
                                if p.at_ident("cap") {
                                    p.next();
                                    let (v, s) = number(&mut p, "a number")?;
                                    cap = unit(v, s, "cap")?;
                                }
                                HitPolicy::CollectSum { cap }
                            }
                            _ => {
                                return err(
                                    ErrorKind::Expected {
                                        expected: "`sum` or `max`".into(),
                                        found: format!("`{agg}`"),
                                    },
                                    aspan,
                                )
                            }
                        }
                    }
                    _ => {
                        return err(
                            ErrorKind::Expected {
                                expected: "`first_hit` or `collect_all`".into(),
                                found: format!("`{kind}`"),
                            },
                            ks,
                        )
                    }
                };
            }
            "const" => {
                p.next();
                let (name, span) = ident(&mut p, "a constant name")?;
                p.expect_punct("=")?;
                let e = p.expr()?;
                f.consts.push((name, span, e));
            }
            "rule" => {
                p.next();
                f.rules.push(rule(&mut p)?);
            }
            _ => return p.expected("`rule`, `const`, `policy`, `review_score` or `version`"),
        }
    }
}

fn rule(p: &mut Parser<'_>) -> Result<RuleAst> {
    let (id, id_span) = ident(p, "a rule id")?;
    p.expect_punct("{")?;
    let mut r = RuleAst {
        id,
        id_span,
        description: String::new(),
        when: None,
        outcome: None,
        reason: None,
        priority: 0,
        enabled: true,
        hard: false,
        shadow: false,
    };
    let mut seen: Vec<String> = Vec::new();
    loop {
        if p.at_punct("}") {
            p.next();
            return Ok(r);
        }
        let (word, span) = ident(p, "a rule clause or `}`")?;
        let key = match word.as_str() {
            "approve" | "review" | "decline" | "score" => "outcome",
            w => w,
        }
        .to_owned();
        if seen.contains(&key) {
            return err(ErrorKind::DuplicateClause(word), span);
        }
        seen.push(key);
        match word.as_str() {
            "description" => r.description = string(p, "a description string")?,
            "when" => r.when = Some(p.expr()?),
            "score" => {
                let (v, s) = number(p, "a score")?;
                r.outcome = Some((Outcome::Score(unit(v, s, "score")?), span.to(s)));
            }
            "approve" => r.outcome = Some((Outcome::Action(Action::Approve), span)),
            "review" => r.outcome = Some((Outcome::Action(Action::Review), span)),
            "decline" => r.outcome = Some((Outcome::Action(Action::Decline), span)),
            "reason" => r.reason = Some(string(p, "a reason code string")?),
            "priority" => {
                let (v, s) = number(p, "a priority")?;
                if v.fract() != 0.0 || v.abs() > 1e6 {
                    return err(
                        ErrorKind::InvalidValue(format!(
                            "priority {v} is not an integer in [-1000000, 1000000]"
                        )),
                        s,
                    );
                }
                r.priority = v as i32;
            }
            "hard" => r.hard = true,
            "disabled" => r.enabled = false,
            "shadow" => r.shadow = true,
            _ => {
                return err(
                    ErrorKind::Expected {
                        expected: "a rule clause (description, when, score, approve, review, decline, reason, priority, hard, disabled, shadow)".into(),
                        found: format!("`{word}`"),
                    },
                    span,
                )
            }
        }
    }
}
