//! Benchmark helpers.
