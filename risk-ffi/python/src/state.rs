//! Entity state from Python: lists (add, remove, contains, reload), snapshots and the
//! state report. Labels are `Engine.report_label` (engine.rs).

use crate::engine::PyEngine;
use crate::errors::{self, err, Kind};
use crate::json::loads;
use pyo3::prelude::*;
use risk_core::state::{StateEngine, StateError};
use risk_core::Engine;
use std::path::PathBuf;

pub(crate) fn state_err(e: StateError) -> PyErr {
    err(Kind::State, e.to_string(), e.code())
}

pub(crate) fn state_of(engine: &Engine) -> PyResult<&StateEngine> {
    engine
        .state()
        .map(|st| &**st)
        .ok_or_else(|| errors::not_configured("[state] section"))
}

/// A list value as the lists keep it: text, or an integer's decimal text.
fn value_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = v.extract::<String>() {
        return Ok(s);
    }
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(errors::type_err(
            "a list value is a str or an int, not a bool",
        ));
    }
    v.extract::<i128>()
        .map(|i| i.to_string())
        .map_err(|_| errors::type_err("a list value is a str or an int"))
}

#[pymethods]
impl PyEngine {
    /// Adds `value` (str or int) to the list `list`; `expires_at_ms` > 0 removes it at
    /// that time (ms since the Unix epoch). Raises `risk.StateError` for an unknown list
    /// or a list full to its `max_entries`.
    #[pyo3(signature = (list, value, expires_at_ms=0))]
    fn list_add(
        &self,
        py: Python<'_>,
        list: &str,
        value: &Bound<'_, PyAny>,
        expires_at_ms: i64,
    ) -> PyResult<()> {
        let v = value_text(value)?;
        let exp = (expires_at_ms > 0).then_some(expires_at_ms);
        let st = state_of(self.live()?)?;
        // A journal append (fsync) or a Redis round trip: without the GIL.
        py.detach(|| st.lists().add(list, &v, exp))
            .map_err(state_err)
    }

    /// Removes `value` from `list`; returns whether it was there.
    fn list_remove(&self, py: Python<'_>, list: &str, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        let v = value_text(value)?;
        let st = state_of(self.live()?)?;
        py.detach(|| st.lists().remove(list, &v)).map_err(state_err)
    }

    /// Whether `list` holds `value` (and it has not expired).
    fn list_contains(
        &self,
        py: Python<'_>,
        list: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let v = value_text(value)?;
        let st = state_of(self.live()?)?;
        // Shared lists live on Redis: a round trip without the GIL.
        py.detach(|| st.lists().contains(list, &v))
            .map_err(state_err)
    }

    /// Reads every list's file again (a bad file raises and the serving list stays).
    fn lists_reload(&self, py: Python<'_>) -> PyResult<()> {
        let st = state_of(self.live()?)?;
        py.detach(|| st.lists().reload()).map_err(state_err)
    }

    /// Writes a snapshot of the entity state to `path` (default: `state.snapshot` of the
    /// configuration), atomically, private to the user.
    #[pyo3(signature = (path=None))]
    fn state_snapshot(&self, py: Python<'_>, path: Option<PathBuf>) -> PyResult<()> {
        let st = state_of(self.live()?)?;
        let p = path
            .or_else(|| st.config().snapshot.clone())
            .ok_or_else(|| {
                err(
                    Kind::State,
                    "no path given and no state.snapshot configured",
                    0,
                )
            })?;
        py.detach(|| st.snapshot(&p)).map(|_| ()).map_err(state_err)
    }

    /// The entity state's report: entities, memory, windows, labels, lists, store.
    fn state_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = state_of(self.live()?)?.to_json();
        loads(py, &text)
    }
}
