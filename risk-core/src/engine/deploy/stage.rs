//! Deploy stages: the supervisor's tick (guards, stage advance, promotion, automatic
//! rollback), the routing changes each makes, events, and what `decide` records while a
//! deploy watches its versions.

use super::{Active, AnyVer, ScoreMaps, TargetCtl};
use crate::clock::Nanos;
use crate::decision::{Action, Decision, FallbackCause};
use crate::deploy::shadow::Shadow;
use crate::deploy::slot::{Canary, Routing, SlotState, Ver};
use crate::deploy::stats::{broken_guard, Outcome, VersionStats};
use crate::deploy::SHARE_SCALE;
use crate::deploy::{DeployError, DeployEvent, EventKind, Phase, StateChange, Target};
use crate::engine::{Chosen, Inner};
use crate::scorer::Score;
use crate::txn::Transaction;
use crate::version::VersionId;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Events kept per target in its status.
const HISTORY: usize = 64;

/// The least time between two supervisor ticks.
const MIN_TICK: Duration = Duration::from_millis(10);

impl Inner {
    /// Records a decision for the deploy watching its versions (decide path, only while
    /// a deploy is active; counters only).
    #[inline(never)]
    pub(in crate::engine) fn observe_canary(
        &self,
        ch: &Chosen<'_>,
        d: &Decision,
        rules: Option<&Score>,
        model: Option<&Score>,
    ) {
        let (rules_ns, fast_ns) = (d.timings.rules_ns, d.timings.fast_ns);
        let p = &ch.policy.body.policy;
        let shift = d.threshold_shift;
        let ra = rules.map(|r| r.directive.unwrap_or(p.threshold(r.probability, shift)));
        let ma = model.map(|m| p.threshold(m.probability, shift));
        let agrees = ra.zip(ma).map(|(a, b)| a == b);
        let mut n = 0;
        if let Some(s) = &ch.rules.stats {
            n = n.max(s.record(&Outcome {
                failed: rules.is_none(),
                score: rules.map(|r| r.probability),
                latency_ns: Some(rules_ns),
                action: d.action,
                agrees_with_rules: agrees,
            }));
        }
        if let Some(s) = ch.fast.and_then(|f| f.stats.as_ref()) {
            let failed = matches!(
                d.fallback,
                Some(
                    FallbackCause::Timeout
                        | FallbackCause::Error
                        | FallbackCause::Panic
                        | FallbackCause::InvalidScore
                        | FallbackCause::CircuitOpen
                )
            );
            n = n.max(s.record(&Outcome {
                failed,
                score: model.map(|m| m.probability),
                latency_ns: model.map(|_| fast_ns),
                action: d.action,
                agrees_with_rules: agrees,
            }));
        }
        if let Some(s) = &ch.policy.stats {
            n = n.max(s.record(&Outcome {
                failed: false,
                score: d.score.is_finite().then_some(d.score),
                latency_ns: None,
                action: d.action,
                agrees_with_rules: agrees,
            }));
        }
        let every = self.deploy.cfg.check_every;
        if ch.canary && every > 0 && n.is_multiple_of(every) {
            self.deploy.poke();
        }
    }

    /// Hands a copy of the decision to each running shadow (never blocks).
    #[inline(never)]
    pub(in crate::engine) fn offer_shadows(
        &self,
        r: &Routing,
        txn: &Transaction,
        rules: Option<&Score>,
        model: Option<&Score>,
        shift: f32,
        action: Action,
    ) {
        let f = r.fast.as_ref().and_then(|f| f.shadow.as_ref());
        for s in [r.rules.shadow.as_ref(), f, r.policy.shadow.as_ref()]
            .into_iter()
            .flatten()
        {
            s.offer(txn, rules, model, shift, action);
        }
    }

