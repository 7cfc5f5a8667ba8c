//! Regression tests of the reliability review (issue [7]): each failed before its fix.

use crate::common::*;
use crate::engine::block_on;
use risk_core::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Fails alone on a poisoned row (amount 666), and fails the whole batch call when the
/// batch holds one: the shape of a model that chokes on one bad input.
struct Poison {
    calls: AtomicU64,
}

impl Scorer for Poison {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("poison", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if t.amount == 666.0 {
            return Err(ScoreError::Failed("poisoned row".into()));
        }
        Ok(Score::new(0.05))
    }
    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        if txns.iter().any(|t| t.amount == 666.0) {
            return Err(ScoreError::Failed("poisoned batch".into()));
        }
        out.extend(txns.iter().map(|_| Score::new(0.05)));
        Ok(())
    }
}

fn row(s: &Arc<FeatureSchema>, id: u64, amount: f64) -> Transaction {
    Transaction::builder(s)
        .id(id)
        .entity(id)
        .timestamp_ms(1_767_571_200_000 + id as i64)
        .amount(amount, "USD")
        .build()
        .unwrap()
}

/// Defect 9: one bad row used to fail its whole chunk of 64, and the breaker counted the
/// chunk, so a 1/64 row-failure rate opened the circuit.
#[test]
fn decide_batch_fails_the_row_not_the_chunk() {
    let s = schema();
    let e = Engine::builder(s.clone())
        .clock(ManualClock::new())
        .rules(rules(0.8))
        .fast(Arc::new(Poison {
            calls: AtomicU64::new(0),
        }))
        .circuit(CircuitConfig {
            min_calls: 5,
            failure_rate: 0.5,
            ..Default::default()
        })
        .build()
        .unwrap();
    for chunk in 0..10u64 {
        let txns: Vec<Transaction> = (0..64)
            .map(|i| row(&s, chunk * 64 + i + 1, if i == 17 { 666.0 } else { 50.0 }))
            .collect();
        for (i, d) in e.decide_batch(&txns).into_iter().enumerate() {
            let d = d.unwrap();
            if i == 17 {
                assert_eq!(
                    (d.tier, d.fallback),
                    (Tier::Rules, Some(FallbackCause::Error))
                );
            } else {
                assert_eq!(
                    (d.tier, d.fallback, d.model_score),
                    (Tier::Fast, None, Some(0.05)),
                    "chunk {chunk} row {i}"
                );
            }
        }
    }
    assert_eq!(e.fast_circuit(), Some(CircuitState::Closed));
    assert_eq!(e.metrics().fallback(FallbackCause::Error), 10);
}

/// A rule tier that takes `ms` of (manual) time.
struct SlowRules {
    clock: Arc<ManualClock>,
    ms: u64,
}

impl Scorer for SlowRules {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("slow-rules", "1", Latency::Bounded)
    }
    fn score(&self, _t: &Transaction) -> Result<Score, ScoreError> {
        self.clock.advance(Duration::from_millis(self.ms));
        Ok(Score::new(0.1))
    }
}

/// Defect 8: the fast tier was dispatched even when the rule stage had used up the whole
/// deadline (inline and on the pool); now it is skipped and counted.
#[test]
fn a_deadline_spent_by_the_rules_skips_the_fast_tier() {
    for latency in [Latency::Bounded, Latency::Unbounded] {
        let clock = ManualClock::new();
        let fast = Scripted::new(Act::Value(0.05), latency);
        let e = Engine::builder(schema())
            .clock(clock.clone())
            .rules(Arc::new(SlowRules {
                clock: clock.clone(),
                ms: 20,
            }))
            .fast(fast.clone())
            .fast_deadline(Duration::from_millis(15))
            .circuit(lenient_circuit())
            .build()
            .unwrap();
        let d = e.decide(&txn(e.schema(), 1, 1)).unwrap();
        assert_eq!(
            (d.tier, d.fallback),
            (Tier::Rules, Some(FallbackCause::Timeout))
        );
        assert_eq!(fast.calls.load(Ordering::SeqCst), 0, "{latency:?}");
        let m = e.metrics();
        assert_eq!(m.fast_skipped, 1);
        // A skip says nothing about the model's health.
        assert_eq!(e.fast_circuit(), Some(CircuitState::Closed));
        let t: Vec<Transaction> = (2..5).map(|i| txn(e.schema(), i, i)).collect();
        for d in e.decide_batch(&t) {
            assert_eq!(d.unwrap().fallback, Some(FallbackCause::Timeout));
        }
        assert_eq!(fast.calls.load(Ordering::SeqCst), 0, "{latency:?}");
    }
}

