//! Static checks run at compile time, reported as warnings (the set still compiles):
//!
//! - **never fires**: a rule whose conjunction holds contradictory tests on one field
//!   (`amount > 500 && amount < 100`, `country == "US" && country == "GB"`, `channel ==
//!   "pos" && channel in ["ecom"]`), or whose condition is constant false;
//! - **redundant**: a rule that can only fire when a higher-priority hard `decline` rule
//!   fires too (its condition implies the hard rule's), so it never changes an action;
//!   under `first_hit`, any earlier rule whose condition it implies makes it unreachable;
//! - **duplicate**: two rules with the same condition.
//!
//! The analysis reads the conjunction at the top of each condition: comparisons of a
//! field with a constant, `in` lists and `!=`; any other conjunct only makes a rule
//! stricter, so contradictions and implications found on the simple part are sound.
//! Negated lists (`!(x in L)`) are not simple: they hold for a missing value.

use crate::checker::{Cmp, TExpr};
use crate::parser::file::{HitPolicy, Outcome};
use crate::rule::Rule;
use risk_core::{Action, FeatureSchema};
use std::fmt;

/// What a warning is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarningKind {
    /// The rule can never fire.
    NeverFires,
    /// The rule never changes an outcome: the named rule always fires with it.
    Redundant(String),
    /// Same condition as the named rule.
    Duplicate(String),
}

/// A compile-time warning about one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleWarning {
    /// The rule.
    pub rule: String,
    /// What.
    pub kind: WarningKind,
    /// The rule file.
    pub file: String,
    /// 1-based line of the rule.
    pub line: usize,
    /// 1-based column of its id.
    pub col: usize,
    /// Explanation.
    pub message: String,
}

impl fmt::Display for RuleWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: warning: rule {}: {}",
            self.file, self.line, self.col, self.rule, self.message
        )
    }
}

/// What a conjunction allows of one field: `[lo, hi]` (inclusive; never missing), an
/// optional finite set of values, values excluded.
#[derive(Debug, Clone)]
struct Dom {
    lo: f32,
    hi: f32,
    allowed: Option<Vec<f32>>,
    excluded: Vec<f32>,
}

impl Dom {
    fn any() -> Self {
        Dom {
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            allowed: None,
            excluded: Vec::new(),
        }
    }

    fn admits(&self, v: f32) -> bool {
        v >= self.lo && v <= self.hi && !self.excluded.contains(&v)
    }

    fn is_empty(&self) -> bool {
        self.lo > self.hi
            || self
                .allowed
                .as_ref()
                .is_some_and(|a| !a.iter().any(|&v| self.admits(v)))
    }

    fn meet(&mut self, c: &Atom) {
        match c {
            Atom::Range(lo, hi) => {
                self.lo = self.lo.max(*lo);
                self.hi = self.hi.min(*hi);
            }
            Atom::Set(s) => {
                self.allowed = Some(match self.allowed.take() {
                    None => s.clone(),
                    Some(a) => a.into_iter().filter(|v| s.contains(v)).collect(),
                })
            }
            Atom::Ne(k) => self.excluded.push(*k),
        }
    }

    /// Whether every value this domain admits satisfies `c`.
    fn implies(&self, c: &Atom) -> bool {
        // A finite domain: a set, or a single point (`x == k`).
        let point = (self.lo == self.hi).then(|| vec![self.lo]);
        let values: Option<Vec<f32>> = self
            .allowed
            .clone()
            .or(point)
            .map(|a| a.into_iter().filter(|&v| self.admits(v)).collect());
        match (c, values) {
            (Atom::Range(lo, hi), Some(vs)) => vs.iter().all(|v| v >= lo && v <= hi),
            (Atom::Range(lo, hi), None) => self.lo >= *lo && self.hi <= *hi,
            (Atom::Set(s), Some(vs)) => vs.iter().all(|v| s.contains(v)),
            (Atom::Set(_), None) => false,
            (Atom::Ne(k), Some(vs)) => !vs.contains(k),
            (Atom::Ne(k), None) => !self.admits(*k),
        }
    }
}

/// One simple test of a field.
#[derive(Debug, Clone)]
enum Atom {
    Range(f32, f32),
    Set(Vec<f32>),
    Ne(f32),
}

