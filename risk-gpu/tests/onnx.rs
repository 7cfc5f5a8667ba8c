//! ONNX Runtime: probabilities equal xgboost's within 1e-5; the engine's deadline
//! terminates a run.

use crate::common::*;
use risk_core::synth::schema;
use risk_core::{Engine, FallbackCause, PoolConfig, ScoreError, Scorer, Transaction};
use risk_gpu::onnx::{OnnxConfig, OnnxError, OnnxScorer};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cfg(file: &str) -> OnnxConfig {
    let mut c = OnnxConfig::new(models().join(file));
    c.runtime = Some(onnxruntime());
    c
}

/// The slow model without warm-up (a warm-up run would be terminated too).
fn slow() -> OnnxScorer {
    let mut c = cfg("slow_classifier.onnx");
    c.warmup = false;
    OnnxScorer::load(&c, &schema()).unwrap()
}

fn txn(r: &Reference, i: usize) -> Transaction {
    ref_txn(r, i)
}

#[test]
fn onnx_probabilities_equal_xgboost() {
    let r = reference();
    let s = schema();
    let m = OnnxScorer::load(&cfg("xgb_fraud.onnx"), &s).unwrap();
    assert!(m.placement().starts_with("cpu"), "{}", m.placement());
    m.warmup().unwrap();
    let txns: Vec<Transaction> = (0..r.rows).map(|i| txn(&r, i)).collect();
    let mut worst = 0f32;
    for (c, chunk) in txns.chunks(1000).enumerate() {
        let refs: Vec<&Transaction> = chunk.iter().collect();
        let mut out = Vec::new();
        m.score_batch(&refs, &mut out).unwrap();
        assert_eq!(out.len(), refs.len());
        for (k, o) in out.iter().enumerate() {
            worst = worst.max((o.probability - r.probs[c * 1000 + k]).abs());
        }
    }
    assert!(worst <= 1e-5, "max |onnx - xgboost| = {worst:e}");
    // Single rows agree with batches.
    for (t, want) in txns.iter().zip(&r.probs).take(50) {
        let p = m.score(t).unwrap().probability;
        assert!((p - want).abs() <= 1e-5);
    }
}

#[test]
fn a_slow_model_is_terminated_at_the_budget() {
    let slow = slow();
    let r = reference();
    let t = txn(&r, 0);
    let start = Instant::now();
    let e = slow
        .score_within(&t, Duration::from_millis(100))
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(e, ScoreError::Cancelled);
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // The session serves the next run (and that one is cancelled at its own budget).
    for _ in 0..3 {
        let start = Instant::now();
        assert_eq!(
            slow.score_within(&t, Duration::from_millis(30)),
            Err(ScoreError::Cancelled)
        );
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}

#[test]
fn the_engine_deadline_terminates_the_run_and_frees_the_worker() {
    let s = schema();
    let slow = Arc::new(slow());
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(risk_core::ConstantScorer::new(0.2)))
        .fast(slow)
        .fast_deadline(Duration::from_millis(50))
        .pool_config(PoolConfig {
            fast_workers: 1,
            spin: Duration::ZERO,
            async_workers: 1,
            ..Default::default()
        })
        .circuit(risk_core::CircuitConfig {
            min_calls: 1_000,
            ..Default::default()
        })
        .build()
        .unwrap();
    let r = reference();
    for i in 0..3 {
        let d = engine.decide(&txn(&r, i)).unwrap();
        // With one worker, a run that kept going (2^40 loop iterations) would leave the
        // worker stuck and the next call Saturated; terminated runs free it.
        assert_eq!(d.fallback, Some(FallbackCause::Timeout), "call {i}");
        assert!(d.timings.total_ns < 1_000_000_000);
        // The worker comes back: its run was terminated, not left looping.
        let start = Instant::now();
        while engine.metrics().fast_workers_busy > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "run {i} was not terminated"
            );
            std::thread::yield_now();
        }
    }
}

#[test]
fn bad_models_are_typed_errors() {
    let s = schema();
    // A warm-up that cannot finish within its budget fails the engine build.
    let mut c = cfg("slow_classifier.onnx");
    c.warmup_budget = Duration::from_millis(50);
    let m = OnnxScorer::load(&c, &s).unwrap();
    assert_eq!(m.warmup(), Err(ScoreError::Cancelled));
    let mut c = cfg("xgb_fraud.json"); // not an ONNX file
    assert!(matches!(
        OnnxScorer::load(&c, &s),
        Err(OnnxError::Load { .. })
    ));
    c = cfg("no-such.onnx");
    assert!(matches!(
        OnnxScorer::load(&c, &s),
        Err(OnnxError::Load { .. })
    ));
    c = cfg("xgb_fraud.onnx");
    c.output = Some("nope".into());
    assert!(matches!(OnnxScorer::load(&c, &s), Err(OnnxError::Model(_))));
    c = cfg("xgb_fraud.onnx");
    c.features = Some(vec!["amount".into()]);
    let e = OnnxScorer::load(&c, &s).unwrap_err();
    assert!(e.to_string().contains("18 features, 1 are mapped"), "{e}");
}

/// `device`: `Cpu` stays on the CPU whatever the build; `Cuda` is strict, so a build or
/// machine that cannot place the session there refuses the load instead of silently
/// serving from the CPU.
#[test]
fn an_explicit_device_places_the_session_or_refuses_the_load() {
    let mut c = cfg("xgb_fraud.onnx");
    c.device = Some(risk_gpu::Device::Cpu);
    let m = OnnxScorer::load(&c, &schema()).unwrap();
    assert_eq!(m.placement(), "cpu");
    c.device = Some(risk_gpu::Device::Cuda(0));
    match OnnxScorer::load(&c, &schema()) {
        // Only a CUDA build on a machine with a GPU and the CUDA provider gets here.
        Ok(m) => assert_eq!(m.placement(), "cuda:0"),
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, OnnxError::Load { .. }), "{msg}");
            assert!(msg.contains("cuda:0"), "{msg}");
        }
    }
}
