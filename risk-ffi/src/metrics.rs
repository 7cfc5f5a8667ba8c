//! Engine metrics as JSON: `risk_engine_metrics_json`.

use crate::args::write_text;
use crate::engine::risk_engine;
use crate::error::guard;
use crate::error::risk_result;
use crate::handle::with_handle;
use std::ffi::c_char;

/// Every metric as JSON (decisions by action, tier and fallback cause, latency
/// percentiles, gray zone, circuit state).
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL to query the size); `len` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_metrics_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            let m = h.engine.metrics();
            let lat = |l: &risk_core::LatencySummary| serde_json::json!({"count": l.count, "p50_ns": l.p50_ns, "p99_ns": l.p99_ns, "p999_ns": l.p999_ns, "max_ns": l.max_ns});
            let by = |v: Vec<(&str, u64)>| {
                serde_json::Value::Object(
                    v.into_iter()
                        .map(|(k, c)| (k.to_owned(), c.into()))
                        .collect(),
                )
            };
            let g = &m.gray;
            let j = serde_json::json!({
                "decisions": m.decisions,
                "by_action": by(m.by_action.iter().map(|(a, c)| (a.as_str(), *c)).collect()),
                "by_tier": by(m.by_tier.iter().map(|(t, c)| (t.as_str(), *c)).collect()),
                "fallbacks": by(m.fallbacks.iter().map(|(f, c)| (f.as_str(), *c)).collect()),
                "hard_rule": m.hard_rule,
                "rules_failed": m.rules_failed,
                "late_discarded": m.late_discarded,
                "latency": {
                    "rules": lat(&m.rules_latency),
                    "fast": lat(&m.fast_latency),
                    "total": lat(&m.total_latency),
                    "deep": lat(&m.deep_latency),
                },
                "gray": {
                    "enqueued": g.enqueued, "shed": g.shed, "completed": g.completed,
                    "timed_out": g.timed_out, "failed": g.failed, "saturated": g.saturated,
                    "queue_len": g.queue_len,
                },
                "fast_circuit": m.fast_circuit,
                "fast_workers_busy": m.fast_workers_busy,
            });
            write_text(&j.to_string(), buf, cap, len)
        })
    })
}
