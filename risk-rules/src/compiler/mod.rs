//! Compiler: typed tree → flat stack program over feature slots. Rule conditions run as
//! branch programs ([`crate::exec::branch`]); this stack program serves
//! [`crate::expression::Expression`] and the leaves a branch program has no typed test for.
//!
//! Comparisons of a slot with a constant, and membership of a slot in a constant set,
//! compile to single fused instructions (the common shape of rule conditions). `&&` and
//! `||` short-circuit with conditional jumps. The maximum stack depth is computed here and
//! bounded, so the evaluator runs on a fixed array without allocating.
//!
//! Files: `op` (the instructions and the stack bound, which the VM reads) and `emitter`.

mod emitter;
mod op;

pub use emitter::{Emitter, MAX_OPS};
pub use op::{Op, MAX_STACK};
