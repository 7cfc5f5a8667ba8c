//! The BERT encoder through ONNX Runtime: any ONNX export with the Hugging Face
//! interface (int64 `input_ids`, `attention_mask`, optional `token_type_ids`, all
//! `[batch, sequence]`) and a float output `[batch, sequence, hidden]` (for example
//! `last_hidden_state`, as optimum exports BertModel) or `[batch, hidden]` (an already
//! pooled embedding). `tools/export_bert_onnx.py` writes one from the Hugging Face files
//! (and its dynamically quantized INT8 variant). Runs are terminated at the deadline like
//! the `onnx` tier's.

use super::BertError;
use crate::onnx::watchdog::Watchdog;
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use parking_lot::Mutex;
use risk_core::ScoreError;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// What the ONNX encoder returns for a batch.
#[derive(Debug)]
pub enum EncoderOutput {
    /// Hidden states `[batch, seq, hidden]`, row-major.
    Hidden(Vec<f32>),
    /// Pooled embeddings `[batch, hidden]`, row-major (pooling is the model's).
    Pooled(Vec<f32>),
}

/// An ONNX BERT encoder.
pub struct OrtEncoder {
    sessions: Vec<Mutex<Session>>,
    next: AtomicUsize,
    token_types: bool,
    output: String,
    rank: usize,
    watchdog: Watchdog,
    placement: String,
    /// FNV-1a 64 of the file.
    pub content_hash: u64,
}

impl std::fmt::Debug for OrtEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtEncoder")
            .field("output", &self.output)
            .field("rank", &self.rank)
            .field("placement", &self.placement)
            .finish()
    }
}

impl OrtEncoder {
    /// Loads `path` with `sessions` parallel sessions of `intra_threads` threads each.
    pub fn load(
        path: &Path,
        runtime: Option<&Path>,
        sessions: usize,
        intra_threads: usize,
    ) -> Result<Self, BertError> {
        let err = |m: String| BertError::Onnx {
            path: path.to_path_buf(),
            message: m,
        };
        let env = crate::onnx::environment(runtime).map_err(|e| err(e.to_string()))?;
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        let mut list = Vec::new();
        let mut placement = String::new();
        for _ in 0..sessions.max(1) {
            let (mut b, p) = crate::onnx::builder(env, intra_threads, None).map_err(&err)?;
            placement = p;
            list.push(
                b.commit_from_memory(&bytes)
                    .map_err(|e| err(e.to_string()))?,
            );
        }
        let s0 = &list[0];
        let names: Vec<&str> = s0.inputs().iter().map(|i| i.name()).collect();
        for need in ["input_ids", "attention_mask"] {
            if !names.contains(&need) {
                return Err(err(format!(
                    "no input named {need:?} (inputs: {names:?}); expected the Hugging Face BERT interface"
                )));
            }
        }
        for i in s0.inputs() {
            let ok = matches!(
                i.dtype(),
                ValueType::Tensor {
                    ty: TensorElementType::Int64,
                    ..
                }
            );
            if !ok {
                return Err(err(format!(
                    "input {:?} is {:?}, expected int64",
                    i.name(),
                    i.dtype()
                )));
            }
            if !["input_ids", "attention_mask", "token_type_ids"].contains(&i.name()) {
                return Err(err(format!("unexpected input {:?}", i.name())));
            }
        }
        let (output, rank) = s0
            .outputs()
            .iter()
            .find_map(|o| match o.dtype() {
                ValueType::Tensor {
                    ty: TensorElementType::Float32,
                    shape,
                    ..
                } if shape.len() == 3 || shape.len() == 2 => {
                    Some((o.name().to_owned(), shape.len()))
                }
                _ => None,
            })
            .ok_or_else(|| {
                err("no float output of shape [batch, seq, hidden] or [batch, hidden]".into())
            })?;
        Ok(Self {
            token_types: names.contains(&"token_type_ids"),
            sessions: list.into_iter().map(Mutex::new).collect(),
            next: AtomicUsize::new(0),
            output,
            rank,
            watchdog: Watchdog::start().map_err(|e| err(e.to_string()))?,
            placement,
            content_hash: risk_core::schema::Fnv::hash(&bytes),
        })
    }

    /// Where the sessions run.
    pub fn placement(&self) -> &str {
        &self.placement
    }

    /// Runs a padded batch `[b, t]`; `budget` terminates a late run.
    pub fn run(
        &self,
        ids: &[i64],
        mask: &[i64],
        b: usize,
        t: usize,
        hidden: usize,
        budget: Option<Duration>,
    ) -> Result<EncoderOutput, ScoreError> {
        let fail = |e: ort::Error| ScoreError::Failed(e.to_string());
        let types = vec![0i64; if self.token_types { ids.len() } else { 0 }];
        let ids_t = TensorRef::from_array_view(([b, t], ids)).map_err(fail)?;
        let mask_t = TensorRef::from_array_view(([b, t], mask)).map_err(fail)?;
        let mut inputs = ort::inputs!["input_ids" => ids_t, "attention_mask" => mask_t];
        if self.token_types {
            let types_t = TensorRef::from_array_view(([b, t], &types[..])).map_err(fail)?;
            inputs.push(("token_type_ids".into(), types_t.into()));
        }
        let mut session = crate::onnx::pick_session(&self.sessions, &self.next);
        self.watchdog
            .run_within(&mut session, inputs, budget, |out| {
                self.read(out, b, t, hidden)
            })
    }

    fn read(
        &self,
        out: &ort::session::SessionOutputs<'_>,
        b: usize,
        t: usize,
        hidden: usize,
    ) -> Result<EncoderOutput, ScoreError> {
        let fail = |e: ort::Error| ScoreError::Failed(e.to_string());
        let v = out
            .get(&self.output)
            .ok_or_else(|| ScoreError::Failed(format!("output {:?} missing", self.output)))?;
        let (shape, x) = v.try_extract_tensor::<f32>().map_err(fail)?;
        let want: Vec<i64> = if self.rank == 3 {
            vec![b as i64, t as i64, hidden as i64]
        } else {
            vec![b as i64, hidden as i64]
        };
        if shape.iter().copied().collect::<Vec<i64>>() != want {
            return Err(ScoreError::Failed(format!(
                "ONNX encoder output {:?} has shape {shape:?}, expected {want:?}",
                self.output
            )));
        }
        Ok(if self.rank == 3 {
            EncoderOutput::Hidden(x.to_vec())
        } else {
            EncoderOutput::Pooled(x.to_vec())
        })
    }
}
