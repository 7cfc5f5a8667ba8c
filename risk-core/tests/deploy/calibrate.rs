//! Calibration: fitted on labelled scores, ECE before and after on held-out rows, and
//! applied in the decision path of a deployed version.

use super::*;
use risk_core::calibrate::{Calibration, CalibrationReport, Method};
use risk_core::deploy::{Candidate, Target};

/// A seeded generator (SplitMix64), so the data set is the same everywhere.
struct Rng(u64);
impl Rng {
    fn f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` rows: a true fraud probability, a label drawn from it, and an overconfident,
/// shifted model score (what a model trained on rebalanced data reports).
fn rows(seed: u64, n: usize, shift: f64) -> (Vec<f32>, Vec<bool>) {
    let mut r = Rng(seed);
    let (mut s, mut l) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let p = 0.002 + 0.5 * r.f64().powi(3);
        let z = (p / (1.0 - p)).ln();
        let score = 1.0 / (1.0 + (-(2.2 * z + shift)).exp());
        s.push(score as f32);
        l.push(r.f64() < p);
    }
    (s, l)
}

#[test]
fn every_method_cuts_the_expected_calibration_error_on_held_out_rows() {
    // Overconfident and shifted scores; temperature scaling only rescales the logit, so
    // it gets scores that are overconfident alone (no shift).
    for m in [Method::Platt, Method::Isotonic, Method::Temperature] {
        let shift = if m == Method::Temperature { 0.0 } else { 2.0 };
        let (train_s, train_l) = rows(1, 40_000, shift);
        let (test_s, test_l) = rows(2, 40_000, shift);
        let c = Calibration::fit(m, &train_s, &train_l).unwrap();
        let r = CalibrationReport::evaluate(&c, &test_s, &test_l);
        println!("{r}\n");
        assert!(
            r.before.ece > 0.05,
            "the raw scores are miscalibrated: {}",
            r.before.ece
        );
        assert!(r.after.ece < 0.02, "{m:?}: ECE {} after", r.after.ece);
        assert!(r.after.brier < r.before.brier);
    }
    // Fitting needs both classes.
    assert!(Calibration::fit(Method::Platt, &[0.5; 100], &[false; 100]).is_err());
    assert!(Calibration::fit(Method::Platt, &[f32::NAN; 100], &[true; 100]).is_err());
}

#[test]
fn a_deployed_calibration_applies_before_the_thresholds_and_is_its_own_version() {
    let clock = ManualClock::new();
    let raw = Model::new("1", 0.8, 0.0);
    let e = engine(raw.clone(), &clock);
    let mut next = 0;
    run(&e, &mut next, 600, 1000);
    let cal = Calibration::Platt { a: 1.0, b: -0.3 };
    let mut plan = immediate();
    plan.gate.max_mean_abs_diff = 0.5;
    plan.gate.min_action_agreement = 0.0;
    e.deploy(
        Target::Fast,
        Candidate::scorer(raw.clone()).with_calibration(cal.clone()),
        plan,
    )
    .unwrap();
    let v = e.versions().fast.unwrap();
    assert_eq!(v.name(), "amount-model");
    assert_ne!(
        v.hash(),
        raw.info().content_hash,
        "calibrated = another version"
    );
    let s = e.schema().clone();
    for id in 0..200 {
        let t = txn(&s, 50_000 + id, 1000);
        let d = e.decide(&t).unwrap();
        let want = cal.apply(raw.score(&t).unwrap().probability);
        assert_eq!(d.model_score, Some(want));
        assert_eq!(
            d.action,
            Policy::default().threshold(want, d.threshold_shift)
        );
    }
    // A calibration is refused on a tier it does not apply to.
    assert!(e
        .deploy(
            Target::Rules,
            Candidate::scorer(Arc::new(AmountRules(0.8))).with_calibration(cal),
            immediate()
        )
        .is_err());
}
