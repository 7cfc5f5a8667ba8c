//! The Llama-family deep tier (issue [4]), in progress.
//!
//! Present: [`prefix_cache`] (the shared-prefix KV state store, keyed by prompt tokens,
//! model identity and precision plan, with pinning, LRU and metrics) and [`prompt`]
//! (system prompt + per-transaction suffix templates). To come in this module: the
//! Llama forward on candle-core with explicit per-request KV caches, GGUF and safetensors
//! loading, the tokenizer from `tokenizer.json` or GGUF metadata, batched suffix prefill,
//! and `DeepScorer`.

pub mod prefix_cache;
pub mod prompt;

pub use prefix_cache::{CacheError, CacheStats, PrefixCache, PrefixKey};
pub use prompt::{PromptTemplate, TemplateError};
