//! Engine metrics as JSON (`risk_engine_metrics_json`) and as the Prometheus/OpenMetrics
//! text exposition (`risk_engine_metrics_text`).

use crate::engine::risk_engine;
use crate::error::risk_result;
use crate::export::export_handle;
use std::ffi::c_char;

/// Every metric of the engine (every field of its `MetricsSnapshot`) as one JSON object
/// with these keys:
/// - `decisions`, `hard_rule`, `rules_failed`, `late_discarded`, `fast_skipped`,
///   `async_shed`, `fast_workers_busy`: counts;
/// - `by_action` {`approve`, `review`, `decline`}, `by_tier` {`rules`, `fast`, `static`},
///   `fallbacks` {`timeout`, `error`, `panic`, `invalid_score`, `circuit_open`, `absent`,
///   `saturated`}: decisions by action, deciding tier and fast-tier fallback cause;
/// - `latency` {`rules`, `fast`, `total`, `deep`}, each {`count`, `mean_ns`, `p50_ns`,
///   `p99_ns`, `p999_ns`, `max_ns`};
/// - `gray` {`enqueued`, `shed`, `completed`, `timed_out`, `failed`, `saturated`,
///   `abandoned`, `batches`, `subscriber_dropped`, `skipped`, `circuit_open`,
///   `late_discarded`, `queue_len`}: the gray zone and deep tier;
/// - `fast_circuit`, `deep_circuit`: a circuit breaker's state, "closed", "open",
///   "half_open" or "absent".
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
    export_handle(e, buf, cap, len, |h| Ok(h.engine.metrics().to_json()))
}

/// Every metric in the OpenMetrics text exposition format, names prefixed `risk_` (what a
/// `/metrics` endpoint serves to Prometheus; the library starts no server). Same
/// `(buf, cap, *len)` protocol as `risk_engine_metrics_json`.
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL to query the size); `len` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_metrics_text(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export_handle(e, buf, cap, len, |h| Ok(h.engine.metrics_text()))
}
