//! `examples/risk.toml` builds the quickstart's rule and fast tiers from a file.

use risk_core::synth::{generate, SynthConfig};
use risk_core::{Engine, ScorerRegistry, Tier};
use std::path::Path;

#[test]
fn the_example_config_builds_a_working_engine() {
    let mut reg = ScorerRegistry::default();
    risk_rules::register(&mut reg);
    risk_gpu::register(&mut reg);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/risk.toml");
    let e = Engine::from_config_with(&path, &reg).unwrap_or_else(|err| panic!("{err}"));
    // The file's schema is the synthetic one: generated transactions decide as they are.
    assert_eq!(
        e.schema().fingerprint(),
        risk_core::synth::schema().fingerprint()
    );
    let rows = generate(&SynthConfig::new(3, 500));
    let mut fast = 0;
    for r in &rows {
        let d = e.decide(&r.txn).unwrap();
        fast += (d.tier == Tier::Fast) as usize;
        assert!(d.model_score.is_some());
    }
    assert!(fast > 300, "{fast}");
}
