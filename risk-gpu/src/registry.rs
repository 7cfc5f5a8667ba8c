//! `risk.toml` scorer kinds of this crate.
//!
//! ```toml
//! [fast.scorer]
//! kind = "xgboost"
//! path = "models/xgb_fraud.json"   # relative to risk.toml; JSON or UBJSON
//! explain_above = 0.3              # SHAP reason codes for scores at or above (default 0.3)
//! explain = "decision"             # or: SHAP reasons for review and decline decisions
//!                                  # only, computed after the decision (no explain_above)
//! top_k = 3                        # reasons per decision (default 3)
//! score_transform = "clamp"        # regressions only: "clamp", "logistic", "linear:LO:HI"
//! classes = [2, 3]                 # multi-class models only: the fraud classes (the score
//!                                  # is their summed probability)
//!
//! [fast.scorer]
//! kind = "lightgbm"                # a LightGBM text model (save_model), same options
//! path = "models/lgbm_fraud.txt"
//!
//! [fast.scorer]
//! kind = "onnx"
//! path = "models/xgb_fraud.onnx"
//! input = "input"                  # optional
//! output = "probabilities"         # optional
//! positive_class = 1               # optional
//! sessions = 2                     # optional
//! intra_threads = 1                # optional
//! runtime = "/path/libonnxruntime.so"  # optional, else ORT_DYLIB_PATH
//! device = "cuda"                  # optional: "cpu", "cuda", "cuda:N" (strict); default:
//!                                  # CUDA when built with --features cuda and it loads
//! features = ["amount", "mcc"]     # optional: schema fields of the input, in order
//!
//! [fast.scorer]                    # a model of several inputs (a sequence model)
//! kind = "onnx"
//! path = "models/seq_gru.onnx"
//! [fast.scorer.inputs]             # every model input, by name
//! x = { features = "all" }         # flat features: "all" or a list of schema fields
//! seq = { sequence = "card_seq" }  # a [[state.sequences]] entry: [B, N, F] float32
//! mask = { mask = "card_seq" }     # its mask [B, N] (1 = event, 0 = padding)
//! len = { length = "card_seq" }    # its length [B]
//!
//! [deep.scorer]
//! kind = "llm"
//! model = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
//! template = "prompts/fraud_analyst.txt"
//! tokenizer = "tokenizer.json"     # optional, else the GGUF's own tokenizer
//! probe = "probe.safetensors"      # optional linear probe, else the answer tokens
//! yes = "yes"                      # answer words (default yes / no)
//! no = "no"
//! max_suffix_tokens = 128          # optional
//! history = 2                      # recent transactions per entity in the prompt
//! history_bytes = 4096             # prompt bytes of one entity's history (oldest go first)
//! cache_entries = 8                # prefix states kept
//! cache_mb = 512
//! device = "cpu"                   # or "cuda", "cuda:N" (built with --features cuda)
//!
//! [fast.scorer]                    # BERT-class text tier (issue [13])
//! kind = "bert"
//! model = "models/all-MiniLM-L6-v2"  # config.json, model.safetensors, tokenizer.json
//! head = "models/text_head.safetensors"  # + text_head.json sidecar (encoder identity)
//! template = "prompts/bert_text.txt"
//! max_tokens = 64                   # token budget (default 64)
//! backend = "candle"                # or "onnx"
//! precision = "f32"                 # candle: f32 or int8
//! onnx = "models/minilm.int8.onnx"  # backend "onnx": the exported encoder
//! sessions = 2                      # onnx: parallel sessions (default 2)
//! intra_threads = 1                 # onnx: threads per run (default 1)
//! runtime = "/path/libonnxruntime.so"  # onnx: optional, else ORT_DYLIB_PATH
//! device = "cpu"                    # candle: or "cuda", "cuda:N"
//!
//! [fast.scorer]                    # a model on a KServe V2 server (issue [14]);
//! kind = "kserve"                   # every key: risk_gpu::remote, module `toml`
//! endpoints = ["http://127.0.0.1:8085"]
//! model = "xgb-fraud"
//! output = "predict_proba"
//!
//! [deep.scorer.quant]              # optional precision plan applied at load
//! "layers.0-7" = "f16"             # f32 f16 bf16 int8 rtn_int4[_g32|_g64|_g128]
//! "layers.8-27" = "rtn_int4_g64"   # awq_int4 needs a calibrated checkpoint: `model` = the
//! "layers.28-29" = "f16"           # directory `quant_report --save` wrote
//! ```

use crate::bert::{BertBackend, BertFiles, BertScorer};
use crate::llm::deep::{DeepFiles, DeepOptions, DeepScorer};
use crate::onnx::{InputMap, InputSource, OnnxConfig, OnnxScorer};
use crate::qlinear::plan::{Precision, QuantPlan};
use crate::trees::multiclass::{MultiClassModel, MultiClassScorer};
use crate::trees::score_transform::ScoreTransform;
use crate::trees::{ModelFamily, XgbModel, XgbScorer};
use risk_core::{ConfigError, Scorer, ScorerRegistry, ScorerSpec};
use std::sync::Arc;

