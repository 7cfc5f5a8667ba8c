//! Any ONNX binary classifier through ONNX Runtime (`ort`, loaded dynamically).
//!
//! The shared library is found through `ORT_DYLIB_PATH` (or [`OnnxConfig::runtime`]);
//! `.ci/run` extracts it from the `onnxruntime` wheel on PyPI. The model's probability
//! output may be a float tensor `[N, 2]` (column `positive_class`), `[N, 1]` or `[N]`, or a
//! ZipMap (sequence of maps from class label to probability). Sessions are warmed up at
//! load. A run honours the engine's deadline for real: [`OnnxScorer::score_within`] arms a
//! watchdog that calls `RunOptions::terminate` when the budget runs out, so ONNX Runtime
//! stops working instead of finishing a result nobody will read.
//!
//! With `--features cuda`, the CUDA execution provider is registered when available; if
//! not, the session runs on the CPU and [`OnnxScorer::placement`] says why.

mod inputs;
pub(crate) mod watchdog;

pub use inputs::{InputMap, InputSource};

use inputs::{Buf, ModelInput};
use ort::session::Session;
use ort::value::{TensorElementType, ValueType};
use parking_lot::Mutex;
use risk_core::{FeatureSchema, Latency, Score, ScoreError, Scorer, ScorerInfo, Transaction};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use watchdog::Watchdog;

/// An ONNX model that cannot be served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxError {
    /// The ONNX Runtime library could not be loaded.
    #[error("ONNX Runtime unavailable: {0} (set ORT_DYLIB_PATH to libonnxruntime.so >= 1.31)")]
    Runtime(String),
    /// The model file could not be loaded.
    #[error("cannot load ONNX model {path}: {message}")]
    Load {
        /// The file.
        path: String,
        /// ONNX Runtime's message.
        message: String,
    },
    /// The model's inputs or outputs do not fit a binary classifier over the schema.
    #[error("ONNX model does not fit: {0}")]
    Model(String),
}

/// How to load an ONNX classifier.
#[derive(Debug, Clone, PartialEq)]
pub struct OnnxConfig {
    /// The `.onnx` file.
    pub path: PathBuf,
    /// Input name (default: the model's only input).
    pub input: Option<String>,
    /// Probability output name (default: `probabilities`, else the first float or ZipMap
    /// output that is not a label).
    pub output: Option<String>,
    /// Column (or ZipMap key) of the positive class.
    pub positive_class: usize,
    /// Schema fields fed to the model in order (default: every schema field in order).
    pub features: Option<Vec<String>>,
    /// Every model input and what feeds it, for models of several inputs (flat features,
    /// sequences, masks, lengths); empty: the one input (`input`) fed `features`.
    pub inputs: Vec<InputMap>,
    /// Parallel sessions (concurrent runs).
    pub sessions: usize,
    /// Threads inside one run.
    pub intra_threads: usize,
    /// Path to `libonnxruntime.so` (default: `ORT_DYLIB_PATH`).
    pub runtime: Option<PathBuf>,
    /// Whether [`Scorer::warmup`] runs every session once (default true).
    pub warmup: bool,
    /// Longest a warm-up run may take before it is terminated and the load fails.
    pub warmup_budget: Duration,
    /// Where sessions run. `None` (the default): CUDA device 0 when built with
    /// `--features cuda` and its execution provider loads, else the CPU (the placement
    /// says which). `Some(Cpu)`: the CPU only. `Some(Cuda(i))`: CUDA device `i`, and the
    /// load fails when its execution provider cannot be registered.
    pub device: Option<crate::device::Device>,
}

impl OnnxConfig {
    /// Defaults for a model file.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            input: None,
            output: None,
            positive_class: 1,
            features: None,
            inputs: Vec::new(),
            sessions: 2,
            intra_threads: 1,
            runtime: None,
            warmup: true,
            warmup_budget: Duration::from_secs(30),
            device: None,
        }
    }
}