/// Defect 6: `decide_async` queued into an unbounded channel and started the deadline
/// when a worker picked the job up. The queue is bounded (a full one sheds to the rules
/// at once) and the deadline counts from the call.
#[test]
fn decide_async_is_bounded_and_its_deadline_starts_at_the_call() {
    let clock = ManualClock::new();
    let fast = Scripted::new(Act::Block, Latency::Unbounded);
    let e = Engine::builder(schema())
        .clock(clock.clone())
        .rules(rules(0.8))
        .fast(fast.clone())
        .circuit(lenient_circuit())
        .pool_config(PoolConfig {
            fast_workers: 1,
            spin: Duration::ZERO,
            async_workers: 1,
            async_queue_capacity: 1,
            ..Default::default()
        })
        .build()
        .unwrap();
    let s = e.schema().clone();
    // A occupies the only async worker (blocked in the fast tier until the deadline).
    let a = e.decide_async(txn(&s, 1, 1));
    fast.wait_started();
    // B waits in the queue (capacity 1); C finds it full and is answered by the rules.
    let b = e.decide_async(txn(&s, 2, 2));
    let c = block_on(e.decide_async(txn(&s, 3, 3))).unwrap();
    assert_eq!(
        (c.tier, c.fallback),
        (Tier::Rules, Some(FallbackCause::Saturated))
    );
    assert_eq!(e.metrics().async_shed, 1);
    // A's deadline passes; B's deadline counted from its call has passed too, so B is
    // decided by the rules without calling the fast tier again.
    clock.advance(Duration::from_millis(15));
    let a = block_on(a).unwrap();
    assert_eq!(a.fallback, Some(FallbackCause::Timeout));
    let b = block_on(b).unwrap();
    assert_eq!(
        (b.tier, b.fallback),
        (Tier::Rules, Some(FallbackCause::Timeout))
    );
    assert_eq!(
        b.timings.total_ns, 15_000_000,
        "queueing counts against the deadline"
    );
    assert_eq!(fast.calls.load(Ordering::SeqCst), 1);
    assert_eq!(e.metrics().fast_skipped, 1);
    fast.release(1);
}

