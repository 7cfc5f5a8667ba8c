//! [`BertScorer`]: the transaction rendered to text by a template, tokenized and
//! truncated to a token budget, encoded (candle f32 / INT8, or ONNX Runtime), pooled,
//! and scored by a [`TextHead`]. Latency unbounded: it runs on the tier pool, and a run
//! stops at its budget (between layers on candle, by ONNX Runtime's terminate).

use super::config::{BertConfig, EncoderId};
use super::encoder::{BertEncoder, Stop};
use super::head::TextHead;
use super::ort::{EncoderOutput, OrtEncoder};
use super::{BertError, Pooling};
use crate::llm::prompt::PromptTemplate;
use crate::qlinear::plan::Precision;
use candle_core::{Device, Tensor};
use risk_core::{FeatureSchema, Latency, Score, ScoreError, Scorer, ScorerInfo, Transaction};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenizers::{Tokenizer, TruncationParams};

/// Which runtime runs the encoder.
#[derive(Debug, Clone, PartialEq)]
pub enum BertBackend {
    /// The candle forward of this crate, linear layers at `precision` (f32 or int8).
    Candle {
        /// `F32` or `Int8`.
        precision: Precision,
    },
    /// An ONNX export through ONNX Runtime.
    Onnx {
        /// The `.onnx` file.
        model: PathBuf,
        /// `libonnxruntime.so` (default `ORT_DYLIB_PATH`).
        runtime: Option<PathBuf>,
        /// Parallel sessions.
        sessions: usize,
        /// Threads per run.
        intra_threads: usize,
    },
}

/// Everything a [`BertScorer`] is built from.
#[derive(Debug, Clone)]
pub struct BertFiles {
    /// Hugging Face model directory: `config.json`, `model.safetensors`, `tokenizer.json`.
    pub model_dir: PathBuf,
    /// Head safetensors (its sidecar is the same path with `.json`).
    pub head: PathBuf,
    /// Text template (`{{amount}}`, `{{t:merchant_descriptor}}`, ...; see
    /// [`PromptTemplate`]), without sections.
    pub template: PathBuf,
    /// Encoder runtime.
    pub backend: BertBackend,
    /// Token budget (special tokens included); longer texts are truncated.
    pub max_tokens: usize,
    /// Device of the candle backend.
    pub device: crate::device::Device,
}

impl BertFiles {
    /// Candle f32, a 64-token budget (what the committed head was trained with; the
    /// cost grows with it: ~0.3 ms per token on two CPU cores), on the CPU.
    pub fn new(
        model_dir: impl Into<PathBuf>,
        head: impl Into<PathBuf>,
        template: impl Into<PathBuf>,
    ) -> Self {
        Self {
            model_dir: model_dir.into(),
            head: head.into(),
            template: template.into(),
            backend: BertBackend::Candle {
                precision: Precision::F32,
            },
            max_tokens: 64,
            device: crate::device::Device::Cpu,
        }
    }
}

#[derive(Debug)]
enum Engine {
    Candle(BertEncoder),
    Onnx(OrtEncoder),
}

/// Counters of a [`BertScorer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BertStats {
    /// Transactions scored.
    pub scored: u64,
    /// Runs stopped at their budget.
    pub stopped: u64,
    /// Texts cut to the token budget.
    pub truncated: u64,
}

/// Called before each encoder layer (tests use it to make the encoder slow).
pub type LayerHook = Arc<dyn Fn(usize) + Send + Sync>;

/// A BERT-family text classifier as a fast tier.
pub struct BertScorer {
    config: BertConfig,
    encoder_id: EncoderId,
    engine: Engine,
    tokenizer: Tokenizer,
    template: PromptTemplate,
    head: TextHead,
    max_tokens: usize,
    max_text_bytes: usize,
    name: String,
    version: String,
    content_hash: u64,
    hook: Option<LayerHook>,
    scored: AtomicU64,
    stopped: AtomicU64,
    truncated: AtomicU64,
}

impl std::fmt::Debug for BertScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertScorer")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// Largest `tokenizer.json` accepted, bytes.
pub const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

