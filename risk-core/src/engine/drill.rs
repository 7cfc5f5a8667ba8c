//! Fallback drills: [`Engine::drill`] injects a fault into a tier (down, slow, NaN; deep
//! down), replays transactions through the real decide path, and reports how fast the
//! rules took over, which tier decided, the fallback causes, and (with labels) the rules'
//! quality against the model's on the same rows. A fallback that was never drilled cannot
//! be called available.
//!
//! The fault sits in the engine, not in a wrapper scorer: the breaker, the deadline and
//! the metrics see it as they would see the real thing (a drill can open the breaker; it
//! recovers by its half-open probes). The decide path pays one relaxed load for it.

use super::Engine;
use crate::decision::{Action, FallbackCause, Tier};
use crate::deploy::gate::auprc;
use crate::metrics::Histogram;
use crate::txn::Transaction;
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// The fault a drill injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Fault {
    /// Every fast-tier call fails (as an error would).
    FastDown,
    /// Every fast-tier call takes this much longer (past the deadline, it times out).
    FastSlow {
        /// Added latency, milliseconds.
        delay_ms: u64,
    },
    /// Every fast-tier score is NaN.
    FastNan,
    /// Every deep batch fails: gray-zone verdicts come from the fallback.
    DeepDown,
}

/// Fault codes in the fast tier's `fault` atomic.
impl Fault {
    /// Parses `"fast_down"`, `"fast_nan"`, `"deep_down"` or `"fast_slow:<ms>"`; the error
    /// names what was wrong.
    pub fn parse(text: &str) -> Result<Fault, String> {
        match text.split_once(':') {
            None if text == "fast_down" => Ok(Fault::FastDown),
            None if text == "fast_nan" => Ok(Fault::FastNan),
            None if text == "deep_down" => Ok(Fault::DeepDown),
            Some(("fast_slow", ms)) => ms
                .parse()
                .map(|delay_ms| Fault::FastSlow { delay_ms })
                .map_err(|_| format!("fault {text:?}: bad milliseconds")),
            _ => Err(format!(
                "fault {text:?} is not fast_down, fast_nan, deep_down or fast_slow:<ms>"
            )),
        }
    }
}

pub(crate) const FAULT_NONE: u8 = 0;
pub(crate) const FAULT_DOWN: u8 = 1;
pub(crate) const FAULT_SLOW: u8 = 2;
pub(crate) const FAULT_NAN: u8 = 3;

/// What to drill.
#[derive(Debug, Clone)]
pub struct DrillPlan {
    /// The fault.
    pub fault: Fault,
    /// The transactions to replay under it (live traffic keeps flowing meanwhile and is
    /// affected too: drill a replica, or accept that).
    pub transactions: Vec<Transaction>,
    /// Labels of the transactions (`true`: fraud), for the quality comparison; empty: none.
    pub labels: Vec<bool>,
}

/// Percentiles of the time from a decision's start to the rules' answer under the fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SwitchTime {
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Largest, microseconds.
    pub max_us: f64,
}

/// Quality of the decisions, with labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quality {
    /// Share of fraud declined or sent to review.
    pub recall: f64,
    /// Share of declined or reviewed that was fraud.
    pub precision: f64,
    /// Area under the precision-recall curve of the deciding score.
    pub auprc: f64,
}

/// A drill's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrillReport {
    /// The fault.
    pub fault: Fault,
    /// Decisions made under it.
    pub decisions: u64,
    /// By deciding tier (`rules`, `fast`, `static`).
    pub by_tier: Vec<(&'static str, u64)>,
    /// Fallback causes (`timeout`, `error`, ...), zero counts left out.
    pub fallbacks: Vec<(&'static str, u64)>,
    /// Decisions that failed with an error (bad input): should be 0.
    pub errors: u64,
    /// Time to the rules' answer.
    pub switch_time: SwitchTime,
    /// The fast tier's circuit after the drill.
    pub circuit_after: &'static str,
    /// Model decisions on the same rows before the fault (labels given).
    pub model_quality: Option<Quality>,
    /// The decisions under the fault (labels given).
    pub drill_quality: Option<Quality>,
    /// Deep verdicts delivered during the drill, and how many were fallbacks.
    pub deep_verdicts: (u64, u64),
    /// Wall time of the drill.
    pub duration_ms: f64,
}

impl DrillReport {
    /// The JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A Markdown summary for the on-call log.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### Fallback drill: {:?}\n", self.fault);
        let _ = writeln!(s, "| | |\n|---|---|");
        let _ = writeln!(
            s,
            "| decisions | {} ({} errors) |",
            self.decisions, self.errors
        );
        let tiers: Vec<String> = self
            .by_tier
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let _ = writeln!(s, "| decided by | {} |", tiers.join(", "));
        let f: Vec<String> = self
            .fallbacks
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "| fallbacks | {} |",
            if f.is_empty() {
                "none".into()
            } else {
                f.join(", ")
            }
        );
        let t = &self.switch_time;
        let _ = writeln!(
            s,
            "| time to the rules' answer | p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs |",
            t.p50_us, t.p99_us, t.max_us
        );
        let _ = writeln!(s, "| fast circuit after | {} |", self.circuit_after);
        if let (Some(m), Some(d)) = (self.model_quality, self.drill_quality) {
            let _ = writeln!(
                s,
                "| recall (model → drill) | {:.3} → {:.3} |",
                m.recall, d.recall
            );
            let _ = writeln!(
                s,
                "| precision (model → drill) | {:.3} → {:.3} |",
                m.precision, d.precision
            );
            let _ = writeln!(
                s,
                "| AUPRC (model → drill) | {:.3} → {:.3} |",
                m.auprc, d.auprc
            );
        }
        let (v, f) = self.deep_verdicts;
        if v > 0 {
            let _ = writeln!(s, "| deep verdicts | {v} ({f} fallbacks) |");
        }
        let _ = writeln!(s, "| duration | {:.1} ms |", self.duration_ms);
        s
    }
}

