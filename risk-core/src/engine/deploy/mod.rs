//! The engine side of model lifecycle: `deploy`, `promote`, `rollback`, `deploy_status`,
//! the supervisor that advances stages and judges guards, and what `decide` records for a
//! deploy (only while one is active).
//!
//! Every change of the routing happens under one control mutex (never taken by `decide`):
//! the new [`Routing`] is built from the current one and stored, so `decide` sees the old
//! snapshot or the new one, whole.

mod build;
mod stage;

pub(in crate::engine) use build::policy_id;

use super::Engine;
use crate::calibrate::Calibration;
use crate::clock::Nanos;
use crate::deploy::judge::Looks;
use crate::deploy::recent::Recent;
use crate::deploy::shadow::Shadow;
use crate::deploy::slot::Routing;
use crate::deploy::stats::VersionStats;
use crate::deploy::{
    ActiveDeploy, Candidate, DeployConfig, DeployError, DeployEvent, DeployStatus, EventKind,
    GateReport, ModelDirectory, Phase, RolloutPlan, Target, VersionView,
};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

pub(in crate::engine) use build::AnyVer;

/// Deploy control, owned by the engine.
pub(crate) struct DeployCtl {
    pub cfg: DeployConfig,
    pub recent: Recent,
    pub dir: Option<ModelDirectory>,
    pub registry: crate::config::ScorerRegistry,
    pub(super) state: Mutex<Control>,
    pub(super) subscribers: Mutex<Vec<SyncSender<DeployEvent>>>,
    pub(super) supervisor: Mutex<Option<std::thread::Thread>>,
    pub(super) stop: AtomicBool,
    pub(super) next_id: AtomicU64,
}

#[derive(Default)]
pub(super) struct Control {
    pub(super) targets: [TargetCtl; 4],
}

#[derive(Default)]
pub(super) struct TargetCtl {
    pub(super) active: Option<Active>,
    /// A deploy is between its start and its gate's verdict.
    pub(super) busy: bool,
    pub(super) previous: Vec<(AnyVer, Option<String>)>,
    pub(super) history: VecDeque<DeployEvent>,
    pub(super) serving_key: Option<String>,
}

pub(super) struct Active {
    pub id: u64,
    pub cand: AnyVer,
    pub key: Option<String>,
    pub plan: RolloutPlan,
    pub phase: Phase,
    pub stage: usize,
    pub phase_started: Nanos,
    pub stage_started: Nanos,
    pub stage_base: u64,
    pub started_ms: i64,
    pub gate: GateReport,
    pub shadow: Option<Arc<Shadow>>,
    pub cand_stats: Arc<VersionStats>,
    pub serving_stats: Arc<VersionStats>,
    /// The guards' looks (their significance spent over the deploy).
    pub looks: Looks,
    /// Calibrations the candidate's and the serving version's scores pass through
    /// before the score guard compares them (one scale for both).
    pub maps: ScoreMaps,
    pub salt: u64,
}

/// Calibrations applied to each side's scores before the score guard bins them.
#[derive(Clone, Default)]
pub(super) struct ScoreMaps {
    pub cand: Option<Arc<Calibration>>,
    pub serving: Option<Arc<Calibration>>,
}

