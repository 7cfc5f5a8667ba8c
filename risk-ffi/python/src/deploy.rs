//! Live deploys from Python: a candidate (rules, fast or deep model, policy) through the
//! validation gate, shadow and canary stages, promoted or rolled back.

use crate::engine::PyEngine;
use crate::errors::{self, err, Kind};
use crate::json::loads;
use pyo3::prelude::*;
use risk_core::deploy::{Candidate, DeployError, RolloutPlan, Target};
use std::path::PathBuf;

fn target(name: &str) -> PyResult<Target> {
    Target::parse(name).ok_or_else(|| {
        errors::input(format!(
            "target {name:?} is not rules, fast, deep or policy"
        ))
    })
}

/// A refused deploy as `risk.DeployError`; a malformed plan as `risk.InputError`; a shut
/// down engine as `risk.ClosedError`.
fn deploy_err(e: DeployError) -> PyErr {
    let kind = match e {
        DeployError::ShutDown => Kind::Closed,
        DeployError::Plan(_) => Kind::Input,
        _ => Kind::Deploy,
    };
    err(kind, e.to_string(), 0)
}

#[pymethods]
impl PyEngine {
    /// Deploys a candidate to `target` (`"rules"`, `"fast"`, `"deep"` or `"policy"`) and
    /// returns the deploy id. `candidate`: TOML, a `[scorer]` table as in `risk.toml`'s
    /// `[fast.scorer]` (optionally with `[calibration]`), a `[policy]` table, or
    /// `stored = "<key>"` (a version in the model directory). `plan`: TOML with `by`,
    /// `[gate]`, `[shadow]`, `[[canary]]`, `[guards]`; None is the standard plan (shadow,
    /// then canary 1% -> 10% -> 50% -> 100%, a minute each); a plan without stages
    /// promotes once the gate passes. Relative paths resolve against `base_dir` (default:
    /// the current directory).
    ///
    /// The gate runs on this thread (GIL released) on recent live decisions (by default
    /// it needs 32). Raises `risk.DeployError` when refused: what serves is unchanged.
    ///
    /// >>> engine.deploy("fast", '[scorer]\nkind = "xgboost"\npath = "model2.json"\n',
    /// ...               plan="[gate]\nmin_sample = 16\n", base_dir="examples")
    #[pyo3(signature = (target, candidate, plan=None, base_dir=None))]
    fn deploy(
        &self,
        py: Python<'_>,
        target: &str,
        candidate: &str,
        plan: Option<&str>,
        base_dir: Option<PathBuf>,
    ) -> PyResult<u64> {
        let engine = self.live()?;
        let t = self::target(target)?;
        let dir = base_dir.unwrap_or_else(|| PathBuf::from("."));
        py.detach(|| {
            let candidate = Candidate::from_toml(candidate, &dir)?;
            let plan = match plan {
                None => RolloutPlan::standard(),
                Some(p) => RolloutPlan::from_toml(p)?,
            };
            engine.deploy(t, candidate, plan)
        })
        .map_err(deploy_err)
    }

    /// `target`'s deploy status: `target`, `epoch`, `serving` ({`id`, `name`,
    /// `version`, `hash`} or None), `previous`, `active` (the deploy in progress or None:
    /// {`id`, `candidate`, `phase`, `stage`, `share`, `started_ms`, `gate`, ...}) and
    /// `history` (the latest events, oldest first).
    fn deploy_status<'py>(&self, py: Python<'py>, target: &str) -> PyResult<Bound<'py, PyAny>> {
        let text = self.live()?.deploy_status(self::target(target)?).to_json();
        loads(py, &text)
    }

    /// Promotes `target`'s deploy in progress now, skipping its remaining stages.
    /// `risk.DeployError` when none is in progress.
    fn promote(&self, py: Python<'_>, target: &str) -> PyResult<()> {
        let engine = self.live()?;
        let t = self::target(target)?;
        py.detach(|| engine.promote(t)).map_err(deploy_err)
    }

    /// Ends `target`'s deploy in progress (what serves stays), or with none in progress
    /// serves the previous version again. `reason` is recorded in the history.
    /// `risk.DeployError` when there is nothing to roll back to.
    #[pyo3(signature = (target, reason=None))]
    fn rollback(&self, py: Python<'_>, target: &str, reason: Option<&str>) -> PyResult<()> {
        let engine = self.live()?;
        let t = self::target(target)?;
        let reason = reason.unwrap_or("rollback requested");
        py.detach(|| engine.rollback(t, reason)).map_err(deploy_err)
    }

    /// Judges every deploy's guards and stages now (the engine's supervisor also does,
    /// every `[deploy] check_interval_ms`).
    fn deploy_tick(&self, py: Python<'_>) -> PyResult<()> {
        let engine = self.live()?;
        py.detach(|| engine.deploy_tick());
        Ok(())
    }
}
