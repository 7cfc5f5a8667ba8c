//! [`DeepHead`]: how the score is read from the model's last position.

use super::probe::LinearProbe;

/// How the score is read from the last position.
#[derive(Debug, Clone)]
pub enum DeepHead {
    /// `P(yes) / (P(yes) + P(no))` over the next-token distribution, each side the sum
    /// over its tokens (e.g. `" yes"`, `" Yes"`).
    Answer {
        /// Token ids that mean fraud.
        yes: Vec<u32>,
        /// Token ids that mean legitimate.
        no: Vec<u32>,
    },
    /// `sigmoid(w · h + b)` over the final (normalised) hidden state.
    Probe(LinearProbe),
}

/// `P(yes) / (P(yes) + P(no))` from the logits of the yes tokens followed by the no
/// tokens (`row[..n_yes]`, `row[n_yes..]`), computed stably in log space.
pub fn answer_probability(row: &[f32], n_yes: usize) -> f32 {
    let lse = |v: &[f32]| {
        let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        m + v.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
    };
    let (y, n) = row.split_at(n_yes);
    let d = lse(y) - lse(n);
    (1.0 / (1.0 + (-d).exp())) as f32
}