/// A feature list: `"all"` (every schema field: `None`) or an array of field names.
fn features(
    spec: &ScorerSpec,
    v: Option<&toml::Value>,
    at: &str,
) -> Result<Option<Vec<String>>, ConfigError> {
    let bad = || {
        ConfigError::invalid(
            format!("{}.{at}", spec.key),
            "expected \"all\" or a list of schema field names",
        )
    };
    match v {
        None => Ok(None),
        Some(toml::Value::String(s)) if s == "all" => Ok(None),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_owned).ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(bad()),
    }
}

/// `[*.scorer.inputs]`: each model input as `{ features = ... }`, `{ sequence = NAME }`,
/// `{ mask = NAME }` or `{ length = NAME }`.
fn onnx_inputs(spec: &ScorerSpec, t: &toml::Value) -> Result<Vec<InputMap>, ConfigError> {
    let key = format!("{}.inputs", spec.key);
    let t = t
        .as_table()
        .ok_or_else(|| ConfigError::invalid(&key, "expected a table of model inputs"))?;
    let mut out = Vec::with_capacity(t.len());
    for (name, v) in t {
        let at = format!("{key}.{name}");
        let one = v.as_table().filter(|x| x.len() == 1).ok_or_else(|| {
            ConfigError::invalid(
                &at,
                "expected one of { features = ... }, { sequence = NAME }, { mask = NAME }, { length = NAME }",
            )
        })?;
        let (k, x) = one.iter().next().expect("one entry");
        let text = || {
            x.as_str().map(str::to_owned).ok_or_else(|| {
                ConfigError::invalid(format!("{at}.{k}"), "expected a sequence name")
            })
        };
        let source = match k.as_str() {
            "features" => {
                InputSource::Features(features(spec, Some(x), &format!("inputs.{name}.features"))?)
            }
            "sequence" => InputSource::Sequence(text()?),
            "mask" => InputSource::Mask(text()?),
            "length" => InputSource::Length(text()?),
            o => {
                return Err(ConfigError::invalid(
                    &at,
                    format!("{o:?} is not features, sequence, mask or length"),
                ))
            }
        };
        out.push(InputMap {
            name: name.clone(),
            source,
        });
    }
    Ok(out)
}

fn scorer_err(spec: &ScorerSpec, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Scorer {
        key: spec.key.clone(),
        message: e.to_string(),
    }
}

fn count(spec: &ScorerSpec, name: &str, default: usize) -> Result<usize, ConfigError> {
    match spec.f64(name)? {
        None => Ok(default),
        Some(v) if v >= 0.0 && v.fract() == 0.0 && v <= 1e6 => Ok(v as usize),
        Some(v) => Err(ConfigError::invalid(
            format!("{}.{name}", spec.key),
            format!("{v} is not a non-negative integer"),
        )),
    }
}

const LLM_KEYS: [&str; 15] = [
    "kind",
    "model",
    "template",
    "tokenizer",
    "probe",
    "yes",
    "no",
    "max_suffix_tokens",
    "history",
    "history_entities",
    "history_bytes",
    "cache_entries",
    "cache_mb",
    "quant",
    "device",
];

fn llm(spec: &ScorerSpec) -> Result<DeepScorer, ConfigError> {
    if let Some(k) = spec.table.keys().find(|k| !LLM_KEYS.contains(&k.as_str())) {
        return Err(ConfigError::invalid(
            format!("{}.{k}", spec.key),
            format!("unknown key (known: {})", LLM_KEYS.join(", ")),
        ));
    }
    let mut files = DeepFiles::new(spec.path("model")?, spec.path("template")?);
    if spec.table.contains_key("tokenizer") {
        files.tokenizer = Some(spec.path("tokenizer")?);
    }
    if spec.table.contains_key("probe") {
        files.probe = Some(spec.path("probe")?);
    }
    if spec.table.contains_key("yes") {
        files.yes = spec.str("yes")?.to_owned();
    }
    if spec.table.contains_key("no") {
        files.no = spec.str("no")?.to_owned();
    }
    if spec.table.contains_key("device") {
        files.device = spec
            .str("device")?
            .parse()
            .map_err(|e: String| ConfigError::invalid(format!("{}.device", spec.key), e))?;
    }
    if let Some(q) = spec.table.get("quant") {
        let key = format!("{}.quant", spec.key);
        let table = q.as_table().ok_or_else(|| {
            ConfigError::invalid(&key, "expected a table of \"layers.A-B\" = \"precision\"")
        })?;
        let mut plan = QuantPlan::new();
        for (k, v) in table {
            let v = v.as_str().ok_or_else(|| {
                ConfigError::invalid(format!("{key}.{k}"), "expected a precision string")
            })?;
            plan.set(k, v)
                .map_err(|e| ConfigError::invalid(format!("{key}.{k}"), e.to_string()))?;
        }
        files.quant = Some(plan);
    }
    let d = DeepOptions::default();
    let opts = DeepOptions {
        max_suffix_tokens: count(spec, "max_suffix_tokens", d.max_suffix_tokens)?,
        history: count(spec, "history", d.history)?,
        history_entities: count(spec, "history_entities", d.history_entities)?,
        history_bytes: count(spec, "history_bytes", d.history_bytes)?,
        cache_entries: count(spec, "cache_entries", d.cache_entries)?.max(1),
        cache_bytes: count(spec, "cache_mb", d.cache_bytes >> 20)? << 20,
    };
    DeepScorer::load(&files, spec.schema.clone(), opts).map_err(|e| scorer_err(spec, e))
}