    pub(in crate::engine) fn ensure_supervisor(&self, me: Weak<Inner>) {
        let mut sup = self.deploy.supervisor.lock();
        if sup.is_some() || self.deploy.stop.load(Relaxed) {
            return;
        }
        let interval = self.deploy.cfg.check_interval;
        let h = std::thread::Builder::new()
            .name("risk-deploy".into())
            .spawn(move || {
                let mut last: Option<std::time::Instant> = None;
                loop {
                    std::thread::park_timeout(interval);
                    // Pokes come every `check_every` candidate decisions; a tick reads every
                    // watched version's counters (cache lines the deciding threads write), so
                    // ticks are at least `MIN_TICK` apart however fast decisions come.
                    if let Some(gap) = last.map(|l| l.elapsed()).filter(|g| *g < MIN_TICK) {
                        std::thread::sleep(MIN_TICK - gap);
                    }
                    let Some(inner) = me.upgrade() else { return };
                    if inner.deploy.stop.load(Relaxed) {
                        return;
                    }
                    inner.tick();
                    last = Some(std::time::Instant::now());
                }
            });
        // Without a supervisor the stages still advance on `deploy_tick` calls.
        if let Ok(h) = h {
            *sup = Some(h.thread().clone());
        }
    }

    pub(in crate::engine) fn tick(&self) {
        let now = self.clock.now();
        let mut events = Vec::new();
        let mut st = self.deploy.state.lock();
        for target in Target::ALL {
            let t = &mut st.targets[target.index()];
            let Some(a) = &mut t.active else { continue };
            let budget = self.budget(target);
            // What each phase compares, and whether its stage has done enough to end.
            let (c, v, b, latency, ready) = match (a.phase, &a.shadow) {
                (Phase::Shadow, Some(s)) => {
                    let stage = a
                        .plan
                        .shadow
                        .as_ref()
                        .map(|s| (s.min_scored, s.min_duration, s.budget));
                    let (min, dur, b) = stage.unwrap_or((0, Duration::ZERO, budget));
                    let (c, v) = (s.cand.snapshot(), s.serving.snapshot());
                    let ready = c.n >= min && elapsed(now, a.phase_started) >= dur;
                    (c, v, b, true, ready)
                }
                _ => {
                    let (c, v) = (a.cand_stats.snapshot(), a.serving_stats.snapshot());
                    let stage = &a.plan.canary[a.stage];
                    let ready = c.n - a.stage_base.min(c.n) >= stage.min_decisions
                        && elapsed(now, a.stage_started) >= stage.min_duration;
                    (c, v, budget, target == Target::Fast, ready)
                }
            };
            // A stage never ends before the guards could judge it; they judge at looks
            // spaced by growth and before a stage ends, so their significance is spent over
            // O(log n) looks, not over every tick (latency alone is checked at every tick).
            let g = &a.plan.guards;
            let ready = ready && c.n >= g.min_decisions;
            let look = c.n >= g.min_decisions && (ready || a.looks.due(c.n));
            let levels = look.then(|| a.looks.take(c.n, v.n >= g.min_decisions));
            let broken = broken_guard(g, &c, Some(&v), b, latency, levels);
            match broken {
                Some(why) => events.push(self.abort_locked(target, t, true, &why)),
                None if ready => events.extend(self.advance_locked(target, t, now)),
                None => {}
            }
        }
        drop(st);
        for e in events {
            self.emit(e);
        }
    }

    /// The calibrations that put the candidate's and the serving version's scores on one
    /// scale for the score guard: when the candidate is the serving model itself (same
    /// scorer name and content hash) and only one of the two brings a calibration, the
    /// other's scores pass through it. A different model is compared as it scores.
    pub(in crate::engine) fn score_maps(&self, target: Target, cand: &AnyVer) -> ScoreMaps {
        let (AnyVer::Fast(c), Target::Fast) = (cand, target) else {
            return ScoreMaps::default();
        };
        let r = self.routing.load();
        let Some(f) = r.fast.as_ref() else {
            return ScoreMaps::default();
        };
        let (ci, si) = (c.body.scorer.info(), f.serving.body.scorer.info());
        if (ci.name.as_str(), ci.content_hash()) != (si.name.as_str(), si.content_hash()) {
            return ScoreMaps::default();
        }
        match (
            c.body.calibration.clone(),
            f.serving.body.calibration.clone(),
        ) {
            (Some(cc), None) => ScoreMaps {
                cand: None,
                serving: Some(cc),
            },
            (None, Some(sc)) => ScoreMaps {
                cand: Some(sc),
                serving: None,
            },
            _ => ScoreMaps::default(),
        }
    }

