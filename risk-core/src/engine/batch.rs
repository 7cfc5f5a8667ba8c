//! Batched decisions: [`Engine::decide_batch`] and the fast tier's per-chunk
//! `score_batch` call.

use super::tier::{self, guarded_batch, guarded_score, FastTier};
use super::{Chosen, Engine, RuleOut};
use crate::clock::Clock;
use crate::decision::{Decision, FallbackCause};
use crate::deploy::slot::FastModel;
use crate::error::DecideError;
use crate::scorer::{Latency, Score};
use crate::txn::Transaction;
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    /// Decides on several transactions. A bounded fast tier scores them in chunks of
    /// [`BATCH_CHUNK`](Self::BATCH_CHUNK), one `score_batch` call per chunk under that
    /// chunk's own deadline (measured from the chunk's start, as for one `decide`), so a
    /// large batch never turns into one deadline for all; otherwise each goes through
    /// [`decide`]. Results are in input order and equal what `decide` would answer.
    ///
    /// [`decide`]: Engine::decide
    pub fn decide_batch(&self, txns: &[Transaction]) -> Vec<Result<Decision, DecideError>> {
        let Some(st) = self.inner.state.clone() else {
            return self.decide_batch_stateless(txns);
        };
        let (rows, tickets) = self.with_state_batch(&st, txns);
        let mut out = self.decide_batch_stateless(&rows);
        for (d, tk) in out.iter_mut().zip(&tickets) {
            if let (Ok(d), Some(tk)) = (d, tk) {
                d.state = tk.status;
                st.record_outcome(tk, d.action);
                if self.inner.monitor.is_some() {
                    st.note_action(d.txn, d.action);
                }
            }
        }
        out
    }

    fn decide_batch_stateless(&self, txns: &[Transaction]) -> Vec<Result<Decision, DecideError>> {
        let inner = &*self.inner;
        let routing = inner.routing.load();
        match &routing.fast {
            // A fast canary picks a model per entity: one `score_batch` cannot serve both.
            Some(f)
                if f.serving.body.latency == Latency::Bounded
                    && f.canary.is_none()
                    && txns.len() > 1 =>
            {
                drop(routing);
                txns.chunks(Self::BATCH_CHUNK)
                    .flat_map(|c| self.decide_chunk(c))
                    .collect()
            }
            _ => txns.iter().map(|t| self.decide_stateless(t)).collect(),
        }
    }

    /// Transactions per `score_batch` call (and per deadline) in [`decide_batch`](Self::decide_batch).
    pub const BATCH_CHUNK: usize = 64;

    fn decide_chunk(&self, txns: &[Transaction]) -> Vec<Result<Decision, DecideError>> {
        let inner = &*self.inner;
        let clock = &*inner.clock;
        let fast = &inner.fast;
        let routing = inner.routing.load();
        let Some(model) = routing.fast.as_ref().map(|f| &f.serving) else {
            return txns.iter().map(|t| self.decide_stateless(t)).collect();
        };
        let chosen: Vec<Chosen<'_>> = txns.iter().map(|t| Chosen::pick(&routing, t)).collect();
        let t0 = clock.now();
        let checked: Vec<Result<(), DecideError>> = txns.iter().map(|t| inner.check(t)).collect();
        let rules: Vec<RuleOut> = txns
            .iter()
            .zip(&checked)
            .zip(&chosen)
            .map(|((t, c), ch)| {
                if c.is_ok() {
                    inner.run_rules(&*ch.rules.body.scorer, t)
                } else {
                    None
                }
            })
            .collect();
        let t1 = clock.now();
        let ok: Vec<&Transaction> = txns
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(t, _)| t)
            .collect();
        let fast_out = fast.run_batch(clock, &model.body, &ok, t0.saturating_add(fast.deadline));
        let t2 = clock.now();
        let n = ok.len().max(1) as u64;
        let (rules_ns, fast_ns) = ((t1 - t0) / n, (t2 - t1) / n);
        let mut k = 0;
        txns.iter()
            .zip(checked)
            .zip(rules)
            .zip(&chosen)
            .map(|(((t, c), r), ch)| {
                c?;
                let f = fast_out
                    .as_ref()
                    .map_err(|c| *c)
                    .map(|v| v[k])
                    .and_then(|s| s);
                k += 1;
                Ok(inner.finish(ch, t, r, f, t0, rules_ns, fast_ns))
            })
            .collect()
    }
}

impl FastTier {
    /// One `score_batch` call for a bounded (inline) tier, under the circuit breaker.
    /// A failure is the row's, not the chunk's: per-item invalid scores become per-item
    /// failures, and a batch call that errs or panics is retried row by row (while the
    /// deadline allows) so that only the rows that fail alone fall back. The breaker
    /// counts rows, not calls.
    fn run_batch(
        &self,
        clock: &dyn Clock,
        m: &FastModel,
        txns: &[&Transaction],
        until: u64,
    ) -> Result<Vec<Result<Score, FallbackCause>>, FallbackCause> {
        use crate::circuit::Permit;
        let now = clock.now();
        if now >= until {
            // The rule stage used up the deadline (see `FastTier::run`).
            self.skipped.fetch_add(txns.len() as u64, Relaxed);
            return Err(FallbackCause::Timeout);
        }
        if self.forced_open.load(Relaxed) {
            return Err(FallbackCause::CircuitOpen);
        }
        match self.fault.load(Relaxed) {
            super::drill::FAULT_DOWN => return Ok(vec![Err(FallbackCause::Error); txns.len()]),
            super::drill::FAULT_NAN => {
                return Ok(vec![Err(FallbackCause::InvalidScore); txns.len()])
            }
            super::drill::FAULT_SLOW => super::drill::stall(self.fault_delay_ns.load(Relaxed)),
            _ => {}
        }
        let permit = m.circuit.acquire(now);
        if permit == Permit::Denied {
            return Err(FallbackCause::CircuitOpen);
        }
        let mut out = Vec::with_capacity(txns.len());
        let valid = |s: Score| {
            if s.is_valid() {
                Ok(s)
            } else {
                Err(FallbackCause::InvalidScore)
            }
        };
        let r: Vec<Result<Score, FallbackCause>> = match guarded_batch(&*m.scorer, txns, &mut out) {
            Ok(()) => out
                .into_iter()
                .map(|s| valid(s).map(|s| m.calibrated(s)))
                .collect(),
            Err(_) => txns
                .iter()
                .map(|t| {
                    if clock.now() > until {
                        return Err(FallbackCause::Timeout);
                    }
                    guarded_score(&*m.scorer, t)
                        .map(|s| m.calibrated(s))
                        .map_err(tier::Failure::cause)
                })
                .collect(),
        };
        let end = clock.now();
        let (oks, fails) = if end > until {
            (0, txns.len())
        } else {
            let oks = r.iter().filter(|x| x.is_ok()).count();
            (oks, r.len() - oks)
        };
        m.circuit.record_n(
            permit,
            u32::try_from(oks).unwrap_or(u32::MAX),
            u32::try_from(fails).unwrap_or(u32::MAX),
            end,
        );
        if end > until {
            return Err(FallbackCause::Timeout);
        }
        Ok(r)
    }
}
