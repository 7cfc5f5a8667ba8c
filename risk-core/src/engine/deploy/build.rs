//! Building a deploy candidate (load, schema check, warm-up), running its validation gate,
//! its shadow scoring function, installing a version in its slot, and its model-directory
//! record.

use crate::calibrate::Calibration;
use crate::circuit::Circuit;
use crate::config::ScorerSpec;
use crate::deploy::directory::{PolicyMeta, VersionMeta};
use crate::deploy::gate::{self, GateFn, GateReport};
use crate::deploy::shadow::{Eval, ShadowItem};
use crate::deploy::slot::{FastModel, PolicyModel, RulesModel, SlotState, Ver};
use crate::deploy::stats::Outcome;
use crate::deploy::{Candidate, DeployError, ModelDirectory, RolloutPlan, Target};
use crate::engine::gray::DeepModel;
use crate::engine::tier::{guarded_batch_within, guarded_score, guarded_score_within};
use crate::engine::Inner;
use crate::policy::Policy;
use crate::scorer::{Score, Scorer};
use crate::txn::Transaction;
use crate::version::VersionId;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A version of any slot.
#[derive(Clone)]
pub(crate) enum AnyVer {
    Rules(Arc<Ver<RulesModel>>),
    Fast(Arc<Ver<FastModel>>),
    Policy(Arc<Ver<PolicyModel>>),
    Deep(Arc<DeepModel>),
}

impl AnyVer {
    pub(crate) fn id(&self) -> VersionId {
        match self {
            AnyVer::Rules(v) => v.id,
            AnyVer::Fast(v) => v.id,
            AnyVer::Policy(v) => v.id,
            AnyVer::Deep(m) => m.id,
        }
    }
}

/// A loaded, warmed-up candidate.
pub(in crate::engine) struct Built {
    pub ver: AnyVer,
    /// Its model-directory key (when a directory is configured).
    pub key: Option<String>,
    /// The scorer table that rebuilds it and the artifact file to copy.
    spec: Option<(toml::Table, Option<PathBuf>)>,
    calibration: Option<Calibration>,
    policy: Option<Policy>,
}

/// The version id of a policy.
pub(crate) fn policy_id(p: &Policy) -> VersionId {
    let h = crate::hash::Fnv::hash(format!("{p:?}").as_bytes());
    VersionId::new(
        "policy",
        &format!("approve<{} decline>={}", p.approve_below, p.decline_at),
        h,
    )
}

impl Inner {
    /// The policy version `p` within this engine's configuration.
    pub(crate) fn policy_version(&self, p: Policy) -> Arc<Ver<PolicyModel>> {
        let mut cfg = self.cfg.clone();
        cfg.policy = p;
        Ver::new(
            policy_id(&p),
            PolicyModel {
                policy: p,
                config_fp: cfg.fingerprint(),
            },
        )
    }

