//! Execution: the programs the compiler's output runs as, lowest first.
//!
//! - [`vm`]: the stack VM, for [`Expression`](crate::expression::Expression)s and the
//!   leaves a branch program has no typed test for;
//! - [`branch`]: every rule condition as jump code over typed tests, linked into one
//!   program per rule set, and its interpreter;
//! - `jit` (feature `jit`): the linked program as native code, from x86-64 templates or
//!   Cranelift.

pub mod branch;
#[cfg(feature = "jit")]
#[allow(unsafe_code)]
pub(crate) mod jit;
pub mod vm;
