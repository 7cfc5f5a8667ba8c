//! Health, the per-tier kill switch, and the `tracing` events the library emits (captured
//! by a subscriber the test installs: the library installs none).

use crate::common::*;
use parking_lot::Mutex;
use risk_core::*;
use std::sync::Arc;
use std::time::Duration;

/// Collects every event's target and fields, rendered.
#[derive(Default, Clone)]
pub(crate) struct Capture(pub(crate) Arc<Mutex<Vec<String>>>);

struct Fields(String);
impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", f.name(), v));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut f = Fields(format!(
            "{} {}",
            e.metadata().level(),
            e.metadata().target()
        ));
        e.record(&mut f);
        self.0.lock().push(f.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Capture {
    pub(crate) fn any(&self, all: &[&str]) -> bool {
        self.0
            .lock()
            .iter()
            .any(|l| all.iter().all(|p| l.contains(p)))
    }
}

#[test]
fn the_fast_kill_switch_hands_every_decision_to_the_rules_and_health_says_so() {
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(rules(0.9))
        .fast(Arc::new(ConstantScorer::new(0.1)))
        .build()
        .unwrap();
    assert_eq!(e.health().status, HealthStatus::Ready);
    assert_eq!(e.health().fast.state, "closed");
    assert_eq!(e.decide(&txn(&s, 1, 1)).unwrap().tier, Tier::Fast);
    e.force_open(Switchable::Fast, true);
    let d = e.decide(&txn(&s, 2, 1)).unwrap();
    assert_eq!(
        (d.tier, d.fallback),
        (Tier::Rules, Some(FallbackCause::CircuitOpen))
    );
    assert_eq!(d.action, Action::Decline, "the rules' 0.9 decides");
    let batch = e.decide_batch(&[txn(&s, 3, 1), txn(&s, 4, 2)]);
    assert!(batch
        .iter()
        .all(|d| d.as_ref().unwrap().tier == Tier::Rules));
    let h = e.health();
    assert_eq!(
        (h.status, h.fast.state),
        (HealthStatus::Degraded, "forced_open")
    );
    assert!(
        h.reasons
            .iter()
            .any(|r| r.contains("fast tier switched off")),
        "{h:?}"
    );
    assert!(h.to_json().contains("\"status\":\"degraded\""));
    e.force_open(Switchable::Fast, false);
    assert_eq!(e.decide(&txn(&s, 5, 1)).unwrap().tier, Tier::Fast);
    assert_eq!(e.health().status, HealthStatus::Ready);
    e.shutdown(Shutdown::Abandon);
    assert_eq!(e.health().status, HealthStatus::ShutDown);
}

#[test]
fn the_deep_kill_switch_gives_fallback_verdicts() {
    let s = schema();
    let deep = Scripted::new(Act::Value(0.9), Latency::Bounded);
    let e = Engine::builder(s.clone())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(deep.clone())
        .deep_config(deep_cfg(60_000))
        .build()
        .unwrap();
    let verdicts = e.subscribe();
    e.force_open(Switchable::Deep, true);
    assert_eq!(e.health().deep.state, "forced_open");
    e.decide(&txn(&s, 1, 1)).unwrap();
    let v = verdicts.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(v.failure, Some(DeepFailure::CircuitOpen));
    assert_eq!(
        deep.calls.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the deep model is not called"
    );
    e.force_open(Switchable::Deep, false);
    e.decide(&txn(&s, 2, 2)).unwrap();
    let v = verdicts.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!((v.failure, v.score), (None, 0.9));
}

#[test]
fn panics_breaker_transitions_fallbacks_and_the_kill_switch_are_traced() {
    let cap = Capture::default();
    let s = schema();
    let fast = Scripted::new(Act::Panic, Latency::Bounded);
    let e = Engine::builder(s.clone())
        .rules(rules(0.1))
        .fast(fast.clone())
        .circuit(CircuitConfig {
            min_calls: 5,
            ..Default::default()
        })
        .build()
        .unwrap();
    tracing::subscriber::with_default(cap.clone(), || {
        // A callsite another test thread registered while this scoped subscriber was not
        // yet in tracing's list keeps a cached "never" interest, and its events would not
        // reach `cap` (a race of tracing's callsite cache, seen once in CI): recompute
        // every cached interest now that `cap` is registered, and again before the last
        // event, whose callsite other tests also hit.
        tracing::callsite::rebuild_interest_cache();
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        for i in 0..10 {
            e.decide(&txn(&s, i, 1)).unwrap();
        }
        std::panic::set_hook(prev);
        tracing::callsite::rebuild_interest_cache();
        e.force_open(Switchable::Fast, true);
    });
    assert!(
        cap.any(&["ERROR risk::tier", "scripted panic"]),
        "{:?}",
        cap.0.lock()
    );
    assert!(
        cap.any(&["WARN risk::circuit", "tier=\"fast\"", "circuit opened"]),
        "{:?}",
        cap.0.lock()
    );
    assert!(cap.any(&["DEBUG risk::decide", "cause=\"panic\""]));
    assert!(cap.any(&["DEBUG risk::decide", "cause=\"circuit_open\""]));
    assert!(cap.any(&["WARN risk::health", "tier=\"fast\"", "open=true"]));
    assert!(e.health().reasons.iter().any(|r| r.contains("fast tier")));
}
