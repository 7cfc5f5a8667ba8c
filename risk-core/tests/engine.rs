//! Deadline, fallback, circuit breaker, policy and API agreement.

use crate::common::*;
use risk_core::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn engine_with(
    clock: Arc<ManualClock>,
    fast: Arc<Scripted>,
    circuit: CircuitConfig,
    workers: usize,
) -> Engine {
    Engine::builder(schema())
        .clock(clock)
        .rules(rules(0.8))
        .fast(fast)
        .circuit(circuit)
        .pool_config(PoolConfig {
            fast_workers: workers,
            spin: Duration::ZERO,
            async_workers: 1,
            ..Default::default()
        })
        .build()
        .unwrap()
}

#[test]
fn blocking_scorer_times_out_at_the_deadline_and_rules_decide() {
    let clock = ManualClock::new();
    let fast = Scripted::new(Act::Block, Latency::Unbounded);
    let e = engine_with(clock.clone(), fast.clone(), lenient_circuit(), 2);
    let s = e.schema().clone();
    let e2 = e.clone();
    let h = std::thread::spawn(move || e2.decide(&txn(&s, 1, 1)).unwrap());
    fast.wait_started();
    clock.advance(Duration::from_millis(15));
    let d = h.join().unwrap();
    assert_eq!(d.fallback, Some(FallbackCause::Timeout));
    assert_eq!(d.tier, Tier::Rules);
    assert_eq!(
        d.action,
        Action::Decline,
        "rule score 0.8 >= decline_at 0.7"
    );
    assert_eq!(d.rule_score, 0.8);
    assert_eq!(d.model_score, None);
    assert_eq!(d.timings.total_ns, 15_000_000);
    fast.release(1);
}

#[test]
fn blocking_scorer_with_the_real_clock_returns_by_the_deadline() {
    let fast = Scripted::new(Act::Block, Latency::Unbounded);
    let e = Engine::builder(schema())
        .rules(rules(0.1))
        .fast(fast.clone())
        .fast_deadline(Duration::from_millis(15))
        .build()
        .unwrap();
    let t = txn(e.schema(), 1, 1);
    let start = Instant::now();
    let d = e.decide(&t).unwrap();
    let took = start.elapsed();
    assert_eq!(d.fallback, Some(FallbackCause::Timeout));
    assert_eq!((d.tier, d.action), (Tier::Rules, Action::Approve));
    // Returning before the deadline is a bug whatever the machine's load; how much later
    // it returns is the machine's, measured in benches (no wall-clock ceiling here). The
    // scorer blocks for ever: that the call returned at all is the point.
    assert!(
        took >= Duration::from_millis(15),
        "returned before the deadline: {took:?}"
    );
    fast.release(1);
}

