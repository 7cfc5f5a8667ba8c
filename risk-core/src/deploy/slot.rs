//! Versioned slots: what serves each target, which entities a canary decides for, and
//! the shadow copy. The engine holds one [`Routing`] in an `ArcSwap`: `decide` loads it
//! once (no lock) and uses that snapshot for every tier, so a decision never mixes two
//! deploy states; a deploy or rollback builds a new `Routing` and stores it.

use super::shadow::Shadow;
use super::stats::VersionStats;
use super::SHARE_SCALE;
use crate::calibrate::Calibration;
use crate::circuit::Circuit;
use crate::hash::splitmix_finalize;
use crate::policy::Policy;
use crate::scorer::{Latency, Scorer};
use crate::txn::Transaction;
use crate::version::VersionId;
use std::sync::Arc;

/// One version in a slot. `stats` is set only while a deploy watches the slot.
pub(crate) struct Ver<T> {
    pub id: VersionId,
    pub body: T,
    pub stats: Option<Arc<VersionStats>>,
    /// Decisions this version took part in (shared by its watched copies), for the
    /// `risk_decisions_by_version_total` metric.
    pub decided: Arc<crate::stripe::StripedCounter>,
}

impl<T: Clone> Ver<T> {
    pub(crate) fn new(id: VersionId, body: T) -> Arc<Self> {
        Arc::new(Self {
            id,
            body,
            stats: None,
            decided: Arc::default(),
        })
    }

    /// The same version with (or without) deploy counters.
    pub(crate) fn watched(&self, stats: Option<Arc<VersionStats>>) -> Arc<Self> {
        Arc::new(Self {
            id: self.id,
            body: self.body.clone(),
            stats,
            decided: Arc::clone(&self.decided),
        })
    }
}

/// A fast model version: the scorer, its calibration, and its own circuit breaker (a
/// failing canary opens its own circuit, not the serving model's).
#[derive(Clone)]
pub(crate) struct FastModel {
    pub scorer: Arc<dyn Scorer>,
    pub latency: Latency,
    pub calibration: Option<Arc<Calibration>>,
    pub circuit: Arc<Circuit>,
}

/// A rule set version.
#[derive(Clone)]
pub(crate) struct RulesModel {
    pub scorer: Arc<dyn Scorer>,
}

/// A thresholds version, with the configuration fingerprint decisions record under it.
#[derive(Clone, Copy)]
pub(crate) struct PolicyModel {
    pub policy: Policy,
    pub config_fp: u64,
}

/// The candidate of a canary: its version, its share, and the salt of its sticky hash.
pub(crate) struct Canary<T> {
    pub ver: Arc<Ver<T>>,
    pub share: u32,
    pub salt: u64,
}

/// One target's state.
pub(crate) struct SlotState<T> {
    pub serving: Arc<Ver<T>>,
    pub canary: Option<Canary<T>>,
    pub shadow: Option<Arc<Shadow>>,
}

impl<T> SlotState<T> {
    pub(crate) fn serving(v: Arc<Ver<T>>) -> Self {
        Self {
            serving: v,
            canary: None,
            shadow: None,
        }
    }

    /// The version that decides for `txn`'s entity (its transaction id when it has none),
    /// and whether it is the canary. Sticky: the same entity gets the same answer for a
    /// given salt, and a larger share keeps every entity a smaller one had.
    #[inline]
    pub(crate) fn pick(&self, txn: &Transaction) -> (&Ver<T>, bool) {
        match &self.canary {
            Some(c) if bucket(txn, c.salt) < c.share => (&c.ver, true),
            _ => (&self.serving, false),
        }
    }
}

/// The sticky bucket in `0..SHARE_SCALE` of `txn`'s entity.
#[inline]
pub(crate) fn bucket(txn: &Transaction, salt: u64) -> u32 {
    let key = if txn.entity.is_none() {
        txn.id.0
    } else {
        txn.entity.0
    };
    (splitmix_finalize(key ^ salt) % SHARE_SCALE as u64) as u32
}

/// Everything `decide` routes by, loaded once per call.
pub(crate) struct Routing {
    /// Bumped by every change; decisions can be bracketed by it in tests and audits.
    pub epoch: u64,
    pub rules: SlotState<RulesModel>,
    pub fast: Option<SlotState<FastModel>>,
    pub policy: SlotState<PolicyModel>,
    /// The deep model serving (its workers read their own slot; this is what decisions
    /// record).
    pub deep: Option<VersionId>,
}

impl Routing {
    /// Whether any slot is being watched by a deploy (then decisions record stats).
    #[inline]
    pub(crate) fn watched(&self) -> bool {
        self.rules.serving.stats.is_some()
            || self.policy.serving.stats.is_some()
            || self
                .fast
                .as_ref()
                .is_some_and(|f| f.serving.stats.is_some())
    }

    /// Whether any slot has a shadow running.
    #[inline]
    pub(crate) fn shadowed(&self) -> bool {
        self.rules.shadow.is_some()
            || self.policy.shadow.is_some()
            || self.fast.as_ref().is_some_and(|f| f.shadow.is_some())
    }
}

impl<T> Clone for SlotState<T> {
    fn clone(&self) -> Self {
        Self {
            serving: Arc::clone(&self.serving),
            canary: self.canary.as_ref().map(|c| Canary {
                ver: Arc::clone(&c.ver),
                share: c.share,
                salt: c.salt,
            }),
            shadow: self.shadow.clone(),
        }
    }
}

impl Clone for Routing {
    fn clone(&self) -> Self {
        Self {
            epoch: self.epoch,
            rules: self.rules.clone(),
            fast: self.fast.clone(),
            policy: self.policy.clone(),
            deep: self.deep,
        }
    }
}