/// The identity of the encoder in `model_dir` (hashes `model.safetensors`).
pub fn encoder_id(model_dir: &Path, config: &BertConfig) -> Result<EncoderId, BertError> {
    let weights = model_dir.join("model.safetensors");
    let bytes = std::fs::read(&weights).map_err(|e| BertError::Weights {
        path: weights.clone(),
        message: e.to_string(),
    })?;
    Ok(EncoderId {
        name: dir_name(model_dir),
        hidden_size: config.hidden_size,
        layers: config.num_hidden_layers,
        weights_fnv64: format!("{:016x}", risk_core::schema::Fnv::hash(&bytes)),
    })
}

/// The directory's name, or its parent's when it is a package's `model/` folder.
fn dir_name(dir: &Path) -> String {
    let name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    match name(dir).as_deref() {
        Some("model") | None => dir.parent().and_then(name).unwrap_or_else(|| "bert".into()),
        Some(n) => n.to_owned(),
    }
}

/// Loads `tokenizer.json` from `model_dir`, truncating to `max_tokens`, no padding.
pub fn load_tokenizer(model_dir: &Path, max_tokens: usize) -> Result<Tokenizer, BertError> {
    let path = model_dir.join("tokenizer.json");
    let err = |m: String| BertError::Tokenizer {
        path: path.clone(),
        message: m,
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| err(e.to_string()))?
        .len();
    if len > MAX_TOKENIZER_BYTES {
        return Err(err(format!("{len} bytes (at most {MAX_TOKENIZER_BYTES})")));
    }
    let mut t = Tokenizer::from_file(&path).map_err(|e| err(e.to_string()))?;
    t.with_padding(None);
    t.with_truncation(Some(TruncationParams {
        max_length: max_tokens,
        ..Default::default()
    }))
    .map_err(|e| err(e.to_string()))?;
    Ok(t)
}

impl BertScorer {
    /// Loads the model, the head (refused unless trained on this encoder), the
    /// tokenizer and the template over `schema`.
    pub fn load(files: &BertFiles, schema: Arc<FeatureSchema>) -> Result<Self, BertError> {
        let config = BertConfig::from_file(&files.model_dir.join("config.json"))?;
        if files.max_tokens < 2 || files.max_tokens > config.max_position_embeddings {
            return Err(BertError::Input(format!(
                "max_tokens {} outside 2..={} (the model's positions)",
                files.max_tokens, config.max_position_embeddings
            )));
        }
        let id = encoder_id(&files.model_dir, &config)?;
        let head = TextHead::load(&files.head)?;
        if !head.meta.encoder.same_encoder(&id) || head.input_dim() != config.hidden_size {
            return Err(BertError::EncoderMismatch {
                head: head.meta.encoder.to_string(),
                model: id.to_string(),
            });
        }
        let tokenizer = load_tokenizer(&files.model_dir, files.max_tokens)?;
        let text = std::fs::read_to_string(&files.template).map_err(|e| BertError::Template {
            path: files.template.clone(),
            message: e.to_string(),
        })?;
        let template =
            PromptTemplate::parse_body(&text, schema).map_err(|e| BertError::Template {
                path: files.template.clone(),
                message: e.to_string(),
            })?;
        let head_bytes = std::fs::read(&files.head).map_err(|e| BertError::Head {
            path: files.head.clone(),
            message: e.to_string(),
        })?;
        let head_hash = risk_core::schema::Fnv::hash(&head_bytes);
        let (engine, runtime, engine_hash) = match &files.backend {
            BertBackend::Candle { precision } => {
                let device = files
                    .device
                    .candle()
                    .map_err(|e| BertError::Input(e.to_string()))?;
                let dev_name = match &device {
                    Device::Cpu => "cpu".to_string(),
                    d => format!("{d:?}").to_lowercase(),
                };
                let enc = BertEncoder::load(
                    config.clone(),
                    &files.model_dir.join("model.safetensors"),
                    *precision,
                    &device,
                )?;
                (
                    Engine::Candle(enc),
                    format!("candle-{precision}-{dev_name}"),
                    0,
                )
            }
            BertBackend::Onnx {
                model,
                runtime,
                sessions,
                intra_threads,
            } => {
                let enc = OrtEncoder::load(model, runtime.as_deref(), *sessions, *intra_threads)?;
                let h = enc.content_hash;
                let stem = model.file_stem().and_then(|s| s.to_str()).unwrap_or("onnx");
                (Engine::Onnx(enc), format!("ort-{stem}"), h)
            }
        };
        let mut h = risk_core::schema::Fnv::new();
        h.write(id.weights_fnv64.as_bytes());
        h.write(&head_hash.to_le_bytes());
        h.write(&engine_hash.to_le_bytes());
        h.write(text.as_bytes());
        let content_hash = h.finish();
        Ok(Self {
            name: format!("bert:{}:{runtime}", id.name),
            version: format!("{}:{:016x}", id.name, content_hash),
            encoder_id: id,
            config,
            engine,
            tokenizer,
            template,
            head,
            max_tokens: files.max_tokens,
            // A word-piece is at least one character and BERT tokenizers give up on
            // words over 100 characters, so bytes past this cannot reach the budget.
            max_text_bytes: files.max_tokens * 128,
            content_hash,
            hook: None,
            scored: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
        })
    }

