//! `risk.Engine`: an engine built from `risk.toml`, deciding one mapping or a whole
//! Arrow table (the GIL released, rows spread over threads when no entity state orders
//! them), picklable (rebuilt from its configuration) and safe across `fork`.

use crate::batch::{decide_table, Errors};
use crate::decision::PyDecision;
use crate::errors::{self, err, Kind};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use risk_core::{Engine, ScorerRegistry, Shutdown};
use risk_rules::RuleScorer;
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bumped in a child process after `os.fork()` (`risk/__init__.py` registers the hook):
/// an engine made in another generation has no threads here and refuses to work.
pub static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Called by `os.register_at_fork(after_in_child=...)`.
#[pyfunction]
pub fn _after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Where an engine's configuration came from: enough to build it again (pickling).
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) text: String,
    pub(crate) base_dir: PathBuf,
    pub(crate) origin: PathBuf,
}

/// Every scorer kind, with the rule tier's scorer kept in `rules` for `reload_rules`
/// (see [`risk_rules::register_keeping`]).
pub(crate) fn registry(rules: &risk_rules::RuleSlot) -> ScorerRegistry {
    let mut reg = ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    risk_rules::register_keeping(&mut reg, rules);
    reg
}

/// A decision engine (`risk.toml`): rules, a fast tier under its deadline, entity state.
#[pyclass(module = "risk", name = "Engine", frozen)]
pub struct PyEngine {
    engine: ManuallyDrop<Engine>,
    /// The rule tier's scorer, when it is a rule file.
    pub(crate) rules: Option<Arc<RuleScorer>>,
    /// The last drill's report (JSON), read by `drill_report`.
    pub(crate) last_drill: Mutex<Option<String>>,
    /// Mapping keys resolved once per key object (`decide`'s parse).
    pub(crate) keys: crate::txn::KeyCache,
    source: Source,
    generation: u64,
    closed: AtomicBool,
    computed: HashSet<String>,
}

impl std::fmt::Debug for PyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("origin", &self.source.origin)
            .finish_non_exhaustive()
    }
}

impl Drop for PyEngine {
    fn drop(&mut self) {
        if self.generation == FORK_GENERATION.load(Ordering::SeqCst) {
            // SAFETY: not used again: `self` is being dropped.
            unsafe { ManuallyDrop::drop(&mut self.engine) };
        }
        // In a forked child the engine's threads do not exist: dropping it would wait
        // for them, so its memory is left to the process's exit.
    }
}

impl PyEngine {
    fn build(source: Source, py: Python<'_>) -> PyResult<PyEngine> {
        let rules = Arc::new(Mutex::new(None));
        let reg = registry(&rules);
        let engine = py
            .detach(|| Engine::from_toml_str(&source.text, &source.base_dir, &source.origin, &reg))
            .map_err(errors::config)?;
        let rules = rules.lock().unwrap_or_else(|e| e.into_inner()).take();
        let computed = computed_of(&engine);
        Ok(PyEngine {
            engine: ManuallyDrop::new(engine),
            rules,
            last_drill: Mutex::new(None),
            keys: crate::txn::KeyCache::default(),
            source,
            generation: FORK_GENERATION.load(Ordering::SeqCst),
            closed: AtomicBool::new(false),
            computed,
        })
    }

    /// `ClosedError` in place of `e` when the engine was closed meanwhile (a `close` on
    /// another thread while this call ran: its "shut down" is the close).
    fn closed_or(&self, e: PyErr) -> PyErr {
        if self.closed.load(Ordering::SeqCst) {
            err(Kind::Closed, "the engine was closed while this call ran", 0)
        } else {
            e
        }
    }

    /// The engine, or `ClosedError` when closed or made before a fork.
    pub fn live(&self) -> PyResult<&Engine> {
        if self.generation != FORK_GENERATION.load(Ordering::Relaxed) {
            return Err(err(
                Kind::Closed,
                "this engine was created before os.fork(): its threads do not exist in this \
                 process; build one here (Engine.from_toml, or unpickle a pickled engine)",
                0,
            ));
        }
        if self.closed.load(Ordering::Relaxed) {
            return Err(err(Kind::Closed, "the engine is closed", 0));
        }
        Ok(&self.engine)
    }
}

