//! Bounds on the sizes a model file states, checked before anything is allocated from
//! them: a hostile or corrupt file gets [`LlmError::TooLarge`] (naming the file's key,
//! its value and the bound) or [`LlmError::Format`], never a huge allocation or a panic.
//!
//! - [`check_gguf_header`] walks a GGUF header (magic, version, `tensor_count`,
//!   `metadata_kv_count`, every key and value, every tensor's name, dimensions, type and
//!   offset) before candle parses it. candle 0.11 bounds the header counts by the file's
//!   size, but it keeps each metadata value as a 32-byte `Value` (an array of a million
//!   one-byte values takes 32 MB), divides by `general.alignment` unchecked (0 panics)
//!   and multiplies tensor dimensions unchecked. The walk allocates nothing from what it
//!   reads but the (bounded) key strings.
//! - `check_config` (both loaders) bounds the hyper-parameters read from GGUF metadata
//!   or `config.json` (block count, context length, hidden size, head counts,
//!   vocabulary, MLP size) and checks them against each other. The GGUF loader then
//!   checks every tensor's shape in the tensor table before reading any tensor; the
//!   safetensors loader's tensors are sized by their file, and their shapes are checked
//!   before they are used.
//!
//! The maxima are well above every published Llama-family model (Llama 3.1 405B: 126
//! blocks, hidden 16,384, 128 heads, MLP 53,248, vocabulary 128,256, context 131,072).

use super::config::LlamaConfig;
use super::error::LlmError;
use candle_core::quantized::gguf_file;
use std::io::Read;

/// Most decoder blocks.
pub const MAX_LAYERS: usize = 1024;
/// Largest hidden size.
pub const MAX_HIDDEN: usize = 1 << 16;
/// Most attention heads (query or key/value).
pub const MAX_HEADS: usize = 1024;
/// Largest head size.
pub const MAX_HEAD_DIM: usize = 1024;
/// Largest MLP inner size.
pub const MAX_INTERMEDIATE: usize = 1 << 20;
/// Largest vocabulary (tokens, and merges of a GGUF tokenizer).
pub const MAX_VOCAB: usize = 1 << 21;
/// Longest context (positions).
pub const MAX_CONTEXT: usize = 1 << 20;
/// Most values in the rotary tables built at load (`context · head_dim` f32: cosines and
/// sines of each position and frequency): 1 GiB.
pub const MAX_ROPE_TABLE: usize = 1 << 28;
/// Most tensors in a GGUF file.
pub const MAX_TENSORS: u64 = 1 << 16;
/// Most metadata entries in a GGUF file.
pub const MAX_METADATA: u64 = 1 << 16;
/// Longest GGUF metadata key or tensor name.
pub const MAX_KEY: u64 = 1 << 16;
/// Longest GGUF string value (`tokenizer.huggingface.json` holds a whole tokenizer).
pub const MAX_STRING: u64 = 1 << 26;
/// Most elements of one GGUF metadata array.
pub const MAX_ARRAY: u64 = 1 << 22;
/// Most array elements in all of a GGUF file's metadata.
pub const MAX_ARRAY_TOTAL: u64 = 1 << 23;
/// Deepest nesting of GGUF arrays.
pub const MAX_NESTING: usize = 4;
/// Most dimensions of a GGUF tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u64 = 4;

fn too_large(key: &str, value: u64, max: u64) -> LlmError {
    LlmError::TooLarge {
        key: key.to_owned(),
        value,
        max,
    }
}

// ===== hyper-parameters =====

/// The file's names of the [`LlamaConfig`] fields, for error messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keys {
    pub(crate) vocab: &'static str,
    pub(crate) hidden: &'static str,
    pub(crate) intermediate: &'static str,
    pub(crate) layers: &'static str,
    pub(crate) heads: &'static str,
    pub(crate) kv_heads: &'static str,
    pub(crate) head_dim: &'static str,
    pub(crate) rope_theta: &'static str,
    pub(crate) rms_eps: &'static str,
    pub(crate) max_positions: &'static str,
    pub(crate) original_max_positions: &'static str,
}