pub(crate) fn environment(
    runtime: Option<&Path>,
) -> Result<&'static ort::environment::Environment, OnnxError> {
    static ENV: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let path = match runtime {
            Some(p) => p.to_path_buf(),
            None => std::env::var_os("ORT_DYLIB_PATH")
                .map(PathBuf::from)
                .ok_or_else(|| "ORT_DYLIB_PATH is not set".to_string())?,
        };
        if !path.exists() {
            return Err(format!("{} does not exist", path.display()));
        }
        ort::init_from(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .with_name("risk")
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| OnnxError::Runtime(e.clone()))
}

/// A free session of `sessions` (round robin from `next`), else waits for one.
pub(crate) fn pick_session<'a>(
    sessions: &'a [Mutex<Session>],
    next: &AtomicUsize,
) -> parking_lot::MutexGuard<'a, Session> {
    let n = sessions.len();
    let start = next.fetch_add(1, Ordering::Relaxed);
    for k in 0..n {
        if let Some(g) = sessions[(start + k) % n].try_lock() {
            return g;
        }
    }
    sessions[start % n].lock()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Output {
    /// Float tensor; probability at `col` of each row (`None`: one value per row).
    Tensor { col: Option<usize> },
    /// Sequence of maps (ZipMap) keyed by int64 class.
    ZipMap,
}

/// An ONNX classifier as a tier. Latency unbounded: it runs on the engine's tier pool
/// and its runs are terminated at the deadline.
pub struct OnnxScorer {
    sessions: Vec<Mutex<Session>>,
    next: AtomicUsize,
    inputs: Vec<ModelInput>,
    output: String,
    kind: Output,
    positive: usize,
    watchdog: Watchdog,
    placement: String,
    version: String,
    content_hash: u64,
    warmup: Option<Duration>,
}

impl std::fmt::Debug for OnnxScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxScorer")
            .field("version", &self.version)
            .field(
                "inputs",
                &self.inputs.iter().map(|i| &i.name).collect::<Vec<_>>(),
            )
            .field("output", &self.output)
            .field("placement", &self.placement)
            .finish()
    }
}

pub(crate) fn builder(
    env: &ort::environment::Environment,
    threads: usize,
    device: Option<crate::device::Device>,
) -> Result<(ort::session::builder::SessionBuilder, String), String> {
    let b = Session::builder(env).map_err(|e| e.to_string())?;
    let b = b
        .with_intra_threads(threads.max(1))
        .map_err(|e| e.to_string())?;
    let b = b.with_inter_threads(1).map_err(|e| e.to_string())?;
    // A run terminated at its deadline is an expected outcome, reported as a typed
    // `ScoreError::Cancelled`; ONNX Runtime would also log it as an error.
    let b = b
        .with_log_level(ort::logging::LogLevel::Fatal)
        .map_err(|e| e.to_string())?;
    match device {
        Some(crate::device::Device::Cpu) => Ok((b, "cpu".to_string())),
        Some(crate::device::Device::Cuda(i)) => cuda_provider(b, i, true),
        None => cuda_provider(b, 0, false),
    }
}

/// Registers the CUDA execution provider for device `i`; `strict`: its failure fails
/// the load, else the session stays on the CPU and the placement says why.
#[cfg(feature = "cuda")]
fn cuda_provider(
    mut b: ort::session::builder::SessionBuilder,
    i: usize,
    strict: bool,
) -> Result<(ort::session::builder::SessionBuilder, String), String> {
    use ort::ep::ExecutionProvider;
    let id = i32::try_from(i).map_err(|_| format!("cuda:{i}: device index out of range"))?;
    match ort::ep::CUDA::default().with_device_id(id).register(&mut b) {
        Ok(()) => Ok((b, format!("cuda:{i}"))),
        Err(e) if strict => Err(format!(
            "cuda:{i}: CUDA execution provider unavailable: {e}"
        )),
        Err(e) => Ok((b, format!("cpu (CUDA execution provider unavailable: {e})"))),
    }
}

