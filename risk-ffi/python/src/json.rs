//! JSON documents of the Rust crates (reports, statuses) as Python objects: `json.loads`
//! of the one JSON text the C ABI returns too, so both bindings carry the same document.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `json.loads(text)`.
pub fn loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let f = LOADS.get_or_try_init(py, || {
        py.import("json")
            .and_then(|m| m.getattr("loads"))
            .map(|f| f.unbind())
    })?;
    f.bind(py).call1((text,))
}
