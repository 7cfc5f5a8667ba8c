//! Observing and drilling an engine from Python: metrics (a dict and the OpenMetrics text),
//! health and the kill switch, monitors, fallback drills, shutdown.

use crate::engine::PyEngine;
use crate::errors;
use crate::json::loads;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use risk_core::{DrillPlan, Fault, Shutdown, Switchable};
use std::time::Duration;

#[pymethods]
impl PyEngine {
    /// Every metric as a dict: counts (`decisions`, `hard_rule`, `rules_failed`, ...),
    /// `by_action`, `by_tier`, `fallbacks` ({name: count}), `latency` {`rules`, `fast`,
    /// `total`, `deep`} (each {`count`, `mean_ns`, `p50_ns`, `p99_ns`, `p999_ns`,
    /// `max_ns`}), `gray` (the gray zone and deep tier), `fast_circuit`, `deep_circuit`.
    ///
    /// >>> engine.metrics()["latency"]["total"]["p99_ns"]
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = self.live()?.metrics().to_json();
        loads(py, &text)
    }

    /// Every metric in the OpenMetrics text exposition format, names prefixed `risk_`
    /// (what a `/metrics` endpoint serves to Prometheus).
    fn metrics_text(&self) -> PyResult<String> {
        Ok(self.live()?.metrics_text())
    }

    /// The engine's health: `status` (`ready`, `degraded`, `shut_down`), `reasons`, `fast`
    /// and `deep` {`present`, `state`, `serving`}, `deploying`.
    fn health<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = self.live()?.health().to_json();
        loads(py, &text)
    }

    /// Sets (`open=True`) or clears the kill switch of `tier` (`"fast"` or `"deep"`):
    /// while set, the rules decide (fallback `circuit_open`), or gray-zone verdicts come
    /// from the fallback. Effective on the next decision.
    #[pyo3(signature = (tier, open=true))]
    fn force_open(&self, tier: &str, open: bool) -> PyResult<()> {
        let engine = self.live()?;
        let t = Switchable::parse(tier)
            .ok_or_else(|| errors::input(format!("tier {tier:?} is not fast or deep")))?;
        engine.force_open(t, open);
        Ok(())
    }

    /// The monitors' latest values: `windows`, `agreement`, `drift` ([{`subject`, `ks`,
    /// `psi`, `n`}]), `deep_fallback_share`, `firing`, `baseline`, `recent` (the latest
    /// alerts). Raises `risk.NotConfiguredError` without `[monitor]`.
    fn monitor_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let r = self
            .live()?
            .monitor_report()
            .ok_or_else(|| errors::not_configured("[monitor]"))?;
        loads(py, &r.to_json())
    }

    /// Judges every monitor now (the monitor thread does every `monitor.interval_ms`);
    /// returns how many alerts were raised (0 without `[monitor]`).
    fn monitor_tick(&self, py: Python<'_>) -> PyResult<usize> {
        let engine = self.live()?;
        Ok(py.detach(|| engine.monitor_tick().len()))
    }

    /// Runs a fallback drill and returns its report. `fault`: `"fast_down"`,
    /// `"fast_nan"`, `"deep_down"` or `"fast_slow:<ms>"`; `transactions`: mappings (as
    /// `decide` takes them) replayed under the fault; `labels`: None or one bool (fraud)
    /// per transaction, for the quality comparison (the transactions are then first
    /// decided without the fault). Live traffic on the engine is affected meanwhile.
    ///
    /// The report: `fault`, `decisions`, `by_tier` and `fallbacks` ({name: count}),
    /// `errors`, `switch_time` {`p50_us`, `p99_us`, `max_us`}, `circuit_after`,
    /// `model_quality` / `drill_quality` ({`recall`, `precision`, `auprc`}, None without
    /// labels), `deep_verdicts` ([delivered, fallbacks]), `duration_ms`.
    #[pyo3(signature = (fault, transactions, labels=None))]
    fn drill<'py>(
        &self,
        py: Python<'py>,
        fault: &str,
        transactions: &Bound<'py, PyAny>,
        labels: Option<Vec<bool>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.live()?;
        let fault = Fault::parse(fault).map_err(errors::input)?;
        let mut txns = Vec::new();
        for (k, item) in transactions.try_iter()?.enumerate() {
            let item = item?;
            let m = item.cast::<PyDict>().map_err(|_| {
                errors::type_err(format!("transactions[{k}]: a mapping (dict) is needed"))
            })?;
            let t = crate::txn::from_mapping(engine.schema(), &self.keys, m)
                .map_err(|e| prefix(py, e, &format!("transactions[{k}]: ")))?;
            txns.push(t);
        }
        let labels = labels.unwrap_or_default();
        if !labels.is_empty() && labels.len() != txns.len() {
            return Err(errors::input(format!(
                "{} labels for {} transactions",
                labels.len(),
                txns.len()
            )));
        }
        let report = py.detach(|| {
            engine
                .drill(DrillPlan {
                    fault,
                    transactions: txns,
                    labels,
                })
                .to_json()
        });
        *self.last_drill.lock().unwrap_or_else(|p| p.into_inner()) = Some(report.clone());
        drill_dict(py, &report)
    }

    /// The last drill's report (as `drill` returns it), None before any drill.
    fn drill_report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.live()?;
        let report = self
            .last_drill
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        report.map(|r| drill_dict(py, &r)).transpose()
    }

    /// Stops the engine: later decisions raise `risk.DecideError` (shut down).
    /// `drain_ms` > 0 waits that long for queued deep-tier work, 0 abandons it. Returns
    /// `(drained, abandoned)`. The engine stays open (metrics, health) until `close`.
    #[pyo3(signature = (drain_ms=0))]
    fn shutdown(&self, py: Python<'_>, drain_ms: u64) -> PyResult<(u64, u64)> {
        let engine = self.live()?;
        let mode = if drain_ms == 0 {
            Shutdown::Abandon
        } else {
            Shutdown::Drain {
                timeout: Duration::from_millis(drain_ms),
            }
        };
        let r = py.detach(|| engine.shutdown(mode));
        Ok((r.drained, r.abandoned))
    }
}

/// The drill report with `by_tier` and `fallbacks` as dicts (the JSON has pairs).
fn drill_dict<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let r = loads(py, text)?;
    let d = r.cast::<PyDict>()?;
    for key in ["by_tier", "fallbacks"] {
        if let Some(v) = d.get_item(key)? {
            if let Ok(pairs) = v.cast::<PyList>() {
                let m = PyDict::new(py);
                for p in pairs.iter() {
                    // [name, count]: JSON arrays come back as lists.
                    m.set_item(p.get_item(0)?, p.get_item(1)?)?;
                }
                d.set_item(key, m)?;
            }
        }
    }
    Ok(r)
}

/// `e` with `what` before its message: the same `risk` exception class and code (other
/// exceptions pass unchanged).
fn prefix(py: Python<'_>, e: PyErr, what: &str) -> PyErr {
    let v = e.value(py);
    let (Ok(msg), Ok(code)) = (v.getattr("message"), v.getattr("code")) else {
        return e;
    };
    match v.get_type().call1((format!("{what}{msg}"), code)) {
        Ok(made) => PyErr::from_value(made),
        Err(_) => e,
    }
}
