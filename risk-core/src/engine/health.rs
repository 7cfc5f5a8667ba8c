//! Health and controls: [`Engine::health`] (ready, degraded with reasons, per-tier breaker
//! and kill-switch state) and [`Engine::force_open`], the per-tier kill switch an on-call
//! engineer flips when a model misbehaves in a way no breaker sees.

use super::Engine;
use crate::deploy::{Target, VersionView};
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;

/// A tier the kill switch applies to (the rules always run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Switchable {
    /// The fast tier: while forced open, the rules decide every transaction
    /// (`FallbackCause::CircuitOpen`).
    Fast,
    /// The deep tier: while forced open, gray-zone verdicts come from the fallback
    /// (cached average, else the prior) with `DeepFailure::CircuitOpen`.
    Deep,
}

impl Switchable {
    /// `fast` or `deep`.
    pub fn as_str(self) -> &'static str {
        match self {
            Switchable::Fast => "fast",
            Switchable::Deep => "deep",
        }
    }

    /// The tier named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        [Switchable::Fast, Switchable::Deep]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// Overall state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Every configured tier serves.
    Ready,
    /// Decisions are made, but something is off (see the reasons): a breaker is open, a
    /// tier is switched off, the audit log failed, the gray queue is full.
    Degraded,
    /// Shut down: `decide` answers `ShutDown`.
    ShutDown,
}

/// One model tier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierHealth {
    /// Whether the tier is configured.
    pub present: bool,
    /// `closed`, `open`, `half_open`, `forced_open`, or `absent`.
    pub state: &'static str,
    /// The version serving.
    pub serving: Option<VersionView>,
}

/// [`Engine::health`]'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// Overall state.
    pub status: HealthStatus,
    /// Why it is degraded (empty when ready).
    pub reasons: Vec<String>,
    /// The fast tier.
    pub fast: TierHealth,
    /// The deep tier.
    pub deep: TierHealth,
    /// Targets with a deploy in progress.
    pub deploying: Vec<Target>,
    /// Whether identifiers this engine writes or sends are keyed pseudonyms (`[privacy]
    /// key` set). `false`: the audit trail holds entity keys as they are.
    pub pseudonymised: bool,
    /// Whether the lists are shared through Redis and it cannot be reached now: decisions
    /// read the last known entries (and say so, `Decision::lists_stale`); the status is
    /// degraded until the lists are reloaded from Redis.
    pub lists_stale: bool,
    /// The gray band serving (fixed, or set by `gray.budget` from recent scores).
    pub gray_band: super::GrayBandView,
}

impl Health {
    /// The JSON form (the C ABI's `risk_engine_health_json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Engine {
    /// Sets (`open = true`) or clears the kill switch of `tier`. Takes effect on the next
    /// decision (one relaxed load on the decide path); what serves is unchanged, so clearing
    /// it restores the tier at once (its breaker keeps its own state).
    pub fn force_open(&self, tier: Switchable, open: bool) {
        let i = &*self.inner;
        match tier {
            Switchable::Fast => i.fast.forced_open.store(open, Relaxed),
            Switchable::Deep => {
                if let Some(g) = &i.gray {
                    g.force_open(open);
                }
            }
        }
        tracing::warn!(target: "risk::health", tier = tier.as_str(), open, "kill switch set");
    }

    /// Ready, degraded (with reasons) or shut down, and each model tier's state.
    pub fn health(&self) -> Health {
        let i = &*self.inner;
        let m = self.metrics();
        let mut reasons = Vec::new();
        let fast_serving = self.deploy_status(Target::Fast).serving;
        let fast_state = if fast_serving.is_none() {
            "absent"
        } else if i.fast.forced_open.load(Relaxed) {
            "forced_open"
        } else {
            m.fast_circuit
        };
        let deep_state = match &i.gray {
            None => "absent",
            Some(g) if g.forced_open() => "forced_open",
            Some(_) => m.deep_circuit,
        };
        for (tier, st) in [("fast", fast_state), ("deep", deep_state)] {
            match st {
                "open" => reasons.push(format!("{tier} tier circuit open: the rules decide")),
                "half_open" => reasons.push(format!("{tier} tier circuit half-open: probing")),
                "forced_open" => reasons.push(format!("{tier} tier switched off (force_open)")),
                _ => {}
            }
        }
        if let Some(log) = self.audit_log() {
            let s = log.stats();
            if let Some(e) = s.last_error {
                reasons.push(format!("audit log: {e}"));
            }
        }
        if m.gray.queue_len > 0 && m.gray.queue_len as usize >= i.cfg.gray_queue_capacity {
            reasons.push("gray-zone queue full: escalations are shed".into());
        }
        let lists_stale = self.lists().is_some_and(|l| l.stale());
        if lists_stale {
            reasons.push(
                "shared lists stale (Redis unreachable): serving the last known entries".into(),
            );
        }
        let deploying: Vec<Target> = Target::ALL
            .into_iter()
            .filter(|t| self.deploy_status(*t).active.is_some())
            .collect();
        let status = if i.shut.load(Relaxed) {
            HealthStatus::ShutDown
        } else if reasons.is_empty() {
            HealthStatus::Ready
        } else {
            HealthStatus::Degraded
        };
        Health {
            status,
            reasons,
            fast: TierHealth {
                present: fast_serving.is_some(),
                state: fast_state,
                serving: fast_serving,
            },
            deep: TierHealth {
                present: i.gray.is_some(),
                state: deep_state,
                serving: self.deploy_status(Target::Deep).serving,
            },
            deploying,
            pseudonymised: i.pseudonymised,
            lists_stale,
            gray_band: i.gray_band_view(),
        }
    }
}
