//! Why a rule did or did not fire, for analysts' tooling and the bindings.
//!
//! [`RuleSet::explain`] runs every rule's program on one row with a trace: each
//! sub-condition evaluated (a leaf of the `&&` / `||` / `!` tree), in evaluation order,
//! with its outcome and the values it read. The last one decided the rule: the first
//! false conjunct of a rule that did not fire, the first true disjunct of one that did
//! (a `!` flips what its inside decided). Explain is for tools, not the decide path: it
//! allocates, and runs on the interpreter (the same results as native code).

use crate::parser::file::HitPolicy;
use crate::rule::Rule;
use crate::ruleset::RuleSet;
use risk_core::schema::FieldKind;
use risk_core::Features;
use serde::Serialize;

/// A value a condition read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldValue {
    /// A number.
    Num(f32),
    /// A categorical field's value.
    Category(String),
    /// A categorical value outside the field's vocabulary.
    Other,
    /// Missing.
    Missing,
}

/// One sub-condition evaluated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Its source text.
    pub condition: String,
    /// 1-based line and column in the rule file.
    pub line: usize,
    /// Column.
    pub col: usize,
    /// Whether it held.
    pub holds: bool,
    /// The fields it read, with their values.
    pub values: Vec<(String, FieldValue)>,
}

/// One rule's outcome on the row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleExplanation {
    /// Rule id.
    pub id: String,
    /// Whether its condition held.
    pub fired: bool,
    /// Whether it counted: fired, live (not shadow) and, under `first_hit`, the first.
    pub counted: bool,
    /// `disabled` in the file: not evaluated.
    pub disabled: bool,
    /// A shadow rule.
    pub shadow: bool,
    /// A hard rule.
    pub hard: bool,
    /// The sub-condition that decided it (`None`: disabled, or a constant condition).
    pub decided_by: Option<Step>,
    /// Every sub-condition evaluated, in order (the last one is `decided_by`).
    pub steps: Vec<Step>,
}

/// Every rule's outcome on one row, in evaluation order (live rules, then shadow
/// rules, then disabled ones).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The set's `version`.
    pub version: String,
    /// The set's content hash (hex, as on decision records).
    pub hash: String,
    /// Per rule.
    pub rules: Vec<RuleExplanation>,
}

impl Explanation {
    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// The explanation of rule `id`.
    pub fn rule(&self, id: &str) -> Option<&RuleExplanation> {
        self.rules.iter().find(|r| r.id == id)
    }
}

fn value(f: &Features, slot: u32) -> (String, FieldValue) {
    let s = f.schema();
    let field = &s.fields()[slot as usize];
    let v = f.values()[slot as usize];
    let fv = match (&field.kind, v.is_nan()) {
        (_, true) => FieldValue::Missing,
        (FieldKind::Numeric, false) => FieldValue::Num(v),
        (FieldKind::Categorical, false) => match field.value_of(v as u32) {
            Some(c) if v.fract() == 0.0 => FieldValue::Category(c.to_owned()),
            _ => FieldValue::Other,
        },
    };
    (field.name.clone(), fv)
}

impl RuleSet {
    /// Explains every rule on `f` (compiled against the same schema).
    pub fn explain(&self, f: &Features) -> Explanation {
        let src = self.source();
        let x = f.values();
        let in_schema = |slot: u32| (slot as usize) < x.len();
        let mut trace = Vec::new();
        let mut first_counted = false;
        let first_hit = self.policy() == HitPolicy::FirstHit;
        let mut out: Vec<RuleExplanation> = Vec::new();
        let mut order: Vec<u32> = self.plan_order();
        order.extend((0..self.rules().len() as u32).filter(|&i| !self.rules()[i as usize].enabled));
        for i in order {
            let r: &Rule = &self.rules()[i as usize];
            trace.clear();
            let (fired, steps) = match (r.enabled, r.segment()) {
                (false, _) => (false, Vec::new()),
                (true, None) => (false, Vec::new()),
                (true, Some((entry, hit))) => {
                    let fired = self.program().trace(entry, hit, x, &mut trace);
                    let steps = trace
                        .iter()
                        .map(|&(node, holds)| {
                            let info = &self.program().info[node as usize];
                            let (start, end) = unparen(src, info.span.start, info.span.end);
                            let (line, col) = line_col(src, start);
                            Step {
                                condition: src.get(start..end).unwrap_or("").to_owned(),
                                line,
                                col,
                                holds,
                                values: info
                                    .slots
                                    .iter()
                                    .filter(|&&s| in_schema(s))
                                    .map(|&s| value(f, s))
                                    .collect(),
                            }
                        })
                        .collect::<Vec<_>>();
                    (fired, steps)
                }
            };
            let counted = fired && !r.shadow && !(first_hit && first_counted);
            first_counted |= counted;
            out.push(RuleExplanation {
                id: r.id.clone(),
                fired,
                counted,
                disabled: !r.enabled,
                shadow: r.shadow,
                hard: r.hard,
                decided_by: steps.last().cloned(),
                steps,
            });
        }
        Explanation {
            version: self.version().to_owned(),
            hash: format!("{:016x}", self.version_id().hash()),
            rules: out,
        }
    }
}

/// `src[start..end]` without parentheses around the whole of it (and blanks).
fn unparen(src: &str, mut start: usize, mut end: usize) -> (usize, usize) {
    loop {
        let Some(t) = src.get(start..end) else {
            return (start, end);
        };
        let lead = t.len() - t.trim_start().len();
        let trail = t.len() - t.trim_end().len();
        let t = t.trim();
        let b = t.as_bytes();
        if b.len() < 2 || b[0] != b'(' || b[b.len() - 1] != b')' {
            return (start + lead, end - trail);
        }
        // The first `(` must close at the last byte (not `(a) && (b)`); strings in a
        // condition may hold parentheses, so they are skipped.
        let (mut depth, mut quoted, mut closes_at_end) = (0i32, false, false);
        for (i, &c) in b.iter().enumerate() {
            match c {
                b'"' => quoted = !quoted,
                b'(' if !quoted => depth += 1,
                b')' if !quoted => {
                    depth -= 1;
                    if depth == 0 {
                        closes_at_end = i == b.len() - 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        if !closes_at_end {
            return (start + lead, end - trail);
        }
        start += lead + 1;
        end -= trail + 1;
    }
}

/// 1-based line and column of byte `at`.
fn line_col(src: &str, at: usize) -> (usize, usize) {
    let before = src.get(..at).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}