    /// Runs `hook(layer)` before each encoder layer (candle backend): for tests that need
    /// a slow encoder.
    pub fn with_layer_hook(mut self, hook: LayerHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The encoder's identity.
    pub fn encoder_id(&self) -> &EncoderId {
        &self.encoder_id
    }

    /// The head.
    pub fn head(&self) -> &TextHead {
        &self.head
    }

    /// Counters.
    pub fn stats(&self) -> BertStats {
        BertStats {
            scored: self.scored.load(Ordering::Relaxed),
            stopped: self.stopped.load(Ordering::Relaxed),
            truncated: self.truncated.load(Ordering::Relaxed),
        }
    }

    /// The text a transaction is rendered to.
    pub fn render(&self, t: &Transaction) -> String {
        let mut s = String::new();
        self.template.render_into(t, &[], &mut s);
        s
    }

    /// Token ids of `text` under the budget (special tokens included).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, BertError> {
        let mut cut = text.len().min(self.max_text_bytes);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let enc = self
            .tokenizer
            .encode(&text[..cut], true)
            .map_err(|e| BertError::Input(format!("tokenizer: {e}")))?;
        if !enc.get_overflowing().is_empty() || cut < text.len() {
            self.truncated.fetch_add(1, Ordering::Relaxed);
        }
        Ok(enc.get_ids().to_vec())
    }

    /// Pooled (and, per the head's sidecar, normalised) embeddings of `texts`, one
    /// `hidden`-wide row each; `deadline` stops the run.
    pub fn embed(
        &self,
        texts: &[&str],
        deadline: Option<Instant>,
    ) -> Result<Vec<Vec<f32>>, BertError> {
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| self.tokenize(t))
            .collect::<Result<_, _>>()?;
        self.embed_ids(&ids, deadline)
    }

    /// Like [`embed`](Self::embed) for already tokenized inputs.
    pub fn embed_ids(
        &self,
        ids: &[Vec<u32>],
        deadline: Option<Instant>,
    ) -> Result<Vec<Vec<f32>>, BertError> {
        let b = ids.len();
        if b == 0 {
            return Ok(Vec::new());
        }
        let t = ids.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let h = self.config.hidden_size;
        let mut flat = vec![0u32; b * t];
        let mut mask = vec![0f32; b * t];
        for (r, row) in ids.iter().enumerate() {
            flat[r * t..r * t + row.len()].copy_from_slice(row);
            mask[r * t..r * t + row.len()]
                .iter_mut()
                .for_each(|m| *m = 1.0);
        }
        let hidden: Vec<f32> = match &self.engine {
            Engine::Candle(enc) => {
                let dev = enc.device();
                let terr = |e: candle_core::Error| BertError::Tensor(e.to_string());
                let ids_t = Tensor::from_vec(flat, (b, t), dev).map_err(terr)?;
                let mask_t = Tensor::from_slice(&mask, (b, t), dev).map_err(terr)?;
                let hook = self.hook.clone();
                let mut check = |layer: usize| -> Result<(), Stop> {
                    if let Some(h) = &hook {
                        h(layer);
                    }
                    match deadline {
                        Some(d) if Instant::now() >= d => Err(Stop),
                        _ => Ok(()),
                    }
                };
                let x = enc.forward(&ids_t, &mask_t, None, &mut check)?;
                x.flatten_all()
                    .and_then(|x| x.to_vec1::<f32>())
                    .map_err(terr)?
            }
            Engine::Onnx(enc) => {
                let ids64: Vec<i64> = flat.iter().map(|&x| x as i64).collect();
                let mask64: Vec<i64> = mask.iter().map(|&x| x as i64).collect();
                let budget = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                match enc.run(&ids64, &mask64, b, t, h, budget) {
                    Ok(EncoderOutput::Hidden(x)) => x,
                    Ok(EncoderOutput::Pooled(x)) => {
                        let mut rows: Vec<Vec<f32>> =
                            x.chunks_exact(h).map(<[f32]>::to_vec).collect();
                        if self.head.meta.normalize {
                            rows.iter_mut().for_each(|r| l2_normalize(r));
                        }
                        return Ok(rows);
                    }
                    Err(ScoreError::Cancelled) => return Err(BertError::Stopped { layer: 0 }),
                    Err(e) => return Err(BertError::Tensor(e.to_string())),
                }
            }
        };
        Ok(pool_rows(
            &hidden,
            &mask,
            b,
            t,
            h,
            self.head.meta.pooling,
            self.head.meta.normalize,
        ))
    }

    fn score_many(
        &self,
        txns: &[&Transaction],
        deadline: Option<Instant>,
    ) -> Result<Vec<f32>, ScoreError> {
        let texts: Vec<String> = txns.iter().map(|t| self.render(t)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let e = self.embed(&refs, deadline).map_err(|e| match e {
            BertError::Stopped { .. } => {
                self.stopped.fetch_add(1, Ordering::Relaxed);
                ScoreError::Cancelled
            }
            e => ScoreError::Failed(e.to_string()),
        })?;
        self.scored.fetch_add(txns.len() as u64, Ordering::Relaxed);
        Ok(e.iter().map(|v| self.head.probability(v)).collect())
    }
}

