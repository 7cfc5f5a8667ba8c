//! Native gradient-boosted tree scoring with exact TreeSHAP: XGBoost and LightGBM.
//!
//! [`XgbModel`] loads an XGBoost model, JSON ([`xgb_json`]) or UBJSON ([`ubjson`], the
//! default of `save_model("m.ubj")`), or a LightGBM model (text, [`lgbm_text`], or
//! `dump_model` JSON, [`lgbm_json`]), validates
//! it against
//! adversarial input ([`ensemble::Tree::new`]), and builds a padded, branch-free layout
//! ([`flat`]) for scoring, run by a SIMD kernel where the CPU has one (AVX2 byte lanes,
//! else AVX-512 float lanes for the top levels; [`XgbModel::kernel`]). [`XgbScorer`]
//! binds it to a [`FeatureSchema`] and implements [`Scorer`] with bounded latency;
//! transactions scoring at or above `explain_above` get their top SHAP contributions
//! ([`shap`]) as reason codes.

mod avx2;
mod avx512;
mod binner;
mod bytes;
pub mod ensemble;
pub mod flat;
pub mod lgbm_json;
pub mod lgbm_text;
mod lgbm_tree;
pub mod multiclass;
pub mod score_transform;
pub mod shap;
mod shap_build;
mod shap_spread;
pub mod shap_table;
pub mod ubjson;
mod xgb_categories;
pub mod xgb_json;

use ensemble::{Ensemble, Link};
use flat::Flat;
use risk_core::{
    FeatureSchema, Latency, ReasonCode, Reasons, Score, ScoreError, Scorer, ScorerInfo, Slot,
    Transaction,
};
use score_transform::ScoreTransform;
use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;

/// Every scoring kernel [`XgbModel::kernel`] can report.
pub const KERNELS: [&str; 5] = ["avx2-bytes", "avx2-shap", "avx512-top", "scalar", "walk"];

/// Whether this CPU can run the kernel `name` (one of [`KERNELS`]; `None` for another
/// name): `"avx2-bytes"` needs AVX2 and POPCNT, `"avx2-shap"` (the TreeSHAP tables'
/// credit pass) AVX2, `"avx512-top"` AVX-512F, the others
/// nothing. A model runs a SIMD kernel only if it also fits that kernel's limits.
pub fn kernel_available(name: &str) -> Option<bool> {
    match name {
        "avx2-bytes" => Some(binner::available()),
        "avx2-shap" => Some(shap_spread::available()),
        "avx512-top" => Some(avx512::available()),
        "scalar" | "walk" => Some(true),
        _ => None,
    }
}

/// A model file that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// Reading the file failed.
    #[error("cannot read model {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// Not a valid model file (the message names the format and where).
    #[error("malformed tree model: {0}")]
    Format(String),
    /// A valid model using something this loader does not support.
    #[error("unsupported tree model: {0}")]
    Unsupported(String),
    /// A tree that is not a tree.
    #[error("tree {tree}, node {node}: {reason}")]
    BadTree {
        /// Tree index.
        tree: usize,
        /// Node index.
        node: usize,
        /// What is wrong.
        reason: String,
    },
    /// Beyond the size limits.
    #[error("model too large: {0}")]
    TooLarge(String),
    /// The model's features do not fit the schema.
    #[error("model does not fit the schema: {0}")]
    Schema(String),
}

/// A model file's bytes (at most [`xgb_json::MAX_FILE`]) and its version: file name and
/// content hash.
pub(crate) fn read_model_file(p: &Path) -> Result<(Vec<u8>, String), TreeError> {
    let io = |e: std::io::Error| TreeError::Io {
        path: p.display().to_string(),
        message: e.to_string(),
    };
    let len = std::fs::metadata(p).map_err(io)?.len();
    if len > xgb_json::MAX_FILE {
        return Err(TreeError::TooLarge(format!("{len} bytes")));
    }
    let bytes = std::fs::read(p).map_err(io)?;
    let version = format!(
        "{}:{:016x}",
        p.file_name().and_then(|n| n.to_str()).unwrap_or("model"),
        risk_core::schema::Fnv::hash(&bytes)
    );
    Ok((bytes, version))
}

/// Any supported model file's bytes, told apart by content: the library that wrote it
/// and one ensemble per output.
pub(crate) fn parse_any(bytes: &[u8]) -> Result<(ModelFamily, Vec<Ensemble>), TreeError> {
    Ok(if ubjson::looks_like(bytes) {
        (ModelFamily::XGBoost, xgb_json::parse_ubjson_classes(bytes)?)
    } else if lgbm_text::looks_like(bytes) {
        (ModelFamily::LightGBM, lgbm_text::parse_classes(bytes)?)
    } else if lgbm_json::looks_like(bytes) {
        (ModelFamily::LightGBM, lgbm_json::parse_classes(bytes)?)
    } else {
        (ModelFamily::XGBoost, xgb_json::parse_classes(bytes)?)
    })
}

