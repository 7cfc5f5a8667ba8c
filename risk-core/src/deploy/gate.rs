//! The validation gate: a candidate scores a sample of recent (and supplied) transactions
//! twice (a warm pass, then a timed one) and must produce only valid scores, agree with the
//! serving version within the plan's tolerances, keep its latency p99 within the tier's
//! budget and, on labelled rows, reach the plan's AUPRC.

use super::plan::Gate;
use super::{DeployError, GateCheck};
use crate::decision::Action;
use crate::metrics::Histogram;
use crate::txn::Transaction;
use serde::Serialize;
use std::time::{Duration, Instant};

/// What the gate measured (kept in the deploy status and the model directory).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GateReport {
    /// Transactions scored: recent live ones plus supplied ones.
    pub sample: usize,
    /// Of which supplied.
    pub supplied: usize,
    /// Invalid candidate outputs (errors, panics, NaN, out of range).
    pub invalid: usize,
    /// Mean `|candidate - serving|` over the sample (0 without a serving version).
    pub mean_abs_diff: f64,
    /// Share of the sample with the same action from candidate and serving (1 without one).
    pub action_agreement: f64,
    /// Candidate latency on the timed pass, microseconds.
    pub p50_us: f64,
    /// Candidate latency p99 on the timed pass, microseconds.
    pub p99_us: f64,
    /// The ceiling p99 was held to, microseconds.
    pub budget_us: f64,
    /// The candidate's first call after its warm-up, microseconds.
    pub first_call_us: f64,
    /// AUPRC on labelled supplied rows, when there were any.
    pub auprc: Option<f64>,
}

/// One scoring function of the gate: probability and the action it implies, or `None` for
/// a failure.
pub(crate) type GateFn<'a> = &'a dyn Fn(&Transaction) -> Option<(f32, Action)>;

/// Runs the gate. `labels` cover the last `labels.len()` rows of `sample` (the supplied ones).
pub(crate) fn run(
    gate: &Gate,
    sample: &[Transaction],
    labels: &[bool],
    budget: Duration,
    serving: Option<GateFn<'_>>,
    cand: GateFn<'_>,
) -> Result<GateReport, DeployError> {
    let fail = |check, detail: String, report: &GateReport| DeployError::Gate {
        check,
        detail,
        report: Box::new(report.clone()),
    };
    let mut rep = GateReport {
        sample: sample.len(),
        supplied: labels.len().max(gate.transactions.len()),
        budget_us: us(budget),
        action_agreement: 1.0,
        ..Default::default()
    };
    if sample.len() < gate.min_sample {
        return Err(fail(
            GateCheck::Sample,
            format!(
                "{} transactions to validate on, the gate needs {} (supply some, or let traffic run first)",
                sample.len(),
                gate.min_sample
            ),
            &rep,
        ));
    }
    // Warm pass: the candidate's scores; the first call is timed on its own.
    let mut scores = Vec::with_capacity(sample.len());
    for (i, t) in sample.iter().enumerate() {
        let t0 = Instant::now();
        let r = cand(t);
        if i == 0 {
            rep.first_call_us = us(t0.elapsed());
        }
        match r {
            Some((p, a)) if (0.0..=1.0).contains(&p) => scores.push(Some((p, a))),
            _ => {
                rep.invalid += 1;
                scores.push(None);
            }
        }
    }
    if rep.invalid > 0 {
        return Err(fail(
            GateCheck::InvalidScores,
            format!(
                "{} of {} scores were errors, NaN or outside [0, 1]",
                rep.invalid,
                sample.len()
            ),
            &rep,
        ));
    }
    // Timed pass.
    let h = Histogram::new();
    for t in sample {
        let t0 = Instant::now();
        let _ = cand(t);
        h.record(t0.elapsed().as_nanos() as u64);
    }
    let lat = h.snapshot();
    rep.p50_us = lat.p50_ns as f64 / 1e3;
    rep.p99_us = lat.p99_ns as f64 / 1e3;
    let ceiling = gate.max_p99.unwrap_or(budget);
    rep.budget_us = us(ceiling);
    if Duration::from_nanos(lat.p99_ns) > ceiling {
        return Err(fail(
            GateCheck::Latency,
            format!(
                "latency p99 {:.0} us above the {:.0} us budget",
                rep.p99_us, rep.budget_us
            ),
            &rep,
        ));
    }
    if let Some(serving) = serving {
        let (mut diff, mut same, mut n) = (0.0, 0usize, 0usize);
        for (t, c) in sample.iter().zip(&scores) {
            if let (Some((ps, a_s)), Some((pc, a_c))) = (serving(t), c) {
                diff += (ps - pc).abs() as f64;
                same += usize::from(a_s == *a_c);
                n += 1;
            }
        }
        if n > 0 {
            rep.mean_abs_diff = diff / n as f64;
            rep.action_agreement = same as f64 / n as f64;
        }
        if rep.mean_abs_diff > gate.max_mean_abs_diff {
            return Err(fail(
                GateCheck::Disagreement,
                format!(
                    "mean score difference {:.4} from the serving version, at most {:.4}",
                    rep.mean_abs_diff, gate.max_mean_abs_diff
                ),
                &rep,
            ));
        }
        if rep.action_agreement < gate.min_action_agreement {
            return Err(fail(
                GateCheck::ActionAgreement,
                format!(
                    "same action as the serving version on {:.3} of the sample, at least {:.3}",
                    rep.action_agreement, gate.min_action_agreement
                ),
                &rep,
            ));
        }
    }
    if !labels.is_empty() {
        let off = sample.len() - labels.len();
        let pairs: Vec<(f32, bool)> = scores[off..]
            .iter()
            .zip(labels)
            .filter_map(|(s, &l)| s.map(|(p, _)| (p, l)))
            .collect();
        rep.auprc = Some(auprc(&pairs));
    }
    if let (Some(min), Some(got)) = (gate.min_auprc, rep.auprc) {
        if got < min {
            return Err(fail(
                GateCheck::Auprc,
                format!("AUPRC {got:.4} on the labelled rows, at least {min:.4}"),
                &rep,
            ));
        }
    } else if gate.min_auprc.is_some() {
        return Err(fail(
            GateCheck::Auprc,
            "the plan asks for a minimum AUPRC but supplied no labelled transactions".into(),
            &rep,
        ));
    }
    Ok(rep)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Average precision (the step-wise area under the precision-recall curve), ties broken
/// by taking each tied group at once.
pub fn auprc(rows: &[(f32, bool)]) -> f64 {
    let pos = rows.iter().filter(|r| r.1).count();
    if pos == 0 {
        return 0.0;
    }
    let mut v = rows.to_vec();
    v.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (mut tp, mut seen, mut ap, mut i) = (0usize, 0usize, 0.0, 0usize);
    while i < v.len() {
        let mut j = i;
        let mut group_tp = 0;
        while j < v.len() && v[j].0 == v[i].0 {
            group_tp += usize::from(v[j].1);
            j += 1;
        }
        tp += group_tp;
        seen += j - i;
        ap += group_tp as f64 / pos as f64 * (tp as f64 / seen as f64);
        i = j;
    }
    ap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auprc_of_perfect_and_random_rankings() {
        let perfect: Vec<(f32, bool)> = (0..100).map(|i| (i as f32 / 100.0, i >= 90)).collect();
        assert!((auprc(&perfect) - 1.0).abs() < 1e-12);
        let flat: Vec<(f32, bool)> = (0..100).map(|i| (0.5, i % 10 == 0)).collect();
        assert!((auprc(&flat) - 0.1).abs() < 1e-12);
    }
}