    /// The stage after the current one, or promotion.
    pub(in crate::engine) fn advance_locked(
        &self,
        target: Target,
        t: &mut TargetCtl,
        now: Nanos,
    ) -> Option<DeployEvent> {
        let a = t.active.as_mut()?;
        let next_canary = match a.phase {
            Phase::Shadow => (!a.plan.canary.is_empty()).then_some(0),
            Phase::Canary => (a.stage + 1 < a.plan.canary.len()).then_some(a.stage + 1),
        };
        match next_canary {
            Some(0) if a.phase == Phase::Shadow => {
                if let Some(s) = a.shadow.take() {
                    s.stop();
                }
                let share = self.start_canary(target, t, now);
                let a = t.active.as_ref()?;
                Some(self.event_value(
                    target,
                    a.id,
                    EventKind::Stage,
                    a.cand.id(),
                    share,
                    "canary".into(),
                    0,
                    true,
                ))
            }
            Some(k) => {
                a.stage = k;
                a.stage_started = now;
                a.stage_base = a.cand_stats.snapshot().n;
                let share = a.plan.canary[k].share;
                let n = a.stage_base;
                let (id, ver) = (a.id, a.cand.id());
                self.set_canary_share(target, share);
                let key = a.key.clone();
                self.dir_record(target, key.as_deref(), "canary", &format!("share {share}"));
                Some(self.event_value(
                    target,
                    id,
                    EventKind::Stage,
                    ver,
                    share,
                    format!("stage {k}"),
                    n,
                    true,
                ))
            }
            None => Some(self.promote_locked(target, t, true, "every stage passed")),
        }
    }

    pub(in crate::engine) fn start_shadow(
        &self,
        target: Target,
        t: &mut TargetCtl,
        mut a: Active,
    ) -> Result<(), DeployError> {
        let stage = a.plan.shadow.clone().unwrap_or_default();
        let eval = self.shadow_eval(target, &a.cand, stage.budget);
        let stats = (
            VersionStats::mapped(a.maps.cand.clone()),
            VersionStats::mapped(a.maps.serving.clone()),
        );
        let s = Shadow::start(stage.sample, stage.queue, eval, stats)
            .map_err(|e| DeployError::Load(format!("cannot start the shadow thread: {e}")))?;
        a.shadow = Some(Arc::clone(&s));
        self.swap(|r| match target {
            Target::Rules => r.rules.shadow = Some(Arc::clone(&s)),
            Target::Policy => r.policy.shadow = Some(Arc::clone(&s)),
            Target::Fast => {
                if let Some(f) = &mut r.fast {
                    f.shadow = Some(Arc::clone(&s));
                }
            }
            Target::Deep => {}
        });
        self.dir_record(target, a.key.as_deref(), "shadow", "");
        t.active = Some(a);
        Ok(())
    }

