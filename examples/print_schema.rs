//! Prints the synthetic schema as the `[schema]` table of `risk.toml`
//! (`cargo run --release --example print_schema`).

fn main() {
    print!("{}", risk_core::synth::schema().to_toml());
}
