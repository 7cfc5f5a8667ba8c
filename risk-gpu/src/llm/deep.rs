//! `DeepScorer`: the gray-zone tier. A transaction (with the entity's recent history) is
//! rendered after a fixed system prompt, the model runs **one prefill** over the
//! per-transaction suffix on top of the system prompt's cached KV state, and the score is
//! read from the last position: either the normalised probability of configured answer
//! tokens (`" yes"` vs `" no"`) or a linear probe over the final hidden state.
//!
//! The system prompt's KV state lives in a [`PrefixCache`] under a [`PrefixKey`] of its
//! tokens, the model identity (name plus a hash of the weights file) and the precision
//! plan, pinned, so a changed prompt, model or plan can never be served a stale state.
//! A batch of transactions runs as one packed forward ([`Llama::forward_packed`]).

use super::model::{KvCache, Llama, LlmError};
use super::prefix_cache::{CacheStats, PrefixCache, PrefixKey};
use super::prompt::PromptTemplate;
use super::tokenizer::LlmTokenizer;
use candle_core::{DType, Device, Tensor};
use parking_lot::Mutex;
use risk_core::{
    EntityKey, Latency, ReasonCode, Reasons, Score, ScoreError, Scorer, ScorerInfo, Transaction,
};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// A logistic probe over the model's final hidden state, stored as safetensors
/// (`weight`: `[hidden]` f32, `bias`: `[1]` f32) with an optional JSON sidecar
/// (`<file>.json`, `{"model": "<identity>", ...}`) naming the model it was fitted on; a
/// scorer refuses a probe fitted on other weights.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearProbe {
    /// One weight per hidden unit.
    pub weight: Vec<f32>,
    /// Intercept.
    pub bias: f32,
    /// [`Llama::identity`] of the model the probe was fitted on, when known.
    pub model: Option<String>,
}

/// Options of [`LinearProbe::fit`].
#[derive(Debug, Clone, Copy)]
pub struct ProbeFit {
    /// L2 penalty on the standardised weights (the intercept is not penalised).
    pub l2: f64,
    /// Most Newton steps.
    pub max_iterations: usize,
}

impl Default for ProbeFit {
    fn default() -> Self {
        Self {
            l2: 1e-2,
            max_iterations: 50,
        }
    }
}

/// Solves `a x = b` for a symmetric positive-definite `a` (`k × k`, row-major) by
/// Cholesky; `None` if `a` is not positive definite.
fn cholesky_solve(a: &[f64], b: &[f64], k: usize) -> Option<Vec<f64>> {
    let mut l = vec![0f64; k * k];
    for i in 0..k {
        for j in 0..=i {
            let mut sum = a[i * k + j];
            for p in 0..j {
                sum -= l[i * k + p] * l[j * k + p];
            }
            if i == j {
                if sum <= 0.0 || !sum.is_finite() {
                    return None;
                }
                l[i * k + i] = sum.sqrt();
            } else {
                l[i * k + j] = sum / l[j * k + j];
            }
        }
    }
    let mut y = vec![0f64; k];
    for i in 0..k {
        let s: f64 = (0..i).map(|p| l[i * k + p] * y[p]).sum();
        y[i] = (b[i] - s) / l[i * k + i];
    }
    let mut x = vec![0f64; k];
    for i in (0..k).rev() {
        let s: f64 = (i + 1..k).map(|p| l[p * k + i] * x[p]).sum();
        x[i] = (y[i] - s) / l[i * k + i];
    }
    Some(x)
}