fn atom(e: &TExpr) -> Option<(u32, Atom)> {
    let bound = |op: Cmp, k: f32| -> Atom {
        match op {
            Cmp::Eq => Atom::Range(k, k),
            Cmp::Ne => Atom::Ne(k),
            Cmp::Lt => Atom::Range(f32::NEG_INFINITY, k.next_down()),
            Cmp::Le => Atom::Range(f32::NEG_INFINITY, k),
            Cmp::Gt => Atom::Range(k.next_up(), f32::INFINITY),
            Cmp::Ge => Atom::Range(k, f32::INFINITY),
        }
    };
    match e {
        TExpr::Cmp(op, a, b) => match (&**a, &**b) {
            (TExpr::Slot(s), TExpr::Num(k)) if k.is_finite() => Some((s.0, bound(*op, *k))),
            (TExpr::Num(k), TExpr::Slot(s)) if k.is_finite() => Some((s.0, bound(op.flip(), *k))),
            _ => None,
        },
        TExpr::In(a, set) => match &**a {
            TExpr::Slot(s) => Some((s.0, Atom::Set(set.iter().map(|v| v + 0.0).collect()))),
            _ => None,
        },
        _ => None,
    }
}

/// The simple conjuncts at the top of `e`, and whether every conjunct was simple.
fn conjuncts(e: &TExpr, out: &mut Vec<(u32, Atom)>) -> bool {
    match e {
        TExpr::And(a, b) => conjuncts(a, out) & conjuncts(b, out),
        TExpr::Bool(true) => true,
        e => match atom(e) {
            Some(a) => {
                out.push(a);
                true
            }
            None => false,
        },
    }
}

fn domains(atoms: &[(u32, Atom)]) -> Vec<(u32, Dom)> {
    let mut d: Vec<(u32, Dom)> = Vec::new();
    for (s, a) in atoms {
        let i = match d.iter().position(|(x, _)| x == s) {
            Some(i) => i,
            None => {
                d.push((*s, Dom::any()));
                d.len() - 1
            }
        };
        d[i].1.meet(a);
    }
    d
}

/// The warnings of a compiled set (`order`: enabled rules in evaluation order).
pub(crate) fn check(
    rules: &[Rule],
    order: &[u32],
    policy: HitPolicy,
    file: &str,
    schema: &FeatureSchema,
) -> Vec<RuleWarning> {
    let names = |s: u32| schema.fields()[s as usize].name.clone();
    struct Info {
        atoms: Vec<(u32, Atom)>,
        all_simple: bool,
        doms: Vec<(u32, Dom)>,
        expr: TExpr,
    }
    let info: Vec<Info> = rules
        .iter()
        .map(|r| {
            let expr = r.texpr.clone();
            let mut atoms = Vec::new();
            let all_simple = conjuncts(&expr, &mut atoms);
            let doms = domains(&atoms);
            Info {
                atoms,
                all_simple,
                doms,
                expr,
            }
        })
        .collect();
    let mut out = Vec::new();
    let mut warn = |r: &Rule, kind: WarningKind, message: String| {
        out.push(RuleWarning {
            rule: r.id.clone(),
            kind,
            file: file.to_owned(),
            line: r.line,
            col: r.col,
            message,
        })
    };
    let mut never = vec![false; rules.len()];
    for &i in order {
        let (r, inf) = (&rules[i as usize], &info[i as usize]);
        if inf.expr == TExpr::Bool(false) {
            never[i as usize] = true;
            warn(
                r,
                WarningKind::NeverFires,
                "its condition is always false".into(),
            );
        } else if let Some((s, _)) = inf.doms.iter().find(|(_, d)| d.is_empty()) {
            never[i as usize] = true;
            warn(
                r,
                WarningKind::NeverFires,
                format!(
                    "its tests on `{}` contradict each other: it can never fire",
                    names(*s)
                ),
            );
        }
    }
    for (pos, &i) in order.iter().enumerate() {
        let (r, inf) = (&rules[i as usize], &info[i as usize]);
        if never[i as usize] {
            continue;
        }
        // Earlier rules in evaluation order: higher priority, or the same and earlier
        // in the file.
        for &j in &order[..pos] {
            let (h, hi) = (&rules[j as usize], &info[j as usize]);
            if hi.expr == inf.expr && h.shadow == r.shadow {
                warn(
                    r,
                    WarningKind::Duplicate(h.id.clone()),
                    format!("same condition as rule {} (line {})", h.id, h.line),
                );
                break;
            }
            let dominates = !h.shadow
                && !r.shadow
                && match policy {
                    HitPolicy::FirstHit => true,
                    _ => h.hard && h.outcome == Outcome::Action(Action::Decline),
                };
            if !dominates || !hi.all_simple || hi.atoms.is_empty() {
                continue;
            }
            let implied = hi.atoms.iter().all(|(s, a)| {
                inf.doms
                    .iter()
                    .find(|(x, _)| x == s)
                    .is_some_and(|(_, d)| d.implies(a))
            });
            if implied {
                let why = if policy == HitPolicy::FirstHit {
                    "it is unreachable under first_hit"
                } else {
                    "the hard decline decides whenever it fires"
                };
                warn(
                    r,
                    WarningKind::Redundant(h.id.clone()),
                    format!(
                        "whenever it fires, rule {} (line {}, evaluated before it) fires too: {why}",
                        h.id, h.line
                    ),
                );
                break;
            }
        }
    }
    out
}
