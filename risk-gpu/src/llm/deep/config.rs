//! What a [`DeepScorer`](super::DeepScorer) is loaded from ([`DeepFiles`]) and its bounds
//! ([`DeepOptions`]).

use crate::device::Device;
use crate::qlinear::plan::QuantPlan;
use std::path::PathBuf;

/// Options of a [`DeepScorer`](super::DeepScorer).
#[derive(Debug, Clone)]
pub struct DeepOptions {
    /// Most tokens a transaction's suffix may take; history lines are dropped (oldest
    /// first) to fit, and a suffix that does not fit even without history is a tier
    /// failure.
    pub max_suffix_tokens: usize,
    /// Recent transactions per entity rendered into the prompt.
    pub history: usize,
    /// Entities whose history is kept (oldest-seen evicted beyond).
    pub history_entities: usize,
    /// Most bytes of prompt text one entity's history may bring (each transaction counted
    /// as 64 bytes plus its fenced free text); the oldest transactions go first.
    pub history_bytes: usize,
    /// Prefix states kept (the system prompt's is pinned).
    pub cache_entries: usize,
    /// Bytes of prefix state kept.
    pub cache_bytes: usize,
}

impl Default for DeepOptions {
    fn default() -> Self {
        Self {
            max_suffix_tokens: 128,
            history: 2,
            history_entities: 100_000,
            history_bytes: 4096,
            cache_entries: 8,
            cache_bytes: 512 << 20,
        }
    }
}

/// Files a [`DeepScorer`](super::DeepScorer) is loaded from.
#[derive(Debug, Clone)]
pub struct DeepFiles {
    /// GGUF weights, or a Hugging Face / AutoAWQ checkpoint directory (`config.json` +
    /// `*.safetensors`, e.g. one written by `risk_gpu::quant::checkpoint::save`).
    pub model: PathBuf,
    /// `tokenizer.json`; `None`: the GGUF's own tokenizer metadata, or the checkpoint
    /// directory's `tokenizer.json`.
    pub tokenizer: Option<PathBuf>,
    /// Precision plan applied at load (`None`: weights as stored). `awq_int4` entries need
    /// a calibrated checkpoint instead (`cargo run --release --example quant_report --
    /// --save DIR`).
    pub quant: Option<QuantPlan>,
    /// Where the model runs (CUDA needs `--features cuda`).
    pub device: Device,
    /// Prompt template (`[system]`, `[transaction]`, `[history]`).
    pub template: PathBuf,
    /// Linear probe (safetensors); `None`: the answer-token head.
    pub probe: Option<PathBuf>,
    /// Answer word meaning fraud (answer head).
    pub yes: String,
    /// Answer word meaning legitimate (answer head).
    pub no: String,
}

impl DeepFiles {
    /// The answer-token head with `yes` / `no` over `model`'s own tokenizer.
    pub fn new(model: impl Into<PathBuf>, template: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            tokenizer: None,
            quant: None,
            device: Device::Cpu,
            template: template.into(),
            probe: None,
            yes: "yes".into(),
            no: "no".into(),
        }
    }
}
