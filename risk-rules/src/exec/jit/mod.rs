//! Native code for a linked rule program (feature `jit`). On x86-64 System V, [`compile`]
//! uses the templates of `x64` (dynasm-rs: same edges, same semantics, ~8x faster to emit
//! for the mixed set and faster to run, BENCHMARKS.md [12]); Cranelift (`cranelift`)
//! serves every other host and `RISK_RULES_JIT=cranelift`.
//!
//! Why: the branch-program interpreter ([`crate::exec::branch`]) dispatches every test
//! through one `match` and picks every successor at one branch site, so on varied rows the
//! processor cannot predict either; a mixed 100-rule set cost ~2 µs per row that way
//! against ~0.3 µs for the same rules written as a Rust if-chain (BENCHMARKS.md, [12]).
//! Emitting each node as its own compare-and-branch gives every test its own branch
//! site, as compiled code has: the same program, the same edges, no interpretation.
//!
//! Files, lowest first: `abi` (the emitted function's signature, the call-back, what
//! compiles natively: shared by both generators), `x64` and `cranelift` (the generators,
//! which do not know each other), `native` ([`Native`]: the code's memory and the call).
//! Unsafe code lives in `abi` and `native` only.

mod abi;
mod cranelift;
mod native;
#[cfg(all(target_arch = "x86_64", unix))]
mod x64;

pub use native::{compile, compile_cranelift, Native};
