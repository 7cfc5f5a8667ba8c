//! Prometheus / OpenMetrics exposition through the official `prometheus-client` crate.
//!
//! The engine registers one [`Collector`] into a registry the host owns
//! ([`Engine::register_metrics`]); on each scrape it reads the engine's own lock-free
//! counters and histograms, so exporting adds nothing to `decide` (no second set of
//! atomics to bump). The library never starts a server: `examples/metrics_server` serves
//! [`Engine::metrics_text`] over HTTP. `prometheus-client` rather than `metrics` +
//! `metrics-exporter-prometheus`: the host keeps its own `Registry` (no global recorder
//! to fight over inside a JVM or Go process that embeds several libraries), and a
//! scrape-time collector is its native extension point.

use super::{Engine, Inner};
use crate::decision::{Action, FallbackCause, Tier};
use crate::deploy::Target;
use crate::metrics::Histogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Error;
use std::sync::{Arc, Weak};

/// Latency bucket bounds, seconds: 1 µs to 10 s (fast-tier deadlines are milliseconds,
/// deep-tier budgets hundreds of milliseconds).
const BOUNDS_S: [f64; 22] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 1.5e-2,
    2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// The engine's metrics, read at scrape time. Holds the engine weakly: a registry that
/// outlives its engine reports nothing for it rather than keeping it alive.
#[derive(Debug)]
struct EngineCollector {
    inner: Weak<Inner>,
}

impl Engine {
    /// Registers the engine's metrics into `registry` under the prefix `risk_` (as a
    /// sub-registry; the host owns the registry and serves it however it likes).
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry
            .sub_registry_with_prefix("risk")
            .register_collector(Box::new(EngineCollector {
                inner: Arc::downgrade(&self.inner),
            }));
    }

    /// Every metric in the OpenMetrics text exposition format (what `/metrics` serves).
    pub fn metrics_text(&self) -> String {
        let mut r = Registry::default();
        self.register_metrics(&mut r);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }
}

