//! `DeepScorer`: the gray-zone tier. A transaction (with the entity's recent history) is
//! rendered after a fixed system prompt, the model runs **one prefill** over the
//! per-transaction suffix on top of the system prompt's cached KV state, and the score is
//! read from the last position: either the normalised probability of configured answer
//! tokens (`" yes"` vs `" no"`) or a linear probe over the final hidden state.
//!
//! The system prompt's KV state lives in a [`PrefixCache`](crate::llm::PrefixCache)
//! under a [`PrefixKey`](crate::llm::PrefixKey) of its tokens, the model identity (name
//! plus a hash of the weights file) and the precision plan, pinned, so a changed prompt,
//! model or plan can never be served a stale state. A batch of transactions runs as one
//! packed forward ([`Llama::forward_packed`](crate::llm::Llama::forward_packed)).
//!
//! The tier's files: [`DeepFiles`] and [`DeepOptions`] (`config`), the score's head
//! ([`DeepHead`], `head`), the linear probe and its trainer ([`LinearProbe`], `probe`),
//! per-entity history (`history`) and [`DeepScorer`] itself (`scorer`).

mod config;
mod head;
mod history;
mod probe;
mod scorer;

pub use config::{DeepFiles, DeepOptions};
pub use head::{answer_probability, DeepHead};
pub use probe::{LinearProbe, ProbeFit};
pub use scorer::{DeepScorer, DeepStats};
