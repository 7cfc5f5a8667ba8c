//! One decision, top to bottom: check → state → rules → fast → combine → escalate →
//! observe. Each stage is one function below, in that order; the [`Decision`] is complete
//! when it is built.

use super::state::Scratch;
use super::tier::guarded_score_opt;
use super::{Chosen, Engine, Inner};
use crate::audit::AuditEvent;
use crate::clock::Nanos;
use crate::decision::{
    Decision, Escalation, FallbackCause, ShedReason, StageTimings, StateStatus, Tier,
};
use crate::error::DecideError;
use crate::policy::Combined;
use crate::reason::Reasons;
use crate::scorer::Score;
use crate::state::StateOutcome;
use crate::txn::Transaction;
use crate::version::Versions;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Whether the fast tier is called (`decide`) or answered for at once by a full async
/// queue (`decide_async` shedding: the rules decide).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum FastCall {
    Call,
    Saturated,
}

/// What the two tiers answered for one transaction, and when.
pub(super) struct Tiers {
    /// The rule tier's score (`None`: the rule scorer itself failed).
    pub rules: Option<Score>,
    /// The fast tier's score, or why the rules decide.
    pub fast: Result<Score, FallbackCause>,
    /// When the decision started (the deadline counts from here).
    pub t0: Nanos,
    pub rules_ns: u64,
    pub fast_ns: u64,
}

impl Engine {
    /// Decides on one transaction. `Err` only for bad input or after shutdown; every
    /// tier failure becomes a fallback on the returned [`Decision`].
    pub fn decide(&self, txn: &Transaction) -> Result<Decision, DecideError> {
        let t0 = self.inner.clock.now();
        self.decide_from(txn, t0)
    }

    /// [`decide`](Self::decide) whose deadline counts from `t0` (the time of a
    /// `decide_async` call, before it waited in the queue).
    pub(crate) fn decide_from(
        &self,
        txn: &Transaction,
        t0: Nanos,
    ) -> Result<Decision, DecideError> {
        self.inner.decide_one(txn, t0, FastCall::Call)
    }

    /// The answer to a `decide_async` call shed by a full queue: the rules alone, at once.
    pub(crate) fn decide_shed(
        &self,
        txn: &Transaction,
        t0: Nanos,
    ) -> Result<Decision, DecideError> {
        self.inner.decide_one(txn, t0, FastCall::Saturated)
    }
}

impl Inner {
    fn decide_one(
        &self,
        txn: &Transaction,
        t0: Nanos,
        call: FastCall,
    ) -> Result<Decision, DecideError> {
        self.check(txn)?; // 0 check
        if call == FastCall::Saturated {
            self.metrics.async_shed.fetch_add(1, Relaxed);
        }
        let mut scratch = None;
        let (txn, state) = self.fill_state(txn, &mut scratch, t0); // 1 state
        Ok(self.decide_checked(txn, t0, call, state.as_ref()))
    }

    /// Stages 2 to 6 for a checked transaction whose state features are in it (the batch
    /// path enters here with rows it filled itself).
    pub(super) fn decide_checked(
        &self,
        txn: &Transaction,
        t0: Nanos,
        call: FastCall,
        state: Option<&StateOutcome>,
    ) -> Decision {
        let routing = self.routing.load();
        let ch = Chosen::pick(&routing, txn);
        // Filled in place: a `Score` is ~240 bytes (see `FastTier::run`).
        let mut tiers = Tiers {
            rules: None,
            fast: Err(FallbackCause::Absent),
            t0,
            rules_ns: 0,
            fast_ns: 0,
        };
        self.run_rules(&ch, txn, &mut tiers.rules); // 2 rules
        let t1 = self.clock.now();
        tiers.rules_ns = t1.saturating_sub(t0);
        let t2 = self.run_fast(&ch, txn, call, t0, t1, &mut tiers.fast); // 3 fast
        tiers.fast_ns = t2.saturating_sub(t1);
        self.conclude(&ch, txn, &tiers, state) // 4 to 6
    }

    // ===== 0 check =====

    #[inline]
    pub(super) fn check(&self, txn: &Transaction) -> Result<(), DecideError> {
        if self.shut.load(Relaxed) {
            return Err(DecideError::ShutDown);
        }
        let s = txn.features.schema();
        if !Arc::ptr_eq(s, &self.schema) && s.fingerprint() != self.schema.fingerprint() {
            return Err(DecideError::SchemaMismatch {
                expected: self.schema.fingerprint(),
                got: s.fingerprint(),
            });
        }
        txn.validate()
    }

    // ===== 1 state =====

