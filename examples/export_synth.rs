//! Writes synthetic transactions as CSV for the training tools in `tools/`: raw
//! transactions with their velocity features computed by the SDK's entity state
//! (`synth::state_config()`), exactly as an engine built with it computes them at serving.
//!
//! ```text
//! cargo run --release --example export_synth -- OUT.csv ROWS SEED [--raw] [--sequences]
//! ```
//! Default: the documented CSV of `risk_core::synth::write_csv` (categoricals as text).
//! `--raw`: one column per schema slot holding the exact `f32` a model sees (category ids,
//! empty = missing), then `is_fraud`: what the training scripts read, so a model trained
//! on it sees the very values the engine passes at serving time.
//! `--realistic`: the realistic preset (`SynthConfig::realistic`) instead of the easy one.
//! `--sequences` (with `--raw`): also the `card_seq` sequence of every row
//! (`synth::sequence_def()`, computed by entity state with the features) as
//! `OUT.seq.f32` (rows × N × F little-endian f32, padding 0) and `OUT.seqlen.u32` (rows
//! held per row), plus the card and event time of every row in `OUT.keys.csv`
//! (`entity,timestamp_ms`) for a reference built from the raw stream.

use risk_core::synth::{compute_sequences, generate, generate_raw, schema, write_csv, SynthConfig};
use std::io::{BufWriter, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err(
            "usage: export_synth OUT.csv ROWS SEED [--raw] [--realistic] [--sequences]".into(),
        );
    }
    let (seed, n) = (args[3].parse()?, args[2].parse()?);
    let cfg = if args.iter().any(|a| a == "--realistic") {
        SynthConfig::realistic(seed, n)
    } else {
        SynthConfig::new(seed, n)
    };
    let sequences = args.iter().any(|a| a == "--sequences");
    let rows = if sequences {
        let mut rows = generate_raw(&cfg);
        compute_sequences(&mut rows);
        rows
    } else {
        generate(&cfg)
    };
    if sequences {
        let mut seq = BufWriter::new(std::fs::File::create(format!("{}.seq.f32", args[1]))?);
        let mut len = BufWriter::new(std::fs::File::create(format!("{}.seqlen.u32", args[1]))?);
        let mut keys = BufWriter::new(std::fs::File::create(format!("{}.keys.csv", args[1]))?);
        writeln!(keys, "entity,timestamp_ms")?;
        for r in &rows {
            let s = r
                .txn
                .sequences
                .get("card_seq")
                .ok_or("a row without its sequence")?;
            for v in s.values() {
                seq.write_all(&v.to_le_bytes())?;
            }
            len.write_all(&(s.len() as u32).to_le_bytes())?;
            writeln!(keys, "{},{}", r.txn.entity.0, r.txn.timestamp_ms)?;
        }
        seq.flush()?;
        len.flush()?;
        keys.flush()?;
    }
    let mut w = BufWriter::new(std::fs::File::create(&args[1])?);
    if args.iter().any(|a| a == "--raw") {
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