    pub(in crate::engine) fn build_candidate(
        &self,
        target: Target,
        c: Candidate,
    ) -> Result<Built, DeployError> {
        let unsupported = |what: &str| DeployError::Unsupported {
            target,
            what: what.to_owned(),
        };
        let (scorer, calibration, spec): (Arc<dyn Scorer>, _, _) = match (target, c) {
            (Target::Policy, Candidate::Policy(p)) => return self.built_policy(p),
            (Target::Policy, Candidate::Stored(k)) => {
                let m = self.stored_meta(target, &k)?;
                let p = m
                    .policy
                    .ok_or_else(|| DeployError::Directory(format!("{k} holds no policy")))?;
                let static_action = crate::action::Action::parse(&p.static_action)
                    .ok_or_else(|| DeployError::Directory(format!("{k}: bad static_action")))?;
                return self.built_policy(Policy {
                    approve_below: p.approve_below,
                    decline_at: p.decline_at,
                    hard_rule_override: p.hard_rule_override,
                    static_action,
                });
            }
            (Target::Policy, _) => {
                return Err(unsupported("the policy slot takes a [policy] candidate"))
            }
            (_, Candidate::Policy(_)) => {
                return Err(unsupported("a policy candidate fits the policy slot only"))
            }
            (
                _,
                Candidate::Scorer {
                    scorer,
                    calibration,
                },
            ) => (scorer, calibration, None),
            (
                _,
                Candidate::Spec {
                    table,
                    base_dir,
                    calibration,
                },
            ) => {
                let s = self.build_spec(&table, base_dir.clone())?;
                let path = table
                    .get("path")
                    .and_then(|p| p.as_str())
                    .map(|p| base_dir.join(p));
                let mut stored = table;
                if let Some(p) = &path {
                    // A file is copied into the directory; anything else (a model
                    // directory) stays where it is, named by absolute path.
                    stored.insert(
                        "path".into(),
                        toml::Value::String(p.to_string_lossy().into_owned()),
                    );
                }
                (s, calibration, Some((stored, path.filter(|p| p.is_file()))))
            }
            (_, Candidate::Stored(k)) => {
                let m = self.stored_meta(target, &k)?;
                let text = m.spec.ok_or_else(|| {
                    DeployError::Directory(format!(
                        "{k} was a caller-built scorer: it cannot be rebuilt"
                    ))
                })?;
                let table: toml::Table = toml::from_str(&text)
                    .map_err(|e| DeployError::Directory(format!("{k}: spec: {}", e.message())))?;
                let dir = self.deploy.dir.as_ref().map(|d| d.version_dir(target, &k));
                let s = self.build_spec(&table, dir.unwrap_or_default())?;
                (s, m.calibration, Some((table, None)))
            }
        };
        if calibration.is_some() && target != Target::Fast {
            return Err(unsupported(
                "calibration applies to the fast tier's scores only",
            ));
        }
        if let Some(c) = &calibration {
            c.validate().map_err(|e| DeployError::Load(e.to_string()))?;
        }
        if let Some(got) = scorer.schema_fingerprint() {
            let expected = self.schema.fingerprint();
            if got != expected {
                return Err(DeployError::Schema { expected, got });
            }
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scorer.warmup())) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(DeployError::Warmup(e.to_string())),
            Err(_) => return Err(DeployError::Warmup("the scorer panicked".into())),
        }
        let info = scorer.info();
        let mut hash = info.content_hash;
        if let Some(c) = &calibration {
            // A calibrated model is a version of its own.
            hash ^= crate::hash::Fnv::hash(c.to_json().as_bytes()).rotate_left(1);
        }
        let id = VersionId::new(&info.name, &info.version, hash);
        let ver = match target {
            Target::Rules => AnyVer::Rules(Ver::new(id, RulesModel { scorer })),
            Target::Fast => {
                self.fast
                    .ensure_pool(info.latency)
                    .map_err(|e| DeployError::Load(format!("cannot start the fast pool: {e}")))?;
                AnyVer::Fast(Ver::new(
                    id,
                    FastModel {
                        scorer,
                        latency: info.latency,
                        calibration: calibration.clone().map(Arc::new),
                        circuit: Arc::new(Circuit::new(self.cfg.circuit, "fast")),
                    },
                ))
            }
            Target::Deep => {
                if self.gray.is_none() {
                    return Err(unsupported(
                        "this engine has no deep tier ([deep] in risk.toml)",
                    ));
                }
                AnyVer::Deep(Arc::new(DeepModel { scorer, id }))
            }
            Target::Policy => unreachable!("handled above"),
        };
        Ok(Built {
            key: self.deploy.dir.as_ref().map(|_| format!("{hash:016x}")),
            ver,
            spec,
            calibration,
            policy: None,
        })
    }

    fn built_policy(&self, p: Policy) -> Result<Built, DeployError> {
        crate::deploy::candidate::check_policy(&p)?;
        let v = self.policy_version(p);
        Ok(Built {
            key: self
                .deploy
                .dir
                .as_ref()
                .map(|_| format!("{:016x}", v.id.hash())),
            ver: AnyVer::Policy(v),
            spec: None,
            calibration: None,
            policy: Some(p),
        })
    }

    fn build_spec(
        &self,
        table: &toml::Table,
        base_dir: PathBuf,
    ) -> Result<Arc<dyn Scorer>, DeployError> {
        let spec = ScorerSpec {
            key: "candidate.scorer".into(),
            table: table.clone(),
            schema: Arc::clone(&self.schema),
            base_dir,
        };
        self.deploy
            .registry
            .build(&spec)
            .map_err(|e| DeployError::Load(e.to_string()))
    }

    fn stored_meta(&self, target: Target, key: &str) -> Result<VersionMeta, DeployError> {
        let d = self.deploy.dir.as_ref().ok_or_else(|| {
            DeployError::Directory("no model directory is configured (deploy.dir)".into())
        })?;
        d.meta(target, key)
    }

    /// Runs the validation gate of `plan` on `ver`.
    pub(in crate::engine) fn gate(
        &self,
        target: Target,
        ver: &AnyVer,
        plan: &RolloutPlan,
    ) -> Result<GateReport, DeployError> {
        let g = &plan.gate;
        for (k, t) in g.transactions.iter().enumerate() {
            self.check(t)
                .map_err(|e| DeployError::Plan(format!("gate.transactions[{k}]: {e}")))?;
        }
        let mut sample = self.deploy.recent.snapshot(g.sample);
        sample.extend(g.transactions.iter().cloned());
        let r = self.routing.load();
        let pol = r.policy.serving.body.policy;
        let budget = self.budget(target);
        let fast_p = |m: &FastModel, t: &Transaction| {
            guarded_score(&*m.scorer, t).ok().map(|s| m.calibrated(s))
        };
        match ver {
            AnyVer::Fast(c) => {
                let cand = |t: &Transaction| {
                    fast_p(&c.body, t).map(|s| (s.probability, pol.threshold(s.probability, 0.0)))
                };
                let serving = r.fast.as_ref().map(|f| Arc::clone(&f.serving));
                let srv = |t: &Transaction| {
                    let s = fast_p(&serving.as_ref()?.body, t)?;
                    Some((s.probability, pol.threshold(s.probability, 0.0)))
                };
                let srv_fn: Option<GateFn<'_>> = serving.as_ref().map(|_| &srv as GateFn<'_>);
                gate::run(g, &sample, &g.labels, budget, srv_fn, &cand)
            }
            AnyVer::Rules(c) => {
                let act = |s: Score| {
                    (
                        s.probability,
                        s.directive.unwrap_or(pol.threshold(s.probability, 0.0)),
                    )
                };
                let cand = |t: &Transaction| guarded_score(&*c.body.scorer, t).ok().map(act);
                let serving = Arc::clone(&r.rules.serving);
                let srv = |t: &Transaction| guarded_score(&*serving.body.scorer, t).ok().map(act);
                gate::run(g, &sample, &g.labels, budget, Some(&srv), &cand)
            }
            AnyVer::Policy(c) => {
                let rules = Arc::clone(&r.rules.serving);
                let fast = r.fast.as_ref().map(|f| Arc::clone(&f.serving));
                let decide = |p: &Policy, t: &Transaction| {
                    let rs = guarded_score(&*rules.body.scorer, t).ok();
                    let ms = fast.as_ref().and_then(|f| fast_p(&f.body, t));
                    let out = p.combine(rs.as_ref(), ms.as_ref(), 0.0);
                    Some((
                        if out.score.is_finite() {
                            out.score
                        } else {
                            0.0
                        },
                        out.action,
                    ))
                };
                let cand = |t: &Transaction| decide(&c.body.policy, t);
                let srv = |t: &Transaction| decide(&pol, t);
                gate::run(g, &sample, &g.labels, budget, Some(&srv), &cand)
            }
            AnyVer::Deep(c) => {
                let one = |m: &DeepModel, t: &Transaction| {
                    let mut out = Vec::new();
                    guarded_batch_within(&*m.scorer, &[t], budget, &mut out).ok()?;
                    let p = out.first()?.probability;
                    Some((p, pol.threshold(p, 0.0)))
                };
                let cand = |t: &Transaction| one(c, t);
                let serving = self.gray.as_ref().map(|g| g.model());
                let srv = |t: &Transaction| one(serving.as_ref()?, t);
                let srv_fn: Option<GateFn<'_>> = serving.as_ref().map(|_| &srv as GateFn<'_>);
                gate::run(g, &sample, &g.labels, budget, srv_fn, &cand)
            }
        }
    }

    /// The shadow's scoring function for a candidate: its would-be outcome and the
    /// serving side's on the same transaction.
    pub(in crate::engine) fn shadow_eval(
        &self,
        target: Target,
        cand: &AnyVer,
        budget: Duration,
    ) -> Eval {
        let pol = self.routing.load().policy.serving.body.policy;
        let rules_action = move |it: &ShadowItem| {
            it.rules().map(|r| {
                r.directive
                    .unwrap_or(pol.threshold(r.probability, it.shift))
            })
        };
        let _ = target;
        match cand.clone() {
            AnyVer::Fast(c) => Box::new(move |it: &ShadowItem| {
                let t0 = Instant::now();
                let r = guarded_score_within(&*c.body.scorer, &it.txn, budget);
                let lat = t0.elapsed();
                let sc = r
                    .ok()
                    .filter(|_| lat <= budget)
                    .map(|s| c.body.calibrated(s));
                let would = pol.combine(it.rules().as_ref(), sc.as_ref(), it.shift);
                let ra = rules_action(it);
                let th = |s: &Score| pol.threshold(s.probability, it.shift);
                (
                    Outcome {
                        failed: sc.is_none(),
                        score: sc.map(|s| s.probability),
                        latency_ns: Some(lat.as_nanos() as u64),
                        action: would.action,
                        agrees_with_rules: ra.zip(sc.as_ref().map(th)).map(|(a, b)| a == b),
                    },
                    Outcome {
                        failed: it.model().is_none(),
                        score: it.model().map(|s| s.probability),
                        latency_ns: None,
                        action: it.action,
                        agrees_with_rules: ra.zip(it.model().as_ref().map(th)).map(|(a, b)| a == b),
                    },
                )
            }),
            AnyVer::Rules(c) => Box::new(move |it: &ShadowItem| {
                let t0 = Instant::now();
                let r = guarded_score(&*c.body.scorer, &it.txn).ok();
                let lat = t0.elapsed();
                let would = pol.combine(r.as_ref(), it.model().as_ref(), it.shift);
                let ma = it.model().map(|m| pol.threshold(m.probability, it.shift));
                let act = |s: &Score| {
                    s.directive
                        .unwrap_or(pol.threshold(s.probability, it.shift))
                };
                (
                    Outcome {
                        failed: r.is_none(),
                        score: r.map(|s| s.probability),
                        latency_ns: Some(lat.as_nanos() as u64),
                        action: would.action,
                        agrees_with_rules: r.as_ref().map(act).zip(ma).map(|(a, b)| a == b),
                    },
                    Outcome {
                        failed: it.rules().is_none(),
                        score: it.rules().map(|s| s.probability),
                        latency_ns: None,
                        action: it.action,
                        agrees_with_rules: it
                            .rules()
                            .as_ref()
                            .map(act)
                            .zip(ma)
                            .map(|(a, b)| a == b),
                    },
                )
            }),
            AnyVer::Policy(c) => Box::new(move |it: &ShadowItem| {
                let would =
                    c.body
                        .policy
                        .combine(it.rules().as_ref(), it.model().as_ref(), it.shift);
                let o = |action| Outcome {
                    failed: false,
                    score: None,
                    latency_ns: None,
                    action,
                    agrees_with_rules: None,
                };
                (o(would.action), o(it.action))
            }),
            AnyVer::Deep(_) => Box::new(|it: &ShadowItem| {
                let o = Outcome {
                    failed: false,
                    score: None,
                    latency_ns: None,
                    action: it.action,
                    agrees_with_rules: None,
                };
                (o, o)
            }),
        }
    }

    /// Makes `ver` the serving version of its slot (no canary, no shadow).
    pub(in crate::engine) fn install(&self, target: Target, ver: &AnyVer) {
        let _ = target;
        match ver {
            AnyVer::Rules(v) => self.swap(|r| r.rules = SlotState::serving(v.watched(None))),
            AnyVer::Fast(v) => self.swap(|r| r.fast = Some(SlotState::serving(v.watched(None)))),
            AnyVer::Policy(v) => self.swap(|r| r.policy = SlotState::serving(v.watched(None))),
            AnyVer::Deep(m) => {
                if let Some(g) = &self.gray {
                    g.swap(Arc::clone(m));
                }
                self.swap(|r| r.deep = Some(m.id));
            }
        }
    }

    /// The serving version of `target`, without deploy counters.
    pub(in crate::engine) fn serving_of(&self, target: Target) -> Option<AnyVer> {
        let r = self.routing.load();
        Some(match target {
            Target::Rules => AnyVer::Rules(r.rules.serving.watched(None)),
            Target::Policy => AnyVer::Policy(r.policy.serving.watched(None)),
            Target::Fast => AnyVer::Fast(r.fast.as_ref()?.serving.watched(None)),
            Target::Deep => AnyVer::Deep(self.gray.as_ref()?.model()),
        })
    }

    /// Writes (or updates) a candidate's entry in the model directory.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::engine) fn store_meta(
        &self,
        d: &ModelDirectory,
        target: Target,
        key: &str,
        b: &Built,
        plan: &RolloutPlan,
        gate: Option<&GateReport>,
        state: &str,
        detail: &str,
    ) -> Result<(), DeployError> {
        let id = b.ver.id();
        let mut artifact = None;
        let spec = b.spec.as_ref().map(|(table, file)| {
            let mut t = table.clone();
            if let Some(f) = file {
                artifact = Some(f.clone());
                if let Some(name) = f.file_name() {
                    t.insert(
                        "path".into(),
                        toml::Value::String(name.to_string_lossy().into_owned()),
                    );
                }
            }
            toml::to_string(&t).unwrap_or_default()
        });
        let mut m = match d.meta(target, key) {
            Ok(m) => m,
            Err(_) => VersionMeta {
                key: key.to_owned(),
                target: target.as_str().to_owned(),
                name: id.name().to_owned(),
                version: id.version().to_owned(),
                created_ms: self.clock.unix_ms(),
                deployed_by: plan.by.clone(),
                spec: spec.clone(),
                calibration: b.calibration.clone(),
                policy: b.policy.map(|p| PolicyMeta {
                    approve_below: p.approve_below,
                    decline_at: p.decline_at,
                    hard_rule_override: p.hard_rule_override,
                    static_action: p.static_action.as_str().to_owned(),
                }),
                gate: None,
                history: Vec::new(),
                artifact: None,
            },
        };
        if !plan.by.is_empty() {
            m.deployed_by = plan.by.clone();
        }
        if let Some(g) = gate {
            m.gate = serde_json::to_value(g).ok();
        }
        m.history.push(self.change(state, detail));
        d.store(target, &m, artifact.as_deref())
    }
}