    /// Puts the active candidate in canary at stage 0; returns its share.
    pub(in crate::engine) fn start_canary(
        &self,
        target: Target,
        t: &mut TargetCtl,
        now: Nanos,
    ) -> f64 {
        let Some(a) = t.active.as_mut() else {
            return 0.0;
        };
        a.phase = Phase::Canary;
        a.stage = 0;
        a.phase_started = now;
        a.stage_started = now;
        a.stage_base = 0;
        a.cand_stats = Arc::new(VersionStats::mapped(a.maps.cand.clone()));
        a.serving_stats = Arc::new(VersionStats::mapped(a.maps.serving.clone()));
        a.looks.restart();
        let share = a.plan.canary[0].share;
        let bp = share_bp(share);
        let (cs, ss, salt) = (
            Arc::clone(&a.cand_stats),
            Arc::clone(&a.serving_stats),
            a.salt,
        );
        let cand = a.cand.clone();
        self.swap(|r| {
            fn set<T: Clone>(
                s: &mut SlotState<T>,
                c: &Arc<Ver<T>>,
                cs: &Arc<VersionStats>,
                ss: &Arc<VersionStats>,
                bp: u32,
                salt: u64,
            ) {
                s.serving = s.serving.watched(Some(Arc::clone(ss)));
                s.canary = Some(Canary {
                    ver: c.watched(Some(Arc::clone(cs))),
                    share: bp,
                    salt,
                });
            }
            match (&cand, &mut r.fast) {
                (AnyVer::Rules(c), _) => set(&mut r.rules, c, &cs, &ss, bp, salt),
                (AnyVer::Policy(c), _) => set(&mut r.policy, c, &cs, &ss, bp, salt),
                (AnyVer::Fast(c), Some(f)) => set(f, c, &cs, &ss, bp, salt),
                // `deploy` refuses staged plans for these.
                (AnyVer::Fast(_), None) | (AnyVer::Deep(_), _) => {}
            }
        });
        self.dir_record(
            target,
            a.key.as_deref(),
            "canary",
            &format!("share {share}"),
        );
        share
    }

    pub(in crate::engine) fn set_canary_share(&self, target: Target, share: f64) {
        let bp = share_bp(share);
        self.swap(|r| {
            let c = match target {
                Target::Rules => r.rules.canary.as_mut().map(|c| &mut c.share),
                Target::Policy => r.policy.canary.as_mut().map(|c| &mut c.share),
                Target::Fast => r
                    .fast
                    .as_mut()
                    .and_then(|f| f.canary.as_mut())
                    .map(|c| &mut c.share),
                Target::Deep => None,
            };
            if let Some(c) = c {
                *c = bp;
            }
        });
    }

    /// Makes the active candidate the serving version.
    pub(in crate::engine) fn promote_locked(
        &self,
        target: Target,
        t: &mut TargetCtl,
        automatic: bool,
        why: &str,
    ) -> DeployEvent {
        let a = end_active(t);
        let n = a.cand_stats.snapshot().n;
        let old = self.serving_of(target);
        self.install(target, &a.cand);
        if let Some(old) = old {
            t.previous.push((old, t.serving_key.take()));
            let len = t.previous.len();
            if len > 16 {
                t.previous.drain(..len - 16);
            }
        }
        t.serving_key = a.key.clone();
        if let (Some(d), Some(k)) = (&self.deploy.dir, &a.key) {
            let _ = d.set_promoted(target, k);
            let _ = d.record(target, k, self.change("promoted", why));
        }
        self.event_value(
            target,
            a.id,
            EventKind::Promoted,
            a.cand.id(),
            1.0,
            why.into(),
            n,
            automatic,
        )
    }

    /// Ends the active deploy; the serving version stays.
    pub(in crate::engine) fn abort_locked(
        &self,
        target: Target,
        t: &mut TargetCtl,
        automatic: bool,
        why: &str,
    ) -> DeployEvent {
        let a = end_active(t);
        let n = match &a.shadow {
            Some(s) => s.cand.snapshot().n,
            None => a.cand_stats.snapshot().n,
        };
        self.swap(|r| {
            fn clear<T: Clone>(s: &mut SlotState<T>) {
                s.serving = s.serving.watched(None);
                s.canary = None;
                s.shadow = None;
            }
            match target {
                Target::Rules => clear(&mut r.rules),
                Target::Policy => clear(&mut r.policy),
                Target::Fast => {
                    if let Some(f) = &mut r.fast {
                        clear(f);
                    }
                }
                Target::Deep => {}
            }
        });
        self.dir_record(target, a.key.as_deref(), "rolled_back", why);
        let serving = self.serving_of(target).map_or(a.cand.id(), |v| v.id());
        self.event_value(
            target,
            a.id,
            EventKind::RolledBack,
            serving,
            0.0,
            why.into(),
            n,
            automatic,
        )
    }

