//! Quality measures of a quantized model against its reference: perplexity of held-out
//! text and the mean KL divergence of next-token distributions.

use crate::llm::error::LlmError;
use crate::llm::model::Llama;
use candle_core::{DType, Tensor, D};

/// Log-probabilities `[T, vocab]` of every next token of `tokens` (position `t` predicts
/// token `t + 1`; the last position is dropped).
pub fn next_token_log_probs(model: &Llama, tokens: &[u32]) -> Result<Tensor, LlmError> {
    if tokens.len() < 2 {
        return Err(LlmError::Request("need at least 2 tokens".into()));
    }
    let logits = model.forward_all_logits(tokens)?;
    let logits = logits.narrow(0, 0, tokens.len() - 1)?;
    Ok(candle_nn::ops::log_softmax(&logits, D::Minus1)?)
}

/// Sum of negative log-likelihoods of `tokens[1..]` under `log_probs` (from
/// [`next_token_log_probs`]) and the count, to pool into a perplexity
/// `exp(sum / count)` over several sequences.
pub fn nll(log_probs: &Tensor, tokens: &[u32]) -> Result<(f64, usize), LlmError> {
    let next = Tensor::new(&tokens[1..], log_probs.device())?.unsqueeze(1)?;
    let picked = log_probs.gather(&next, 1)?;
    let s = picked.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?;
    Ok((-s, tokens.len() - 1))
}

/// Mean over positions of `KL(reference ‖ other)` between two `[T, vocab]`
/// log-probability tensors.
pub fn mean_kl(reference: &Tensor, other: &Tensor) -> Result<f64, LlmError> {
    let kl = (reference.exp()? * (reference - other)?)?.sum(D::Minus1)?;
    Ok(kl.to_dtype(DType::F64)?.mean_all()?.to_scalar::<f64>()?)
}
