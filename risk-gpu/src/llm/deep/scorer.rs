//! [`DeepScorer`]: the tier itself: the prefix state, suffixes, packed forwards, the
//! [`Scorer`] implementation and its counters.

use super::config::{DeepFiles, DeepOptions};
use super::head::{answer_probability, DeepHead};
use super::history::History;
use super::probe::LinearProbe;
use crate::llm::error::LlmError;
use crate::llm::model::{KvCache, Llama};
use crate::llm::prefix_cache::{CacheStats, PrefixCache, PrefixKey};
use crate::llm::prompt::PromptTemplate;
use crate::llm::tokenizer::LlmTokenizer;
use crate::qlinear::error::QuantError;
use parking_lot::Mutex;
use risk_core::{Latency, ReasonCode, Reasons, Score, ScoreError, Scorer, ScorerInfo, Transaction};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
            per_entity_bytes: opts.history_bytes,
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
                return Err(LlmError::Quant(QuantError::Plan {
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
