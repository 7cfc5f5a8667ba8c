//! Rust errors as the package's exceptions (`risk/_errors.py`): one class per kind, each
//! a `risk.RiskError` carrying the kind and the Rust error's stable numeric code, and a
//! `ValueError` or `TypeError` too where Python code would expect one.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use risk_core::{ConfigError, DecideError};

/// The kinds of `risk._errors`: the class raised for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A configuration (`risk.toml`, a model, a rule file) refused at load.
    Config,
    /// A transaction refused by `decide` (a field, a feature, the schema).
    Decide,
    /// Input data: a missing or mistyped column, a non-monotonic time column.
    Input,
    /// A Python value of the wrong type.
    Type,
    /// The engine was closed (or created before a `fork`).
    Closed,
    /// Entity state (labels, lists, snapshots).
    State,
    /// A deploy refused (the gate, a candidate that does not load, one in progress).
    Deploy,
    /// The audit log (a flush that failed, a directory that cannot be read).
    Audit,
    /// The engine has no such part (`[audit]`, `[monitor]`, `[state]`, a rule file).
    NotConfigured,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::Config => "ConfigError",
            Kind::Decide => "DecideError",
            Kind::Input => "InputError",
            Kind::Type => "RiskTypeError",
            Kind::Closed => "ClosedError",
            Kind::State => "StateError",
            Kind::Deploy => "DeployError",
            Kind::Audit => "AuditError",
            Kind::NotConfigured => "NotConfiguredError",
        }
    }
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An exception of `kind` with `message` and the Rust error's `code` (0: none).
pub fn err(kind: Kind, message: impl Into<String>, code: u32) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let made = ERRORS
            .get_or_try_init(py, || py.import("risk._errors").map(|m| m.unbind()))
            .and_then(|m| m.bind(py).getattr(kind.class()))
            .and_then(|cls| cls.call1((message.as_str(), code)));
        match made {
            Ok(e) => PyErr::from_value(e),
            // The package's own module is missing: still an exception, never a panic.
            Err(_) => PyRuntimeError::new_err(format!("{}: {message}", kind.class())),
        }
    })
}

/// A configuration error.
pub fn config(e: ConfigError) -> PyErr {
    err(Kind::Config, e.to_string(), e.code())
}

/// A decide error, naming the row when there is one.
pub fn decide(e: &DecideError, row: Option<usize>) -> PyErr {
    match row {
        Some(r) => err(Kind::Decide, format!("row {r}: {e}"), e.code()),
        None => err(Kind::Decide, e.to_string(), e.code()),
    }
}

/// An input error (columns, dtypes, values of a frame).
pub fn input(message: impl Into<String>) -> PyErr {
    err(Kind::Input, message, 0)
}

/// The engine has no `part` (e.g. "[audit] log").
pub fn not_configured(part: &str) -> PyErr {
    err(Kind::NotConfigured, format!("the engine has no {part}"), 0)
}

/// A type error.
pub fn type_err(message: impl Into<String>) -> PyErr {
    err(Kind::Type, message, 0)
}
