//! The risk SDK for Python: the `risk._native` extension module behind the `risk` package
//! (`python/risk/`). It links the Rust crates directly: `risk.Engine` decides a mapping
//! or a whole Arrow table, with the GIL released; it deploys, observes, drills and
//! audits as the C ABI does. The `Engine` class's methods are spread over one file per
//! concern (pyo3's `multiple-pymethods`). Built by maturin as an abi3 wheel
//! (CPython >= 3.10): `pip install ./risk-ffi/python`.

mod audit;
mod batch;
mod bench;
mod columns;
mod decision;
mod deploy;
mod engine;
mod errors;
mod fields;
mod json;
mod observe;
mod output;
mod replay;
mod replay_call;
mod rules;
mod state;
mod subscription;
mod synth;
mod txn;

use pyo3::prelude::*;

/// The native module: `Engine`, `Decision`, `Verdict`, `Subscription`, the audit reader,
/// the synthetic stream and the fork hook.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<decision::PyDecision>()?;
    m.add_class::<subscription::PyVerdict>()?;
    m.add_class::<subscription::PySubscription>()?;
    m.add_function(wrap_pyfunction!(audit::read_audit_records, m)?)?;
    m.add_function(wrap_pyfunction!(replay_call::replay_toml, m)?)?;
    m.add_function(wrap_pyfunction!(engine::_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(synth::synth, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DECIDE_CHUNK", batch::CHUNK)?;
    m.add("TXN_FIELDS", columns::TXN_FIELDS.to_vec())?;
    Ok(())
}