impl LinearProbe {
    /// Fits a logistic probe on hidden states (`rows`, each `[hidden]`) and labels by
    /// Newton's method (iteratively reweighted least squares) on standardised inputs with
    /// an L2 penalty; the standardisation is folded into the returned weights. Newton
    /// needs no step size, so strongly correlated hidden units cannot make it diverge.
    pub fn fit(rows: &[Vec<f32>], labels: &[bool], opts: ProbeFit) -> Result<Self, LlmError> {
        let n = rows.len();
        if n == 0 || n != labels.len() {
            return Err(LlmError::Request(format!(
                "{n} rows and {} labels",
                labels.len()
            )));
        }
        let k = rows[0].len();
        if rows.iter().any(|r| r.len() != k) {
            return Err(LlmError::Request("rows of different lengths".into()));
        }
        let pos = labels.iter().filter(|&&y| y).count();
        if pos == 0 || pos == n {
            return Err(LlmError::Request(
                "labels need both classes to fit a probe".into(),
            ));
        }
        if opts.l2.is_nan() || opts.l2 <= 0.0 {
            return Err(LlmError::Request("l2 must be positive".into()));
        }
        let mut mean = vec![0f64; k];
        for r in rows {
            for (m, &v) in mean.iter_mut().zip(r) {
                *m += v as f64 / n as f64;
            }
        }
        let mut sd = vec![0f64; k];
        for r in rows {
            for ((s, &v), m) in sd.iter_mut().zip(r).zip(&mean) {
                *s += (v as f64 - m).powi(2) / n as f64;
            }
        }
        sd.iter_mut().for_each(|s| *s = s.sqrt().max(1e-6));
        // Standardised rows with a trailing 1 for the intercept: `d = k + 1` columns.
        let d = k + 1;
        let x: Vec<f64> = rows
            .iter()
            .flat_map(|r| {
                r.iter()
                    .zip(&mean)
                    .zip(&sd)
                    .map(|((&v, m), s)| (v as f64 - m) / s)
                    .chain(std::iter::once(1.0))
            })
            .collect();
        let base = pos as f64 / n as f64;
        let mut beta = vec![0f64; d];
        beta[k] = (base / (1.0 - base)).ln();
        let mut h = vec![0f64; d * d];
        let mut g = vec![0f64; d];
        for _ in 0..opts.max_iterations.max(1) {
            h.iter_mut().for_each(|v| *v = 0.0);
            g.iter_mut().for_each(|v| *v = 0.0);
            for (row, &y) in x.chunks_exact(d).zip(labels) {
                let z: f64 = row.iter().zip(&beta).map(|(a, b)| a * b).sum();
                let p = 1.0 / (1.0 + (-z).exp());
                let wt = (p * (1.0 - p)).max(1e-10);
                let e = p - y as u8 as f64;
                for i in 0..d {
                    g[i] += e * row[i];
                    let wi = wt * row[i];
                    for j in 0..=i {
                        h[i * d + j] += wi * row[j];
                    }
                }
            }
            for i in 0..d {
                g[i] /= n as f64;
                for j in 0..=i {
                    h[i * d + j] /= n as f64;
                    h[j * d + i] = h[i * d + j];
                }
                if i < k {
                    g[i] += opts.l2 * beta[i];
                    h[i * d + i] += opts.l2;
                }
            }
            // The unpenalised intercept keeps H positive definite through its own
            // curvature; a tiny ridge guards against exact separation.
            h[k * d + k] += 1e-9;
            let step = cholesky_solve(&h, &g, d)
                .ok_or_else(|| LlmError::Request("probe fit: singular Hessian".into()))?;
            let mut change = 0f64;
            for (b, s) in beta.iter_mut().zip(&step) {
                *b -= s;
                change = change.max(s.abs());
            }
            if change < 1e-8 {
                break;
            }
        }
        let (w, b) = (&beta[..k], beta[k]);
        let weight: Vec<f32> = w.iter().zip(&sd).map(|(w, s)| (w / s) as f32).collect();
        let bias = b - w
            .iter()
            .zip(&mean)
            .zip(&sd)
            .map(|((w, m), s)| w * m / s)
            .sum::<f64>();
        if !bias.is_finite() || weight.iter().any(|v| !v.is_finite()) {
            return Err(LlmError::Request("probe fit diverged".into()));
        }
        Ok(Self {
            weight,
            bias: bias as f32,
            model: None,
        })
    }