    /// Builds and stores a routing changed by `f`, with the next epoch.
    pub(in crate::engine) fn swap(&self, f: impl FnOnce(&mut Routing)) {
        let mut r = Routing::clone(&self.routing.load());
        f(&mut r);
        r.epoch += 1;
        self.routing.store(Arc::new(r));
    }

    #[allow(clippy::too_many_arguments)]
    pub(in crate::engine) fn event_value(
        &self,
        target: Target,
        deploy: u64,
        kind: EventKind,
        version: VersionId,
        share: f64,
        detail: String,
        candidate_decisions: u64,
        automatic: bool,
    ) -> DeployEvent {
        DeployEvent {
            target,
            deploy,
            epoch: self.routing.load().epoch,
            at_ms: self.clock.unix_ms(),
            kind,
            version: version.into(),
            share,
            detail,
            candidate_decisions,
            automatic,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(in crate::engine) fn event(
        &self,
        target: Target,
        deploy: u64,
        kind: EventKind,
        version: VersionId,
        share: f64,
        detail: String,
        n: u64,
        automatic: bool,
    ) {
        let e = self.event_value(target, deploy, kind, version, share, detail, n, automatic);
        self.emit(e);
    }

    /// Appends to the target's history and sends to subscribers.
    pub(in crate::engine) fn emit(&self, e: DeployEvent) {
        match e.kind {
            EventKind::RolledBack | EventKind::Refused => tracing::warn!(
                target: "risk::deploy",
                target_slot = e.target.as_str(),
                deploy = e.deploy,
                version = %e.version.id,
                kind = ?e.kind,
                automatic = e.automatic,
                detail = %e.detail,
                "deploy event"
            ),
            _ => tracing::info!(
                target: "risk::deploy",
                target_slot = e.target.as_str(),
                deploy = e.deploy,
                version = %e.version.id,
                kind = ?e.kind,
                share = e.share,
                "deploy event"
            ),
        }
        {
            let mut st = self.deploy.state.lock();
            let h = &mut st.targets[e.target.index()].history;
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back(e.clone());
        }
        self.deploy.subscribers.lock().retain(|s| {
            !matches!(
                s.try_send(e.clone()),
                Err(std::sync::mpsc::TrySendError::Disconnected(_))
            )
        });
    }

    pub(in crate::engine) fn change(&self, state: &str, detail: &str) -> StateChange {
        StateChange {
            at_ms: self.clock.unix_ms(),
            state: state.into(),
            detail: detail.into(),
        }
    }

    pub(in crate::engine) fn dir_record(
        &self,
        target: Target,
        key: Option<&str>,
        state: &str,
        detail: &str,
    ) {
        if let (Some(d), Some(k)) = (&self.deploy.dir, key) {
            // A directory that cannot be written must not stop a rollback: the routing
            // already changed; the failure shows in the next deploy that stores.
            let _ = d.record(target, k, self.change(state, detail));
        }
    }

    /// The budget guards and the gate hold latency to for `target`.
    pub(in crate::engine) fn budget(&self, target: Target) -> Duration {
        match target {
            Target::Deep => self.cfg.deep.budget,
            _ => self.cfg.fast_deadline,
        }
    }
}

/// Takes the active deploy out of `t` and stops its shadow. Callers hold the control lock
/// and have checked that a deploy is active.
fn end_active(t: &mut TargetCtl) -> Active {
    let a = t
        .active
        .take()
        .expect("callers check that a deploy is active");
    if let Some(s) = &a.shadow {
        s.stop();
    }
    a
}

fn elapsed(now: Nanos, since: Nanos) -> Duration {
    Duration::from_nanos(now.saturating_sub(since))
}

fn share_bp(share: f64) -> u32 {
    ((share * SHARE_SCALE as f64).round() as u32).min(SHARE_SCALE)
}
