//! Shared pieces of the examples (placeholder until the example helpers grow).