    /// Loads a probe file; the hidden size is checked when the scorer is built.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let p = path.as_ref();
        let t = candle_core::safetensors::load(p, &Device::Cpu).map_err(|e| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })?;
        let get = |name: &str| -> Result<Vec<f32>, LlmError> {
            let v = t.get(name).ok_or_else(|| {
                LlmError::Format(format!("probe {}: tensor {name:?} missing", p.display()))
            })?;
            if v.rank() != 1 {
                return Err(LlmError::Format(format!(
                    "probe {}: tensor {name:?} has shape {:?}, expected a vector",
                    p.display(),
                    v.dims()
                )));
            }
            Ok(v.to_dtype(DType::F32)?.to_vec1()?)
        };
        let weight = get("weight")?;
        let bias = get("bias")?;
        if bias.len() != 1 {
            return Err(LlmError::Format(format!(
                "probe {}: bias has {} values, expected 1",
                p.display(),
                bias.len()
            )));
        }
        if weight.iter().chain(&bias).any(|v| !v.is_finite()) {
            return Err(LlmError::Format(format!(
                "probe {}: non-finite values",
                p.display()
            )));
        }
        let sidecar = sidecar(p);
        let model = match std::fs::read_to_string(&sidecar) {
            Err(_) => None,
            Ok(text) => {
                let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    LlmError::Format(format!("probe sidecar {}: {e}", sidecar.display()))
                })?;
                v.get("model").and_then(|m| m.as_str()).map(str::to_owned)
            }
        };
        Ok(Self {
            weight,
            bias: bias[0],
            model,
        })
    }

    /// Writes the probe as safetensors, and the sidecar `<file>.json` with the model
    /// identity (when known) and `extra` fields (fit metrics, data).
    pub fn save_with(
        &self,
        path: impl AsRef<Path>,
        extra: serde_json::Value,
    ) -> Result<(), LlmError> {
        self.save(&path)?;
        let mut v = match extra {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        if let Some(m) = &self.model {
            v.insert("model".into(), m.clone().into());
        }
        let p = sidecar(path.as_ref());
        std::fs::write(
            &p,
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n",
        )
        .map_err(|e| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })
    }

    /// Writes the probe as safetensors (no sidecar).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), LlmError> {
        let p = path.as_ref();
        let w = Tensor::new(self.weight.as_slice(), &Device::Cpu)?;
        let b = Tensor::new(&[self.bias], &Device::Cpu)?;
        candle_core::safetensors::save(
            &HashMap::from([("weight".to_owned(), w), ("bias".to_owned(), b)]),
            p,
        )
        .map_err(|e| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The probe's probability for one hidden state.
    pub fn apply(&self, h: &[f32]) -> f32 {
        let z: f64 = self
            .weight
            .iter()
            .zip(h)
            .map(|(&w, &x)| w as f64 * x as f64)
            .sum::<f64>()
            + self.bias as f64;
        (1.0 / (1.0 + (-z).exp())) as f32
    }
}

fn sidecar(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}

/// Options of a [`DeepScorer`].
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
            cache_entries: 8,
            cache_bytes: 512 << 20,
        }
    }
}

/// Files a [`DeepScorer`] is loaded from.
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
    pub quant: Option<crate::quant::QuantPlan>,
    /// Where the model runs (CUDA needs `--features cuda`).
    pub device: crate::Device,
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
            device: crate::Device::Cpu,
            template: template.into(),
            probe: None,
            yes: "yes".into(),
            no: "no".into(),
        }
    }
}

/// Recent transactions per entity, bounded in entities and per-entity length.
#[derive(Debug)]
struct History {
    per_entity: usize,
    max_entities: usize,
    map: HashMap<EntityKey, VecDeque<Transaction>>,
    order: VecDeque<EntityKey>,
}

