//! Tokenizers: from a `tokenizer.json`, or built from a GGUF file's own metadata
//! (`tokenizer.ggml.model`, `.pre`, `.tokens`, `.merges`, `.token_type`).
//!
//! GGUF byte-level BPE (`model = "gpt2"`) becomes a `tokenizers` BPE model with the
//! GPT-2 byte-level pre-tokenizer and decoder, no added prefix space (llama.cpp's
//! `smollm`, `gpt-2` and `default` pre-tokenizers behave so for these vocabularies), and
//! control / user-defined tokens (types 3 and 4) registered as special tokens, so ChatML
//! markers such as `<|im_start|>` in a prompt map to their single ids. Other GGUF
//! tokenizer models or pre-tokenizers are refused with a typed error rather than
//! tokenized wrongly. (candle's own GGUF tokenizer adds a prefix space here and gets the
//! first token of a prompt wrong.)

use super::error::LlmError;
use candle_core::quantized::gguf_file;
use std::path::Path;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// Pre-tokenizer names accepted for GGUF byte-level BPE.
pub const SUPPORTED_PRE: [&str; 3] = ["smollm", "gpt-2", "default"];

/// A text ⇄ token-id codec.
#[derive(Clone)]
pub struct LlmTokenizer {
    inner: Tokenizer,
}

impl std::fmt::Debug for LlmTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmTokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish()
    }
}

fn fmt_err(e: impl std::fmt::Display) -> LlmError {
    LlmError::Format(format!("tokenizer: {e}"))
}

impl LlmTokenizer {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let p = path.as_ref();
        let inner = Tokenizer::from_file(p)
            .map_err(|e| LlmError::Format(format!("{}: {e}", p.display())))?;
        Ok(Self { inner })
    }

    /// Builds the tokenizer stored in a GGUF file's metadata.
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let p = path.as_ref();
        super::limits::check_gguf_file(p)?;
        let mut f = std::io::BufReader::new(std::fs::File::open(p).map_err(|e| LlmError::Io {
            path: p.display().to_string(),
            message: e.to_string(),
        })?);
        let c = gguf_file::Content::read(&mut f).map_err(fmt_err)?;
        Self::from_gguf_metadata(&c)
    }

    /// Builds the tokenizer from already-read GGUF metadata (at most
    /// [`MAX_VOCAB`](super::limits::MAX_VOCAB) tokens and merges; `token_type`, when
    /// present, one per token).
    pub fn from_gguf_metadata(c: &gguf_file::Content) -> Result<Self, LlmError> {
        let get = |k: &str| {
            c.metadata
                .get(k)
                .ok_or_else(|| LlmError::Format(format!("metadata key {k:?} missing")))
        };
        // Array lengths before anything is built from them.
        let max = super::limits::MAX_VOCAB;
        let len = |k: &str| match c.metadata.get(k) {
            Some(gguf_file::Value::Array(a)) => Some(a.len()),
            _ => None,
        };
        for k in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
            if let Some(n) = len(k).filter(|&n| n > max) {
                return Err(LlmError::TooLarge {
                    key: k.into(),
                    value: n as u64,
                    max: max as u64,
                });
            }
        }
        if let (Some(t), Some(k)) = (
            len("tokenizer.ggml.token_type"),
            len("tokenizer.ggml.tokens"),
        ) {
            if t != k {
                return Err(LlmError::Format(format!(
                    "tokenizer.ggml.token_type has {t} entries for {k} tokens"
                )));
            }
        }
        let model = get("tokenizer.ggml.model")?.to_string().map_err(fmt_err)?;
        if model != "gpt2" {
            return Err(LlmError::Format(format!(
                "tokenizer model {model:?} is not supported (byte-level BPE \"gpt2\" is)"
            )));
        }
        let pre = match c.metadata.get("tokenizer.ggml.pre") {
            Some(v) => v.to_string().map_err(fmt_err)?.clone(),
            None => "default".into(),
        };
        if !SUPPORTED_PRE.contains(&pre.as_str()) {
            return Err(LlmError::Format(format!(
                "pre-tokenizer {pre:?} is not supported (supported: {SUPPORTED_PRE:?})"
            )));
        }
        let tokens: Vec<String> = get("tokenizer.ggml.tokens")?
            .to_vec()
            .map_err(fmt_err)?
            .iter()
            .map(|v| v.to_string().cloned().map_err(fmt_err))
            .collect::<Result<_, _>>()?;
        let merges: Vec<(String, String)> = get("tokenizer.ggml.merges")?
            .to_vec()
            .map_err(fmt_err)?
            .iter()
            .map(|v| {
                let m = v.to_string().map_err(fmt_err)?;
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| LlmError::Format(format!("merge {m:?} is not two tokens")))
            })
            .collect::<Result<_, _>>()?;
        let types: Vec<i64> = match c.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(fmt_err)?
                .iter()
                .map(|t| t.to_i32().map(i64::from).map_err(fmt_err))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        if vocab.len() != tokens.len() {
            return Err(LlmError::Format(
                "duplicate tokens in the vocabulary".into(),
            ));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(fmt_err)?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        inner.with_decoder(Some(ByteLevel::new(false, true, true)));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(types.iter())
            .filter(|(_, &t)| t == 3 || t == 4)
            .map(|(s, _)| AddedToken::from(s.clone(), true))
            .collect();
        inner.add_special_tokens(special).map_err(fmt_err)?;
        Ok(Self { inner })
    }

    /// Writes the tokenizer as `tokenizer.json`.
    pub fn save(&self, path: &Path) -> Result<(), LlmError> {
        self.inner.save(path, false).map_err(|e| LlmError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// Token ids of `text` (special-token markers in the text map to their ids; no BOS is
    /// added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(|e| LlmError::Request(format!("tokenize: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// Text of `ids` (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlmError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| LlmError::Request(format!("detokenize: {e}")))
    }

    /// The id of a whole token, e.g. `" yes"` (`None` unless it is one token).
    pub fn single_token(&self, text: &str) -> Option<u32> {
        match self.encode(text).ok()?.as_slice() {
            [id] => Some(*id),
            _ => None,
        }
    }
}
