//! Multi-class tree models (XGBoost `multi:softprob` / `multi:softmax`, LightGBM
//! `multiclass`): one [`XgbModel`] per class gives that class's margin (each with its
//! padded layout, SIMD kernel and SHAP tables), and the probabilities are their softmax.
//! As a fast tier ([`MultiClassScorer`]) the score is the probability of the classes the
//! policy names as fraud (say `card_testing`, `account_takeover`), and the reasons are the
//! SHAP contributions to the margin of the most probable of them.

use super::{ModelFamily, TreeError, XgbModel};
use risk_core::{
    FeatureSchema, Latency, ReasonCode, Reasons, Score, ScoreError, Scorer, ScorerInfo, Slot,
    Transaction,
};
use std::path::Path;
use std::sync::Arc;

/// A loaded multi-class model.
#[derive(Debug, Clone)]
pub struct MultiClassModel {
    classes: Vec<XgbModel>,
    family: ModelFamily,
    version: String,
    content_hash: u64,
}

impl MultiClassModel {
    /// Loads a multi-class model file: XGBoost JSON or UBJSON, LightGBM text or dump
    /// (told apart by content). A model of one output is refused (load it as an [`XgbModel`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TreeError> {
        let (bytes, version) = super::read_model_file(path.as_ref())?;
        let mut m = Self::from_bytes(&bytes)?;
        m.version = version;
        Ok(m)
    }

    /// Parses a multi-class model from its bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TreeError> {
        let (family, classes) = super::parse_any(bytes)?;
        if classes.len() < 2 {
            return Err(TreeError::Unsupported(
                "a model of one output, not multi-class: load it as an XgbModel (risk.toml: \
                 no classes = [...])"
                    .into(),
            ));
        }
        let classes = classes
            .into_iter()
            .map(|e| {
                let mut m = XgbModel::build(e, bytes)?;
                m.family = family;
                Ok(m)
            })
            .collect::<Result<Vec<_>, TreeError>>()?;
        let content_hash = classes[0].content_hash;
        Ok(Self {
            version: format!("{content_hash:016x}"),
            classes,
            family,
            content_hash,
        })
    }

    /// Number of classes.
    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }

    /// Class `k`'s model: its [`margin`](XgbModel::margin) and
    /// [`contributions`](XgbModel::contributions) (SHAP of that margin).
    ///
    /// # Panics
    /// If `k` is not below [`num_classes`](Self::num_classes).
    pub fn class(&self, k: usize) -> &XgbModel {
        &self.classes[k]
    }

    /// Which library wrote the model.
    pub fn family(&self) -> ModelFamily {
        self.family
    }

    /// Number of features the model reads.
    pub fn num_features(&self) -> usize {
        self.classes[0].num_features()
    }

    /// File name and content hash.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The class probabilities of one row (softmax of the margins) into `out`.
    ///
    /// # Panics
    /// If `x` is shorter than [`num_features`](Self::num_features).
    pub fn probabilities(&self, x: &[f32], out: &mut Vec<f64>) {
        out.clear();
        out.extend(self.classes.iter().map(|c| c.margin(x)));
        let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for m in out.iter_mut() {
            *m = (*m - max).exp();
            sum += *m;
        }
        for m in out.iter_mut() {
            *m /= sum;
        }
    }
}

/// A [`MultiClassModel`] as the fast tier: the score is the summed probability of the
/// fraud classes; reasons explain the most probable of them.
#[derive(Debug)]
pub struct MultiClassScorer {
    model: Arc<MultiClassModel>,
    fraud: Vec<usize>,
    map: Vec<Slot>,
    /// Reason codes per fraud class (in `fraud`'s order), per model feature.
    codes: Vec<Vec<ReasonCode>>,
    explain_above: f32,
    /// Reasons left to [`Scorer::explain`] ([`explain_on_decision`](Self::explain_on_decision)).
    defer: bool,
    top_k: usize,
    schema_fp: u64,
}

