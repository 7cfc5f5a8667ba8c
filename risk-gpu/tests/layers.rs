//! The crate's modules import strictly downward (STYLE.md habit 3a): the floor table below,
//! lowest first, is checked by `risk_layers::check` against every file under `src/`
//! (upward imports, imports through the crate root's re-exports, file import cycles, and
//! modules no floor places, each named with file and line).

use std::path::Path;

/// Lowest floor first; a module may use its own floor and those below, never above.
/// - `device`, `slots`: where a model runs, a feature list's schema slots;
/// - `trees`, `onnx`, `qlinear`: the backends that need nothing above them, and the
///   quantized linear layers (precision plans, INT4/INT8 formats, kernels) the model runs on;
/// - `llm`: the Llama model (error, config, loading, forward, plan application), its
///   tokenizer, limits, prompts and prefix cache;
/// - `quant`: tools that take a whole model (AWQ calibration, evaluation, checkpoint
///   writing), re-exporting `qlinear` as the public `risk_gpu::quant`;
/// - `llm/deep`, `bert`, `remote`: the tiers (the deep tier loads a model; the BERT tier
///   borrows the prompt templates);
/// - `registry`: builds any tier from `risk.toml`.
const FLOORS: &[&[&str]] = &[
    &["device", "slots"],
    &["trees", "onnx", "qlinear"],
    &["llm"],
    &["quant"],
    &["llm/deep", "bert", "remote"],
    &["registry"],
];

#[test]
fn modules_import_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    if let Err(e) = risk_layers::check(src.as_path(), FLOORS) {
        panic!("{e}");
    }
}
