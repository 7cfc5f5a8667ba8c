//! Times native XGBoost scoring of the committed model on its reference rows (a quick
//! look without criterion: `cargo run --release --example tree_speed`).

use risk_gpu::trees::XgbModel;
use std::time::Instant;

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models");
    let m = XgbModel::from_file(dir.join("xgb_fraud.json")).unwrap();
    let bytes = std::fs::read(dir.join("xgb_ref_features.f32")).unwrap();
    let x: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let n = x.len() / 18;
    let rows: Vec<&[f32]> = (0..n).map(|i| &x[i * 18..(i + 1) * 18]).collect();
    println!(
        "trees {} max depth {}",
        m.ensemble().trees.len(),
        m.ensemble().max_depth()
    );
    let mut s = 0.0;
    // The SIMD kernel vs the scalar traversal, interleaved pass by pass (this VM's
    // speed drifts by tens of percent within seconds; only paired ratios mean much).
    let (mut ratios, mut simd_ns, mut scalar_ns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..60 {
        let t = Instant::now();
        for r in &rows {
            s += m.margin(r);
        }
        let a = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for r in &rows {
            s += m.margin_scalar(r);
        }
        let b = t.elapsed().as_nanos() as f64 / n as f64;
        ratios.push(a / b);
        simd_ns.push(a);
        scalar_ns.push(b);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "paired, 60 passes: margin {:.0} ns/row, scalar only {:.0} ns/row, median ratio {:.3} (kernel {})",
        median(&mut simd_ns),
        median(&mut scalar_ns),
        median(&mut ratios),
        m.kernel()
    );
    for _ in 0..3 {
        let t = Instant::now();
        for r in &rows {
            s += m.margin(r);
        }
        println!(
            "single: {:.0} ns/row",
            t.elapsed().as_nanos() as f64 / n as f64
        );
        let t = Instant::now();
        for r in &rows {
            s += m.margin_scalar(r);
        }
        println!(
            "single, scalar only: {:.0} ns/row (kernel {})",
            t.elapsed().as_nanos() as f64 / n as f64,
            m.kernel()
        );
        let mut out = vec![0f32; 64];
        let t = Instant::now();
        for c in rows.chunks(64) {
            m.predict_batch(c, &mut out[..c.len()]);
        }
        println!(
            "batch64: {:.0} ns/row",
            t.elapsed().as_nanos() as f64 / n as f64
        );
        let mut phi = Vec::new();
        let t = Instant::now();
        for r in rows.iter().take(500) {
            m.contributions(r, &mut phi);
        }
        println!(
            "shap (tables): {:.1} us/row",
            t.elapsed().as_nanos() as f64 / 500.0 / 1e3
        );
        let t = Instant::now();
        for r in rows.iter().take(500) {
            m.contributions_recursive(r, &mut phi);
        }
        println!(
            "shap (recursive): {:.1} us/row",
            t.elapsed().as_nanos() as f64 / 500.0 / 1e3
        );
    }
    std::hint::black_box(s);
}