/// Features entity state computes (no column or key needed for them).
pub(crate) fn computed_of(engine: &Engine) -> HashSet<String> {
    engine
        .state()
        .map(|st| {
            let c = st.config();
            c.features
                .iter()
                .map(|f| f.name.clone())
                .chain(c.lists.iter().map(|l| l.field_name()))
                .collect()
        })
        .unwrap_or_default()
}

/// `source` (a path, or TOML text: a `str` holding a newline or an `=` that is no file)
/// with `base_dir` for text (default: the current directory).
pub(crate) fn source_of(source: &Bound<'_, PyAny>, base_dir: Option<PathBuf>) -> PyResult<Source> {
    match source.cast::<PyString>() {
        Ok(s) => {
            let s = s.to_str()?;
            if !Path::new(s).is_file() && (s.contains('\n') || s.contains('=')) {
                let dir = base_dir.unwrap_or_else(|| PathBuf::from("."));
                Ok(Source {
                    text: s.to_owned(),
                    base_dir: std::path::absolute(&dir).unwrap_or(dir),
                    origin: PathBuf::from("<risk.toml text>"),
                })
            } else {
                read_config(Path::new(s))
            }
        }
        Err(_) => {
            let p: PathBuf = source.extract().map_err(|_| {
                errors::type_err("from_toml takes a path (str or os.PathLike) or TOML text")
            })?;
            read_config(&p)
        }
    }
}

fn read_config(path: &Path) -> PyResult<Source> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        errors::config(risk_core::ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })
    })?;
    let base_dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Absolute, so a pickled engine unpickles in another working directory.
    let base_dir = std::path::absolute(&base_dir).unwrap_or(base_dir);
    Ok(Source {
        text,
        base_dir,
        origin: path.to_path_buf(),
    })
}

#[pymethods]
impl PyEngine {
    /// Builds an engine from `risk.toml`: `source` is a path (`str` or `os.PathLike`)
    /// or the TOML text itself (a `str` holding a newline or an `=`). Relative paths in
    /// the file resolve against its directory, or against `base_dir` for text (default:
    /// the current directory). Raises `risk.ConfigError` naming the key at fault.
    ///
    /// >>> engine = risk.Engine.from_toml("examples/risk.toml")
    #[staticmethod]
    #[pyo3(signature = (source, base_dir=None))]
    fn from_toml(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        base_dir: Option<PathBuf>,
    ) -> PyResult<PyEngine> {
        let src = source_of(source, base_dir)?;
        PyEngine::build(src, py)
    }

    /// Rebuilds an engine from pickled configuration text (see `__reduce__`).
    #[staticmethod]
    fn _from_source(
        py: Python<'_>,
        text: String,
        base_dir: PathBuf,
        origin: PathBuf,
    ) -> PyResult<PyEngine> {
        PyEngine::build(
            Source {
                text,
                base_dir,
                origin,
            },
            py,
        )
    }

