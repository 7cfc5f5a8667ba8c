//! The three fits. Platt and temperature minimise the log loss by Newton's method (two
//! and one parameters: the Hessian is solved in closed form); isotonic regression is
//! pool-adjacent-violators over the sorted scores.

use super::{logit, sigmoid, Calibration, CalibrationError, MAX_KNOTS};

/// Rows of each class a fit needs.
const MIN_PER_CLASS: usize = 10;
const ITERATIONS: usize = 100;

pub(super) fn check_rows(scores: &[f32], labels: &[bool]) -> Result<(), CalibrationError> {
    if scores.len() != labels.len() {
        return Err(CalibrationError::Data(format!(
            "{} scores but {} labels",
            scores.len(),
            labels.len()
        )));
    }
    if let Some(i) = scores.iter().position(|s| !(0.0..=1.0).contains(s)) {
        return Err(CalibrationError::Data(format!(
            "score {} at row {i} is not a number in [0, 1]",
            scores[i]
        )));
    }
    let pos = labels.iter().filter(|&&l| l).count();
    let neg = labels.len() - pos;
    if pos < MIN_PER_CLASS || neg < MIN_PER_CLASS {
        return Err(CalibrationError::Data(format!(
            "{pos} fraud and {neg} legitimate rows; at least {MIN_PER_CLASS} of each are needed"
        )));
    }
    Ok(())
}

/// Platt's smoothed targets: `(N+ + 1) / (N+ + 2)` for positives, `1 / (N- + 2)` for
/// negatives, so a separable sample does not drive the slope to infinity.
fn targets(labels: &[bool]) -> (f64, f64) {
    let pos = labels.iter().filter(|&&l| l).count() as f64;
    let neg = labels.len() as f64 - pos;
    ((pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0))
}

pub(super) fn platt(scores: &[f32], labels: &[bool]) -> Result<Calibration, CalibrationError> {
    let (hi, lo) = targets(labels);
    let z: Vec<f64> = scores.iter().map(|&s| logit(s as f64)).collect();
    let (mut a, mut b) = (1.0f64, 0.0f64);
    for _ in 0..ITERATIONS {
        let (mut ga, mut gb, mut haa, mut hab, mut hbb) = (0.0, 0.0, 1e-9, 0.0, 1e-9);
        for (zi, &l) in z.iter().zip(labels) {
            let p = sigmoid(a * zi + b);
            let t = if l { hi } else { lo };
            let d = p - t;
            let w = p * (1.0 - p);
            ga += d * zi;
            gb += d;
            haa += w * zi * zi;
            hab += w * zi;
            hbb += w;
        }
        let det = haa * hbb - hab * hab;
        if det.abs() < 1e-12 {
            break;
        }
        let da = (hbb * ga - hab * gb) / det;
        let db = (haa * gb - hab * ga) / det;
        a -= da;
        b -= db;
        if da.abs() < 1e-10 && db.abs() < 1e-10 {
            break;
        }
    }
    if !(a.is_finite() && b.is_finite()) || a <= 0.0 {
        return Err(CalibrationError::Data(format!(
            "Platt fit found no increasing map (a={a}): the scores do not rank fraud"
        )));
    }
    Ok(Calibration::Platt { a, b })
}

pub(super) fn temperature(
    scores: &[f32],
    labels: &[bool],
) -> Result<Calibration, CalibrationError> {
    let z: Vec<f64> = scores.iter().map(|&s| logit(s as f64)).collect();
    // Newton on the inverse temperature s: loss(s) = sum log(1 + e^{-y s z}).
    let mut s = 1.0f64;
    for _ in 0..ITERATIONS {
        let (mut g, mut h) = (0.0, 1e-9);
        for (zi, &l) in z.iter().zip(labels) {
            let p = sigmoid(s * zi);
            g += (p - if l { 1.0 } else { 0.0 }) * zi;
            h += p * (1.0 - p) * zi * zi;
        }
        let step = g / h;
        // Keep s positive: halve toward zero instead of crossing it.
        s = if s - step > 0.0 { s - step } else { s / 2.0 };
        if step.abs() < 1e-10 {
            break;
        }
    }
    if !s.is_finite() || s <= 0.0 {
        return Err(CalibrationError::Data(format!(
            "temperature fit diverged (1/t={s})"
        )));
    }
    Ok(Calibration::Temperature { t: 1.0 / s })
}

pub(super) fn isotonic(scores: &[f32], labels: &[bool]) -> Result<Calibration, CalibrationError> {
    let mut rows: Vec<(f32, f64)> = scores
        .iter()
        .zip(labels)
        .map(|(&s, &l)| (s, if l { 1.0 } else { 0.0 }))
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Blocks of (x_min, x_max, sum_y, n); equal scores start in one block.
    let mut blocks: Vec<(f32, f32, f64, f64)> = Vec::new();
    for (x, y) in rows {
        match blocks.last_mut() {
            Some(b) if b.1 == x => {
                b.2 += y;
                b.3 += 1.0;
            }
            _ => blocks.push((x, x, y, 1.0)),
        }
        // Pool adjacent violators: merge while the previous block's mean exceeds the last.
        while blocks.len() > 1 {
            let n = blocks.len();
            let (prev, last) = (blocks[n - 2], blocks[n - 1]);
            if prev.2 / prev.3 <= last.2 / last.3 {
                break;
            }
            blocks[n - 2] = (prev.0, last.1, prev.2 + last.2, prev.3 + last.3);
            blocks.pop();
        }
    }
    // Knots at each block's ends, so the map is flat inside a block and linear between.
    let mut x = Vec::with_capacity(blocks.len() * 2);
    let mut y = Vec::with_capacity(blocks.len() * 2);
    for (lo, hi, sum, n) in blocks {
        let v = (sum / n) as f32;
        for k in [lo, hi] {
            if x.last().is_none_or(|&l| k > l) {
                x.push(k);
                y.push(v);
            }
        }
    }
    thin(&mut x, &mut y);
    Ok(Calibration::Isotonic { x, y })
}

/// Keeps at most [`MAX_KNOTS`] knots by dropping every other interior one (the map
/// stays monotone; a fit this fine means far more rows than a calibration needs).
fn thin(x: &mut Vec<f32>, y: &mut Vec<f32>) {
    while x.len() > MAX_KNOTS {
        let n = x.len();
        let keep = |i: usize| i == 0 || i == n - 1 || i.is_multiple_of(2);
        let (nx, ny): (Vec<f32>, Vec<f32>) = x
            .iter()
            .zip(y.iter())
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, (a, b))| (*a, *b))
            .unzip();
        *x = nx;
        *y = ny;
    }
}
