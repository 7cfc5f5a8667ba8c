//! The rule tier from Python: its report, rollback to a recorded version, and explain.

use crate::engine::PyEngine;
use crate::errors::{self, err, Kind};
use crate::json::loads;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use risk_rules::RuleScorer;

impl PyEngine {
    fn rule_tier(&self) -> PyResult<&RuleScorer> {
        self.live()?;
        self.rules
            .as_deref()
            .ok_or_else(|| errors::not_configured("rule file (rules.scorer kind is not \"rules\")"))
    }
}

#[pymethods]
impl PyEngine {
    /// The rule tier: `file`, `version`, `hash`, `backend`, `rules` (how many),
    /// `shadow` ([{`id`, `hits`}]), `warnings`, `versions` (the recorded history) and
    /// `stats` {`reloads`, `failures`, `last_error`}.
    fn rules_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = self.rule_tier()?.report_json();
        loads(py, &text)
    }

    /// Serves a recorded rule version again, atomically: `to` is a version name (the
    /// newest with it), a 16-digit hex hash, or `"previous"`. Needs
    /// `rules.scorer.history_dir`. On any error the serving rules stay and
    /// `risk.ConfigError` is raised.
    fn rollback_rules(&self, py: Python<'_>, to: &str) -> PyResult<()> {
        let r = self.rule_tier()?;
        py.detach(|| r.rollback(to))
            .map(|_| ())
            .map_err(|e| err(Kind::Config, e.to_string(), 0))
    }

    /// Explains the serving rules on `txn` (a mapping, as `decide` takes it): `version`,
    /// `hash`, and per rule in evaluation order `id`, `fired`, `counted`, `disabled`,
    /// `shadow`, `hard`, `decided_by` (the sub-condition that decided it, with the values
    /// read) and every `steps` evaluated. The features are those given (entity state does
    /// not fill them here).
    fn explain_rules<'py>(
        &self,
        py: Python<'py>,
        txn: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let r = self.rule_tier()?;
        let t = crate::txn::from_mapping(self.live()?.schema(), &self.keys, txn)?;
        let text = r.current().explain(&t.features).to_json();
        loads(py, &text)
    }
}
