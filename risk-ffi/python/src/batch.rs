//! `Engine.decide_batch`: an Arrow table decided in chunks of rows, with the GIL
//! released, on several threads when nothing orders the rows.

use crate::columns::{Columns, Plan};
use crate::errors;
use crate::output;
use arrow_array::RecordBatch;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::input::AnyRecordBatch;
use pyo3_arrow::PyTable;
use risk_core::{DecideError, Decision, Engine};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Rows decided together: one `Engine::decide_batch` call and one output record batch.
/// Large enough that per-chunk costs vanish, small enough that threads share the work.
pub const CHUNK: usize = 4096;

/// What to do with a row the engine refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errors {
    /// Raise the first one (in row order).
    Raise,
    /// Null decision and an `error` column.
    Keep,
}

impl Errors {
    /// `"raise"` or `"keep"`.
    pub fn parse(s: &str) -> PyResult<Errors> {
        match s {
            "raise" => Ok(Errors::Raise),
            "keep" => Ok(Errors::Keep),
            _ => Err(errors::input(format!(
                "errors must be \"raise\" or \"keep\", not {s:?}"
            ))),
        }
    }
}

/// `data` as Arrow record batches (zero-copy for Arrow data; a dict of arrays through
/// `pyarrow.table`).
pub fn record_batches(
    data: &Bound<'_, PyAny>,
) -> PyResult<(arrow_schema::SchemaRef, Vec<RecordBatch>)> {
    let py = data.py();
    let arrow = if data.hasattr("__arrow_c_stream__")? || data.hasattr("__arrow_c_array__")? {
        data.clone()
    } else if data.is_instance_of::<PyDict>() {
        py.import("pyarrow")?.getattr("table")?.call1((data,))?
    } else {
        return Err(errors::type_err(format!(
            "decide_batch takes Arrow data (a pyarrow Table or RecordBatch, a polars or pandas \
             DataFrame) or a dict of arrays, not {}",
            data.get_type().name()?
        )));
    };
    let any: AnyRecordBatch = arrow
        .extract()
        .map_err(|e| errors::type_err(format!("could not read the data as Arrow: {e}")))?;
    let reader = any.into_reader()?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| errors::input(format!("reading the data: {e}")))?;
    Ok((schema, batches))
}

/// One chunk of work: rows `start..start + len` of batch `batch`, the `row`-th row overall.
#[derive(Debug, Clone, Copy)]
struct Item {
    batch: usize,
    start: usize,
    len: usize,
    row: usize,
}

fn items(batches: &[RecordBatch]) -> Vec<Item> {
    let mut out = Vec::new();
    let mut row = 0;
    for (b, batch) in batches.iter().enumerate() {
        let n = batch.num_rows();
        let mut start = 0;
        while start < n {
            let len = CHUNK.min(n - start);
            out.push(Item {
                batch: b,
                start,
                len,
                row: row + start,
            });
            start += len;
        }
        row += n;
    }
    out
}

/// Decides one chunk: its transactions built, then decided as a batch.
fn run(engine: &Engine, cols: &Columns<'_>, it: Item) -> Vec<Result<Decision, DecideError>> {
    let mut txns = Vec::with_capacity(it.len);
    let mut built: Vec<Option<DecideError>> = Vec::with_capacity(it.len);
    for r in it.start..it.start + it.len {
        match cols.txn(r) {
            Ok(t) => {
                txns.push(t);
                built.push(None);
            }
            Err(e) => built.push(Some(e)),
        }
    }
    let decided = engine.decide_batch(&txns);
    if decided.len() == it.len {
        return decided; // every row built: no second pass over ~0.5 KB results
    }
    let mut decided = decided.into_iter();
    built
        .into_iter()
        .map(|b| match b {
            None => decided.next().expect("one result per built transaction"),
            Some(e) => Err(e),
        })
        .collect()
}

/// Decides every row of `data`; see `Engine.decide_batch`.
pub fn decide_table<'py>(
    py: Python<'py>,
    engine: &Engine,
    computed: &HashSet<String>,
    data: &Bound<'py, PyAny>,
    threads: usize,
    errors: Errors,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (schema, batches) = record_batches(data)?;
    let plan = Plan::new(engine.schema(), &schema, computed)?;
    if strict && !plan.ignored().is_empty() {
        return Err(errors::input(format!(
            "columns that no transaction field or feature reads (strict=True): {}",
            plan.ignored().join(", ")
        )));
    }
    let keep = errors == Errors::Keep;
    let result: PyResult<Vec<RecordBatch>> = py.detach(|| {
        let cols = batches
            .iter()
            .map(|b| plan.columns(b))
            .collect::<PyResult<Vec<_>>>()?;
        let work = items(&batches);
        let out: Vec<Mutex<Option<RecordBatch>>> = work.iter().map(|_| Mutex::new(None)).collect();
        // The first item (in row order) holding a refused row, when refused rows raise.
        let first_bad = AtomicUsize::new(usize::MAX);
        let failure: Mutex<Option<(usize, DecideError)>> = Mutex::new(None);
        let next = AtomicUsize::new(0);
        let worker = || loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= work.len() || k > first_bad.load(Ordering::Relaxed) {
                break;
            }
            let it = work[k];
            let res = run(engine, &cols[it.batch], it);
            if !keep {
                if let Some(i) = res.iter().position(|r| r.is_err()) {
                    first_bad.fetch_min(k, Ordering::Relaxed);
                    let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                    if f.as_ref().is_none_or(|(row, _)| it.row + i < *row) {
                        let e = res.into_iter().nth(i).and_then(Result::err);
                        *f = e.map(|e| (it.row + i, e));
                    }
                    continue;
                }
            }
            *out[k].lock().unwrap_or_else(|e| e.into_inner()) =
                Some(output::batch(&res, it.row, keep));
        };
        let n = threads.min(work.len()).max(1);
        if n == 1 {
            worker();
        } else {
            std::thread::scope(|s| {
                for _ in 0..n {
                    s.spawn(worker);
                }
            });
        }
        if let Some((row, e)) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(errors::decide(&e, Some(row)));
        }
        Ok(out
            .into_iter()
            .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect())
    });
    let table = PyTable::try_new(result?, output::schema(keep))?;
    table.into_pyarrow(py)
}