/// Without the `cuda` feature: the CPU, or a typed refusal when CUDA was asked for.
#[cfg(not(feature = "cuda"))]
fn cuda_provider(
    b: ort::session::builder::SessionBuilder,
    i: usize,
    strict: bool,
) -> Result<(ort::session::builder::SessionBuilder, String), String> {
    if strict {
        Err(format!(
            "cuda:{i}: risk-gpu was built without the cuda feature"
        ))
    } else {
        Ok((b, "cpu (built without the cuda feature)".to_string()))
    }
}

impl OnnxScorer {
    /// Loads and checks the model over `schema` (warm-up runs in [`Scorer::warmup`],
    /// which the engine calls before serving).
    pub fn load(cfg: &OnnxConfig, schema: &FeatureSchema) -> Result<Self, OnnxError> {
        let env = environment(cfg.runtime.as_deref())?;
        let load = |m: String| OnnxError::Load {
            path: cfg.path.display().to_string(),
            message: m,
        };
        let bytes = std::fs::read(&cfg.path).map_err(|e| load(e.to_string()))?;
        let mut sessions = Vec::new();
        let mut placement = String::new();
        for _ in 0..cfg.sessions.max(1) {
            let (mut b, p) = builder(env, cfg.intra_threads, cfg.device).map_err(&load)?;
            placement = p;
            let s = b
                .commit_from_memory(&bytes)
                .map_err(|e| load(e.to_string()))?;
            sessions.push(s);
        }
        let s0 = &sessions[0];
        let inputs = inputs::resolve(
            s0,
            &cfg.inputs,
            cfg.input.as_deref(),
            cfg.features.as_deref(),
            schema,
        )?;
        // ----- output -----
        let pick = |o: &ort::value::Outlet| -> Option<Output> {
            match o.dtype() {
                ValueType::Tensor {
                    ty: TensorElementType::Float32,
                    shape,
                    ..
                } => match shape.len() {
                    1 => Some(Output::Tensor { col: None }),
                    2 if shape[1] == 1 => Some(Output::Tensor { col: None }),
                    2 => Some(Output::Tensor {
                        col: Some(cfg.positive_class),
                    }),
                    _ => None,
                },
                ValueType::Sequence(inner) if matches!(**inner, ValueType::Map { .. }) => {
                    Some(Output::ZipMap)
                }
                _ => None,
            }
        };
        let (output, kind) = match &cfg.output {
            Some(n) => {
                let o = s0
                    .outputs()
                    .iter()
                    .find(|o| o.name() == n)
                    .ok_or_else(|| OnnxError::Model(format!("no output named {n:?}")))?;
                (
                    n.clone(),
                    pick(o).ok_or_else(|| {
                        OnnxError::Model(format!(
                            "output {n:?} is {:?}, not probabilities",
                            o.dtype()
                        ))
                    })?,
                )
            }
            None => s0
                .outputs()
                .iter()
                .filter(|o| o.name() != "label")
                .find_map(|o| pick(o).map(|k| (o.name().to_owned(), k)))
                .ok_or_else(|| OnnxError::Model("no float probability or ZipMap output".into()))?,
        };
        let me = Self {
            next: AtomicUsize::new(0),
            inputs,
            output,
            kind,
            positive: cfg.positive_class,
            watchdog: Watchdog::start().map_err(|e| OnnxError::Runtime(e.to_string()))?,
            placement,
            content_hash: risk_core::schema::Fnv::hash(&bytes),
            version: format!(
                "{}:{:016x}",
                cfg.path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("model"),
                risk_core::schema::Fnv::hash(&bytes)
            ),
            sessions: sessions.into_iter().map(Mutex::new).collect(),
            warmup: cfg.warmup.then_some(cfg.warmup_budget),
        };
        Ok(me)
    }

    /// Where the sessions run, and why.
    pub fn placement(&self) -> &str {
        &self.placement
    }

