//! The Rust engine's own time on the rows of a table, for the benchmark
//! (`risk-ffi/python/bench.py`) to compare the package's calls against in the same run:
//! the transactions are built before the clock starts, so only `decide` is timed.

use crate::batch::{record_batches, CHUNK};
use crate::columns::Plan;
use crate::errors;
use pyo3::prelude::*;
use risk_core::{Engine, Transaction};
use std::collections::HashSet;
use std::time::Instant;

/// Nanoseconds the engine takes for every row of `data`: `mode` `"decide"` calls
/// `Engine::decide` row by row, `"batch"` calls `Engine::decide_batch` on chunks of
/// [`CHUNK`] rows (one thread, as the package does with entity state).
pub fn rust_time(
    py: Python<'_>,
    engine: &Engine,
    computed: &HashSet<String>,
    data: &Bound<'_, PyAny>,
    mode: &str,
) -> PyResult<u64> {
    let (schema, batches) = record_batches(data)?;
    let plan = Plan::new(engine.schema(), &schema, computed)?;
    let mut txns: Vec<Transaction> = Vec::new();
    for b in &batches {
        let cols = plan.columns(b)?;
        for r in 0..b.num_rows() {
            txns.push(
                cols.txn(r)
                    .map_err(|e| errors::decide(&e, Some(txns.len())))?,
            );
        }
    }
    let batch = match mode {
        "decide" => false,
        "batch" => true,
        _ => return Err(errors::input("mode is \"decide\" or \"batch\"")),
    };
    Ok(py.detach(|| {
        let t0 = Instant::now();
        if batch {
            for c in txns.chunks(CHUNK) {
                std::hint::black_box(engine.decide_batch(c));
            }
        } else {
            for t in &txns {
                let _ = std::hint::black_box(engine.decide(t));
            }
        }
        t0.elapsed().as_nanos() as u64
    }))
}