/// Which library wrote a model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelFamily {
    /// XGBoost (JSON or UBJSON).
    XGBoost,
    /// LightGBM (text model).
    LightGBM,
}

impl ModelFamily {
    /// `"xgboost"` or `"lightgbm"`: the `risk.toml` scorer kind and the scorer's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::XGBoost => "xgboost",
            Self::LightGBM => "lightgbm",
        }
    }

    /// Prefix of the reason codes a scorer of this family gives (`xgb:`, `lgbm:`).
    pub fn reason_prefix(self) -> &'static str {
        match self {
            Self::XGBoost => "xgb",
            Self::LightGBM => "lgbm",
        }
    }
}

/// A loaded gradient-boosted model, a binary classifier or a regression ([`Link`]):
/// XGBoost or LightGBM (the name stays from when XGBoost was the only family).
#[derive(Debug, Clone)]
pub struct XgbModel {
    ensemble: Ensemble,
    family: ModelFamily,
    flat: Option<Flat>,
    tables: Option<shap_table::ShapTables>,
    bias: f64,
    version: String,
    /// FNV-1a 64 of the JSON bytes.
    content_hash: u64,
}

impl XgbModel {
    /// Loads a model file: XGBoost JSON or UBJSON, or LightGBM text (told apart by
    /// content, not name).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TreeError> {
        let (bytes, version) = read_model_file(path.as_ref())?;
        let mut m = Self::from_bytes(&bytes)?;
        m.version = version;
        Ok(m)
    }

    /// Parses a model: XGBoost JSON or UBJSON, or LightGBM text or dump (told apart by
    /// content: [`ubjson::looks_like`], [`lgbm_text::looks_like`],
    /// [`lgbm_json::looks_like`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TreeError> {
        let (family, classes) = parse_any(bytes)?;
        let mut m = Self::build(xgb_json::one(classes)?, bytes)?;
        m.family = family;
        Ok(m)
    }

    /// Parses a LightGBM model: its text (`Booster.save_model("m.txt")`, [`lgbm_text`])
    /// or its dump (`json.dump(booster.dump_model(), f)`, [`lgbm_json`]).
    pub fn from_lightgbm(bytes: &[u8]) -> Result<Self, TreeError> {
        let classes = if lgbm_json::looks_like(bytes) {
            lgbm_json::parse_classes(bytes)?
        } else {
            lgbm_text::parse_classes(bytes)?
        };
        let mut m = Self::build(xgb_json::one(classes)?, bytes)?;
        m.family = ModelFamily::LightGBM;
        Ok(m)
    }

    /// Parses an XGBoost UBJSON model (`save_model("m.ubj")`), at most
    /// [`xgb_json::MAX_UBJSON_FILE`] bytes.
    pub fn from_ubjson(bytes: &[u8]) -> Result<Self, TreeError> {
        Self::build(xgb_json::parse_ubjson(bytes)?, bytes)
    }

    /// Parses an XGBoost JSON model.
    pub fn from_json(bytes: &[u8]) -> Result<Self, TreeError> {
        if ubjson::looks_like(bytes) {
            return Err(TreeError::Format(
                "this is UBJSON, not JSON: load it with from_ubjson, from_bytes or from_file"
                    .into(),
            ));
        }
        if lgbm_text::looks_like(bytes) || lgbm_json::looks_like(bytes) {
            return Err(TreeError::Format(
                "this is a LightGBM model, not XGBoost JSON: load it with from_lightgbm, \
                 from_bytes or from_file"
                    .into(),
            ));
        }
        Self::build(xgb_json::parse(bytes)?, bytes)
    }

    fn build(ensemble: Ensemble, bytes: &[u8]) -> Result<Self, TreeError> {
        let flat = Flat::new(&ensemble);
        let tables = shap_table::ShapTables::new(&ensemble);
        let bias = ensemble.base_margin + shap::expected_values(&ensemble).iter().sum::<f64>();
        let content_hash = risk_core::schema::Fnv::hash(bytes);
        Ok(Self {
            version: format!("{content_hash:016x}"),
            content_hash,
            ensemble,
            family: ModelFamily::XGBoost,
            flat,
            tables,
            bias,
        })
    }

    /// The validated trees.
    pub fn ensemble(&self) -> &Ensemble {
        &self.ensemble
    }

    /// Which library wrote the model.
    pub fn family(&self) -> ModelFamily {
        self.family
    }

    /// Runs `f` on `x` as the trees read it ([`Ensemble::prepare`]: a copy only for
    /// LightGBM models with `zero_as_missing` features).
    #[inline]
    fn input<R>(&self, x: &[f32], f: impl FnOnce(&[f32]) -> R) -> R {
        if self.ensemble.zero_as_missing.is_empty() {
            return f(x);
        }
        INPUT.with(|b| {
            let mut b = b.borrow_mut();
            f(self.ensemble.prepare(x, &mut b))
        })
    }

    /// Number of features the model reads.
    pub fn num_features(&self) -> usize {
        self.ensemble.num_features
    }

    /// File name and content hash.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// FNV-1a 64 of the model file's bytes (recorded on decisions).
    pub fn content_hash(&self) -> u64 {
        self.content_hash
    }

    /// Whether the padded fast layout is in use (trees no deeper than
    /// [`flat::MAX_PADDED_DEPTH`], at most [`flat::MAX_PADDED_NODES`] padded slots).
    pub fn is_padded(&self) -> bool {
        self.flat.is_some()
    }

    fn check(&self, x: &[f32]) {
        assert!(
            x.len() >= self.ensemble.num_features,
            "row has {} values, the model reads {}",
            x.len(),
            self.ensemble.num_features
        );
    }

    /// Raw margin (log-odds) of one row of model features.
    ///
    /// # Panics
    /// If `x` is shorter than [`num_features`](Self::num_features).
    #[inline]
    pub fn margin(&self, x: &[f32]) -> f64 {
        self.check(x);
        match &self.flat {
            Some(f) => self.input(x, |x| f.leaf_sum(x)) + self.ensemble.base_margin,
            None => self.ensemble.margin_walk(x),
        }
    }

    /// [`margin`](Self::margin) without the SIMD kernels: the scalar traversal they are
    /// tested against (equal bit for bit).
    pub fn margin_scalar(&self, x: &[f32]) -> f64 {
        self.check(x);
        match &self.flat {
            Some(f) => self.input(x, |x| f.leaf_sum_scalar(x)) + self.ensemble.base_margin,
            None => self.ensemble.margin_walk(x),
        }
    }

    /// Whether scoring uses a SIMD kernel (see [`kernel`](Self::kernel)).
    pub fn uses_simd(&self) -> bool {
        self.flat.as_ref().is_some_and(|f| f.uses_simd())
    }

    /// The scoring kernel in use: `"avx2-bytes"` (x86-64 with AVX2; at most 32
    /// features, 1,024 trees and 254 distinct thresholds per feature in the top six
    /// levels), `"avx512-top"` (AVX-512F, models the byte kernel refuses; at most 32
    /// features and 1,024 trees), `"scalar"` (the padded traversal) or `"walk"` (no
    /// padded layout: see [`is_padded`](Self::is_padded)).
    pub fn kernel(&self) -> &'static str {
        self.flat.as_ref().map_or("walk", |f| f.kernel())
    }

    /// How the margin becomes the output ([`Link::Logistic`]: a probability).
    pub fn link(&self) -> Link {
        self.ensemble.link
    }

    /// The model's output for one row: a probability for binary objectives, the
    /// predicted value for regressions ([`link`](Self::link)).
    #[inline]
    pub fn predict(&self, x: &[f32]) -> f32 {
        self.ensemble.link.apply(self.margin(x)) as f32
    }

    /// Outputs of many rows into `out` (same length as `rows`), equal bit for bit
    /// to [`predict`](Self::predict) row by row. Each row runs the single-row kernel
    /// (rows in lanes measured no faster here, see BENCHMARKS.md), chosen once per batch.
    ///
    /// # Panics
    /// If a row is shorter than [`num_features`](Self::num_features).
    pub fn predict_batch(&self, rows: &[&[f32]], out: &mut [f32]) {
        let Some(f) = self
            .flat
            .as_ref()
            .filter(|_| self.ensemble.zero_as_missing.is_empty())
        else {
            for (o, r) in out.iter_mut().zip(rows) {
                *o = self.predict(r);
            }
            return;
        };
        let mut m = [0f64; 64];
        for (rc, oc) in rows.chunks(64).zip(out.chunks_mut(64)) {
            for r in rc {
                self.check(r);
            }
            let m = &mut m[..rc.len()];
            f.leaf_sums(rc, m);
            for (o, &m) in oc.iter_mut().zip(m.iter()) {
                *o = self.ensemble.link.apply(m + self.ensemble.base_margin) as f32;
            }
        }
    }

    /// Exact SHAP values: one per feature, then the bias; they sum to the margin.
    pub fn contributions(&self, x: &[f32], out: &mut Vec<f64>) {
        self.check(x);
        self.input(x, |x| match &self.tables {
            Some(t) => {
                out.clear();
                out.resize(self.ensemble.num_features + 1, 0.0);
                t.add(x, out);
                shap::add_trees(&self.ensemble, t.deep_trees().iter().copied(), x, out);
                out[self.ensemble.num_features] += self.bias;
            }
            None => shap::contributions(&self.ensemble, self.bias, x, out),
        })
    }

    /// Exact SHAP values by the recursive algorithm (no tables): the reference for
    /// [`contributions`](Self::contributions), and its fallback for models whose tables
    /// would be too large.
    pub fn contributions_recursive(&self, x: &[f32], out: &mut Vec<f64>) {
        self.check(x);
        self.input(x, |x| {
            shap::contributions(&self.ensemble, self.bias, x, out)
        });
    }

    /// Which credit pass explanations use: `"avx2-shap"` or `"scalar"` over the subset
    /// tables ([`shap_table`]), `"recursive"` without them.
    pub fn shap_kernel(&self) -> &'static str {
        self.tables.as_ref().map_or("recursive", |t| t.kernel())
    }

    /// Whether explanations use the subset tables ([`shap_table`]).
    pub fn has_shap_tables(&self) -> bool {
        self.tables.is_some()
    }
}

