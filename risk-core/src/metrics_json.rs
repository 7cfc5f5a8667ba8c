//! A [`MetricsSnapshot`] as JSON: the one place a snapshot becomes JSON (the C ABI's
//! `risk_engine_metrics_json` and the Python package's `Engine.metrics` return it).

use crate::metrics::{GrayStats, LatencySummary, MetricsSnapshot};
use serde_json::{json, Value};

impl MetricsSnapshot {
    /// Every field as one JSON object: counts (`decisions`, `hard_rule`, `rules_failed`,
    /// `late_discarded`, `fast_skipped`, `async_shed`, `fast_workers_busy`), `by_action`,
    /// `by_tier`, `fallbacks` ({name: count}), `latency` {`rules`, `fast`, `total`,
    /// `deep`} (each {`count`, `mean_ns`, `p50_ns`, `p99_ns`, `p999_ns`, `max_ns`}),
    /// `gray` (the gray zone and deep tier's counters), `fast_circuit`, `deep_circuit`.
    pub fn to_json(&self) -> String {
        metrics_json(self).to_string()
    }
}

/// Every struct is destructured without `..`, so a field added to `MetricsSnapshot`,
/// `LatencySummary` or `GrayStats` does not compile until it is emitted here (then list it
/// in the function's documentation: a test checks the two agree).
fn metrics_json(m: &MetricsSnapshot) -> Value {
    let MetricsSnapshot {
        decisions,
        by_action,
        by_tier,
        fallbacks,
        hard_rule,
        rules_failed,
        late_discarded,
        fast_skipped,
        async_shed,
        rules_latency,
        fast_latency,
        total_latency,
        deep_latency,
        gray,
        fast_circuit,
        deep_circuit,
        fast_workers_busy,
    } = m;
    let GrayStats {
        enqueued,
        shed,
        completed,
        timed_out,
        failed,
        saturated,
        abandoned,
        batches,
        subscriber_dropped,
        skipped,
        circuit_open,
        late_discarded: gray_late_discarded,
        queue_len,
    } = gray;
    json!({
        "decisions": decisions,
        "by_action": counts(by_action.iter().map(|(a, c)| (a.as_str(), *c))),
        "by_tier": counts(by_tier.iter().map(|(t, c)| (t.as_str(), *c))),
        "fallbacks": counts(fallbacks.iter().map(|(f, c)| (f.as_str(), *c))),
        "hard_rule": hard_rule,
        "rules_failed": rules_failed,
        "late_discarded": late_discarded,
        "fast_skipped": fast_skipped,
        "async_shed": async_shed,
        "latency": {
            "rules": latency(rules_latency),
            "fast": latency(fast_latency),
            "total": latency(total_latency),
            "deep": latency(deep_latency),
        },
        "gray": {
            "enqueued": enqueued,
            "shed": shed,
            "completed": completed,
            "timed_out": timed_out,
            "failed": failed,
            "saturated": saturated,
            "abandoned": abandoned,
            "batches": batches,
            "subscriber_dropped": subscriber_dropped,
            "skipped": skipped,
            "circuit_open": circuit_open,
            "late_discarded": gray_late_discarded,
            "queue_len": queue_len,
        },
        "fast_circuit": fast_circuit,
        "deep_circuit": deep_circuit,
        "fast_workers_busy": fast_workers_busy,
    })
}

fn latency(l: &LatencySummary) -> Value {
    let LatencySummary {
        count,
        mean_ns,
        p50_ns,
        p99_ns,
        p999_ns,
        max_ns,
    } = l;
    json!({
        "count": count,
        "mean_ns": mean_ns,
        "p50_ns": p50_ns,
        "p99_ns": p99_ns,
        "p999_ns": p999_ns,
        "max_ns": max_ns,
    })
}

/// `{name: count}` in the snapshot's order.
fn counts<'a>(v: impl Iterator<Item = (&'a str, u64)>) -> Value {
    Value::Object(v.map(|(k, c)| (k.to_owned(), c.into())).collect())
}