impl MultiClassScorer {
    /// Binds `model` to `schema` (features by name as [`super::XgbScorer::new`]), scoring
    /// the probability of the classes `fraud` (distinct, below the class count, not all
    /// of them). Reason codes are `xgb:class<k>:<feature>` (`lgbm:` for LightGBM).
    pub fn new(
        model: Arc<MultiClassModel>,
        schema: &FeatureSchema,
        fraud: &[usize],
        explain_above: f32,
        top_k: usize,
    ) -> Result<Self, TreeError> {
        let k = model.num_classes();
        let mut seen = vec![false; k];
        for &c in fraud {
            if c >= k || std::mem::replace(&mut seen[c], true) {
                return Err(TreeError::Schema(format!(
                    "fraud classes {fraud:?}: each a distinct class below {k}"
                )));
            }
        }
        if fraud.is_empty() || fraud.len() == k {
            return Err(TreeError::Schema(format!(
                "fraud classes {fraud:?}: name some of the {k} classes, not none or all"
            )));
        }
        let map = super::feature_slots(model.class(0), schema)?;
        let prefix = model.family().reason_prefix();
        let codes = fraud
            .iter()
            .map(|c| {
                map.iter()
                    .map(|s| {
                        ReasonCode::intern(&format!("{prefix}:class{c}:{}", schema.field(*s).name))
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            schema_fp: schema.fingerprint(),
            model,
            fraud: fraud.to_vec(),
            map,
            codes,
            explain_above,
            defer: false,
            top_k: top_k.min(risk_core::Reasons::CAPACITY),
        })
    }

    /// Computes reasons only for the decisions that need them (`explain = "decision"`),
    /// as [`super::XgbScorer::explain_on_decision`].
    pub fn explain_on_decision(mut self) -> Self {
        self.defer = true;
        self
    }

    /// The top contributions to the margin of the most probable fraud class, given the
    /// class probabilities `p`.
    fn explain_row(&self, x: &[f32], p: &[f64], out: &mut Reasons) {
        let (i, &c) = self
            .fraud
            .iter()
            .enumerate()
            .max_by(|a, b| p[*a.1].total_cmp(&p[*b.1]))
            .expect("fraud classes are not empty");
        super::PHI.with(|phi| {
            let mut phi = phi.borrow_mut();
            self.model.class(c).contributions(x, &mut phi);
            let nf = self.model.num_features();
            super::push_top_k(&phi[..nf], self.top_k, &self.codes[i], out);
        });
    }

    /// Runs `f` on the row as the model reads it (this thread's buffer: no allocation).
    fn with_row<R>(&self, t: &Transaction, f: impl FnOnce(&[f32]) -> R) -> R {
        super::ROW.with(|r| {
            let mut r = r.borrow_mut();
            r.clear();
            r.extend(self.map.iter().map(|s| t.features.get(*s)));
            f(&r)
        })
    }
}

impl Scorer for MultiClassScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(
            self.model.family().name(),
            self.model.version(),
            Latency::Bounded,
        )
        .with_content_hash(self.model.content_hash)
    }

    fn schema_fingerprint(&self) -> Option<u64> {
        Some(self.schema_fp)
    }

    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        // This thread's buffers for the row, the class probabilities and the
        // contributions: a decision allocates nothing.
        self.with_row(t, |x| {
            super::CLASS_P.with(|p| {
                let mut p = p.borrow_mut();
                self.model.probabilities(x, &mut p);
                let prob: f64 = self.fraud.iter().map(|&c| p[c]).sum();
                let mut s = Score::new(prob.clamp(0.0, 1.0) as f32);
                if !self.defer && s.probability >= self.explain_above && self.top_k > 0 {
                    self.explain_row(x, &p, &mut s.reasons);
                }
                Ok(s)
            })
        })
    }

    fn defers_reasons(&self) -> bool {
        self.defer
    }

    fn explain(&self, t: &Transaction, out: &mut Reasons) -> Result<(), ScoreError> {
        self.with_row(t, |x| {
            super::CLASS_P.with(|p| {
                let mut p = p.borrow_mut();
                self.model.probabilities(x, &mut p);
                self.explain_row(x, &p, out);
            })
        });
        Ok(())
    }

    fn warmup(&self) -> Result<(), ScoreError> {
        let x = vec![f32::NAN; self.model.num_features()];
        let mut p = Vec::new();
        self.model.probabilities(&x, &mut p);
        let sum: f64 = p.iter().sum();
        if !(sum - 1.0).abs().le(&1e-6) {
            return Err(ScoreError::Failed(format!(
                "warm-up class probabilities sum to {sum}"
            )));
        }
        Ok(())
    }
}
