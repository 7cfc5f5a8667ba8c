//! Faults between the tier and a real MLServer, injected by `FaultProxy`: every call
//! returns within its budget, through the engine's fallback, and the counters say why.

use super::*;
use risk_core::{ConstantScorer, Engine, FallbackCause, ScoreError, Tier};
use risk_gpu::remote::{BreakerConfig, BreakerState, Fault, FaultProxy, HedgeConfig, RetryConfig};

fn proxied(f: impl FnOnce(&mut KServeConfig)) -> (FaultProxy, Arc<RemoteScorer>) {
    let p = FaultProxy::start(mlserver_addr()).unwrap();
    let mut c = cfg(&[p.url()]);
    c.breaker = BreakerConfig {
        failures: 3,
        open_for: Duration::from_secs(3600),
    };
    c.retry = RetryConfig {
        max: 1,
        min_left: Duration::from_millis(1),
    };
    f(&mut c);
    let s = load(&c);
    (p, s)
}

const BUDGET: Duration = Duration::from_secs(30);

/// Ten calls under `fault`; returns (proxy requests, stats delta, errors).
fn ten_calls(
    fault: Fault,
) -> (
    u64,
    risk_gpu::remote::RemoteStats,
    Vec<ScoreError>,
    Arc<RemoteScorer>,
) {
    let (p, s) = proxied(|_| {});
    let t = txns(&reference(), 1).remove(0);
    let (r0, s0) = (p.requests(), s.stats());
    p.set(fault);
    let errs: Vec<ScoreError> = (0..10)
        .map(|_| {
            s.score_within(&t, BUDGET)
                .expect_err("fault must fail the call")
        })
        .collect();
    let s1 = s.stats();
    let mut d = s1;
    d.calls -= s0.calls;
    d.attempts -= s0.attempts;
    d.failed -= s0.failed;
    (p.requests() - r0, d, errs, s)
}

#[test]
fn retryable_faults_are_retried_then_the_breaker_opens() {
    for fault in [
        Fault::Status(500),
        Fault::Malformed,
        Fault::Truncated,
        Fault::Drop,
    ] {
        let (sent, d, errs, s) = ten_calls(fault);
        // Call 1: attempt + retry fail (2 of 3); call 2: the third failure opens the
        // breaker, no retry can go out; calls 3-10 send nothing.
        assert_eq!(sent, 3, "{fault:?}: {d:?}");
        assert_eq!((d.calls, d.failed, d.attempts), (10, 10, 3), "{fault:?}");
        assert_eq!((d.retries, d.no_endpoint), (1, 8), "{fault:?}");
        assert_eq!(d.failures.total(), 3, "{fault:?}");
        let by_kind = match fault {
            Fault::Status(_) => d.failures.status,
            Fault::Malformed => d.failures.malformed,
            Fault::Truncated => d.failures.body + d.failures.transport,
            _ => d.failures.transport,
        };
        assert_eq!(by_kind, 3, "{fault:?}: {:?}", d.failures);
        assert!(errs.iter().all(|e| matches!(e, ScoreError::Failed(_))));
        assert!(format!("{}", errs[9]).contains("circuit breaker is open"));
        let ep = &s.endpoints()[0];
        assert_eq!((ep.breaker, ep.opens), (BreakerState::Open, 1), "{fault:?}");
    }
}

#[test]
fn a_wrong_shape_is_not_retried() {
    let (sent, d, errs, _) = ten_calls(Fault::WrongShape);
    assert_eq!(sent, 3);
    assert_eq!((d.attempts, d.retries, d.no_endpoint), (3, 0, 7));
    assert_eq!(d.failures.shape, 3);
    assert!(format!("{}", errs[0]).contains("shape"), "{}", errs[0]);
}

#[test]
fn a_4xx_is_not_retried_and_a_5xx_once_is() {
    let (p, s) = proxied(|_| {});
    let t = txns(&reference(), 1).remove(0);
    let want = want(&native(), &t);
    p.next(1, Fault::Status(503));
    let got = s.score_within(&t, BUDGET).unwrap().probability;
    assert!((got - want).abs() <= 1e-6);
    let st = s.stats();
    assert_eq!((st.retries, st.failures.status, st.ok), (1, 1, 1));
    p.next(1, Fault::Status(400));
    let e = s.score_within(&t, BUDGET).unwrap_err();
    assert!(e.to_string().contains("HTTP 400"), "{e}");
    assert_eq!(s.stats().retries, 1, "a 400 would fail again");
    // No retry when less than min_left of the budget is left.
    let (p, s) = proxied(|c| c.retry.min_left = Duration::from_secs(3600));
    p.next(1, Fault::Status(500));
    assert!(s.score_within(&t, BUDGET).is_err());
    assert_eq!(s.stats().retries, 0);
}

#[test]
fn a_slow_server_costs_the_budget_and_no_more() {
    let (p, s) = proxied(|_| {});
    let t = txns(&reference(), 1).remove(0);
    p.set(Fault::Delay(Duration::from_secs(600)));
    for _ in 0..3 {
        let e = s.score_within(&t, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, ScoreError::Cancelled), "{e}");
    }
    let st = s.stats();
    assert_eq!(
        (st.deadline, st.failures.timeout, st.retries),
        (3, 3, 0),
        "{st:?}"
    );
    // Attempts that ran out of budget are failures of their endpoint: its breaker opened.
    assert_eq!(s.endpoints()[0].breaker, BreakerState::Open);
    let e = s.score_within(&t, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(e, ScoreError::Failed(_)), "{e}");
    assert_eq!(
        p.requests(),
        4 + 2 + 3,
        "load GETs, warm-up, then 3; none once open"
    );
}