impl DeployCtl {
    pub(crate) fn new(
        cfg: DeployConfig,
        dir: Option<ModelDirectory>,
        registry: crate::config::ScorerRegistry,
        serving_keys: [Option<String>; 4],
    ) -> Self {
        let mut c = Control::default();
        for (t, k) in c.targets.iter_mut().zip(serving_keys) {
            t.serving_key = k;
        }
        Self {
            recent: Recent::new(cfg.sample_capacity, cfg.sample_every),
            cfg,
            dir,
            registry,
            state: Mutex::new(c),
            subscribers: Mutex::new(Vec::new()),
            supervisor: Mutex::new(None),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// Stops the supervisor and every shadow; routing keeps what serves.
    pub(crate) fn shutdown(&self, routing: &ArcSwap<Routing>) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.supervisor.lock().take() {
            t.unpark();
        }
        let mut st = self.state.lock();
        for t in st.targets.iter_mut() {
            if let Some(a) = t.active.take() {
                if let Some(s) = &a.shadow {
                    s.stop();
                }
            }
        }
        drop(st);
        let mut r = Routing::clone(&routing.load());
        r.rules.shadow = None;
        r.policy.shadow = None;
        if let Some(f) = &mut r.fast {
            f.shadow = None;
        }
        routing.store(Arc::new(r));
    }

    #[inline]
    pub(super) fn poke(&self) {
        if let Some(t) = &*self.supervisor.lock() {
            t.unpark();
        }
    }
}

impl Engine {
    /// Deploys `candidate` to `target` following `plan`: load, warm-up, validation gate
    /// (on this thread), then shadow and canary stages advanced by a supervisor, then
    /// promotion, or an automatic rollback when a guard breaks. Returns the deploy id once
    /// the candidate shadows, is in canary, or (with no stages) serves. A refused
    /// candidate never serves a decision.
    pub fn deploy(
        &self,
        target: Target,
        candidate: Candidate,
        plan: RolloutPlan,
    ) -> Result<u64, DeployError> {
        let i = &*self.inner;
        if i.shut.load(Relaxed) {
            return Err(DeployError::ShutDown);
        }
        plan.validate()?;
        if target == Target::Deep && (plan.shadow.is_some() || !plan.canary.is_empty()) {
            return Err(DeployError::Unsupported {
                target,
                what: "the deep tier takes gate-and-promote plans only (its batches mix entities)"
                    .into(),
            });
        }
        {
            let mut st = i.deploy.state.lock();
            let t = &mut st.targets[target.index()];
            if let Some(a) = &t.active {
                return Err(DeployError::InProgress { target, id: a.id });
            }
            if t.busy {
                return Err(DeployError::InProgress { target, id: 0 });
            }
            t.busy = true;
        }
        let staged = plan.shadow.is_some() || !plan.canary.is_empty();
        if target == Target::Fast && staged && i.routing.load().fast.is_none() {
            i.deploy.state.lock().targets[target.index()].busy = false;
            return Err(DeployError::Unsupported {
                target,
                what: "no fast model serves yet: the first one takes a gate-and-promote plan"
                    .into(),
            });
        }
        let id = i.deploy.next_id.fetch_add(1, Relaxed);
        let span = tracing::info_span!("risk.deploy", target = target.as_str(), deploy = id);
        let r = span.in_scope(|| self.deploy_gated(target, candidate, plan, id));
        i.deploy.state.lock().targets[target.index()].busy = false;
        r.map(|()| id)
    }

    fn deploy_gated(
        &self,
        target: Target,
        candidate: Candidate,
        plan: RolloutPlan,
        id: u64,
    ) -> Result<(), DeployError> {
        let i = &*self.inner;
        let built = i.build_candidate(target, candidate)?;
        let gate = match i.gate(target, &built.ver, &plan) {
            Ok(g) => g,
            Err(e) => {
                i.event(
                    target,
                    id,
                    EventKind::Refused,
                    built.ver.id(),
                    0.0,
                    e.to_string(),
                    0,
                    false,
                );
                if let (Some(d), Some(k)) = (&i.deploy.dir, &built.key) {
                    let _ =
                        i.store_meta(d, target, k, &built, &plan, None, "refused", &e.to_string());
                }
                return Err(e);
            }
        };
        if let (Some(d), Some(k)) = (&i.deploy.dir, &built.key) {
            i.store_meta(d, target, k, &built, &plan, Some(&gate), "validated", "")?;
        }
        let now = i.clock.now();
        let mut st = i.deploy.state.lock();
        if i.shut.load(Relaxed) {
            return Err(DeployError::ShutDown);
        }
        let maps = i.score_maps(target, &built.ver);
        let phases = u32::from(plan.shadow.is_some()) + u32::from(!plan.canary.is_empty());
        let looks = Looks::new(plan.guards.false_rollback, phases);
        let a = Active {
            id,
            cand: built.ver,
            key: built.key,
            plan,
            phase: Phase::Shadow,
            stage: 0,
            phase_started: now,
            stage_started: now,
            stage_base: 0,
            started_ms: i.clock.unix_ms(),
            gate,
            shadow: None,
            cand_stats: Arc::new(VersionStats::mapped(maps.cand.clone())),
            serving_stats: Arc::new(VersionStats::mapped(maps.serving.clone())),
            looks,
            maps,
            salt: crate::hash::splitmix_finalize(id ^ 0xca11),
        };
        let t = &mut st.targets[target.index()];
        let ver = a.cand.id();
        if a.plan.shadow.is_some() {
            i.start_shadow(target, t, a)?;
            drop(st);
            i.event(
                target,
                id,
                EventKind::Started,
                ver,
                0.0,
                "shadow".into(),
                0,
                false,
            );
        } else if !a.plan.canary.is_empty() {
            t.active = Some(a);
            let share = i.start_canary(target, t, now);
            drop(st);
            i.event(
                target,
                id,
                EventKind::Started,
                ver,
                share,
                "canary".into(),
                0,
                false,
            );
        } else {
            t.active = Some(a);
            let ev = i.promote_locked(target, t, false, "no stages in the plan");
            drop(st);
            i.emit(ev);
        }
        i.ensure_supervisor(Arc::downgrade(&self.inner));
        Ok(())
    }

