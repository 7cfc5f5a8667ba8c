//! Batched decisions: [`Engine::decide_batch`] and the fast tier's per-chunk
//! `score_batch` call.

use super::decide::{FastCall, Tiers};
use super::tier::{self, guarded_batch, guarded_score, FastTier};
use super::{Chosen, Engine};
use crate::clock::Clock;
use crate::decision::{Decision, FallbackCause};
use crate::deploy::slot::FastModel;
use crate::error::DecideError;
use crate::scorer::{Latency, Score};
use crate::state::StateOutcome;
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
        let inner = &*self.inner;
        match &inner.state {
            None => self.decide_rows(txns, &[]),
            // Stage 1 for every row first, then stages 2 to 6 row by row or chunk by chunk.
            Some(st) => {
                let (rows, states) = inner.fill_state_batch(st, txns);
                self.decide_rows(&rows, &states)
            }
        }
    }

    /// `txns` with their state features in them; `states` is empty without `[state]`.
    fn decide_rows(
        &self,
        txns: &[Transaction],
        states: &[Option<StateOutcome>],
    ) -> Vec<Result<Decision, DecideError>> {
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
                    .enumerate()
                    .flat_map(|(k, c)| {
                        let at = (k * Self::BATCH_CHUNK).min(states.len());
                        self.decide_chunk(c, &states[at..])
                    })
                    .collect()
            }
            _ => self.decide_each(txns, states),
        }
    }

    /// One row at a time, each with its own deadline.
    fn decide_each(
        &self,
        txns: &[Transaction],
        states: &[Option<StateOutcome>],
    ) -> Vec<Result<Decision, DecideError>> {
        let inner = &*self.inner;
        txns.iter()
            .enumerate()
            .map(|(i, t)| {
                let t0 = inner.clock.now();
                inner.check(t)?;
                Ok(inner.decide_checked(t, t0, FastCall::Call, state_of(states, i)))
            })
            .collect()
    }

    /// Transactions per `score_batch` call (and per deadline) in [`decide_batch`](Self::decide_batch).
    pub const BATCH_CHUNK: usize = 64;

    fn decide_chunk(
        &self,
        txns: &[Transaction],
        states: &[Option<StateOutcome>],
    ) -> Vec<Result<Decision, DecideError>> {
        let inner = &*self.inner;
        let clock = &*inner.clock;
        let fast = &inner.fast;
        let routing = inner.routing.load();
        let Some(model) = routing.fast.as_ref().map(|f| &f.serving) else {
            return self.decide_each(txns, states);
        };
        let chosen: Vec<Chosen<'_>> = txns.iter().map(|t| Chosen::pick(&routing, t)).collect();
        let t0 = clock.now();
        let checked: Vec<Result<(), DecideError>> = txns.iter().map(|t| inner.check(t)).collect();
        let rules: Vec<Option<Score>> = txns
            .iter()
            .zip(&checked)
            .zip(&chosen)
            .map(|((t, c), ch)| {
                let mut r = None;
                if c.is_ok() {
                    inner.run_rules(ch, t, &mut r);
                }
                r
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
            .enumerate()
            .map(|(i, (((t, c), rules), ch))| {
                c?;
                let fast = fast_out
                    .as_ref()
                    .map_err(|c| *c)
                    .map(|v| v[k])
                    .and_then(|s| s);
                k += 1;
                let tiers = Tiers {
                    rules,
                    fast,
                    t0,
                    rules_ns,
                    fast_ns,
                };
                Ok(inner.conclude(ch, t, &tiers, state_of(states, i)))
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

/// Row `i`'s state outcome (`states` is empty without `[state]`).
fn state_of(states: &[Option<StateOutcome>], i: usize) -> Option<&StateOutcome> {
    states.get(i).and_then(Option::as_ref)
}
