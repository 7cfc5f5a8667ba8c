//! The Llama-family deep tier (issue [4]), in progress.
//!
//! Present: [`model`] (the Llama forward on candle-core, GGUF loading, explicit
//! per-request KV caches), [`prefix_cache`] (the shared-prefix KV state store, keyed by prompt tokens,
//! model identity and precision plan, with pinning, LRU and metrics) and [`prompt`]
//! (system prompt + per-transaction suffix templates). [`tokenizer`] (from `tokenizer.json` or the GGUF's own metadata). To come
//! in this module: safetensors loading, batched suffix prefill, and `DeepScorer`.

pub mod deep;
pub mod model;
pub mod prefix_cache;
pub mod prompt;
pub mod tokenizer;

pub use deep::{DeepFiles, DeepHead, DeepOptions, DeepScorer, DeepStats, LinearProbe};
pub use model::{KvCache, Llama, LlamaConfig, LlmError};
pub use prefix_cache::{CacheError, CacheStats, PrefixCache, PrefixKey};
pub use prompt::{PromptTemplate, TemplateError};
pub use tokenizer::LlmTokenizer;
