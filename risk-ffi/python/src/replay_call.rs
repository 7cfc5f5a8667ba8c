//! `Engine.replay` and `risk._native.replay_toml`: a table replayed in event time through
//! a replay engine built from a configuration (`Engine::replay_builder_from_toml_str`:
//! no audit log, monitor, rule history or shared state store; the deep tier only when
//! asked for), labels fed when they became known, the run's figures in the result's
//! schema metadata.

use crate::engine::{registry, source_of, Source};
use crate::errors;
use pyo3::prelude::*;
use risk_core::Engine;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Replays `data` through a replay engine built from `source` (see `Engine.replay`).
#[allow(clippy::too_many_arguments)] // Engine.replay's keyword arguments, and the source
pub fn replay_source<'py>(
    py: Python<'py>,
    source: Source,
    data: &Bound<'py, PyAny>,
    label: &str,
    label_delay_ms: Option<i64>,
    labels: Option<&Bound<'py, PyAny>>,
    errors: &str,
    deep: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let errors = crate::batch::Errors::parse(errors)?;
    let data = crate::batch::record_batches(data)?;
    let (times, ids) = crate::replay::times_and_ids(&data.1, true)?;
    let feed: Vec<crate::replay::Label> = match (labels, label_delay_ms) {
        (Some(_), Some(_)) => return Err(errors::input("give labels or label_delay_ms, not both")),
        (Some(l), None) => {
            let (_, lb) = crate::batch::record_batches(l)?;
            let (lt, lid) = crate::replay::times_and_ids(&lb, false)?;
            let fraud = crate::replay::label_column(&lb, "fraud")?;
            lt.into_iter()
                .zip(lid)
                .zip(fraud)
                .enumerate()
                .filter_map(|(k, ((t, id), f))| f.map(|f| (t, k, id, f)))
                .collect()
        }
        // A label known at its own transaction's time would reach the store before
        // the transaction does: the shortest delay is 1 ms.
        (None, Some(d)) if d < 1 => {
            return Err(errors::input(
                "label_delay_ms must be at least 1 (a label is known after its transaction)",
            ))
        }
        (None, Some(d)) => {
            let fraud = crate::replay::label_column(&data.1, label)?;
            times
                .iter()
                .zip(&ids)
                .zip(fraud)
                .enumerate()
                .filter(|(_, (_, f))| *f == Some(true))
                .map(|(k, ((t, id), _))| (t.saturating_add(d), k, *id, true))
                .collect()
        }
        (None, None) => Vec::new(),
    };
    let build = move |clock: Arc<risk_core::ManualClock>| -> PyResult<Engine> {
        let rules = Arc::new(Mutex::new(None));
        let reg = registry(&rules);
        Engine::replay_builder_from_toml_str(
            &source.text,
            &source.base_dir,
            &source.origin,
            &reg,
            clock,
            deep,
        )
        .and_then(|b| b.build())
        .map_err(errors::config)
    };
    let (batches, stats) = crate::replay::replay(py, build, data, times, feed, errors, deep)?;
    let keep = errors == crate::batch::Errors::Keep;
    let meta: std::collections::HashMap<String, String> = [
        ("risk.replay.labels_fed", stats.labels_fed),
        ("risk.replay.labels_after_end", stats.labels_after_end),
        ("risk.replay.labels_refused", stats.labels_refused),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_string()))
    .chain([(
        "risk.replay.deep".to_owned(),
        if deep { "replayed" } else { "skipped" }.to_owned(),
    )])
    .chain(
        stats
            .deep
            .map(|d| {
                [
                    (
                        "risk.replay.deep_verdicts".to_owned(),
                        d.verdicts.to_string(),
                    ),
                    ("risk.replay.deep_lost".to_owned(), d.lost.to_string()),
                    (
                        "risk.replay.deep_latency_p50_us".to_owned(),
                        d.p50_us.to_string(),
                    ),
                    (
                        "risk.replay.deep_latency_p99_us".to_owned(),
                        d.p99_us.to_string(),
                    ),
                ]
            })
            .into_iter()
            .flatten(),
    )
    .chain(
        stats
            .first_refusal
            .map(|r| ("risk.replay.labels_refused_reason".to_owned(), r)),
    )
    .collect();
    let schema = Arc::new(
        crate::output::schema(keep)
            .as_ref()
            .clone()
            .with_metadata(meta),
    );
    let batches = batches
        .into_iter()
        .map(|b| b.with_schema(Arc::clone(&schema)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| errors::input(e.to_string()))?;
    pyo3_arrow::PyTable::try_new(batches, schema)?.into_pyarrow(py)
}

/// Replays `data` in event time through a replay engine built from `source` (a
/// `risk.toml` path, or its text with `base_dir`), as `Engine.replay` does, without
/// building a live engine first (which would open its audit log, state stores and deep
/// tier). `risk.backtest` and `risk.compare` call it for a path or TOML text.
#[pyfunction]
#[pyo3(signature = (source, data, *, base_dir=None, label="is_fraud", label_delay_ms=None, labels=None, errors="raise", deep=false))]
#[allow(clippy::too_many_arguments)] // Engine.replay's keyword arguments, and the source's
pub fn replay_toml<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
    base_dir: Option<PathBuf>,
    label: &str,
    label_delay_ms: Option<i64>,
    labels: Option<&Bound<'py, PyAny>>,
    errors: &str,
    deep: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let source = source_of(source, base_dir)?;
    replay_source(
        py,
        source,
        data,
        label,
        label_delay_ms,
        labels,
        errors,
        deep,
    )
}