#[test]
fn a_hedge_answers_when_the_first_attempt_stalls() {
    let (p, s) = proxied(|c| {
        c.hedge = Some(HedgeConfig {
            percentile: 0.5,
            min_delay: Duration::from_millis(1),
            max_extra: 1.0,
            min_samples: 10,
        })
    });
    let native = native();
    let all = txns(&reference(), 40);
    for t in &all[..20] {
        s.score_within(t, BUDGET).unwrap();
    }
    let s0 = s.stats();
    p.next(1, Fault::Delay(Duration::from_secs(600)));
    // Without the hedge this call would wait out its 30 s budget and fail.
    let got = s.score_within(&all[20], BUDGET).unwrap().probability;
    assert!((got - want(&native, &all[20])).abs() <= 1e-6);
    let st = s.stats();
    assert_eq!(st.hedges - s0.hedges, 1);
    assert_eq!(st.hedge_wins - s0.hedge_wins, 1);
    assert_eq!(
        st.cancelled - s0.cancelled,
        1,
        "the stalled attempt was aborted"
    );
    assert_eq!(st.failures.total(), 0, "a lost race is not a failure");
    assert_eq!(s.endpoints()[0].breaker, BreakerState::Closed);
}

#[test]
fn hedges_stay_within_their_extra_load() {
    let (p, s) = proxied(|c| {
        c.hedge = Some(HedgeConfig {
            percentile: 0.5,
            min_delay: Duration::from_micros(1),
            max_extra: 0.1,
            min_samples: 1,
        })
    });
    let all = txns(&reference(), 100);
    s.score_within(&all[0], BUDGET).unwrap();
    // Every other request stalls 20 ms past a ~ms median: each call wants a hedge.
    p.set(Fault::Tail {
        share: 0.5,
        delay: Duration::from_millis(20),
    });
    for t in &all {
        s.score_within(t, BUDGET).unwrap();
    }
    let st = s.stats();
    assert!(st.hedges <= 11, "at most 10% of 101 calls: {st:?}");
    assert!(st.hedges >= 1, "{st:?}");
    assert_eq!(st.attempts, st.calls + st.hedges);
}

#[test]
fn calls_move_to_the_healthy_replica() {
    let bad = FaultProxy::start(mlserver_addr()).unwrap();
    let good = FaultProxy::start(mlserver_addr()).unwrap();
    let mut c = cfg(&[bad.url(), good.url()]);
    c.breaker.failures = 2;
    c.breaker.open_for = Duration::from_secs(3600);
    // The good replica is the slower one at load, so selection tries the bad one first.
    // 300 ms: on a loaded machine the bad replica's first (cold) requests took over the
    // 30 ms this was, and selection never tried it (seen in CI).
    good.set(Fault::Delay(Duration::from_millis(300)));
    let s = load(&c);
    good.set(Fault::Pass);
    bad.set(Fault::Drop);
    let native = native();
    for t in txns(&reference(), 30) {
        // A failed attempt on the bad replica is retried on the good one.
        let p = s.score_within(&t, BUDGET).unwrap().probability;
        assert!((p - want(&native, &t)).abs() <= 1e-6);
    }
    let eps = s.endpoints();
    assert_eq!(eps[0].breaker, BreakerState::Open);
    assert_eq!(eps[0].failures, 2, "{eps:?}");
    assert_eq!(eps[1].failures, 0);
    assert_eq!(s.stats().ok, 30);
    assert_eq!(s.stats().retries, 2);
}

fn engine(fast: Arc<RemoteScorer>, deadline: Duration) -> Engine {
    Engine::builder(schema())
        .rules(Arc::new(ConstantScorer::new(0.2)))
        .fast(fast)
        .fast_deadline(deadline)
        .build()
        .unwrap()
}

#[test]
fn the_engine_decides_through_its_fallback_whatever_the_server_does() {
    let t = txns(&reference(), 1).remove(0);
    let cases = [
        (Fault::Status(500), FallbackCause::Error),
        (Fault::Malformed, FallbackCause::Error),
        (Fault::Truncated, FallbackCause::Error),
        (Fault::WrongShape, FallbackCause::Error),
        (Fault::Drop, FallbackCause::Error),
        (
            Fault::Delay(Duration::from_secs(600)),
            FallbackCause::Timeout,
        ),
    ];
    for (fault, cause) in cases {
        let (p, s) = proxied(|_| {});
        // Long enough that the first decision is the model's on a loaded machine.
        let deadline = if cause == FallbackCause::Timeout {
            Duration::from_secs(2)
        } else {
            BUDGET
        };
        let e = engine(s.clone(), deadline);
        let d = e.decide(&t).unwrap();
        assert_eq!((d.tier, d.fallback), (Tier::Fast, None), "{fault:?} before");
        p.set(fault);
        let d = e.decide(&t).unwrap();
        assert_eq!(d.tier, Tier::Rules, "{fault:?}");
        assert_eq!(d.fallback, Some(cause), "{fault:?}");
        assert_eq!((d.rule_score, d.model_score), (0.2, None), "{fault:?}");
    }
}
