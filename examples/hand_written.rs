//! The example engine's tiers called by hand: the peer that measures `Engine::decide`'s
//! own overhead (`benches/lean.rs`, `examples/lean_replay.rs`).
//!
//! It does the same tiers' work as `examples/risk.toml` (the default rule set, native
//! XGBoost with TreeSHAP reasons for scores ≥ 0.3, top 3) and combines them with the
//! same [`Policy`]; it has none of what the engine adds around them (model slots and
//! versions, the deadline and pool, the gray queue, metrics, the decision record).

use risk_core::{Action, Engine, Policy, Scorer, Transaction};
use risk_gpu::trees::{XgbModel, XgbScorer};
use risk_rules::RuleScorer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The repository's root (examples, rules and models are read from it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The engine of `examples/risk.toml` with the SDK's scorers registered.
pub fn example_engine() -> Engine {
    let mut reg = risk_core::ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    Engine::from_config_with(root().join("examples/risk.toml"), &reg)
        .expect("examples/risk.toml builds")
}

/// Rules, then the model, then the combine policy: an if/else engine.
#[derive(Debug)]
pub struct HandWritten {
    rules: RuleScorer,
    fast: XgbScorer,
    policy: Policy,
}

impl HandWritten {
    /// The tiers of `examples/risk.toml`, bound to `engine`'s schema.
    pub fn new(engine: &Engine) -> Self {
        let schema = engine.schema().clone();
        let rules = RuleScorer::from_file(
            root().join("risk-rules/rules/default.rules"),
            schema.clone(),
        )
        .expect("the default rules compile");
        let model = XgbModel::from_file(root().join("testdata/models/xgb_fraud.json"))
            .expect("testdata/models/xgb_fraud.json loads");
        let fast = XgbScorer::new(Arc::new(model), &schema, 0.3, 3).expect("model fits schema");
        Self {
            rules,
            fast,
            policy: Policy::default(),
        }
    }

    /// The action and the score it was taken on.
    #[inline]
    pub fn decide(&self, t: &Transaction) -> (Action, f32) {
        let r = self.rules.score(t).ok();
        let m = self.fast.score(t).ok();
        let c = self.policy.combine(r.as_ref(), m.as_ref(), 0.0);
        (c.action, c.score)
    }
}