const BERT_KEYS: [&str; 12] = [
    "kind",
    "model",
    "head",
    "template",
    "max_tokens",
    "backend",
    "precision",
    "onnx",
    "sessions",
    "intra_threads",
    "runtime",
    "device",
];

fn bert(spec: &ScorerSpec) -> Result<BertScorer, ConfigError> {
    if let Some(k) = spec.table.keys().find(|k| !BERT_KEYS.contains(&k.as_str())) {
        return Err(ConfigError::invalid(
            format!("{}.{k}", spec.key),
            format!("unknown key (known: {})", BERT_KEYS.join(", ")),
        ));
    }
    let mut files = BertFiles::new(
        spec.path("model")?,
        spec.path("head")?,
        spec.path("template")?,
    );
    files.max_tokens = count(spec, "max_tokens", files.max_tokens)?;
    let backend = if spec.table.contains_key("backend") {
        spec.str("backend")?
    } else {
        "candle"
    };
    let only = |k: &str, b: &str| -> Result<(), ConfigError> {
        if spec.table.contains_key(k) {
            return Err(ConfigError::invalid(
                format!("{}.{k}", spec.key),
                format!("only for backend = \"{b}\""),
            ));
        }
        Ok(())
    };
    files.backend = match backend {
        "candle" => {
            for k in ["onnx", "sessions", "intra_threads", "runtime"] {
                only(k, "onnx")?;
            }
            let precision = match spec
                .table
                .get("precision")
                .map(|_| spec.str("precision"))
                .transpose()?
            {
                None | Some("f32") => Precision::F32,
                Some("int8") => Precision::Int8,
                Some(o) => {
                    return Err(ConfigError::invalid(
                        format!("{}.precision", spec.key),
                        format!("{o:?} (f32, int8)"),
                    ))
                }
            };
            if spec.table.contains_key("device") {
                files.device = spec
                    .str("device")?
                    .parse()
                    .map_err(|e: String| ConfigError::invalid(format!("{}.device", spec.key), e))?;
            }
            BertBackend::Candle { precision }
        }
        "onnx" => {
            for k in ["precision", "device"] {
                only(k, "candle")?;
            }
            BertBackend::Onnx {
                model: spec.path("onnx")?,
                runtime: if spec.table.contains_key("runtime") {
                    Some(spec.path("runtime")?)
                } else {
                    None
                },
                sessions: count(spec, "sessions", 2)?.max(1),
                intra_threads: count(spec, "intra_threads", 1)?.max(1),
            }
        }
        o => {
            return Err(ConfigError::invalid(
                format!("{}.backend", spec.key),
                format!("{o:?} (candle, onnx)"),
            ))
        }
    };
    BertScorer::load(&files, spec.schema.clone()).map_err(|e| scorer_err(spec, e))
}

/// When a tree model's reasons are computed: `explain_above` (a score, 0.3 by default)
/// or `explain = "decision"` (review and decline decisions, after the decision); `true`
/// for the latter.
fn explain_mode(spec: &ScorerSpec) -> Result<(f32, bool), ConfigError> {
    let above = spec.f64("explain_above")?;
    if !spec.table.contains_key("explain") {
        return Ok((above.unwrap_or(0.3) as f32, false));
    }
    let key = format!("{}.explain", spec.key);
    match spec.str("explain")? {
        "decision" if above.is_some() => Err(ConfigError::invalid(
            key,
            "\"decision\" explains review and decline decisions: drop explain_above, or drop explain to explain by score",
        )),
        "decision" => Ok((f32::INFINITY, true)),
        "score" => Ok((above.unwrap_or(0.3) as f32, false)),
        o => Err(ConfigError::invalid(
            key,
            format!("{o:?} (\"decision\": review and decline decisions; \"score\": scores >= explain_above)"),
        )),
    }
}