impl History {
    fn observe(&mut self, t: &Transaction) {
        if self.per_entity == 0 {
            return;
        }
        if !self.map.contains_key(&t.entity) {
            while self.map.len() >= self.max_entities.max(1) {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(t.entity);
        }
        let q = self.map.entry(t.entity).or_default();
        if q.iter().any(|h| h.id == t.id) {
            return;
        }
        q.push_front(t.clone());
        q.truncate(self.per_entity);
    }

    /// Newest first, strictly before `t` and not `t` itself.
    fn recent(&self, t: &Transaction) -> Vec<Transaction> {
        self.map
            .get(&t.entity)
            .map(|q| {
                q.iter()
                    .filter(|h| h.id != t.id && h.timestamp_ms <= t.timestamp_ms)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Counters of a [`DeepScorer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeepStats {
    /// Transactions scored.
    pub scored: u64,
    /// Packed forwards run.
    pub batches: u64,
    /// Suffix tokens prefilled.
    pub suffix_tokens: u64,
    /// History lines dropped to fit `max_suffix_tokens`.
    pub history_dropped: u64,
    /// Batches that failed.
    pub failures: u64,
    /// Batches stopped between layers because their budget passed.
    pub cancelled: u64,
    /// Prefix cache counters.
    pub cache: CacheStats,
}

/// The Llama-family deep tier.
pub struct DeepScorer {
    model: Arc<Llama>,
    tokenizer: LlmTokenizer,
    template: PromptTemplate,
    head: DeepHead,
    opts: DeepOptions,
    key: PrefixKey,
    cache: Arc<PrefixCache<KvCache>>,
    build_lock: Mutex<()>,
    history: Mutex<History>,
    reason: ReasonCode,
    scored: AtomicU64,
    batches: AtomicU64,
    suffix_tokens: AtomicU64,
    history_dropped: AtomicU64,
    failures: AtomicU64,
    cancelled: AtomicU64,
}

impl std::fmt::Debug for DeepScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeepScorer")
            .field("model", &self.model.identity())
            .field("prefix_tokens", &self.key.tokens().len())
            .finish()
    }
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

fn fail(e: impl std::fmt::Display) -> ScoreError {
    ScoreError::Failed(format!("deep tier: {e}"))
}

impl DeepScorer {
    /// A scorer over `model` with a shared `cache` (several scorers, e.g. a canary and
    /// the serving model, may share one). Checks the head against the model.
    pub fn new(
        model: Arc<Llama>,
        tokenizer: LlmTokenizer,
        template: PromptTemplate,
        head: DeepHead,
        opts: DeepOptions,
        cache: Arc<PrefixCache<KvCache>>,
    ) -> Result<Self, LlmError> {
        let cfg = model.config();
        match &head {
            DeepHead::Answer { yes, no } => {
                if yes.is_empty() || no.is_empty() {
                    return Err(LlmError::Format(
                        "answer head needs at least one yes and one no token".into(),
                    ));
                }
                if let Some(bad) = yes.iter().chain(no).find(|&&t| t as usize >= cfg.vocab) {
                    return Err(LlmError::Format(format!(
                        "answer token {bad} outside the vocabulary of {}",
                        cfg.vocab
                    )));
                }
            }
            DeepHead::Probe(p) => {
                if let Some(m) = &p.model {
                    // A probe of the base weights serves their quantized variants too.
                    if m != model.identity() && m != model.base_identity() {
                        return Err(LlmError::Format(format!(
                            "probe was fitted on model {m:?}, this model is {:?}",
                            model.identity()
                        )));
                    }
                }
                if p.weight.len() != cfg.hidden {
                    return Err(LlmError::Format(format!(
                        "probe has {} weights, the model's hidden size is {}",
                        p.weight.len(),
                        cfg.hidden
                    )));
                }
            }
        }
        let prefix = tokenizer.encode(template.system())?;
        if prefix.is_empty() {
            return Err(LlmError::Format("the system prompt is empty".into()));
        }
        if prefix.len() + opts.max_suffix_tokens > cfg.max_positions {
            return Err(LlmError::Format(format!(
                "system prompt ({} tokens) + max_suffix_tokens ({}) exceed the context of {}",
                prefix.len(),
                opts.max_suffix_tokens,
                cfg.max_positions
            )));
        }
        let key = PrefixKey::new(&prefix, model.identity(), model.plan());
        let history = History {
            per_entity: opts.history,
            max_entities: opts.history_entities,
            map: HashMap::new(),
            order: VecDeque::new(),
        };
        Ok(Self {
            model,
            tokenizer,
            template,
            head,
            opts,
            key,
            cache,
            build_lock: Mutex::new(()),
            history: Mutex::new(history),
            reason: ReasonCode::intern("DEEP_LLM"),
            scored: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            suffix_tokens: AtomicU64::new(0),
            history_dropped: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
        })
    }

    /// Loads model, tokenizer, template and head from files, with a prefix cache of its
    /// own sized by `opts`.
    pub fn load(
        files: &DeepFiles,
        schema: Arc<risk_core::FeatureSchema>,
        opts: DeepOptions,
    ) -> Result<Self, LlmError> {
        let dir = files.model.is_dir();
        let device = files
            .device
            .candle()
            .map_err(|e| LlmError::Request(e.to_string()))?;
        let mut model = if dir {
            Llama::from_safetensors(&files.model, &device)?
        } else {
            Llama::from_gguf(&files.model, &device)?
        };
        if let Some(plan) = files.quant.as_ref().filter(|p| !p.is_empty()) {
            if plan.resolve(model.config().layers, false)?.needs_awq() {
                return Err(LlmError::Quant(crate::quant::QuantError::Plan {
                    entry: plan.to_string(),
                    reason: "awq_int4 needs calibration: write a calibrated checkpoint with `cargo run --release --example quant_report -- --save DIR --plan PLAN` and point `model` at DIR".into(),
                }));
            }
            model = model.quantize(plan)?;
        }
        let model = Arc::new(model);
        let tokenizer = match &files.tokenizer {
            Some(p) => LlmTokenizer::from_file(p)?,
            None if dir => LlmTokenizer::from_file(files.model.join("tokenizer.json"))?,
            None => LlmTokenizer::from_gguf(&files.model)?,
        };
        let text = std::fs::read_to_string(&files.template).map_err(|e| LlmError::Io {
            path: files.template.display().to_string(),
            message: e.to_string(),
        })?;
        let template = PromptTemplate::parse(&text, schema)
            .map_err(|e| LlmError::Format(format!("{}: {e}", files.template.display())))?;
        let head = match &files.probe {
            Some(p) => DeepHead::Probe(LinearProbe::load(p)?),
            None => Self::answer_head(&tokenizer, &files.yes, &files.no)?,
        };
        let cache = Arc::new(PrefixCache::new(opts.cache_entries, opts.cache_bytes));
        Self::new(model, tokenizer, template, head, opts, cache)
    }

    /// The answer head for `yes` / `no` words: each word's leading-space and capitalised
    /// forms that are single tokens of this tokenizer.
    pub fn answer_head(tok: &LlmTokenizer, yes: &str, no: &str) -> Result<DeepHead, LlmError> {
        let ids = |w: &str| -> Vec<u32> {
            let mut cap = w.to_owned();
            if let Some(c) = cap.get_mut(0..1) {
                c.make_ascii_uppercase();
            }
            let mut v: Vec<u32> = [format!(" {w}"), format!(" {cap}"), w.to_owned(), cap]
                .iter()
                .filter_map(|s| tok.single_token(s))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (y, n) = (ids(yes), ids(no));
        if y.is_empty() || n.is_empty() {
            return Err(LlmError::Format(format!(
                "answer words {yes:?} / {no:?} are not single tokens"
            )));
        }
        Ok(DeepHead::Answer { yes: y, no: n })
    }

    /// The prefix cache key of the system prompt.
    pub fn prefix_key(&self) -> &PrefixKey {
        &self.key
    }

    /// The model.
    pub fn model(&self) -> &Arc<Llama> {
        &self.model
    }

    /// Records a transaction in its entity's history (call it for every decided
    /// transaction so the prompt can show recent activity).
    pub fn observe(&self, t: &Transaction) {
        self.history.lock().observe(t);
    }

    /// Counters.
    pub fn stats(&self) -> DeepStats {
        DeepStats {
            scored: self.scored.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            suffix_tokens: self.suffix_tokens.load(Ordering::Relaxed),
            history_dropped: self.history_dropped.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            cache: self.cache.stats(),
        }
    }

    /// The system prompt's KV state: from the cache, else prefilled once (concurrent
    /// callers wait for one prefill) and stored pinned.
    pub fn prefix_state(&self) -> Result<Arc<KvCache>, LlmError> {
        if let Some(s) = self.cache.get(&self.key) {
            return Ok(s);
        }
        let _g = self.build_lock.lock();
        if let Some(s) = self.cache.get(&self.key) {
            return Ok(s);
        }
        let mut kv = KvCache::default();
        self.model.forward_hidden(self.key.tokens(), &mut kv)?;
        let bytes = kv.bytes();
        self.cache
            .insert(self.key.clone(), kv, bytes, true)
            .map_err(|e| LlmError::Request(format!("prefix cache: {e}")))
    }

    /// The rendered suffix of `t` and its tokens, dropping history lines (oldest first)
    /// until it fits `max_suffix_tokens`.
    pub fn suffix(&self, t: &Transaction) -> Result<(String, Vec<u32>), LlmError> {
        let mut hist = self.history.lock().recent(t);
        loop {
            let text = self.template.render(t, &hist);
            let ids = self.tokenizer.encode(&text)?;
            if ids.len() <= self.opts.max_suffix_tokens {
                return Ok((text, ids));
            }
            if hist.pop().is_none() {
                return Err(LlmError::Request(format!(
                    "transaction {} renders to {} tokens, more than max_suffix_tokens = {}",
                    t.id.0,
                    ids.len(),
                    self.opts.max_suffix_tokens
                )));
            }
            self.history_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Scores already-tokenised suffixes in one packed forward.
    pub fn score_tokens(&self, suffixes: &[&[u32]]) -> Result<Vec<f32>, LlmError> {
        self.score_tokens_until(suffixes, None)
    }

    /// [`score_tokens`](Self::score_tokens) that stops between layers once `until` has
    /// passed ([`LlmError::Cancelled`]).
    pub fn score_tokens_until(
        &self,
        suffixes: &[&[u32]],
        until: Option<std::time::Instant>,
    ) -> Result<Vec<f32>, LlmError> {
        let prefix = self.prefix_state()?;
        let hidden = self.model.forward_packed_until(&prefix, suffixes, until)?;
        let out = match &self.head {
            DeepHead::Answer { yes, no } => {
                let ids: Vec<u32> = yes.iter().chain(no).copied().collect();
                let logits: Vec<Vec<f32>> = self.model.logits_of(&hidden, &ids)?.to_vec2()?;
                logits
                    .iter()
                    .map(|row| answer_probability(row, yes.len()))
                    .collect()
            }
            DeepHead::Probe(p) => {
                let h: Vec<Vec<f32>> = hidden.to_vec2()?;
                h.iter().map(|r| p.apply(r)).collect()
            }
        };
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.suffix_tokens.fetch_add(
            suffixes.iter().map(|s| s.len() as u64).sum(),
            Ordering::Relaxed,
        );
        Ok(out)
    }

    fn suffix_tokens(&self, txns: &[&Transaction]) -> Result<Vec<Vec<u32>>, LlmError> {
        txns.iter().map(|t| self.suffix(t).map(|s| s.1)).collect()
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &LlmTokenizer {
        &self.tokenizer
    }

    /// Final hidden states (`[n, hidden]`, row-major) of transactions: the features a
    /// probe is fitted on.
    pub fn hidden_states(&self, txns: &[&Transaction]) -> Result<Vec<Vec<f32>>, LlmError> {
        let toks = self.suffix_tokens(txns)?;
        let refs: Vec<&[u32]> = toks.iter().map(|v| v.as_slice()).collect();
        let prefix = self.prefix_state()?;
        Ok(self.model.forward_packed(&prefix, &refs)?.to_vec2()?)
    }

    fn score_all(
        &self,
        txns: &[&Transaction],
        out: &mut Vec<Score>,
        until: Option<std::time::Instant>,
    ) -> Result<(), LlmError> {
        let toks = self.suffix_tokens(txns)?;
        let refs: Vec<&[u32]> = toks.iter().map(|v| v.as_slice()).collect();
        let ps = self.score_tokens_until(&refs, until)?;
        out.clear();
        for (p, t) in ps.into_iter().zip(txns) {
            let mut reasons = Reasons::default();
            reasons.push(self.reason, p);
            out.push(Score {
                reasons,
                ..Score::new(p)
            });
            self.observe(t);
        }
        self.scored.fetch_add(txns.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl DeepScorer {
    fn batch_until(
        &self,
        txns: &[&Transaction],
        out: &mut Vec<Score>,
        until: Option<std::time::Instant>,
    ) -> Result<(), ScoreError> {
        out.clear();
        if txns.is_empty() {
            return Ok(());
        }
        match self.score_all(txns, out, until) {
            Ok(()) => Ok(()),
            Err(LlmError::Cancelled { .. }) => {
                self.cancelled.fetch_add(1, Ordering::Relaxed);
                Err(ScoreError::Cancelled)
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                Err(fail(e))
            }
        }
    }
}

impl Scorer for DeepScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(
            "llm",
            format!("{} / {}", self.model.identity(), self.model.plan()),
            Latency::Unbounded,
        )
    }

    fn score(&self, txn: &Transaction) -> Result<Score, ScoreError> {
        let mut out = Vec::with_capacity(1);
        self.score_batch(&[txn], &mut out)?;
        out.pop().ok_or_else(|| fail("no score"))
    }

    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        self.batch_until(txns, out, None)
    }

    /// Checks the budget between layers: a batch whose budget passes stops at the next
    /// layer with [`ScoreError::Cancelled`] and frees its worker for the next batch.
    fn score_batch_within(
        &self,
        txns: &[&Transaction],
        budget: std::time::Duration,
        out: &mut Vec<Score>,
    ) -> Result<(), ScoreError> {
        let until = std::time::Instant::now().checked_add(budget);
        self.batch_until(txns, out, until)
    }

    /// Prefills the system prompt (pinned in the cache) and runs one suffix so the first
    /// gray-zone batch pays neither.
    fn warmup(&self) -> Result<(), ScoreError> {
        self.prefix_state().map_err(fail)?;
        let probe = self.tokenizer.encode("Warm-up.").map_err(fail)?;
        self.score_tokens(&[&probe]).map_err(fail)?;
        Ok(())
    }
}
