//! [`RuleSet`]: a compiled, immutable rule file.
//!
//! Files: `set` (the type and its accessors), `build` (compiling a file), `eval`
//! (evaluating a transaction) and `native` (the swap to native code).

mod build;
mod eval;
mod native;
mod set;

pub use build::{LoadError, MAX_RULES, MAX_SOURCE};
pub use eval::{Hits, Verdict};
pub use native::NativeBackend;
pub use set::RuleSet;