/// A tree model of `family` (kind `xgboost` or `lightgbm`): `path`, `explain_above`
/// (0.3) or `explain = "decision"`, `top_k` (3). A file of the other family is refused,
/// naming the kind it needs.
fn trees(spec: &ScorerSpec, family: ModelFamily) -> Result<Arc<dyn Scorer>, ConfigError> {
    if spec.table.contains_key("classes") {
        return multiclass(spec, family);
    }
    let model = XgbModel::from_file(spec.path("path")?).map_err(|e| scorer_err(spec, e))?;
    same_family(spec, family, model.family(), model.version())?;
    let (explain, on_decision) = explain_mode(spec)?;
    let top_k = count(spec, "top_k", 3)?;
    let transform = if spec.table.contains_key("score_transform") {
        ScoreTransform::parse(spec.str("score_transform")?)
            .map_err(|e| ConfigError::invalid(format!("{}.score_transform", spec.key), e))?
    } else {
        ScoreTransform::Probability
    };
    let s = XgbScorer::with_transform(Arc::new(model), &spec.schema, explain, top_k, transform)
        .map_err(|e| scorer_err(spec, e))?;
    Ok(Arc::new(if on_decision {
        s.explain_on_decision()
    } else {
        s
    }))
}

/// A model file of the other library than the kind names: refused, naming the kind.
fn same_family(
    spec: &ScorerSpec,
    kind: ModelFamily,
    file: ModelFamily,
    version: &str,
) -> Result<(), ConfigError> {
    if kind == file {
        return Ok(());
    }
    Err(ConfigError::invalid(
        format!("{}.path", spec.key),
        format!(
            "{version} is a {file:?} model: name it with kind = \"{}\"",
            file.name()
        ),
    ))
}

/// A multi-class tree model: `classes` names the fraud classes (their summed probability
/// is the score).
fn multiclass(spec: &ScorerSpec, family: ModelFamily) -> Result<Arc<dyn Scorer>, ConfigError> {
    let key = format!("{}.classes", spec.key);
    let classes: Vec<usize> = spec
        .table
        .get("classes")
        .and_then(|v| v.as_array())
        .ok_or_else(|| ConfigError::invalid(&key, "an array of class numbers"))?
        .iter()
        .map(|v| {
            v.as_integer()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| ConfigError::invalid(&key, format!("{v} is not a class number")))
        })
        .collect::<Result<_, _>>()?;
    let model = MultiClassModel::from_file(spec.path("path")?).map_err(|e| scorer_err(spec, e))?;
    same_family(spec, family, model.family(), model.version())?;
    let (explain, on_decision) = explain_mode(spec)?;
    let top_k = count(spec, "top_k", 3)?;
    let s = MultiClassScorer::new(Arc::new(model), &spec.schema, &classes, explain, top_k)
        .map_err(|e| scorer_err(spec, e))?;
    Ok(Arc::new(if on_decision {
        s.explain_on_decision()
    } else {
        s
    }))
}

/// Registers `xgboost`, `lightgbm`, `onnx`, `bert`, `llm` and (feature `kserve`, on by
/// default) `kserve`.
pub fn register(r: &mut ScorerRegistry) {
    r.register("xgboost", |spec| trees(spec, ModelFamily::XGBoost));
    r.register("lightgbm", |spec| trees(spec, ModelFamily::LightGBM));
    r.register("onnx", |spec| {
        let mut cfg = OnnxConfig::new(spec.path("path")?);
        let s = |k: &str| {
            spec.table
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        cfg.input = s("input");
        cfg.output = s("output");
        cfg.features = features(spec, spec.table.get("features"), "features")?;
        if let Some(t) = spec.table.get("inputs") {
            cfg.inputs = onnx_inputs(spec, t)?;
        }
        cfg.positive_class = count(spec, "positive_class", 1)?;
        cfg.sessions = count(spec, "sessions", 2)?.max(1);
        cfg.intra_threads = count(spec, "intra_threads", 1)?.max(1);
        if spec.table.contains_key("runtime") {
            cfg.runtime = Some(spec.path("runtime")?);
        }
        if spec.table.contains_key("device") {
            cfg.device =
                Some(spec.str("device")?.parse().map_err(|e: String| {
                    ConfigError::invalid(format!("{}.device", spec.key), e)
                })?);
        }
        let scorer = OnnxScorer::load(&cfg, &spec.schema).map_err(|e| scorer_err(spec, e))?;
        Ok(Arc::new(scorer))
    });
    r.register("llm", |spec| Ok(Arc::new(llm(spec)?)));
    r.register("bert", |spec| Ok(Arc::new(bert(spec)?)));
    #[cfg(feature = "kserve")]
    r.register("kserve", |spec| {
        Ok(Arc::new(crate::remote::scorer_from_spec(spec)?))
    });
}
