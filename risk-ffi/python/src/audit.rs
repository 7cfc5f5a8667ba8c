//! The audit log from Python: query a log directory (`risk.read_audit_records`, and
//! `risk.read_audit` as a DataFrame in `python/risk/audit.py`), and a live engine's flush
//! and counters.

use crate::engine::PyEngine;
use crate::errors::{self, err, Kind};
use crate::json::loads;
use pyo3::prelude::*;
use pyo3::types::PyList;
use risk_core::audit::{AuditReader, Query};
use std::path::PathBuf;
use std::time::Duration;

/// Most records one query returns.
const MAX_RECORDS: usize = 1_000_000;

/// The records of the audit log in `dir` matching the query, in log order, as dicts (the
/// library's JSON views: a decision is {`seq`, `kind`, `txn_id`, `entity`,
/// `event_time_ms`, `decided_at_ms`, `action`, `score`, `tier`, `fallback`, `rules_fired`,
/// `reasons`, `thresholds`, `versions`, `timings_ns`, `features`, ...}). `txn`, `entity`:
/// only that transaction / entity; `from_ms`, `to_ms`: decision time in `[from_ms,
/// to_ms)`; `rule`: only decisions on which it fired; `kinds`: any of `"decision"`,
/// `"verdict"`, `"schema"`, `"alert"` (default decisions and verdicts); `limit`: at most
/// that many (and never more than 1,000,000). A damaged record is {`kind`: `"damaged"`,
/// `error`}: reported, never skipped. Raises `risk.AuditError` for a directory that
/// cannot be read.
#[pyfunction]
#[pyo3(signature = (dir, *, txn=None, entity=None, from_ms=None, to_ms=None, rule=None, kinds=None, limit=None))]
#[allow(clippy::too_many_arguments)] // the query's keyword arguments, one each
pub fn read_audit_records<'py>(
    py: Python<'py>,
    dir: PathBuf,
    txn: Option<u64>,
    entity: Option<u64>,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    rule: Option<String>,
    kinds: Option<Vec<String>>,
    limit: Option<usize>,
) -> PyResult<Bound<'py, PyList>> {
    let mut q = Query {
        txn,
        entity,
        from_ms,
        to_ms,
        rule,
        ..Query::default()
    };
    if let Some(kinds) = kinds {
        q.only_kinds(kinds.iter().map(String::as_str))
            .map_err(|e| errors::input(format!("kinds: {e}")))?;
    }
    let limit = limit.unwrap_or(MAX_RECORDS).min(MAX_RECORDS);
    let text = py.detach(|| {
        let entries = AuditReader::new(&dir).query(q).map_err(|e| e.to_string())?;
        let items: Vec<serde_json::Value> = entries
            .take(limit)
            .map(|e| match e {
                Ok(e) => e.to_json(),
                Err(err) => serde_json::json!({"kind": "damaged", "error": err.to_string()}),
            })
            .collect();
        Ok::<_, String>(serde_json::Value::Array(items).to_string())
    });
    let text = text.map_err(|m| err(Kind::Audit, m, 0))?;
    Ok(loads(py, &text)?.cast_into::<PyList>()?)
}

#[pymethods]
impl PyEngine {
    /// Waits until every record accepted so far is durable (fsynced), at most
    /// `timeout_ms`; returns the durable sequence number. Raises `risk.AuditError` when
    /// the log could not make them durable in time, `risk.NotConfiguredError` without an
    /// `[audit]` log.
    #[pyo3(signature = (timeout_ms=30_000))]
    fn audit_flush(&self, py: Python<'_>, timeout_ms: u64) -> PyResult<u64> {
        let log = self
            .live()?
            .audit_log()
            .ok_or_else(|| errors::not_configured("[audit] log"))?;
        py.detach(|| log.flush(Duration::from_millis(timeout_ms)))
            .map_err(|e| err(Kind::Audit, e.to_string(), 0))
    }

    /// The audit log's counters: `accepted`, `shed_full`, `shed_closed`, `written_seq`,
    /// `durable_seq`, `batches`, `io_errors`, `last_error`, `segments_deleted`,
    /// `recovery` {`segment`, `truncated_bytes`, `corrupt`, `last_seq`}.
    fn audit_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let log = self
            .live()?
            .audit_log()
            .ok_or_else(|| errors::not_configured("[audit] log"))?;
        loads(py, &log.stats().to_json())
    }
}
