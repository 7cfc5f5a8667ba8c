//! Writes synthetic transactions as CSV for the training tools in `tools/`: raw
//! transactions with their velocity features computed by the SDK's entity state
//! (`synth::state_config()`), exactly as an engine built with it computes them at serving.
//!
//! ```text
//! cargo run --release --example export_synth -- OUT.csv ROWS SEED [--raw]
//! ```
//! Default: the documented CSV of `risk_core::synth::write_csv` (categoricals as text).
//! `--raw`: one column per schema slot holding the exact `f32` a model sees (category ids,
//! empty = missing), then `is_fraud`: what the training scripts read, so a model trained
//! on it sees the very values the engine passes at serving time.

use risk_core::synth::{generate, schema, write_csv, SynthConfig};
use std::io::{BufWriter, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: export_synth OUT.csv ROWS SEED [--raw]".into());
    }
    let rows = generate(&SynthConfig::new(args[3].parse()?, args[2].parse()?));
    let mut w = BufWriter::new(std::fs::File::create(&args[1])?);
    if args.get(4).map(String::as_str) == Some("--raw") {
        let s = schema();
        let names: Vec<&str> = s.fields().iter().map(|f| f.name.as_str()).collect();
        writeln!(w, "{},is_fraud", names.join(","))?;
        for r in &rows {
            let vals: Vec<String> = r
                .txn
                .features
                .values()
                .iter()
                .map(|v| {
                    if v.is_nan() {
                        String::new()
                    } else {
                        format!("{v:?}")
                    }
                })
                .collect();
            writeln!(w, "{},{}", vals.join(","), r.is_fraud as u8)?;
        }
    } else {
        write_csv(&rows, &mut w)?;
    }
    w.flush()?;
    eprintln!("wrote {} rows to {}", rows.len(), args[1]);
    Ok(())
}