    /// The transaction every later stage sees: the caller's, or (with `[state]`) a
    /// per-thread copy with the entity's state features filled in.
    #[inline]
    fn fill_state<'a>(
        &self,
        txn: &'a Transaction,
        scratch: &'a mut Option<Scratch>,
        t0: Nanos,
    ) -> (&'a Transaction, Option<StateOutcome>) {
        let Some(st) = &self.state else {
            return (txn, None);
        };
        let copy = scratch.insert(Scratch::of(txn));
        let out = st.fill(copy, self.clock.unix_ms_at(t0));
        (&**copy, Some(out))
    }

    // ===== 2 rules =====

    #[inline]
    pub(super) fn run_rules(&self, ch: &Chosen<'_>, txn: &Transaction, out: &mut Option<Score>) {
        if !guarded_score_opt(&*ch.rules.body.scorer, txn, out) {
            self.metrics.rules_failed.fetch_add(1, Relaxed);
        }
    }

    // ===== 3 fast =====

    /// The fast tier under its breaker and the deadline `t0 + fast.deadline`: writes the
    /// answer to `out` and returns the time it came.
    #[inline]
    fn run_fast(
        &self,
        ch: &Chosen<'_>,
        txn: &Transaction,
        call: FastCall,
        t0: Nanos,
        t1: Nanos,
        out: &mut Result<Score, FallbackCause>,
    ) -> Nanos {
        match (ch.fast, call) {
            (None, _) => {
                *out = Err(FallbackCause::Absent);
                t1
            }
            (Some(_), FastCall::Saturated) => {
                *out = Err(FallbackCause::Saturated);
                t1
            }
            (Some(m), FastCall::Call) => {
                let f = &self.fast;
                let until = t0.saturating_add(f.deadline);
                f.run(&*self.clock, &m.body, txn, t1, until, out)
            }
        }
    }

    /// Stages 4 to 6 once the tiers have answered (also each row's end in a batch).
    #[inline]
    pub(super) fn conclude(
        &self,
        ch: &Chosen<'_>,
        txn: &Transaction,
        tiers: &Tiers,
        state: Option<&StateOutcome>,
    ) -> Decision {
        // Borrowed, never copied: a `Score` is ~240 bytes (reasons, fired rules).
        let model = tiers.fast.as_ref().ok();
        let rules = tiers.rules.as_ref();
        // 4 combine: the entity's feedback shift, hard rules, thresholds. The entity
        // store holds what only a deep tier writes (feedback) and reads (the daily
        // average): without one it is skipped (a sharded lock and a cache probe less).
        let shift = match self.gray {
            Some(_) => self.entities.on_decide(txn, model.map(|m| m.probability)),
            None => 0.0,
        };
        let c = ch.policy.body.policy.combine(rules, model, shift);
        // A model that defers its reasons explains review and decline decisions only.
        let deferred = self.deferred_reasons(ch, txn, model, c.action);
        let escalation = self.escalate(txn, model, &c); // 5 escalate
        let (timings, end) = self.timings(tiers);
        let d = Decision {
            txn: txn.id,
            entity: txn.entity,
            action: c.action,
            score: c.score,
            tier: c.tier,
            fallback: tiers.fast.err(),
            hard_rule: c.hard_rule,
            rule_score: rules.map_or(f32::NAN, |r| r.probability),
            model_score: model.map(|m| m.probability),
            threshold_shift: shift,
            reasons: merge_reasons(tiers, deferred.as_ref(), c.tier),
            timings,
            escalation,
            rules_fired: rules.map(|r| r.fired).unwrap_or_default(),
            rules_shadow: rules.map(|r| r.shadow_fired).unwrap_or_default(),
            versions: self.versions_used(ch, tiers),
            decided_at_ms: self.clock.unix_ms_at(end),
            state: state.map_or(StateStatus::Off, |s| s.status),
            lists_stale: state.is_some_and(|s| s.lists_stale),
        };
        self.observe(ch, txn, tiers, &d, state); // 6 observe
        d
    }

    // ===== 5 escalate =====

    /// A fast score in the gray band (and no hard rule) goes, never blocking, to the deep
    /// tier's queue.
    #[inline]
    fn escalate(&self, txn: &Transaction, model: Option<&Score>, c: &Combined) -> Escalation {
        let (lo, hi) = match &self.gray_band {
            Some(b) => {
                if let Some(m) = model {
                    b.record(m.probability);
                }
                b.band().unwrap_or(self.cfg.gray_band)
            }
            None => self.cfg.gray_band,
        };
        let Some(m) = model.filter(|m| !c.hard_rule && m.probability >= lo && m.probability <= hi)
        else {
            return Escalation::None;
        };
        let Some(g) = &self.gray else {
            return Escalation::Shed(ShedReason::NoDeepTier);
        };
        match g.try_push(txn, m.probability) {
            Ok(t) => {
                self.metrics.gray.enqueued.fetch_add(1, Relaxed);
                Escalation::Enqueued(t)
            }
            Err(why) => {
                self.metrics.gray.shed.fetch_add(1, Relaxed);
                tracing::debug!(target: "risk::gray", txn = txn.id.0, reason = ?why, "gray-zone transaction shed");
                Escalation::Shed(why)
            }
        }
    }

    // ===== the decision's parts =====

    /// Per-stage times, the total ending now; and now.
    #[inline]
    fn timings(&self, tiers: &Tiers) -> (StageTimings, Nanos) {
        let end = self.clock.now();
        let total = end.saturating_sub(tiers.t0);
        let t = StageTimings {
            rules_ns: tiers.rules_ns,
            fast_ns: tiers.fast_ns,
            combine_ns: total.saturating_sub(tiers.rules_ns + tiers.fast_ns),
            total_ns: total,
        };
        (t, end)
    }

    /// The versions this decision used: the answering scorers' own, else the slots'.
    #[inline]
    fn versions_used(&self, ch: &Chosen<'_>, tiers: &Tiers) -> Versions {
        let mut v = self.versions;
        v.rules = tiers
            .rules
            .as_ref()
            .and_then(|r| r.version)
            .unwrap_or(ch.rules.id);
        v.fast = ch.fast.map(|f| {
            let v = tiers.fast.as_ref().ok().and_then(|m| m.version);
            v.unwrap_or(f.id)
        });
        v.config = ch.policy.body.config_fp;
        v.deep = ch.routing.deep;
        v
    }

    // ===== 6 observe =====

    /// Everything that watches a decision, none of it blocking: counters and latency
    /// histograms, the deploy sample, monitors, canary and shadow comparisons, the audit
    /// record, and the state outcome (outcome-filtered features).
    #[inline]
    fn observe(
        &self,
        ch: &Chosen<'_>,
        txn: &Transaction,
        tiers: &Tiers,
        d: &Decision,
        state: Option<&StateOutcome>,
    ) {
        let model = tiers.fast.as_ref().ok();
        let m = &self.metrics;
        ch.rules.decided.add(1);
        if let (Some(f), Some(_)) = (ch.fast, model) {
            f.decided.add(1);
        }
        // This thread's stripe: two callers do not share these lines.
        let k = m.counts.mine();
        k.by_action[d.action as usize].fetch_add(1, Relaxed);
        k.by_tier[d.tier as usize].fetch_add(1, Relaxed);
        if let Some(cause) = d.fallback {
            k.by_cause[cause.index()].fetch_add(1, Relaxed);
            if cause != FallbackCause::Absent {
                tracing::debug!(target: "risk::decide", txn = txn.id.0, cause = cause.as_str(), "the rules decided: fast tier fell back");
            }
        }
        if d.hard_rule {
            k.hard_rule.fetch_add(1, Relaxed);
        }
        m.rules.record(d.timings.rules_ns);
        if ch.fast.is_some() {
            m.fast.record(d.timings.fast_ns);
        }
        m.total.record(d.timings.total_ns);
        self.deploy.recent.offer(txn);
        let policy = &ch.policy.body.policy;
        let shift = d.threshold_shift;
        if let Some(mc) = &self.monitor {
            mc.observe(txn, tiers.rules.as_ref(), model, policy, shift);
        }
        if ch.canary || ch.routing.watched() {
            self.observe_canary(ch, d, tiers.rules.as_ref(), model);
        }
        if ch.routing.shadowed() {
            self.offer_shadows(
                ch.routing,
                txn,
                tiers.rules.as_ref(),
                model,
                shift,
                d.action,
            );
        }
        if let Some(a) = &self.audit {
            // Never blocks beyond the sink's policy; a shed record is counted by the sink.
            let _ = a.offer(&AuditEvent::Decision {
                decision: d,
                txn,
                policy,
            });
        }
        if let (Some(st), Some(out)) = (&self.state, state) {
            st.record_outcome(out, d.action);
            if self.monitor.is_some() {
                st.note_action(d.txn, d.action);
            }
        }
    }
}

/// The deciding tier's reasons first, then the other's, up to [`Reasons::CAPACITY`]
/// (the model's `deferred` reasons, when it gave them after the decision).
#[inline]
fn merge_reasons(tiers: &Tiers, deferred: Option<&Reasons>, decided_by: Tier) -> Reasons {
    let model = deferred.or(tiers.fast.as_ref().ok().map(|s| &s.reasons));
    let rules = tiers.rules.as_ref().map(|s| &s.reasons);
    let (first, second) = match decided_by {
        Tier::Fast => (model, rules),
        _ => (rules, model),
    };
    let mut reasons = Reasons::new();
    for s in [first, second].into_iter().flatten() {
        for r in s.iter() {
            if reasons.len() < Reasons::CAPACITY {
                reasons.push(r.code, r.weight);
            }
        }
    }
    reasons
}