fn quality(scores: &[f32], flagged: &[bool], labels: &[bool]) -> Quality {
    let tp = flagged
        .iter()
        .zip(labels)
        .filter(|(f, l)| **f && **l)
        .count() as f64;
    let pos = labels.iter().filter(|l| **l).count() as f64;
    let flagged_n = flagged.iter().filter(|f| **f).count() as f64;
    let rows: Vec<(f32, bool)> = scores.iter().copied().zip(labels.iter().copied()).collect();
    Quality {
        recall: if pos > 0.0 { tp / pos } else { 0.0 },
        precision: if flagged_n > 0.0 { tp / flagged_n } else { 0.0 },
        auprc: auprc(&rows),
    }
}

impl Engine {
    /// Runs a drill: with labels, the rows are first decided normally (the model's
    /// quality), then the fault is injected, the rows decided again, and the fault
    /// cleared. The breaker may be open afterwards (it recovers by its probes).
    pub fn drill(&self, plan: DrillPlan) -> DrillReport {
        let span =
            tracing::info_span!("risk.drill", fault = ?plan.fault, rows = plan.transactions.len());
        span.in_scope(|| self.drill_in_span(plan))
    }

    fn drill_in_span(&self, plan: DrillPlan) -> DrillReport {
        let labelled = !plan.labels.is_empty() && plan.labels.len() == plan.transactions.len();
        let decide_all = |txns: &[Transaction], lat: Option<&Histogram>| {
            txns.iter()
                .map(|t| {
                    let t0 = Instant::now();
                    let d = self.decide(t);
                    if let Some(h) = lat {
                        h.record(t0.elapsed().as_nanos() as u64);
                    }
                    d
                })
                .collect::<Vec<_>>()
        };
        let flag = |a: Action| a != Action::Approve;
        let summarize = |ds: &[Result<crate::decision::Decision, crate::error::DecideError>]| {
            let ok: Vec<_> = ds.iter().filter_map(|d| d.as_ref().ok()).collect();
            let scores: Vec<f32> = ok
                .iter()
                .map(|d| if d.score.is_finite() { d.score } else { 0.0 })
                .collect();
            let flagged: Vec<bool> = ok.iter().map(|d| flag(d.action)).collect();
            (scores, flagged)
        };
        let model_quality = labelled.then(|| {
            let (s, f) = summarize(&decide_all(&plan.transactions, None));
            quality(&s, &f, &plan.labels)
        });
        let i = &*self.inner;
        let started = Instant::now();
        let deep0 = i.metrics.gray_verdicts();
        self.set_fault(plan.fault, true);
        let lat = Histogram::new();
        let ds = decide_all(&plan.transactions, Some(&lat));
        if let Some(g) = &i.gray {
            // The gray-zone work of the replay runs under the fault too.
            g.wait_idle(i.cfg.deep.budget.saturating_mul(4) + Duration::from_secs(1));
        }
        self.set_fault(plan.fault, false);
        let deep1 = i.metrics.gray_verdicts();
        let duration_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut by_tier = [0u64; 3];
        let mut causes = [0u64; FallbackCause::ALL.len()];
        let mut errors = 0;
        for d in &ds {
            match d {
                Ok(d) => {
                    by_tier[d.tier as usize] += 1;
                    if let Some(c) = d.fallback {
                        causes[c.index()] += 1;
                    }
                }
                Err(_) => errors += 1,
            }
        }
        let l = lat.snapshot();
        let drill_quality = labelled.then(|| {
            let (s, f) = summarize(&ds);
            quality(&s, &f, &plan.labels)
        });
        let report = DrillReport {
            fault: plan.fault,
            decisions: ds.len() as u64 - errors,
            by_tier: Tier::ALL
                .iter()
                .map(|t| (t.as_str(), by_tier[*t as usize]))
                .collect(),
            fallbacks: FallbackCause::ALL
                .iter()
                .filter(|c| causes[c.index()] > 0)
                .map(|c| (c.as_str(), causes[c.index()]))
                .collect(),
            errors,
            switch_time: SwitchTime {
                p50_us: l.p50_ns as f64 / 1e3,
                p99_us: l.p99_ns as f64 / 1e3,
                max_us: l.max_ns as f64 / 1e3,
            },
            circuit_after: self.metrics().fast_circuit,
            deep_verdicts: (deep1.0 - deep0.0, deep1.1 - deep0.1),
            model_quality,
            drill_quality,
            duration_ms,
        };
        tracing::warn!(target: "risk::drill", fault = ?plan.fault, decisions = report.decisions, "drill finished");
        report
    }