#[test]
fn saturated_pool_falls_back_at_once() {
    let clock = ManualClock::new();
    let fast = Scripted::new(Act::Block, Latency::Unbounded);
    let e = engine_with(clock.clone(), fast.clone(), lenient_circuit(), 2);
    let s = e.schema().clone();
    // Stall both workers.
    for i in 0..2 {
        let (e2, s2) = (e.clone(), s.clone());
        let h = std::thread::spawn(move || e2.decide(&txn(&s2, i, i)).unwrap());
        fast.wait_started();
        clock.advance(Duration::from_millis(15));
        assert_eq!(h.join().unwrap().fallback, Some(FallbackCause::Timeout));
    }
    // Both workers are stuck: the next call does not wait at all (clock not advanced).
    let d = e.decide(&txn(&s, 9, 9)).unwrap();
    assert_eq!(d.fallback, Some(FallbackCause::Saturated));
    assert_eq!(d.timings.total_ns, 0);
    // Releasing the stuck calls frees the workers; late answers are discarded.
    fast.set(Act::Value(0.05));
    fast.release(2);
    let mut d = e.decide(&txn(&s, 10, 10)).unwrap();
    for _ in 0..10_000 {
        if d.fallback.is_none() {
            break;
        }
        std::thread::yield_now();
        d = e.decide(&txn(&s, 10, 10)).unwrap();
    }
    assert_eq!((d.tier, d.model_score), (Tier::Fast, Some(0.05)));
    // One worker answering does not mean the other has finished its late call yet:
    // wait for the count (bounded), not for time.
    for _ in 0..1_000_000 {
        if e.metrics().late_discarded >= 2 {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(e.metrics().late_discarded, 2);
}

#[test]
fn panicking_scorer_falls_back_and_engine_keeps_serving() {
    for latency in [Latency::Bounded, Latency::Unbounded] {
        let clock = ManualClock::new();
        let fast = Scripted::new(Act::Panic, latency);
        let e = engine_with(clock, fast.clone(), lenient_circuit(), 1);
        let s = e.schema().clone();
        for i in 0..3 {
            let d = e.decide(&txn(&s, i, i)).unwrap();
            assert_eq!(d.fallback, Some(FallbackCause::Panic), "{latency:?}");
            assert_eq!(d.tier, Tier::Rules);
        }
        fast.set(Act::Value(0.1));
        let d = e.decide(&txn(&s, 5, 5)).unwrap();
        assert_eq!(
            (d.tier, d.fallback, d.action),
            (Tier::Fast, None, Action::Approve)
        );
        assert_eq!(e.metrics().fallback(FallbackCause::Panic), 3);
    }
}

#[test]
fn invalid_scores_and_errors_fall_back() {
    let clock = ManualClock::new();
    for (act, cause) in [
        (Act::Value(f32::NAN), FallbackCause::InvalidScore),
        (Act::Value(1.5), FallbackCause::InvalidScore),
        (Act::Value(-0.01), FallbackCause::InvalidScore),
        (Act::Error, FallbackCause::Error),
    ] {
        for latency in [Latency::Bounded, Latency::Unbounded] {
            let fast = Scripted::new(act, latency);
            let e = engine_with(clock.clone(), fast, lenient_circuit(), 1);
            let d = e.decide(&txn(e.schema(), 1, 1)).unwrap();
            assert_eq!(d.fallback, Some(cause), "{act:?} {latency:?}");
            assert_eq!((d.tier, d.score), (Tier::Rules, 0.8));
        }
    }
}

#[test]
fn no_fast_tier_is_absent() {
    let e = Engine::builder(schema()).rules(rules(0.5)).build().unwrap();
    let d = e.decide(&txn(e.schema(), 1, 1)).unwrap();
    assert_eq!(
        (d.fallback, d.tier, d.action),
        (Some(FallbackCause::Absent), Tier::Rules, Action::Review)
    );
}

#[test]
fn failing_rule_tier_uses_the_model_or_the_static_action() {
    let failing_rules = Scripted::new(Act::Panic, Latency::Bounded);
    let fast = Scripted::new(Act::Value(0.9), Latency::Bounded);
    let e = Engine::builder(schema())
        .clock(ManualClock::new())
        .rules(failing_rules)
        .fast(fast.clone())
        .static_action(Action::Review)
        .build()
        .unwrap();
    let d = e.decide(&txn(e.schema(), 1, 1)).unwrap();
    assert_eq!((d.tier, d.action), (Tier::Fast, Action::Decline));
    assert!(d.rule_score.is_nan());
    fast.set(Act::Error);
    let d = e.decide(&txn(e.schema(), 2, 2)).unwrap();
    assert_eq!(
        (d.tier, d.action, d.fallback),
        (Tier::Static, Action::Review, Some(FallbackCause::Error))
    );
    assert_eq!(e.metrics().rules_failed, 2);
}

#[test]
fn circuit_opens_skips_half_opens_and_recloses() {
    let clock = ManualClock::new();
    let fast = Scripted::new(Act::Block, Latency::Unbounded);
    let circuit = CircuitConfig {
        window: Duration::from_secs(10),
        min_calls: 3,
        failure_rate: 0.5,
        open_for: Duration::from_secs(5),
        half_open_probes: 2,
    };
    let e = engine_with(clock.clone(), fast.clone(), circuit, 8);
    let s = e.schema().clone();
    // Three timeouts open the circuit.
    for i in 0..3 {
        let (e2, s2) = (e.clone(), s.clone());
        let h = std::thread::spawn(move || e2.decide(&txn(&s2, i, i)).unwrap());
        fast.wait_started();
        clock.advance(Duration::from_millis(15));
        assert_eq!(h.join().unwrap().fallback, Some(FallbackCause::Timeout));
    }
    assert_eq!(e.fast_circuit(), Some(CircuitState::Open));
    // While open: skipped with zero wait, the model is not called.
    let calls = fast.calls.load(std::sync::atomic::Ordering::SeqCst);
    for i in 10..20 {
        let d = e.decide(&txn(&s, i, i)).unwrap();
        assert_eq!(d.fallback, Some(FallbackCause::CircuitOpen));
        assert_eq!(d.timings.total_ns, 0);
    }
    assert_eq!(fast.calls.load(std::sync::atomic::Ordering::SeqCst), calls);
    // After open_for, probes go through; two successes close it.
    fast.set(Act::Value(0.2));
    fast.release(3);
    clock.advance(Duration::from_secs(5));
    assert_eq!(e.fast_circuit(), Some(CircuitState::HalfOpen));
    for i in 30..32 {
        let d = e.decide(&txn(&s, i, i)).unwrap();
        assert_eq!((d.fallback, d.tier), (None, Tier::Fast));
    }
    assert_eq!(e.fast_circuit(), Some(CircuitState::Closed));
    assert_eq!(e.metrics().fast_circuit, "closed");
}

#[test]
fn hard_rule_overrides_model() {
    let e = Engine::builder(schema())
        .rules(Arc::new(Rules {
            p: 0.2,
            directive: Some(Action::Decline),
        }))
        .fast(Arc::new(ConstantScorer::new(0.01)))
        .build()
        .unwrap();
    let d = e.decide(&txn(e.schema(), 1, 1)).unwrap();
    assert_eq!(
        (d.action, d.tier, d.hard_rule),
        (Action::Decline, Tier::Rules, true)
    );
    assert_eq!(d.model_score, Some(0.01));
    assert_eq!(d.reasons.as_slice()[0].code.name(), "RULE_TEST");
    assert_eq!(e.metrics().hard_rule, 1);
}

#[test]
fn bad_input_is_a_typed_error() {
    let e = Engine::builder(schema()).rules(rules(0.1)).build().unwrap();
    let mut t = txn(e.schema(), 1, 1);
    t.amount = f64::NAN;
    assert!(matches!(
        e.decide(&t),
        Err(DecideError::InvalidField {
            field: "amount",
            ..
        })
    ));
    t.amount = f64::INFINITY;
    assert!(matches!(
        e.decide(&t),
        Err(DecideError::InvalidField {
            field: "amount",
            ..
        })
    ));
    // Missing required feature.
    let mut t = txn(e.schema(), 1, 1);
    t.features.values_mut()[0] = f32::NAN;
    let err = e.decide(&t).unwrap_err();
    assert!(
        matches!(err, DecideError::Features(SchemaError::MissingRequired(ref f)) if f == "amount")
    );
    assert_eq!(err.code(), 202);
    // Infinite feature value.
    let mut t = txn(e.schema(), 1, 1);
    t.features.values_mut()[2] = f32::INFINITY;
    assert!(e
        .decide(&t)
        .unwrap_err()
        .to_string()
        .contains("velocity_1h"));
    // Features from another schema.
    let other = FeatureSchema::builder().numeric("x").build().unwrap();
    let mut t = txn(e.schema(), 1, 1);
    t.features = other.features();
    assert!(matches!(
        e.decide(&t),
        Err(DecideError::SchemaMismatch { .. })
    ));
    // Unknown field at build time.
    let err = Transaction::builder(e.schema())
        .numeric("nope", 1.0)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("nope"));
}

#[test]
fn invalid_config_names_the_key() {
    let cases: Vec<(EngineBuilder, &str)> = vec![
        (
            Engine::builder(schema())
                .rules(rules(0.1))
                .fast_deadline(Duration::ZERO),
            "fast.deadline_ms",
        ),
        (
            Engine::builder(schema())
                .rules(rules(0.1))
                .gray_band(0.7, 0.3),
            "gray.band",
        ),
        (
            Engine::builder(schema())
                .rules(rules(0.1))
                .gray_band(0.5, 0.5),
            "gray.band",
        ),
        (
            Engine::builder(schema())
                .rules(rules(0.1))
                .thresholds(0.8, 0.2),
            "thresholds",
        ),
        (
            Engine::builder(schema())
                .rules(rules(0.1))
                .thresholds(-0.1, 0.2),
            "thresholds.approve_below",
        ),
        (
            Engine::builder(schema())
                .rules(rules(0.1))
                .gray_queue_capacity(0),
            "gray.queue_capacity",
        ),
        (Engine::builder(schema()), "rules.scorer"),
    ];
    for (b, key) in cases {
        let err = b.build().unwrap_err();
        assert_eq!(err.key(), Some(key), "{err}");
        assert!(err.to_string().contains(key));
    }
}

#[test]
fn decide_batch_and_async_agree_with_decide() {
    let s = schema();
    for latency in [Latency::Bounded, Latency::Unbounded] {
        let fast = Scripted::new(Act::Value(0.1), latency);
        *fast.by_entity.lock() = vec![(2, 0.5), (3, 0.95), (4, f32::NAN)];
        // A manual clock that never moves: no path can time out on a busy machine, so
        // the three paths must agree exactly.
        let e = Engine::builder(s.clone())
            .clock(ManualClock::new())
            .rules(rules(0.4))
            .fast(fast)
            .circuit(lenient_circuit())
            .build()
            .unwrap();
        let mut txns: Vec<Transaction> = (1..=5).map(|i| txn(&s, i, i)).collect();
        txns[4].amount = -1.0; // bad input in the middle of a batch
        let single: Vec<_> = txns.iter().map(|t| e.decide(t)).collect();
        let batch = e.decide_batch(&txns);
        let asynced: Vec<_> = txns
            .iter()
            .map(|t| block_on(e.decide_async(t.clone())))
            .collect();
        for ((a, b), c) in single.iter().zip(&batch).zip(&asynced) {
            match (a, b, c) {
                (Ok(a), Ok(b), Ok(c)) => {
                    for x in [b, c] {
                        assert_eq!(
                            (
                                a.txn,
                                a.action,
                                a.tier,
                                a.fallback,
                                a.model_score.map(f32::to_bits)
                            ),
                            (
                                x.txn,
                                x.action,
                                x.tier,
                                x.fallback,
                                x.model_score.map(f32::to_bits)
                            ),
                            "{latency:?}"
                        );
                    }
                }
                (Err(a), Err(b), Err(c)) => {
                    assert_eq!(a, b);
                    assert_eq!(a, c);
                }
                other => panic!("disagree: {other:?}"),
            }
        }
        let actions: Vec<_> = single
            .iter()
            .map(|d| d.as_ref().ok().map(|d| d.action))
            .collect();
        assert_eq!(
            actions,
            vec![
                Some(Action::Approve),
                Some(Action::Review),
                Some(Action::Decline),
                Some(Action::Review),
                None
            ]
        );
        assert_eq!(
            single[3].as_ref().unwrap().fallback,
            Some(FallbackCause::InvalidScore)
        );
    }
}

#[test]
fn wrong_length_batch_is_a_tier_failure() {
    struct Short;
    impl Scorer for Short {
        fn info(&self) -> ScorerInfo {
            ScorerInfo::new("short", "1", Latency::Bounded)
        }
        fn score(&self, _t: &Transaction) -> Result<Score, ScoreError> {
            Ok(Score::new(0.1))
        }
        fn score_batch(&self, _t: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
            out.clear();
            out.push(Score::new(0.1));
            Ok(())
        }
    }
    let s = schema();
    let e = Engine::builder(s.clone())
        .rules(rules(0.8))
        .fast(Arc::new(Short))
        .build()
        .unwrap();
    let txns: Vec<Transaction> = (1..=3).map(|i| txn(&s, i, i)).collect();
    // The broken batch call is a tier failure, retried row by row: each row gets what
    // `decide` answers (the single-row path works), and nothing is misattributed.
    for (d, t) in e.decide_batch(&txns).into_iter().zip(&txns) {
        let d = d.unwrap();
        let one = e.decide(t).unwrap();
        assert_eq!(
            (d.fallback, d.tier, d.model_score),
            (None, Tier::Fast, Some(0.1))
        );
        assert_eq!((d.action, d.score), (one.action, one.score));
    }
}

#[test]
fn shutdown_refuses_later_calls() {
    let e = Engine::builder(schema()).rules(rules(0.1)).build().unwrap();
    assert_eq!(e.shutdown(Shutdown::Abandon), ShutdownReport::default());
    assert_eq!(e.decide(&txn(e.schema(), 1, 1)), Err(DecideError::ShutDown));
    // Idempotent.
    assert_eq!(e.shutdown(Shutdown::Abandon), ShutdownReport::default());
}

#[test]
fn metrics_count_actions_tiers_and_latency() {
    let e = Engine::builder(schema())
        .rules(rules(0.9))
        .fast(Arc::new(ConstantScorer::new(0.1)))
        .build()
        .unwrap();
    for i in 0..100 {
        e.decide(&txn(e.schema(), i, i)).unwrap();
    }
    let m = e.metrics();
    assert_eq!(m.decisions, 100);
    assert_eq!(m.action(Action::Approve), 100);
    assert_eq!(m.tier(Tier::Fast), 100);
    assert_eq!(m.total_latency.count, 100);
    assert!(m.total_latency.p50_ns <= m.total_latency.p99_ns);
    assert!(m.total_latency.p99_ns <= m.total_latency.max_ns);
}

/// A minimal executor: polls on the current thread, parks until woken.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A bounded fast tier whose every scored row takes `per_row` of (injected) time.
struct Slow {
    clock: Arc<ManualClock>,
    per_row: Duration,
}

impl Scorer for Slow {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("slow", "1", Latency::Bounded)
    }
    fn score(&self, _: &Transaction) -> Result<Score, ScoreError> {
        self.clock.advance(self.per_row);
        Ok(Score::new(0.1))
    }
}