/// Defect 7: after `shutdown()` returned, a deep batch still in flight wrote feedback and
/// called `on_verdict`. Nothing is delivered after shutdown reports.
#[test]
fn nothing_is_delivered_after_shutdown_returns() {
    let clock = ManualClock::new();
    let deep = Scripted::new(Act::Block, Latency::Unbounded);
    let delivered = Arc::new(AtomicU64::new(0));
    let d2 = Arc::clone(&delivered);
    let e = Engine::builder(schema())
        .clock(clock.clone())
        .rules(rules(0.2))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(deep.clone())
        .deep_config(deep_cfg(500))
        .circuit(lenient_circuit())
        .on_verdict(move |_| {
            d2.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let verdicts = e.subscribe();
    let d = e.decide(&txn(e.schema(), 1, 7)).unwrap();
    assert!(matches!(d.escalation, Escalation::Enqueued(_)));
    deep.wait_started();
    let report = e.shutdown(Shutdown::Abandon);
    assert_eq!(report.abandoned, 0, "the item was in flight, not queued");
    // The batch in flight now completes: its verdict must go nowhere.
    deep.release(2);
    while e.metrics().gray.abandoned < 1 {
        std::thread::yield_now();
    }
    assert_eq!(delivered.load(Ordering::SeqCst), 0);
    assert_eq!(e.feedback(EntityKey(7)), None);
    assert!(verdicts.recv().is_err(), "channel closed, nothing buffered");
    assert_eq!(e.metrics().gray.completed, 0);
}

/// Defect 10: the deep tier had no circuit breaker. Failing batches open it; while open,
/// the model is not called and verdicts fall back at once, saying why.
#[test]
fn the_deep_tier_has_a_circuit_breaker() {
    let clock = ManualClock::new();
    let deep = Scripted::new(Act::Error, Latency::Unbounded);
    let e = Engine::builder(schema())
        .clock(clock.clone())
        .rules(rules(0.2))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(deep.clone())
        .deep_config(deep_cfg(500))
        .circuit(CircuitConfig {
            min_calls: 4,
            failure_rate: 0.5,
            ..Default::default()
        })
        .build()
        .unwrap();
    let verdicts = e.subscribe();
    assert_eq!(e.deep_circuit(), Some(CircuitState::Closed));
    for i in 1..=4 {
        e.decide(&txn(e.schema(), i, i)).unwrap();
        let v = verdicts.recv().unwrap();
        assert_eq!(v.failure, Some(DeepFailure::Error));
    }
    assert_eq!(e.deep_circuit(), Some(CircuitState::Open));
    let calls = deep.calls.load(Ordering::SeqCst);
    for i in 5..=8 {
        e.decide(&txn(e.schema(), i, i)).unwrap();
        let v = verdicts.recv().unwrap();
        assert_eq!(v.failure, Some(DeepFailure::CircuitOpen));
    }
    assert_eq!(
        deep.calls.load(Ordering::SeqCst),
        calls,
        "model not called while open"
    );
    let m = e.metrics();
    assert_eq!((m.gray.failed, m.gray.circuit_open), (4, 4));
    assert_eq!(m.deep_circuit, "open");
    // After the open period a probe goes through; a healthy model closes the circuit.
    deep.set(Act::Value(0.9));
    clock.advance(Duration::from_secs(5));
    for i in 9..=11 {
        e.decide(&txn(e.schema(), i, i)).unwrap();
        assert_eq!(verdicts.recv().unwrap().failure, None);
    }
    assert_eq!(e.deep_circuit(), Some(CircuitState::Closed));
}

/// Defect 4: a negative event time is refused by name; a transaction without an entity
/// or a time has no entity state (unkeyed transactions used to share `EntityKey(0)`).
#[test]
fn event_time_and_entity_are_checked() {
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(rules(0.2))
        .fast(Arc::new(ConstantScorer::new(0.5)))
        .deep(Scripted::new(Act::Value(0.99), Latency::Unbounded))
        .deep_config(deep_cfg(500))
        .circuit(lenient_circuit())
        .build()
        .unwrap();
    let built = Transaction::builder(&s)
        .timestamp_ms(-5)
        .amount(1.0, "USD")
        .build();
    assert!(matches!(
        built,
        Err(DecideError::InvalidField {
            field: "timestamp_ms",
            ..
        })
    ));
    // The field is public: `decide` checks it too.
    let mut bad = txn(&s, 1, 1);
    bad.timestamp_ms = -5;
    match e.decide(&bad) {
        Err(DecideError::InvalidField { field, reason }) => {
            assert_eq!(field, "timestamp_ms");
            assert!(reason.contains("-5"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let verdicts = e.subscribe();
    let unkeyed = Transaction::builder(&s)
        .timestamp_ms(1_767_571_200_000)
        .amount(1.0, "USD")
        .build()
        .unwrap();
    e.decide(&unkeyed).unwrap();
    assert_eq!(verdicts.recv().unwrap().score, 0.99);
    // The verdict reached subscribers but no shared record: the next unkeyed
    // transaction is not shifted by it.
    assert_eq!(e.feedback(EntityKey::NONE), None);
    assert_eq!(e.decide(&unkeyed).unwrap().threshold_shift, 0.0);
    e.shutdown(Shutdown::Abandon);
}