/// GGUF metadata keys (the vocabulary is the embedding matrix's row count).
pub(crate) const GGUF_KEYS: Keys = Keys {
    vocab: "token_embd.weight rows",
    hidden: "llama.embedding_length",
    intermediate: "llama.feed_forward_length",
    layers: "llama.block_count",
    heads: "llama.attention.head_count",
    kv_heads: "llama.attention.head_count_kv",
    head_dim: "llama.embedding_length / llama.attention.head_count",
    rope_theta: "llama.rope.freq_base",
    rms_eps: "llama.attention.layer_norm_rms_epsilon",
    max_positions: "llama.context_length",
    original_max_positions: "rope scaling original context",
};

/// `config.json` keys.
pub(crate) const HF_KEYS: Keys = Keys {
    vocab: "config.json: vocab_size",
    hidden: "config.json: hidden_size",
    intermediate: "config.json: intermediate_size",
    layers: "config.json: num_hidden_layers",
    heads: "config.json: num_attention_heads",
    kv_heads: "config.json: num_key_value_heads",
    head_dim: "config.json: head_dim",
    rope_theta: "config.json: rope_theta",
    rms_eps: "config.json: rms_norm_eps",
    max_positions: "config.json: max_position_embeddings",
    original_max_positions: "config.json: rope_scaling.original_max_position_embeddings",
};

/// Bounds every size of `c` and checks them against each other (before any tensor is
/// read or any table built from them).
pub(crate) fn check_config(c: &LlamaConfig, k: &Keys) -> Result<(), LlmError> {
    let sizes = [
        (k.layers, c.layers, MAX_LAYERS),
        (k.hidden, c.hidden, MAX_HIDDEN),
        (k.heads, c.heads, MAX_HEADS),
        (k.kv_heads, c.kv_heads, MAX_HEADS),
        (k.head_dim, c.head_dim, MAX_HEAD_DIM),
        (k.intermediate, c.intermediate, MAX_INTERMEDIATE),
        (k.vocab, c.vocab, MAX_VOCAB),
        (k.max_positions, c.max_positions, MAX_CONTEXT),
    ];
    for (key, v, max) in sizes {
        if v > max {
            return Err(too_large(key, v as u64, max as u64));
        }
        if v == 0 {
            return Err(LlmError::Format(format!("{key} is 0")));
        }
    }
    if !c.heads.is_multiple_of(c.kv_heads) {
        return Err(LlmError::Format(format!(
            "{} = {} is not a multiple of {} = {}",
            k.heads, c.heads, k.kv_heads, c.kv_heads
        )));
    }
    if !c.head_dim.is_multiple_of(2) {
        return Err(LlmError::Format(format!(
            "{} = {} is odd (rotary embeddings rotate pairs)",
            k.head_dim, c.head_dim
        )));
    }
    if c.max_positions * c.head_dim > MAX_ROPE_TABLE {
        return Err(too_large(
            k.max_positions,
            c.max_positions as u64,
            (MAX_ROPE_TABLE / c.head_dim) as u64,
        ));
    }
    if let Some(s) = &c.rope_scaling {
        let o = s.original_max_positions;
        if o > MAX_CONTEXT {
            return Err(too_large(
                k.original_max_positions,
                o as u64,
                MAX_CONTEXT as u64,
            ));
        }
        if o == 0 {
            return Err(LlmError::Format(format!(
                "{} is 0",
                k.original_max_positions
            )));
        }
    }
    if !(c.rope_theta.is_finite() && c.rope_theta > 0.0) {
        return Err(LlmError::Format(format!(
            "{} = {} (must be a positive number)",
            k.rope_theta, c.rope_theta
        )));
    }
    if !(c.rms_eps.is_finite() && c.rms_eps > 0.0) {
        return Err(LlmError::Format(format!(
            "{} = {} (must be a positive number)",
            k.rms_eps, c.rms_eps
        )));
    }
    Ok(())
}

