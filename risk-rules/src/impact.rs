//! Impact analysis: what a candidate rule set would change before it goes live.

use crate::error::RuleError;
use crate::ruleset::{Hits, RuleSet, Verdict};
use risk_core::{Action, Policy, Transaction, TxnId};
use std::collections::BTreeMap;
use std::fmt;

/// Fired counts of one rule id under both sets (0 where a set lacks the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleDelta {
    /// Rule id.
    pub id: String,
    /// Fired under the serving set.
    pub serving: u64,
    /// Fired under the candidate.
    pub candidate: u64,
}

/// One transaction whose rule-tier action changes.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpactExample {
    /// The transaction.
    pub txn: TxnId,
    /// Action and score under the serving set.
    pub before: (Action, f32),
    /// Action and score under the candidate.
    pub after: (Action, f32),
    /// Rule ids that fired under the serving set.
    pub fired_before: Vec<String>,
    /// Rule ids that fired under the candidate.
    pub fired_after: Vec<String>,
}

/// What the candidate changes over a batch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImpactReport {
    /// Transactions evaluated.
    pub transactions: usize,
    /// Whose rule-tier action changes.
    pub changed: usize,
    /// Count per (before, after) action pair, changed ones only.
    pub transitions: BTreeMap<(Action, Action), usize>,
    /// Per rule id, sorted by the size of the change (largest first).
    pub rules: Vec<RuleDelta>,
    /// Up to the requested number of changed transactions.
    pub examples: Vec<ImpactExample>,
}

fn action(v: &Verdict, policy: &Policy) -> Action {
    match v.directive {
        Some(a) if policy.hard_rule_override => a,
        _ => policy.threshold(v.score, 0.0),
    }
}

/// Evaluates `candidate` against `serving` over `txns`. The action is what the rule tier
/// alone would decide under `policy` (hard directive, else thresholds).
pub fn impact(
    serving: &RuleSet,
    candidate: &RuleSet,
    txns: &[Transaction],
    policy: &Policy,
    max_examples: usize,
) -> ImpactReport {
    let mut rep = ImpactReport {
        transactions: txns.len(),
        ..Default::default()
    };
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in serving.rules() {
        counts.entry(r.id.clone()).or_default();
    }
    for r in candidate.rules() {
        counts.entry(r.id.clone()).or_default();
    }
    let (mut ha, mut hb) = (Hits::new(), Hits::new());
    for t in txns {
        let a = serving.evaluate(&t.features, &mut ha);
        let b = candidate.evaluate(&t.features, &mut hb);
        for &i in ha.indices() {
            if let Some(c) = counts.get_mut(&serving.rules()[i as usize].id) {
                c.0 += 1;
            }
        }
        for &i in hb.indices() {
            if let Some(c) = counts.get_mut(&candidate.rules()[i as usize].id) {
                c.1 += 1;
            }
        }
        let (x, y) = (action(&a, policy), action(&b, policy));
        if x != y {
            rep.changed += 1;
            *rep.transitions.entry((x, y)).or_default() += 1;
            if rep.examples.len() < max_examples {
                let ids = |s: &RuleSet, h: &Hits| {
                    h.indices()
                        .iter()
                        .map(|&i| s.rules()[i as usize].id.clone())
                        .collect()
                };
                rep.examples.push(ImpactExample {
                    txn: t.id,
                    before: (x, a.score),
                    after: (y, b.score),
                    fired_before: ids(serving, &ha),
                    fired_after: ids(candidate, &hb),
                });
            }
        }
    }
    rep.rules = counts
        .into_iter()
        .map(|(id, (s, c))| RuleDelta {
            id,
            serving: s,
            candidate: c,
        })
        .collect();
    rep.rules
        .sort_by_key(|d| std::cmp::Reverse((d.candidate as i64 - d.serving as i64).unsigned_abs()));
    rep
}

/// What promoting `set`'s shadow rules to live would change over `txns`: [`impact`] of
/// the set against itself with every shadow rule live (the rule deltas are the shadow
/// rules' hits; the transitions their would-be effect on the rule tier's action).
pub fn shadow_impact(
    set: &RuleSet,
    txns: &[Transaction],
    policy: &Policy,
    max_examples: usize,
) -> Result<ImpactReport, RuleError> {
    let Some(schema) = txns
        .first()
        .map(|t| std::sync::Arc::clone(t.features.schema()))
    else {
        return Ok(ImpactReport::default());
    };
    let live = set.with_shadow_live(&schema)?;
    Ok(impact(set, &live, txns, policy, max_examples))
}

impl fmt::Display for ImpactReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} of {} transactions change action ({:.2}%)",
            self.changed,
            self.transactions,
            100.0 * self.changed as f64 / self.transactions.max(1) as f64
        )?;
        for ((a, b), n) in &self.transitions {
            writeln!(f, "  {a} -> {b}: {n}")?;
        }
        writeln!(f, "rules whose hit count changes:")?;
        for d in self.rules.iter().filter(|d| d.serving != d.candidate) {
            writeln!(
                f,
                "  {:<36} {:>7} -> {:>7} ({:+})",
                d.id,
                d.serving,
                d.candidate,
                d.candidate as i64 - d.serving as i64
            )?;
        }
        for e in &self.examples {
            writeln!(
                f,
                "  txn {}: {} {:.3} [{}] -> {} {:.3} [{}]",
                e.txn.0,
                e.before.0,
                e.before.1,
                e.fired_before.join(","),
                e.after.0,
                e.after.1,
                e.fired_after.join(",")
            )?;
        }
        Ok(())
    }
}
