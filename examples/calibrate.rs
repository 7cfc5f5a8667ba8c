//! Fits a score calibration from labelled scores and reports its effect on held-out rows.
//!
//! ```text
//! cargo run --release --example calibrate -- SCORES.csv [--method platt|isotonic|temperature]
//!                                            [--holdout 0.3] [--out calibration.json]
//! cargo run --release --example calibrate -- --demo      # the fast model on synthetic rows
//! ```
//! `SCORES.csv` has a header and the columns `score,label` (`label` 1 = fraud, 0 = not).
//! Rows are split by position (the last `--holdout` share is held out, so a time-ordered
//! file is validated on its most recent rows). The report shows the reliability table and
//! the expected calibration error before and after; `--out` writes the map as JSON: the
//! `calibration` of a deploy candidate (`[calibration]` in its TOML) or `fast.calibration`
//! in `risk.toml`.

use risk_core::calibrate::{Calibration, CalibrationReport, Method};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let method: Method = opt("--method").as_deref().unwrap_or("platt").parse()?;
    let holdout: f64 = opt("--holdout").map_or(Ok(0.3), |h| h.parse())?;
    if !(0.05..=0.95).contains(&holdout) {
        return Err("--holdout must be between 0.05 and 0.95".into());
    }
    let (scores, labels) = match args.first().map(String::as_str) {
        Some("--demo") => demo()?,
        Some(path) if !path.starts_with("--") => read(path)?,
        _ => {
            return Err(
                "usage: calibrate SCORES.csv | --demo [--method m] [--holdout f] [--out file]"
                    .into(),
            )
        }
    };
    let cut = ((scores.len() as f64) * (1.0 - holdout)) as usize;
    let cal = Calibration::fit(method, &scores[..cut], &labels[..cut])?;
    let report = CalibrationReport::evaluate(&cal, &scores[cut..], &labels[cut..]);
    let json = cal.to_json();
    let shown = match &cal {
        Calibration::Isotonic { x, .. } if json.len() > 200 => {
            format!("isotonic, {} knots", x.len())
        }
        _ => json.clone(),
    };
    println!("fitted on {cut} rows: {shown}\n{report}");
    if let Some(out) = opt("--out") {
        std::fs::write(&out, &json)?;
        println!("wrote {out}");
    }
    Ok(())
}

fn read(path: &str) -> Result<(Vec<f32>, Vec<bool>), Box<dyn Error>> {
    let text = std::fs::read_to_string(path)?;
    let (mut s, mut l) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().skip(1) {
        let mut cols = line.split(',');
        let (Some(a), Some(b)) = (cols.next(), cols.next()) else {
            return Err(format!("{path}:{}: expected score,label", i + 1).into());
        };
        let score: f32 = a
            .trim()
            .parse()
            .map_err(|e| format!("{path}:{}: score: {e}", i + 1))?;
        let label = match b.trim() {
            "1" | "true" => true,
            "0" | "false" => false,
            other => return Err(format!("{path}:{}: label {other:?} is not 0 or 1", i + 1).into()),
        };
        s.push(score);
        l.push(label);
    }
    Ok((s, l))
}

/// The fast model's scores on synthetic rows (seed 42).
fn demo() -> Result<(Vec<f32>, Vec<bool>), Box<dyn Error>> {
    use risk_core::synth::{generate, schema, SynthConfig};
    use risk_core::Scorer;
    let model = std::sync::Arc::new(risk_gpu::trees::XgbModel::from_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/xgb_fraud.json"
    ))?);
    let scorer = risk_gpu::trees::XgbScorer::new(model, &schema(), f32::INFINITY, 0)?;
    Ok(generate(&SynthConfig::new(42, 60_000))
        .iter()
        .map(|r| {
            (
                scorer.score(&r.txn).map_or(0.0, |s| s.probability),
                r.is_fraud,
            )
        })
        .unzip())
}
