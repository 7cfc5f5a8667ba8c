//! [`Llama::quantize`]: a plan applied to a model (round to nearest, or the AWQ-scaled
//! weights [`crate::quant::calibrate`] left; the calibration itself is above this floor).

use super::error::LlmError;
use super::model::Llama;
use crate::qlinear::error::QuantError;
use crate::qlinear::linear::QLinear;
use crate::qlinear::plan::{Precision, Proj, QuantPlan};

fn requantize(name: &str, w: &QLinear, p: Precision) -> Result<QLinear, LlmError> {
    if w.precision() == p {
        return Ok(w.clone());
    }
    Ok(QLinear::quantize(name, &w.dequantize()?, p)?)
}

impl Llama {
    /// A copy of the model with its weights stored as `plan` says (unlisted weights keep
    /// their precision). `awq_int4` projections must have been calibrated for the same
    /// group size ([`crate::quant::calibrate`]); otherwise the error names the projection. The
    /// result's identity adds the plan, so its prefix-cache entries never mix with
    /// another plan's.
    pub fn quantize(&self, plan: &QuantPlan) -> Result<Llama, LlmError> {
        let r = plan.resolve(self.cfg.layers, self.tied)?;
        let mut m = self.clone();
        for (l, b) in m.blocks.iter_mut().enumerate() {
            for p in Proj::ALL {
                let prec = r.get(l, p);
                let name = format!("model.layers.{l}.{}", p.hf_name());
                if let Precision::AwqInt4 { group } = prec {
                    if b.awq[p as usize] != Some(group) {
                        return Err(QuantError::Plan {
                            entry: format!("layers.{l}.{}", p.hf_name()),
                            reason: format!(
                                "awq_int4_g{group} needs AWQ calibration for that group size first (risk_gpu::quant::calibrate)"
                            ),
                        }
                        .into());
                    }
                }
                if prec == Precision::F32 && b.proj(p).precision() == Precision::F32 {
                    continue;
                }
                let w = requantize(&name, b.proj(p), prec)?;
                *b.proj_mut(p) = w;
            }
        }
        m.embed = requantize("model.embed_tokens", &self.embed, r.embeddings)?;
        m.head = match r.head {
            None => m.embed.clone(),
            Some(p) => {
                m.tied = false;
                requantize("lm_head", &self.head, p)?
            }
        };
        m.plan = plan.to_string();
        m.identity = format!("{} quant[{}]", self.identity, m.plan);
        Ok(m)
    }

    /// Precision of every block projection (`[layer][Proj::ALL order]`).
    pub fn precisions(&self) -> Vec<[Precision; 7]> {
        self.blocks
            .iter()
            .map(|b| Proj::ALL.map(|p| b.proj(p).precision()))
            .collect()
    }
}