thread_local! {
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PHI: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static INPUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A multi-class model's class probabilities ([`multiclass::MultiClassScorer`]).
    static CLASS_P: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// The `top_k` largest positive contributions of `phi[..nf]` as reasons, largest first
/// (a fixed array: no allocation per decision).
fn push_top_k(phi: &[f64], top_k: usize, codes: &[ReasonCode], out: &mut Reasons) {
    let k = top_k.min(risk_core::Reasons::CAPACITY);
    if k == 0 {
        return;
    }
    let mut best: [(f64, usize); risk_core::Reasons::CAPACITY] =
        [(0.0, usize::MAX); risk_core::Reasons::CAPACITY];
    for (i, &c) in phi.iter().enumerate() {
        if c > best[k - 1].0 {
            best[k - 1] = (c, i);
            best[..k].sort_by(|a, b| b.0.total_cmp(&a.0));
        }
    }
    for &(c, i) in &best[..k] {
        if i != usize::MAX {
            out.push(codes[i], c as f32);
        }
    }
}

/// The schema slot of each model feature: by name when the file names them (each must be
/// a schema field), else feature `i` is slot `i` and the counts must match.
pub(crate) fn feature_slots(
    model: &XgbModel,
    schema: &FeatureSchema,
) -> Result<Vec<Slot>, TreeError> {
    let nf = model.num_features();
    match &model.ensemble.feature_names {
        Some(names) => names
            .iter()
            .map(|n| {
                schema.slot(n).ok_or_else(|| {
                    TreeError::Schema(format!("model feature {n:?} is not in the schema"))
                })
            })
            .collect(),
        None => {
            if nf != schema.len() {
                return Err(TreeError::Schema(format!(
                    "model reads {nf} positional features, the schema has {} fields",
                    schema.len()
                )));
            }
            Ok((0..nf as u32).map(Slot).collect())
        }
    }
}

/// [`XgbModel`] (XGBoost or LightGBM) as the fast tier.
#[derive(Debug)]
pub struct XgbScorer {
    model: Arc<XgbModel>,
    /// Schema slot of each model feature; `None` when it is the identity.
    map: Option<Vec<Slot>>,
    codes: Vec<ReasonCode>,
    explain_above: f32,
    /// Reasons left to [`Scorer::explain`] once a decision needs them
    /// ([`explain_on_decision`](XgbScorer::explain_on_decision)).
    defer: bool,
    top_k: usize,
    schema_fp: u64,
    transform: ScoreTransform,
}

impl XgbScorer {
    /// Binds `model` to `schema`. Model feature names (when the file has them) must be
    /// schema fields; without names, model feature `i` is schema slot `i` and the counts
    /// must match. Reasons are computed for scores `>= explain_above` (`f32::INFINITY`
    /// turns them off; 0 explains everything). A regression model is refused: see
    /// [`with_transform`](Self::with_transform).
    pub fn new(
        model: Arc<XgbModel>,
        schema: &FeatureSchema,
        explain_above: f32,
        top_k: usize,
    ) -> Result<Self, TreeError> {
        Self::with_transform(
            model,
            schema,
            explain_above,
            top_k,
            ScoreTransform::Probability,
        )
    }

    /// [`new`](Self::new) with the mapping from the model's output to the probability
    /// (a regression needs one, a binary model takes [`ScoreTransform::Probability`]).
    /// Reasons are the SHAP contributions to the margin.
    pub fn with_transform(
        model: Arc<XgbModel>,
        schema: &FeatureSchema,
        explain_above: f32,
        top_k: usize,
        transform: ScoreTransform,
    ) -> Result<Self, TreeError> {
        transform.check(model.link())?;
        let map = feature_slots(&model, schema)?;
        let identity = map.iter().enumerate().all(|(i, s)| s.index() == i);
        let codes = map
            .iter()
            .map(|s| {
                ReasonCode::intern(&format!(
                    "{}:{}",
                    model.family().reason_prefix(),
                    schema.field(*s).name
                ))
            })
            .collect();
        Ok(Self {
            schema_fp: schema.fingerprint(),
            model,
            map: (!identity).then_some(map),
            codes,
            explain_above,
            defer: false,
            top_k: top_k.min(risk_core::Reasons::CAPACITY),
            transform,
        })
    }

    /// Computes reasons only for the decisions that need them (`explain = "decision"`
    /// in `risk.toml`): no SHAP at scoring time, whatever the score; the engine asks
    /// [`Scorer::explain`] for review and decline decisions ([`Scorer::defers_reasons`]).
    pub fn explain_on_decision(mut self) -> Self {
        self.defer = true;
        self
    }

    /// The model.
    pub fn model(&self) -> &Arc<XgbModel> {
        &self.model
    }

    fn with_row<R>(&self, t: &Transaction, f: impl FnOnce(&[f32]) -> R) -> R {
        match &self.map {
            None => f(t.features.values()),
            Some(map) => ROW.with(|r| {
                let mut r = r.borrow_mut();
                r.clear();
                r.extend(map.iter().map(|s| t.features.get(*s)));
                f(&r)
            }),
        }
    }

    fn explain_row(&self, x: &[f32], out: &mut Reasons) {
        PHI.with(|phi| {
            let mut phi = phi.borrow_mut();
            self.model.contributions(x, &mut phi);
            // Top-k positive contributions (toward fraud), largest first.
            push_top_k(
                &phi[..self.model.num_features()],
                self.top_k,
                &self.codes,
                out,
            );
        });
    }
}

impl Scorer for XgbScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(
            self.model.family().name(),
            self.model.version(),
            Latency::Bounded,
        )
        .with_content_hash(self.model.content_hash())
    }

    fn schema_fingerprint(&self) -> Option<u64> {
        Some(self.schema_fp)
    }

    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        self.with_row(t, |x| {
            let mut s = Score::new(self.transform.apply(self.model.predict(x)));
            if !self.defer && s.probability >= self.explain_above && self.top_k > 0 {
                self.explain_row(x, &mut s.reasons);
            }
            Ok(s)
        })
    }

    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        let rows: Vec<Vec<f32>>;
        let refs: Vec<&[f32]> = match &self.map {
            None => txns.iter().map(|t| t.features.values()).collect(),
            Some(map) => {
                rows = txns
                    .iter()
                    .map(|t| map.iter().map(|s| t.features.get(*s)).collect())
                    .collect();
                rows.iter().map(|r| r.as_slice()).collect()
            }
        };
        let mut p = vec![0f32; refs.len()];
        self.model.predict_batch(&refs, &mut p);
        for (x, &y) in refs.iter().zip(&p) {
            let prob = self.transform.apply(y);
            let mut s = Score::new(prob);
            if !self.defer && prob >= self.explain_above && self.top_k > 0 {
                self.explain_row(x, &mut s.reasons);
            }
            out.push(s);
        }
        Ok(())
    }

    fn defers_reasons(&self) -> bool {
        self.defer
    }

    fn explain(&self, t: &Transaction, out: &mut Reasons) -> Result<(), ScoreError> {
        self.with_row(t, |x| self.explain_row(x, out));
        Ok(())
    }

    fn warmup(&self) -> Result<(), ScoreError> {
        let x = vec![f32::NAN; self.model.num_features()];
        let p = self.transform.apply(self.model.predict(&x));
        let mut phi = Vec::new();
        self.model.contributions(&x, &mut phi);
        if !(0.0..=1.0).contains(&p) {
            return Err(ScoreError::Failed(format!(
                "warm-up prediction {p} is not a probability"
            )));
        }
        Ok(())
    }
}