#[test]
fn large_batches_get_a_deadline_per_chunk_not_one_for_all() {
    let s = schema();
    let clock = ManualClock::new();
    // 100 µs a row: 1,000 rows are 100 ms, far past the 15 ms deadline as one batch, while
    // a chunk of 64 rows is 6.4 ms.
    let e = Engine::builder(s.clone())
        .clock(clock.clone())
        .rules(rules(0.4))
        .fast(Arc::new(Slow {
            clock: clock.clone(),
            per_row: Duration::from_micros(100),
        }))
        .fast_deadline(Duration::from_millis(15))
        .circuit(lenient_circuit())
        .build()
        .unwrap();
    let txns: Vec<Transaction> = (1..=1000).map(|i| txn(&s, i, i)).collect();
    let out = e.decide_batch(&txns);
    assert_eq!(out.len(), 1000);
    for (i, d) in out.iter().enumerate() {
        let d = d.as_ref().unwrap();
        assert_eq!(d.txn, txns[i].id);
        assert_eq!((d.tier, d.fallback), (Tier::Fast, None), "row {i}");
        // Timed from its chunk's start, not the batch's.
        assert!(
            d.timings.total_ns <= 7_000_000,
            "row {i}: {} ns",
            d.timings.total_ns
        );
    }
}