    fn session(&self) -> parking_lot::MutexGuard<'_, Session> {
        pick_session(&self.sessions, &self.next)
    }

    /// Runs one batch of `rows` over its inputs' values.
    fn run_bufs(
        &self,
        session: &mut Session,
        bufs: &[Buf],
        rows: usize,
        budget: Option<Duration>,
    ) -> Result<Vec<f32>, ScoreError> {
        let views = inputs::views(&self.inputs, bufs)?;
        self.watchdog
            .run_within(session, views, budget, |out| self.read_probs(out, rows))
    }

    /// Every input's values for `txns`.
    fn gather(&self, txns: &[&Transaction]) -> Result<Vec<Buf>, ScoreError> {
        self.inputs.iter().map(|i| i.gather(txns)).collect()
    }

    /// Features fed to the model's feature input (the single input's width).
    pub fn feature_width(&self) -> Option<usize> {
        self.inputs.iter().find_map(ModelInput::features)
    }

    fn read_probs(
        &self,
        out: &ort::session::SessionOutputs<'_>,
        rows: usize,
    ) -> Result<Vec<f32>, ScoreError> {
        let fail = |e: ort::Error| ScoreError::Failed(e.to_string());
        let v = out
            .get(&self.output)
            .ok_or_else(|| ScoreError::Failed(format!("output {:?} missing", self.output)))?;
        let mut probs = Vec::with_capacity(rows);
        match self.kind {
            Output::Tensor { col } => {
                let (shape, x) = v.try_extract_tensor::<f32>().map_err(fail)?;
                let cols = if shape.len() == 2 {
                    shape[1] as usize
                } else {
                    1
                };
                let c = col.unwrap_or(0);
                if c >= cols || x.len() != rows * cols {
                    return Err(ScoreError::Failed(format!(
                        "output shape {shape:?} has no column {c} for {rows} rows"
                    )));
                }
                probs.extend((0..rows).map(|r| x[r * cols + c]));
            }
            Output::ZipMap => {
                let seq = v
                    .try_extract_sequence::<ort::value::DynMapValueType>()
                    .map_err(fail)?;
                for m in seq {
                    let m = m.try_extract_map::<i64, f32>().map_err(fail)?;
                    probs.push(*m.get(&(self.positive as i64)).ok_or_else(|| {
                        ScoreError::Failed(format!("ZipMap has no class {}", self.positive))
                    })?);
                }
            }
        }
        if probs.len() != rows {
            return Err(ScoreError::BatchLength {
                expected: rows,
                got: probs.len(),
            });
        }
        Ok(probs)
    }
}

impl Scorer for OnnxScorer {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(
            format!("onnx:{}", self.placement),
            &self.version,
            Latency::Unbounded,
        )
        .with_content_hash(self.content_hash)
    }

    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        self.score_within(t, Duration::MAX)
    }

    fn score_within(&self, t: &Transaction, budget: Duration) -> Result<Score, ScoreError> {
        let bufs = self.gather(&[t])?;
        let budget = (budget != Duration::MAX).then_some(budget);
        let p = self.run_bufs(&mut self.session(), &bufs, 1, budget)?;
        Ok(Score::new(p[0]))
    }

    /// One run per session (so the first real call pays no lazy setup), each bounded by
    /// the configured warm-up budget.
    fn warmup(&self) -> Result<(), ScoreError> {
        let Some(budget) = self.warmup else {
            return Ok(());
        };
        let bufs: Vec<Buf> = self.inputs.iter().map(|i| i.zeros(1)).collect();
        for s in &self.sessions {
            let p = self.run_bufs(&mut s.lock(), &bufs, 1, Some(budget))?;
            if !(0.0..=1.0).contains(&p[0]) {
                return Err(ScoreError::Failed(format!(
                    "warm-up output {} is not a probability",
                    p[0]
                )));
            }
        }
        Ok(())
    }

    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        if txns.is_empty() {
            return Ok(());
        }
        let bufs = self.gather(txns)?;
        let p = self.run_bufs(&mut self.session(), &bufs, txns.len(), None)?;
        out.extend(p.into_iter().map(Score::new));
        Ok(())
    }
}