    /// Ends the deploy of `target` in progress by promoting its candidate now (skipping
    /// the remaining stages).
    pub fn promote(&self, target: Target) -> Result<(), DeployError> {
        let i = &*self.inner;
        let mut st = i.deploy.state.lock();
        let t = &mut st.targets[target.index()];
        if t.active.is_none() {
            return Err(DeployError::Nothing {
                target,
                what: "no deploy in progress to promote",
            });
        }
        let ev = i.promote_locked(target, t, false, "promoted by call");
        drop(st);
        i.emit(ev);
        Ok(())
    }

    /// Ends the deploy of `target` in progress (the serving version stays), or, with none
    /// in progress, restores the version that served before the current one. In-flight
    /// decisions finish on the version they started with.
    pub fn rollback(&self, target: Target, reason: &str) -> Result<(), DeployError> {
        let i = &*self.inner;
        let mut st = i.deploy.state.lock();
        let t = &mut st.targets[target.index()];
        let ev = if t.active.is_some() {
            i.abort_locked(target, t, false, reason)
        } else {
            let Some((prev, key)) = t.previous.pop() else {
                return Err(DeployError::Nothing {
                    target,
                    what: "no previous version to roll back to",
                });
            };
            let id = prev.id();
            i.install(target, &prev);
            t.serving_key = key.clone();
            match (&i.deploy.dir, &key) {
                (Some(d), Some(k)) => {
                    // The routing already changed: a directory that cannot be written
                    // must not make the rollback look refused.
                    let _ = d.set_promoted(target, k);
                    let _ = d.record(
                        target,
                        k,
                        i.change("promoted", &format!("rollback: {reason}")),
                    );
                }
                // Back to the configured version: a restart builds it from risk.toml.
                (Some(d), None) => {
                    let _ = d.clear_promoted(target);
                }
                (None, _) => {}
            }
            i.event_value(
                target,
                0,
                EventKind::RolledBack,
                id,
                0.0,
                reason.into(),
                0,
                false,
            )
        };
        drop(st);
        i.emit(ev);
        Ok(())
    }

    /// Where `target` stands: serving version, rollback history, the deploy in progress
    /// with its gate report and live counters, and the latest events.
    pub fn deploy_status(&self, target: Target) -> DeployStatus {
        let i = &*self.inner;
        let r = i.routing.load();
        let st = i.deploy.state.lock();
        let t = &st.targets[target.index()];
        let serving = match target {
            Target::Rules => Some(r.rules.serving.id),
            Target::Fast => r.fast.as_ref().map(|f| f.serving.id),
            Target::Policy => Some(r.policy.serving.id),
            Target::Deep => r.deep,
        };
        let active = t.active.as_ref().map(|a| {
            let (cand, serv, shed) = match &a.shadow {
                Some(s) => (
                    s.cand.snapshot(),
                    s.serving.snapshot(),
                    s.shed.load(Relaxed),
                ),
                None => (a.cand_stats.snapshot(), a.serving_stats.snapshot(), 0),
            };
            ActiveDeploy {
                id: a.id,
                candidate: a.cand.id().into(),
                phase: a.phase,
                stage: a.stage,
                share: match a.phase {
                    Phase::Shadow => 0.0,
                    Phase::Canary => a.plan.canary[a.stage].share,
                },
                started_ms: a.started_ms,
                gate: a.gate.clone(),
                candidate_stats: cand,
                serving_stats: serv,
                shadow_shed: shed,
                guard_looks: a.looks.count(),
            }
        });
        DeployStatus {
            target,
            epoch: r.epoch,
            serving: serving.map(VersionView::from),
            previous: t
                .previous
                .iter()
                .rev()
                .map(|(v, _)| v.id().into())
                .collect(),
            active,
            history: t.history.iter().cloned().collect(),
        }
    }

    /// A channel receiving every deploy event from now on (a slow reader misses events
    /// rather than slowing the supervisor; each status keeps the latest 64).
    pub fn deploy_events(&self) -> Receiver<DeployEvent> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1024);
        self.inner.deploy.subscribers.lock().push(tx);
        rx
    }

    /// Judges every deploy's guards and stages now (the supervisor does this every
    /// `deploy.check_interval` and every `deploy.check_every` candidate decisions).
    pub fn deploy_tick(&self) {
        self.inner.tick();
    }

    /// The routing epoch: bumped by every deploy state change.
    pub fn deploy_epoch(&self) -> u64 {
        self.inner.routing.load().epoch
    }

    /// The model directory (`deploy.dir`), when configured.
    pub fn model_directory(&self) -> Option<&ModelDirectory> {
        self.inner.deploy.dir.as_ref()
    }
}