    /// Pickles as its configuration: the unpickled engine is built again from the same
    /// `risk.toml` text (models and files loaded again; entity state starts empty unless
    /// the configuration loads a snapshot).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let me = slf.get();
        let ctor = slf.get_type().getattr("_from_source")?;
        let args = PyTuple::new(
            slf.py(),
            [
                me.source.text.clone().into_pyobject(slf.py())?.into_any(),
                me.source
                    .base_dir
                    .clone()
                    .into_pyobject(slf.py())?
                    .into_any(),
                me.source.origin.clone().into_pyobject(slf.py())?.into_any(),
            ],
        )?;
        Ok((ctor, args))
    }

    /// Decides one transaction, given as a mapping: `id`, `entity` (int, or str hashed),
    /// `timestamp_ms` (or `time`), `amount`, `currency`, `mcc`, `country`, `channel`,
    /// `device`, `merchant`, `ip`, `email`; `text`, a dict of free-text fields; every
    /// other key a schema feature (number: numeric, str: categorical, None/NaN: missing).
    /// Raises `risk.DecideError` for a transaction the engine refuses.
    ///
    /// >>> d = engine.decide({"id": 1, "entity": 42, "amount": 25.0, "country": "GB"})
    /// >>> d.action, d.score, d.reasons
    fn decide(&self, py: Python<'_>, txn: &Bound<'_, PyDict>) -> PyResult<PyDecision> {
        let engine = self.live()?;
        let t = crate::txn::from_mapping(engine.schema(), &self.keys, txn)?;
        py.detach(|| engine.decide(&t))
            .map(PyDecision)
            .map_err(|e| self.closed_or(errors::decide(&e, None)))
    }

    /// The fast tier's reasons for `txn` (a mapping, as `decide`), on request: a list of
    /// `(code, weight)`, most important first, computed whatever the model's `explain`
    /// setting (a tree model's exact SHAP contributions). The features are used as
    /// given (with entity state, pass the values the decision saw). `None` when no model
    /// serves the transaction or its explanation failed. Raises as `decide` does for a
    /// bad transaction.
    fn explain(
        &self,
        py: Python<'_>,
        txn: &Bound<'_, PyDict>,
    ) -> PyResult<Option<Vec<(&'static str, f32)>>> {
        let engine = self.live()?;
        let t = crate::txn::from_mapping(engine.schema(), &self.keys, txn)?;
        let r = py
            .detach(|| engine.explain(&t))
            .map_err(|e| self.closed_or(errors::decide(&e, None)))?;
        Ok(r.map(|r| r.iter().map(|r| (r.code.name(), r.weight)).collect()))
    }

    /// Decides every row of `data`: anything with the Arrow PyCapsule interface (a pyarrow
    /// Table or RecordBatch, a polars DataFrame, a pandas DataFrame) or a dict of equal-length
    /// arrays. Columns map to transaction fields and schema features by name (see
    /// `decide`; a column named `text.<name>` is a free-text field; other columns are
    /// ignored). Returns a `pyarrow.Table`, one row per input row in order.
    ///
    /// The GIL is released; rows are spread over `threads` threads (default: the CPUs)
    /// unless the engine keeps entity state, whose windows need the rows in order (then one
    /// thread). `errors="raise"` raises the first refused row's `risk.DecideError` (naming
    /// the row); `errors="keep"` returns null decisions for refused rows and an `error`
    /// column. A missing required column or a column of the wrong type raises
    /// `risk.InputError` / `risk.RiskTypeError` before any row is decided; with
    /// `strict=True` so does a column that nothing reads (a misspelt feature).
    #[pyo3(signature = (data, *, threads=None, errors="raise", strict=false))]
    fn decide_batch<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        threads: Option<usize>,
        errors: &str,
        strict: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.live()?;
        let errors = Errors::parse(errors)?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = match (engine.state(), threads) {
            (_, Some(0)) => return Err(errors::input("threads must be at least 1")),
            (Some(_), _) => 1,
            // More threads than 4 a CPU only adds switching (and a limit to hit).
            (None, Some(n)) => n.min(4 * cpus),
            (None, None) => cpus,
        };
        decide_table(py, engine, &self.computed, data, threads, errors, strict)
            .map_err(|e| self.closed_or(e))
    }

    /// Replays `data` in event time through a fresh engine built from this one's
    /// configuration (see `risk.backtest` for the report built on it): the engine's clock
    /// is each row's `time` (or `timestamp_ms`; the rows must be in time order), so no
    /// deadline expires and every tier answers; entity state starts empty (or from the
    /// configured snapshot); the audit trail and Kafka are left out, and the deep tier
    /// unless `deep=True` (then each escalated row's verdict is waited for before the
    /// next row, so it reaches the entity's feedback at that row's event time).
    /// Labels reach entity state when they became known: `labels`, a table of `id`,
    /// `time` (or `timestamp_ms`) and `fraud` in any order (a null `fraud` is skipped);
    /// or, with `label_delay_ms` (at least 1), the `label` column's frauds that many ms
    /// after their transaction. A label is known to every row at or after its time. Rows are decided one by one
    /// on one thread. Returns the decisions as `decide_batch` does; the schema's metadata
    /// holds `risk.replay.labels_fed`, `labels_after_end`, `labels_refused` (with
    /// `labels_refused_reason`, the first refusal's, e.g. no label feature configured) and
    /// `risk.replay.deep` (`skipped` or `replayed`; replayed: `deep_verdicts`,
    /// `deep_lost`, `deep_latency_p50_us`, `deep_latency_p99_us`).
    #[pyo3(signature = (data, *, label="is_fraud", label_delay_ms=None, labels=None, errors="raise", deep=false))]
    #[allow(clippy::too_many_arguments)] // the Python keyword arguments, one each
    fn replay<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        label: &str,
        label_delay_ms: Option<i64>,
        labels: Option<&Bound<'py, PyAny>>,
        errors: &str,
        deep: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.live()?;
        crate::replay_call::replay_source(
            py,
            self.source.clone(),
            data,
            label,
            label_delay_ms,
            labels,
            errors,
            deep,
        )
    }

    /// Builds the transaction of a mapping without deciding it (the benchmark's split
    /// of `decide`'s time into conversion and engine).
    fn _parse(&self, txn: &Bound<'_, PyDict>) -> PyResult<()> {
        crate::txn::from_mapping(self.live()?.schema(), &self.keys, txn).map(|_| ())
    }

    /// The Rust engine's own nanoseconds for every row of `data` (`mode`: `"decide"` row
    /// by row, `"batch"` in chunks on one thread), the transactions built before the clock
    /// starts: the baseline `bench.py` compares the package's calls against.
    #[pyo3(signature = (data, mode="batch"))]
    fn _rust_time(&self, py: Python<'_>, data: &Bound<'_, PyAny>, mode: &str) -> PyResult<u64> {
        crate::bench::rust_time(py, self.live()?, &self.computed, data, mode)
    }

    /// The engine's feature schema: a list of `(name, kind, required)` with `kind`
    /// `"numeric"` or `"categorical"`.
    #[getter]
    fn schema(&self) -> PyResult<Vec<(String, &'static str, bool)>> {
        let engine = self.live()?;
        Ok(engine
            .schema()
            .fields()
            .iter()
            .map(|f| {
                let kind = match f.kind {
                    risk_core::FieldKind::Numeric => "numeric",
                    risk_core::FieldKind::Categorical => "categorical",
                };
                (f.name.clone(), kind, !f.nullable)
            })
            .collect())
    }

    /// Features entity state computes (no column needed for them).
    #[getter]
    fn state_features(&self) -> Vec<String> {
        let mut v: Vec<String> = self.computed.iter().cloned().collect();
        v.sort();
        v
    }

    /// Whether the engine keeps entity state (`[state]`).
    #[getter]
    fn has_state(&self) -> PyResult<bool> {
        Ok(self.live()?.state().is_some())
    }

    /// Reports a transaction's label (a chargeback, a confirmed fraud: `fraud=True`;
    /// `False` clears an earlier `True`) known at `at_ms`: feeds the label features
    /// (`fraud_count`, `fraud_rate`). Returns how many label windows it reached. Raises
    /// `risk.StateError` (no `[state]`, too many pending labels, ...).
    fn report_label(&self, py: Python<'_>, txn: u64, fraud: bool, at_ms: i64) -> PyResult<usize> {
        let engine = self.live()?;
        crate::state::state_of(engine)?;
        py.detach(|| engine.report_label(risk_core::TxnId(txn), fraud, at_ms))
            .map_err(crate::state::state_err)
    }

    /// Reloads the rule file of the rule tier (a bad file raises and the serving rules stay).
    fn reload_rules(&self, py: Python<'_>) -> PyResult<()> {
        self.live()?;
        let rules = self.rules.as_ref().ok_or_else(|| {
            errors::not_configured("rule file (rules.scorer kind is not \"rules\")")
        })?;
        py.detach(|| rules.reload())
            .map(|_| ())
            .map_err(|e| err(Kind::Config, e.to_string(), 0))
    }

    /// Shuts the engine down (deep work queued is abandoned); later calls raise
    /// `risk.ClosedError`. Closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.generation != FORK_GENERATION.load(Ordering::SeqCst) {
            return Ok(());
        }
        if !self.closed.swap(true, Ordering::SeqCst) {
            py.detach(|| self.engine.shutdown(Shutdown::Abandon));
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Engine(origin={:?}, closed={})",
            self.source.origin,
            self.closed.load(Ordering::Relaxed)
        )
    }
}