/// Every weight's shape in a GGUF file's tensor table against `c`, and the blocks the
/// tensor names hold against the block count, before any tensor is read.
pub(crate) fn check_gguf_shapes(g: &gguf_file::Content, c: &LlamaConfig) -> Result<(), LlmError> {
    let want = |name: &str, dims: &[usize], required: bool| -> Result<(), LlmError> {
        match g.tensor_infos.get(name) {
            None if required => Err(LlmError::Format(format!("tensor {name} missing"))),
            None => Ok(()),
            Some(t) if t.shape.dims() != dims => Err(LlmError::Format(format!(
                "tensor {name} has shape {:?}, the config implies {dims:?}",
                t.shape.dims()
            ))),
            Some(_) => Ok(()),
        }
    };
    let (h, q, kv, f) = (
        c.hidden,
        c.heads * c.head_dim,
        c.kv_heads * c.head_dim,
        c.intermediate,
    );
    want("token_embd.weight", &[c.vocab, h], true)?;
    want("output_norm.weight", &[h], true)?;
    want("output.weight", &[c.vocab, h], false)?;
    if let Some(t) = g.tensor_infos.get("rope_freqs.weight") {
        if t.shape.elem_count() != c.head_dim / 2 {
            return Err(LlmError::Format(format!(
                "tensor rope_freqs.weight has shape {:?}, the config implies {} values",
                t.shape.dims(),
                c.head_dim / 2
            )));
        }
    }
    for i in 0..c.layers {
        for (n, dims) in [
            ("attn_norm", &[h][..]),
            ("attn_q", &[q, h]),
            ("attn_k", &[kv, h]),
            ("attn_v", &[kv, h]),
            ("attn_output", &[h, q]),
            ("ffn_norm", &[h]),
            ("ffn_gate", &[f, h]),
            ("ffn_up", &[f, h]),
            ("ffn_down", &[h, f]),
        ] {
            want(&format!("blk.{i}.{n}.weight"), dims, true)?;
        }
    }
    let blocks = g
        .tensor_infos
        .keys()
        .filter_map(|k| {
            k.strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .map(|i| i + 1)
        .max()
        .unwrap_or(0);
    if blocks != c.layers {
        return Err(LlmError::Format(format!(
            "llama.block_count is {}, the tensors hold {blocks} blocks",
            c.layers
        )));
    }
    Ok(())
}

// ===== GGUF header =====

/// A position-tracking reader over a GGUF header.
struct Header<R> {
    r: R,
    pos: u64,
    size: u64,
    /// GGUF v1: 32-bit lengths and dimensions.
    v1: bool,
    /// Array elements seen so far.
    elements: u64,
}

impl<R: Read> Header<R> {
    fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.pos)
    }

    fn truncated(&self, what: &str) -> LlmError {
        LlmError::Format(format!(
            "GGUF header truncated at byte {} (reading {what})",
            self.pos
        ))
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N], LlmError> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|_| self.truncated(what))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32, LlmError> {
        Ok(u32::from_le_bytes(self.bytes(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, LlmError> {
        Ok(u64::from_le_bytes(self.bytes(what)?))
    }

    /// A length or count (32-bit in GGUF v1).
    fn len(&mut self, what: &str) -> Result<u64, LlmError> {
        if self.v1 {
            Ok(self.u32(what)? as u64)
        } else {
            self.u64(what)
        }
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), LlmError> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let copied = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())
            .map_err(|_| self.truncated(what))?;
        self.pos += copied;
        if copied != n {
            return Err(self.truncated(what));
        }
        Ok(())
    }

    /// A string's length, bounded by `max` and by the bytes left.
    fn string_len(&mut self, what: &str, max: u64) -> Result<u64, LlmError> {
        let n = self.len(what)?;
        if n > max {
            return Err(too_large(&format!("{what} length"), n, max));
        }
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        Ok(n)
    }

    /// A key or tensor name.
    fn name(&mut self, what: &str) -> Result<String, LlmError> {
        let n = self.string_len(what, MAX_KEY)?;
        let mut v = vec![0u8; n as usize];
        self.r
            .read_exact(&mut v)
            .map_err(|_| self.truncated(what))?;
        self.pos += n;
        Ok(String::from_utf8_lossy(&v).into_owned())
    }

    /// Skips one value of type `ty`; returns it when it is an integer.
    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Option<i128>, LlmError> {
        Ok(match ty {
            0 => Some(self.bytes::<1>(key)?[0] as i128),
            1 => Some(self.bytes::<1>(key)?[0] as i8 as i128),
            2 => Some(u16::from_le_bytes(self.bytes(key)?) as i128),
            3 => Some(i16::from_le_bytes(self.bytes(key)?) as i128),
            4 => Some(self.u32(key)? as i128),
            5 => Some(self.u32(key)? as i32 as i128),
            10 => Some(self.u64(key)? as i128),
            11 => Some(self.u64(key)? as i64 as i128),
            // bool, f32, f64: skipped.
            7 | 6 | 12 => {
                let width = match ty {
                    7 => 1,
                    6 => 4,
                    _ => 8,
                };
                self.skip(width, key)?;
                None
            }
            8 => {
                let n = self.string_len(key, MAX_STRING)?;
                self.skip(n, key)?;
                None
            }
            9 => {
                if depth >= MAX_NESTING {
                    return Err(too_large(
                        &format!("{key} array nesting"),
                        depth as u64 + 1,
                        MAX_NESTING as u64,
                    ));
                }
                let elem = self.u32(key)?;
                let n = self.len(key)?;
                if n > MAX_ARRAY {
                    return Err(too_large(&format!("{key} array length"), n, MAX_ARRAY));
                }
                self.elements += n;
                if self.elements > MAX_ARRAY_TOTAL {
                    return Err(too_large(
                        "GGUF metadata array elements (all arrays)",
                        self.elements,
                        MAX_ARRAY_TOTAL,
                    ));
                }
                let fixed = match elem {
                    0 | 1 | 7 => Some(1),
                    2 | 3 => Some(2),
                    4..=6 => Some(4),
                    10..=12 => Some(8),
                    _ => None,
                };
                match fixed {
                    Some(w) => self.skip(n * w, key)?,
                    None => {
                        // Strings and arrays take at least their length prefix each.
                        let least = if self.v1 { 4 } else { 8 };
                        if n.saturating_mul(least) > self.remaining() {
                            return Err(self.truncated(key));
                        }
                        for _ in 0..n {
                            self.value(elem, key, depth + 1)?;
                        }
                    }
                }
                None
            }
            t => {
                return Err(LlmError::Format(format!(
                    "GGUF metadata {key}: unknown value type {t}"
                )))
            }
        })
    }
}

/// Walks the GGUF header in `r` (at the file's start; `size`: the file's length) with
/// the bounds above; leaves `r` somewhere in the file.
pub fn check_gguf_header(r: impl Read, size: u64) -> Result<(), LlmError> {
    let mut h = Header {
        r,
        pos: 0,
        size,
        v1: false,
        elements: 0,
    };
    let magic = h.u32("magic")?;
    if magic != 0x4655_4747 && magic != 0x4747_5546 {
        return Err(LlmError::Format(format!(
            "not a GGUF file (magic 0x{magic:08x})"
        )));
    }
    let version = h.u32("version")?;
    if !(1..=3).contains(&version) {
        return Err(LlmError::Format(format!(
            "GGUF version {version} (supported: 1 to 3)"
        )));
    }
    h.v1 = version == 1;
    let tensors = h.len("tensor_count")?;
    if tensors > MAX_TENSORS {
        return Err(too_large("GGUF tensor_count", tensors, MAX_TENSORS));
    }
    let kvs = h.len("metadata_kv_count")?;
    if kvs > MAX_METADATA {
        return Err(too_large("GGUF metadata_kv_count", kvs, MAX_METADATA));
    }
    for _ in 0..kvs {
        let key = h.name("metadata key")?;
        let ty = h.u32(&key)?;
        let v = h.value(ty, &key, 0)?;
        if key == "general.alignment" {
            // candle divides by it (types u8 to i32; others fall back to 32).
            if let Some(a) = v.filter(|_| ty <= 5) {
                if a <= 0 || a.count_ones() != 1 {
                    return Err(LlmError::Format(format!(
                        "GGUF general.alignment {a} is not a power of two"
                    )));
                }
            }
        }
    }
    for _ in 0..tensors {
        let name = h.name("tensor name")?;
        let dims = h.u32(&name)? as u64;
        if dims > MAX_DIMS {
            return Err(too_large(
                &format!("tensor {name} dimensions"),
                dims,
                MAX_DIMS,
            ));
        }
        let mut elems: u64 = 1;
        for _ in 0..dims {
            let d = h.len(&name)?;
            elems = elems.saturating_mul(d);
        }
        // Every type candle reads stores at least two bits per element (Q2_K: 2.625).
        let most = size.saturating_mul(4);
        if elems > most {
            return Err(too_large(&format!("tensor {name} elements"), elems, most));
        }
        h.u32(&name)?; // type
        h.u64(&name)?; // offset
    }
    Ok(())
}

/// [`check_gguf_header`] on the file at `path`.
pub(crate) fn check_gguf_file(path: &std::path::Path) -> Result<(), LlmError> {
    let io = |e: std::io::Error| LlmError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    check_gguf_header(std::io::BufReader::new(f), size).map_err(|e| match e {
        LlmError::Format(m) => LlmError::Format(format!("{}: {m}", path.display())),
        e => e,
    })
}