fn counter<S: prometheus_client::encoding::EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (S, u64)>,
) -> Result<(), Error> {
    let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter1(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Result<(), Error> {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge1(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: i64) -> Result<(), Error> {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn gauge<
    S: prometheus_client::encoding::EncodeLabelSet,
    V: prometheus_client::encoding::EncodeGaugeValue,
>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (S, V)>,
) -> Result<(), Error> {
    let mut fam = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(v).encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

fn histogram(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(&str, &Histogram)],
) -> Result<(), Error> {
    let bounds_ns: Vec<u64> = BOUNDS_S.iter().map(|s| (s * 1e9) as u64).collect();
    let mut fam = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (stage, h) in series {
        let (cum, sum_ns, count) = h.cumulative(&bounds_ns);
        // The encoder adds the buckets up itself: give it each bucket's own count.
        let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(BOUNDS_S.len() + 1);
        let mut prev = 0;
        for (&b, &c) in BOUNDS_S.iter().zip(&cum) {
            buckets.push((b, c - prev));
            prev = c;
        }
        buckets.push((f64::MAX, count - prev));
        let labels = [("stage", *stage)];
        fam.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            sum_ns as f64 / 1e9,
            count,
            &buckets,
            None,
        )?;
    }
    Ok(())
}

impl Collector for EngineCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), Error> {
        let Some(i) = self.inner.upgrade() else {
            return Ok(());
        };
        let engine = Engine {
            inner: Arc::clone(&i),
        };
        let s = engine.metrics();
        let m = &i.metrics;
        let e = &mut enc;
        counter(
            e,
            "decisions",
            "Decisions by action.",
            Action::ALL.map(|a| ([("action", a.as_str())], s.action(a))),
        )?;
        counter(
            e,
            "decisions_by_tier",
            "Decisions by the tier that decided.",
            Tier::ALL.map(|t| ([("tier", t.as_str())], s.tier(t))),
        )?;
        counter(
            e,
            "fallbacks",
            "Decisions the rules took because the fast tier did not answer, by cause.",
            FallbackCause::ALL.map(|c| ([("cause", c.as_str())], s.fallback(c))),
        )?;
        counter1(
            e,
            "hard_rule_decisions",
            "Decisions set by a hard rule.",
            s.hard_rule,
        )?;
        counter1(
            e,
            "rules_failed",
            "Rule-tier failures (errors, panics, invalid scores).",
            s.rules_failed,
        )?;
        counter1(
            e,
            "fast_late_discarded",
            "Fast-tier answers that came after their deadline.",
            s.late_discarded,
        )?;
        counter1(
            e,
            "fast_skipped",
            "Fast-tier calls not made: the deadline had passed.",
            s.fast_skipped,
        )?;
        counter1(
            e,
            "async_shed",
            "decide_async calls answered by the rules because the queue was full.",
            s.async_shed,
        )?;
        histogram(
            e,
            "decide_latency",
            "Latency of decide by stage (rules, fast, total).",
            &[("rules", &m.rules), ("fast", &m.fast), ("total", &m.total)],
        )?;
        histogram(
            e,
            "deep_latency",
            "Gray-zone enqueue to deep verdict.",
            &[("verdict", &m.deep)],
        )?;
        let g = s.gray;
        counter(
            e,
            "gray",
            "Gray-zone transactions by outcome.",
            [
                ("enqueued", g.enqueued),
                ("shed", g.shed),
                ("completed", g.completed),
                ("timed_out", g.timed_out),
                ("failed", g.failed),
                ("saturated", g.saturated),
                ("circuit_open", g.circuit_open),
                ("abandoned", g.abandoned),
                ("subscriber_dropped", g.subscriber_dropped),
            ]
            .map(|(k, v)| ([("outcome", k)], v)),
        )?;
        counter1(e, "deep_batches", "Deep-tier batches run.", g.batches)?;
        gauge1(
            e,
            "gray_queue_length",
            "Gray-zone transactions waiting for the deep tier.",
            g.queue_len as i64,
        )?;
        let band = i.gray_band_view();
        gauge(
            e,
            "gray_band",
            "The gray band's fast-score edges (source: fixed, or budget when gray.budget set it).",
            [("lo", band.lo), ("hi", band.hi)]
                .map(|(edge, v)| ([("edge", edge), ("source", band.source)], f64::from(v))),
        )?;
        gauge1(
            e,
            "fast_workers_busy",
            "Fast-tier pool workers busy.",
            s.fast_workers_busy as i64,
        )?;
        let states = ["closed", "open", "half_open"];
        let circuit = |tier: &'static str, now: &'static str| {
            states.map(move |st| ([("tier", tier), ("state", st)], i64::from(now == st)))
        };
        let mut series: Vec<_> = Vec::new();
        if s.fast_circuit != "absent" {
            series.extend(circuit("fast", s.fast_circuit));
        }
        if s.deep_circuit != "absent" {
            series.extend(circuit("deep", s.deep_circuit));
        }
        gauge(
            e,
            "circuit_state",
            "1 for each tier's current breaker state.",
            series,
        )?;
        let r = i.routing.load();
        let mut by_version: Vec<(Vec<(&str, String)>, u64)> = Vec::new();
        let mut add = |target: &str, id: crate::version::VersionId, n: u64, role: &str| {
            by_version.push((
                vec![
                    ("target", target.to_owned()),
                    ("version", id.to_string()),
                    ("role", role.to_owned()),
                ],
                n,
            ));
        };
        add(
            "rules",
            r.rules.serving.id,
            r.rules.serving.decided.get(),
            "serving",
        );
        if let Some(c) = &r.rules.canary {
            add("rules", c.ver.id, c.ver.decided.get(), "canary");
        }
        if let Some(f) = &r.fast {
            add("fast", f.serving.id, f.serving.decided.get(), "serving");
            if let Some(c) = &f.canary {
                add("fast", c.ver.id, c.ver.decided.get(), "canary");
            }
        }
        counter(
            e,
            "decisions_by_version",
            "Decisions each serving or canary version took part in (the fast model's: where it answered).",
            by_version,
        )?;
        // What serves, one series per target (value 1), and the deploy state.
        let mut info = Vec::new();
        for t in Target::ALL {
            let st = engine.deploy_status(t);
            if let Some(v) = &st.serving {
                info.push((
                    vec![
                        ("target", t.as_str().to_owned()),
                        ("name", v.name.clone()),
                        ("version", v.version.clone()),
                        ("hash", v.hash.clone()),
                    ],
                    1,
                ));
            }
        }
        gauge(
            e,
            "serving_version",
            "The version serving each target (value 1).",
            info,
        )?;
        let active = Target::ALL.map(|t| {
            let a = engine.deploy_status(t).active;
            ([("target", t.as_str())], i64::from(a.is_some()))
        });
        gauge(
            e,
            "deploy_active",
            "1 while a deploy of the target is in progress.",
            active,
        )?;
        gauge1(
            e,
            "deploy_epoch",
            "Routing changes since the engine started.",
            engine.deploy_epoch() as i64,
        )?;
        if let Some(r) = engine.monitor_report() {
            if let Some((v, _)) = r.agreement {
                gauge(
                    e,
                    "monitor_agreement",
                    "Model-vs-rules agreement in the last judged window.",
                    [([("monitor", "agreement")], v)],
                )?;
            }
            gauge(
                e,
                "monitor_drift_ks",
                "KS statistic against the baseline, last window.",
                r.drift
                    .iter()
                    .map(|d| ([("subject", d.subject.clone())], d.ks)),
            )?;
            gauge(
                e,
                "monitor_drift_psi",
                "PSI against the baseline, last window.",
                r.drift
                    .iter()
                    .map(|d| ([("subject", d.subject.clone())], d.psi)),
            )?;
            if let Some(v) = r.deep_fallback_share {
                gauge(
                    e,
                    "monitor_deep_fallback_share",
                    "Share of deep verdicts that were fallbacks, last window.",
                    [([("monitor", "deep")], v)],
                )?;
            }
            if let Some(q) = r.labels {
                gauge(
                    e,
                    "monitor_labelled_decisions",
                    "Decisions checked against their labels in the last judged window, by cell.",
                    [
                        ("fraud_stopped", q.fraud_stopped),
                        ("fraud_missed", q.fraud_missed),
                        ("legit_declined", q.legit_declined),
                        ("legit_passed", q.legit_passed),
                    ]
                    .map(|(k, v)| ([("cell", k)], v as i64)),
                )?;
            }
            gauge(
                e,
                "alerts_firing",
                "Monitor alerts firing now (value 1).",
                r.firing.iter().map(|f| ([("alert", f.clone())], 1i64)),
            )?;
        }
        if let Some(log) = engine.audit_log() {
            let a = log.stats();
            counter(
                e,
                "audit_records",
                "Audit records by fate.",
                [
                    ("accepted", a.accepted),
                    ("shed_full", a.shed_full),
                    ("shed_closed", a.shed_closed),
                ]
                .map(|(k, v)| ([("fate", k)], v)),
            )?;
            counter1(e, "audit_io_errors", "Audit log write errors.", a.io_errors)?;
            gauge1(
                e,
                "audit_durable_seq",
                "Sequence number of the last durable audit record.",
                a.durable_seq as i64,
            )?;
        }
        if let Some(st) = engine.state() {
            let x = st.stats();
            counter(
                e,
                "state_events",
                "Entity-state events: transactions whose features were computed, without an event time, late, degraded (store failed), labels applied and refused, list hits, exact windows read from their buckets (past max_events).",
                [
                    ("updated", x.updates),
                    ("no_time", x.no_time),
                    ("late", x.late),
                    ("degraded", x.degraded),
                    ("label", x.labels),
                    ("label_unknown", x.labels_unknown),
                    ("list_hit", x.list_hits),
                    ("lists_stale", x.lists_stale),
                    ("exact_fallback", x.exact_fallback),
                ]
                .map(|(k, v)| ([("event", k)], v)),
            )?;
            counter(
                e,
                "state_store_faults",
                "Entity-state store calls that timed out, failed, were skipped while the store was down, or background writes shed.",
                [
                    ("timeout", x.store_timeouts),
                    ("error", x.store_errors),
                    ("skipped", x.store_skipped),
                    ("shed", x.store_shed),
                ]
                .map(|(k, v)| ([("fault", k)], v)),
            )?;
            counter(
                e,
                "state_store_reads",
                "Socket reads of the decide path's Redis connections: those that found the reply while polling (read_spin_us), and those that slept in the kernel first.",
                [
                    ("polled", x.store_reads_polled),
                    ("blocked", x.store_reads_blocked),
                ]
                .map(|(k, v)| ([("wait", k)], v)),
            )?;
            counter(
                e,
                "state_list_sync",
                "Shared lists (Redis): changes applied from other hosts, full reloads, subscriber failures, reloads refused (malformed entries).",
                [
                    ("change", x.list_changes),
                    ("resync", x.list_resyncs),
                    ("error", x.list_sync_errors),
                    ("refused", x.list_refused),
                ]
                .map(|(k, v)| ([("event", k)], v)),
            )?;
            gauge1(
                e,
                "state_lists_stale",
                "1 while the shared lists' Redis cannot be reached (the last known entries serve).",
                st.lists().stale() as i64,
            )?;
            gauge(
                e,
                "state_keys",
                "Keys held in process per key source (0 on Redis).",
                st.memory()
                    .into_iter()
                    .map(|m| ([("source", m.source)], m.keys as i64)),
            )?;
        }
        Ok(())
    }
}
