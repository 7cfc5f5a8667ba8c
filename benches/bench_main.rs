//! All criterion benchmarks: `cargo bench -p risk-benches --bench bench_main`.
//! One module per area; peers and baselines are measured in the same run.

use criterion::{criterion_group, criterion_main};

mod audit;
mod deploy;
mod engine;
mod ffi;
mod llm;
mod observe;
mod quant;
mod rules;
mod rules_mixed;
mod rules_mixed_ifchain;
mod state;
mod trees;

criterion_group!(
    name = benches;
    config = engine::config();
    targets = engine::overhead, engine::thread_hop, engine::fallback, rules::evaluate, rules_mixed::evaluate,
        trees::native_vs_ort, ffi::overhead
);
criterion_group!(
    name = audit;
    config = engine::config();
    targets = audit::decide, audit::throughput, audit::writer
);
criterion_group!(
    name = deep;
    config = engine::config();
    targets = llm::prefill, quant::kernels, quant::prefill
);
criterion_group!(
    name = lifecycle;
    config = engine::config();
    targets = deploy::decide, observe::decide, observe::throughput
);
criterion_group!(
    name = state;
    config = engine::config();
    targets = state::decide, state::throughput
);
criterion_group!(
    name = state_redis;
    config = engine::config();
    targets = state::redis
);
criterion_main!(benches, deep, audit, lifecycle, state, state_redis);