fn l2_normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// Pools hidden states (`b × t × h`, row-major) under `mask` (`b × t`, 1 = token):
/// the mask-weighted mean or the first ([CLS]) position, then optionally L2-normalises.
pub fn pool_rows(
    hidden: &[f32],
    mask: &[f32],
    b: usize,
    t: usize,
    h: usize,
    pooling: Pooling,
    normalize: bool,
) -> Vec<Vec<f32>> {
    (0..b)
        .map(|r| {
            let rows = &hidden[r * t * h..(r + 1) * t * h];
            let mut v = match pooling {
                Pooling::Cls => rows[..h].to_vec(),
                Pooling::Mean => {
                    let mut acc = vec![0f32; h];
                    let mut n = 0f32;
                    for (p, m) in mask[r * t..(r + 1) * t].iter().enumerate() {
                        if *m > 0.0 {
                            n += 1.0;
                            acc.iter_mut()
                                .zip(&rows[p * h..(p + 1) * h])
                                .for_each(|(a, x)| *a += x);
                        }
                    }
                    acc.iter_mut().for_each(|a| *a /= n.max(1e-9));
                    acc
                }
            };
            if normalize {
                l2_normalize(&mut v);
            }
            v
        })
        .collect()
}

impl Scorer for BertScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(&self.name, &self.version, Latency::Unbounded)
            .with_content_hash(self.content_hash)
    }

    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        Ok(Score::new(self.score_many(&[t], None)?[0]))
    }

    fn score_within(&self, t: &Transaction, budget: Duration) -> Result<Score, ScoreError> {
        let deadline = Instant::now().checked_add(budget);
        Ok(Score::new(self.score_many(&[t], deadline)?[0]))
    }

    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        out.extend(self.score_many(txns, None)?.into_iter().map(Score::new));
        Ok(())
    }

    fn score_batch_within(
        &self,
        txns: &[&Transaction],
        budget: Duration,
        out: &mut Vec<Score>,
    ) -> Result<(), ScoreError> {
        out.clear();
        let deadline = Instant::now().checked_add(budget);
        out.extend(self.score_many(txns, deadline)?.into_iter().map(Score::new));
        Ok(())
    }

    fn warmup(&self) -> Result<(), ScoreError> {
        // One short run allocates the GEMM buffers (and, for ONNX Runtime, its arenas).
        let ids = self
            .tokenize("warm up")
            .map_err(|e| ScoreError::Failed(e.to_string()))?;
        self.embed_ids(&[ids], None)
            .map(|_| ())
            .map_err(|e| ScoreError::Failed(e.to_string()))
    }
}
