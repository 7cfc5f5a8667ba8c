//! `risk.Decision`: one decision, its fields read on access (no Python object is built
//! for a field nobody reads).

use crate::output::escalation_str;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use risk_core::Decision;

/// The engine's answer for one transaction.
#[pyclass(module = "risk", name = "Decision", frozen)]
#[derive(Debug)]
pub struct PyDecision(pub Decision);

#[pymethods]
impl PyDecision {
    /// `"approve"`, `"review"` or `"decline"`.
    #[getter]
    fn action(&self) -> &'static str {
        self.0.action.as_str()
    }
    /// The score the action was taken on, in [0, 1].
    #[getter]
    fn score(&self) -> f32 {
        self.0.score
    }
    /// The deciding tier: `"rules"`, `"fast"` or `"static"`.
    #[getter]
    fn tier(&self) -> &'static str {
        self.0.tier.as_str()
    }
    /// Why the fast tier did not decide (`"timeout"`, `"circuit_open"`, ...), or None.
    #[getter]
    fn fallback(&self) -> Option<&'static str> {
        self.0.fallback.map(|f| f.as_str())
    }
    /// Whether a hard rule's directive set the action.
    #[getter]
    fn hard_rule(&self) -> bool {
        self.0.hard_rule
    }
    /// The rule tier's probability (NaN if the rule tier failed).
    #[getter]
    fn rule_score(&self) -> f32 {
        self.0.rule_score
    }
    /// The fast tier's probability when it answered, else None.
    #[getter]
    fn model_score(&self) -> Option<f32> {
        self.0.model_score
    }
    /// The threshold shift from the entity's deep-tier feedback (0 when none).
    #[getter]
    fn threshold_shift(&self) -> f32 {
        self.0.threshold_shift
    }
    /// `"none"`, `"enqueued"` (to the deep tier) or `"shed"`.
    #[getter]
    fn escalation(&self) -> &'static str {
        escalation_str(self.0.escalation)
    }
    /// Reasons, deciding tier first: a list of `(code, weight)`.
    #[getter]
    fn reasons(&self) -> Vec<(&'static str, f32)> {
        self.0
            .reasons
            .iter()
            .map(|r| (r.code.name(), r.weight))
            .collect()
    }
    /// The rules that fired, in evaluation order.
    #[getter]
    fn rules_fired(&self) -> Vec<&'static str> {
        self.0.rules_fired.iter().collect()
    }
    /// Shadow rules that fired (recorded, never deciding).
    #[getter]
    fn rules_shadow(&self) -> Vec<&'static str> {
        self.0.rules_shadow.iter().collect()
    }
    /// `{"rules": ..., "fast": ..., "deep": ...}` as `name@version#hash` (None: no tier).
    #[getter]
    fn versions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let v = self.0.versions;
        let d = PyDict::new(py);
        d.set_item("rules", v.rules.to_string())?;
        d.set_item("fast", v.fast.map(|x| x.to_string()))?;
        d.set_item("deep", v.deep.map(|x| x.to_string()))?;
        d.set_item("config", format!("{:016x}", v.config))?;
        d.set_item("schema", format!("{:016x}", v.schema))?;
        Ok(d)
    }
    /// What entity state did: `"off"`, `"fresh"`, `"timeout"`, `"error"`, `"unavailable"`.
    #[getter]
    fn state(&self) -> &'static str {
        self.0.state.as_str()
    }
    /// Whether shared lists were stale (Redis unreachable) for this decision.
    #[getter]
    fn lists_stale(&self) -> bool {
        self.0.lists_stale
    }
    /// Stage timings in nanoseconds: `{"rules_ns", "fast_ns", "combine_ns", "total_ns"}`.
    #[getter]
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.0.timings;
        let d = PyDict::new(py);
        d.set_item("rules_ns", t.rules_ns)?;
        d.set_item("fast_ns", t.fast_ns)?;
        d.set_item("combine_ns", t.combine_ns)?;
        d.set_item("total_ns", t.total_ns)?;
        Ok(d)
    }
    /// When the engine decided, ms since the Unix epoch (by its clock).
    #[getter]
    fn decided_at_ms(&self) -> i64 {
        self.0.decided_at_ms
    }
    /// The transaction id.
    #[getter]
    fn txn(&self) -> u64 {
        self.0.txn.0
    }
    /// The entity key.
    #[getter]
    fn entity(&self) -> u64 {
        self.0.entity.0
    }

    /// The deep-tier ticket when the decision was escalated (`Verdict.ticket` matches
    /// it), else None.
    #[getter]
    fn ticket(&self) -> Option<u64> {
        match self.0.escalation {
            risk_core::Escalation::Enqueued(t) => Some(t.0),
            _ => None,
        }
    }
    /// Every field as a dict (the columns of `decide_batch`'s result, versions nested).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("txn", self.txn())?;
        d.set_item("entity", self.entity())?;
        d.set_item("action", self.action())?;
        d.set_item("score", self.score())?;
        d.set_item("tier", self.tier())?;
        d.set_item("fallback", self.fallback())?;
        d.set_item("hard_rule", self.hard_rule())?;
        d.set_item("rule_score", self.rule_score())?;
        d.set_item("model_score", self.model_score())?;
        d.set_item("threshold_shift", self.threshold_shift())?;
        d.set_item("escalation", self.escalation())?;
        d.set_item("reasons", self.reasons())?;
        d.set_item("rules_fired", self.rules_fired())?;
        d.set_item("rules_shadow", self.rules_shadow())?;
        d.set_item("versions", self.versions(py)?)?;
        d.set_item("state", self.state())?;
        d.set_item("lists_stale", self.lists_stale())?;
        d.set_item("timings", self.timings(py)?)?;
        d.set_item("decided_at_ms", self.decided_at_ms())?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        format!(
            "Decision(txn={}, action={:?}, score={:.4}, tier={:?}, fallback={})",
            self.0.txn.0,
            self.action(),
            self.0.score,
            self.tier(),
            match self.fallback() {
                Some(f) => format!("{f:?}"),
                None => "None".to_owned(),
            }
        )
    }
}