    /// A drill on live traffic: injects `fault` until `decisions` more decisions were
    /// made or `duration` passed on the engine clock (whichever first), then clears it,
    /// and reports from the engine's counters over that window (no labels: quality is not
    /// measured). Blocks the calling thread (an operator's, not a deciding one).
    pub fn drill_live(&self, fault: Fault, decisions: u64, duration: Duration) -> DrillReport {
        let _span = tracing::info_span!("risk.drill", fault = ?fault, live = true).entered();
        let i = &*self.inner;
        // The fault first, then the counters: a window read before the fault was set
        // would count the decisions made while this thread was descheduled between the
        // two (thousands on a loaded machine) as the drill's, and could end it before
        // one faulted decision (seen in CI).
        self.set_fault(fault, true);
        let (m0, lat0, deep0) = (
            self.metrics(),
            i.metrics.total.mark(),
            i.metrics.gray_verdicts(),
        );
        let t0 = i.clock.now();
        let started = Instant::now();
        let until = t0.saturating_add(crate::clock::nanos(duration));
        while self.metrics().decisions < m0.decisions.saturating_add(decisions)
            && i.clock.now() < until
            && !i.shut.load(Relaxed)
        {
            // An operator's thread polling the counters: the deciding threads never wait.
            std::thread::sleep(Duration::from_millis(1));
        }
        self.set_fault(fault, false);
        let m1 = self.metrics();
        let l = i.metrics.total.mark().since(&lat0);
        let deep1 = i.metrics.gray_verdicts();
        let report = DrillReport {
            fault,
            decisions: m1.decisions - m0.decisions,
            by_tier: Tier::ALL
                .iter()
                .map(|t| (t.as_str(), m1.tier(*t) - m0.tier(*t)))
                .collect(),
            fallbacks: FallbackCause::ALL
                .iter()
                .map(|c| (c.as_str(), m1.fallback(*c) - m0.fallback(*c)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            errors: 0,
            switch_time: SwitchTime {
                p50_us: l.p50_ns as f64 / 1e3,
                p99_us: l.p99_ns as f64 / 1e3,
                max_us: l.max_ns as f64 / 1e3,
            },
            circuit_after: m1.fast_circuit,
            model_quality: None,
            drill_quality: None,
            deep_verdicts: (deep1.0 - deep0.0, deep1.1 - deep0.1),
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
        };
        tracing::warn!(target: "risk::drill", fault = ?fault, decisions = report.decisions, "live drill finished");
        report
    }

    fn set_fault(&self, f: Fault, on: bool) {
        let i = &*self.inner;
        match f {
            Fault::DeepDown => {
                if let Some(g) = &i.gray {
                    g.set_down(on);
                }
            }
            _ => {
                let (code, delay) = match f {
                    Fault::FastDown => (FAULT_DOWN, 0),
                    Fault::FastSlow { delay_ms } => {
                        (FAULT_SLOW, delay_ms.saturating_mul(1_000_000))
                    }
                    Fault::FastNan => (FAULT_NAN, 0),
                    Fault::DeepDown => (FAULT_NONE, 0),
                };
                i.fast.fault_delay_ns.store(delay, Relaxed);
                i.fast
                    .fault
                    .store(if on { code } else { FAULT_NONE }, Relaxed);
            }
        }
    }
}

/// Waits `ns` on the calling thread (a drilled slow model), sleeping the bulk.
pub(crate) fn stall(ns: u64) {
    let until = Instant::now() + Duration::from_nanos(ns);
    if ns > 200_000 {
        std::thread::sleep(Duration::from_nanos(ns - 100_000));
    }
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}
