//! `Engine.replay`: a table decided in event time, as it would have been decided live.
//!
//! A fresh engine is built from the configuration with a manual clock
//! ([`EngineBuilder::for_replay`]): before each row the clock is set to the row's event
//! time, so windows, label delays and list expiries follow the data, and no deadline
//! expires (the clock does not move while a decision runs: every tier answers). Labels
//! are reported when the replayed time reaches the moment they became known: a label
//! column plus a delay, or a label table with its own times. Rows are decided one by one,
//! in order, on one thread. With `deep`, the engine keeps its deep tier and the replay
//! waits for the verdict of every escalated row before the next row (the clock stands
//! still meanwhile): the verdict reaches the entity's feedback at the row's event time,
//! and its measured latency is reported beside.

use crate::batch::{Errors, CHUNK};
use crate::columns::Plan;
use crate::errors;
use crate::output;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use pyo3::prelude::*;
use risk_core::{Engine, EventReplay, EventReplayStats, ManualClock, ReplayLabel, TxnId};
use std::sync::Arc;

/// Labels to feed: `(known at ms, input order, txn id, fraud)`; fed by time, then in the
/// order given (a `False` after a `True` for the same transaction at the same time
/// clears it, as given).
pub type Label = (i64, usize, u64, bool);

/// The column `name` of `batches` as booleans (bool or integer 0/1), `None` where null.
pub fn label_column(batches: &[RecordBatch], name: &str) -> PyResult<Vec<Option<bool>>> {
    let mut out = Vec::new();
    for b in batches {
        let a = b
            .column_by_name(name)
            .ok_or_else(|| errors::input(format!("missing label column {name:?}")))?;
        match a.data_type() {
            DataType::Boolean => {
                let a = a.as_boolean();
                out.extend((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))));
            }
            dt if dt.is_integer() || dt.is_floating() => {
                let a = arrow_cast::cast(a, &DataType::Float64)
                    .map_err(|e| errors::input(format!("label column {name:?}: {e}")))?;
                let a = a.as_primitive::<arrow_array::types::Float64Type>();
                out.extend(
                    (0..a.len()).map(|i| {
                        (a.is_valid(i) && !a.value(i).is_nan()).then(|| a.value(i) != 0.0)
                    }),
                );
            }
            dt => {
                return Err(errors::type_err(format!(
                    "label column {name:?} has type {dt}; it needs booleans or 0/1"
                )))
            }
        }
    }
    Ok(out)
}

/// The event times (ms) of every row, checked non-decreasing when `ordered` (the rows to
/// replay; a label table may come in any order); with them the ids.
pub fn times_and_ids(batches: &[RecordBatch], ordered: bool) -> PyResult<(Vec<i64>, Vec<u64>)> {
    let mut times = Vec::new();
    let mut ids = Vec::new();
    for b in batches {
        let schema = b.schema();
        let (name, a) = ["time", "timestamp_ms"]
            .iter()
            .find_map(|n| b.column_by_name(n).map(|a| (*n, a)))
            .ok_or_else(|| {
                errors::input("replay needs an event time: a \"time\" or \"timestamp_ms\" column")
            })?;
        let ms = match a.data_type() {
            DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => arrow_cast::cast(
                a,
                &DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, None),
            )
            .and_then(|x| arrow_cast::cast(&x, &DataType::Int64)),
            _ => arrow_cast::cast(a, &DataType::Int64),
        }
        .map_err(|e| errors::input(format!("column {name:?}: {e}")))?;
        let ms = ms.as_primitive::<Int64Type>();
        if ms.null_count() > 0 {
            return Err(errors::input(format!(
                "column {name:?} has nulls: every row needs an event time"
            )));
        }
        times.extend(ms.values().iter().copied());
        let id = schema.index_of("id").map_err(|_| {
            errors::input("replay needs an \"id\" column (labels name transactions by id)")
        })?;
        let id = arrow_cast::cast(b.column(id), &DataType::UInt64)
            .map_err(|e| errors::input(format!("column \"id\": {e}")))?;
        let id = id.as_primitive::<UInt64Type>();
        ids.extend((0..id.len()).map(|i| if id.is_valid(i) { id.value(i) } else { 0 }));
    }
    if let Some(i) = times
        .windows(2)
        .position(|w| w[1] < w[0])
        .filter(|_| ordered)
    {
        return Err(errors::input(format!(
            "the time column goes backwards at row {} ({} ms after {} ms): sort the rows by \
             event time to replay them",
            i + 1,
            times[i + 1],
            times[i]
        )));
    }
    Ok((times, ids))
}

/// Replays `data` through a fresh replay engine built by `build`; returns the decisions
/// as record batches (output schema, `errors` as in `decide_batch`) and the stats.
pub fn replay(
    py: Python<'_>,
    build: impl FnOnce(Arc<ManualClock>) -> PyResult<Engine> + Send,
    (schema, batches): (arrow_schema::SchemaRef, Vec<RecordBatch>),
    times: Vec<i64>,
    mut labels: Vec<Label>,
    errors: Errors,
    deep: bool,
) -> PyResult<(Vec<RecordBatch>, EventReplayStats)> {
    let first = times.first().copied().unwrap_or(1);
    let clock = EventReplay::clock(first);
    let engine = {
        let clock = Arc::clone(&clock);
        py.detach(move || build(clock))?
    };
    let plan = Plan::new(
        engine.schema(),
        &schema,
        &crate::engine::computed_of(&engine),
    )?;
    let keep = errors == Errors::Keep;
    // The input order breaks ties between labels known at the same time.
    labels.sort_by_key(|l| l.1);
    let feed = labels
        .into_iter()
        .map(|(known_ms, _, txn, fraud)| ReplayLabel {
            known_ms,
            txn: TxnId(txn),
            fraud,
        });
    let mut rep = EventReplay::new(&engine, clock, first, feed, deep);
    let out = py.detach(|| -> PyResult<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let mut row = 0usize;
        for b in &batches {
            let cols = plan.columns(b)?;
            let mut start = 0;
            while start < b.num_rows() {
                let len = CHUNK.min(b.num_rows() - start);
                let mut res = Vec::with_capacity(len);
                for r in start..start + len {
                    rep.advance_to(times[row]);
                    let d = cols.txn(r).and_then(|x| rep.decide(&x));
                    if let (Err(e), false) = (&d, keep) {
                        return Err(errors::decide(e, Some(row)));
                    }
                    res.push(d);
                    row += 1;
                }
                out.push(output::batch(&res, row - len, keep));
                start += len;
            }
        }
        Ok(out)
    })?;
    let stats = rep.finish();
    engine.shutdown(risk_core::Shutdown::Abandon);
    Ok((out, stats))
}
