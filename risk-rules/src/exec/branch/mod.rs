//! Branch programs: every rule condition, whatever its boolean shape, compiled to jump
//! code over typed tests, with no value stack.
//!
//! A condition is a tree of `&&`, `||` and `!` over leaves (comparisons, `in`, field
//! versus field, arithmetic, `is_missing`). Each leaf becomes one [`Node`] holding a
//! typed [`Test`] and two successors: where to go when the test holds and when it does
//! not. `a && b` sends `a`'s true edge to `b` and its false edge to the rule's false
//! exit; `a || b` the other way round; `!a` swaps `a`'s exits. Evaluation is a loop of
//! *test, pick an edge*: as many steps as the short-circuit evaluation of the tree, and
//! each step as cheap as one conjunction atom. Because every comparison with a missing
//! value is false and `!` simply swaps edges, `!(x > 5)` is true for a missing `x`, as
//! the language defines.
//!
//! Tests are normalised so that the common ones share one shape: `x < k`, `x <= k`,
//! `x > k`, `x >= k` and `x == k` are all [`Test::Range`] (`lo <= x <= hi`, false for
//! `NaN`, with `lo` / `hi` the neighbouring `f32` for strict bounds); `in` over small
//! non-negative integers (category ids) is a 64-bit mask. Shapes without a dedicated
//! test (nested arithmetic, functions, comparisons of booleans) run the stack VM for that
//! leaf only ([`Test::Code`]), so every program is exact: property tests check it
//! against the reference interpreter.
//!
//! The last node evaluated is, by construction, the sub-condition that decided the rule
//! (the first false conjunct, the first true disjunct): [`Branches::trace`] reports it
//! for the explain API.
//!
//! Files: `program` (the types), `build` (a condition to a rule program), `link` (rule
//! programs to one program) and `run` (the interpreter).

mod build;
mod link;
mod program;
mod run;

pub use build::slots_of;
pub use program::{ArithCmp, Branches, Linked, Node, NodeInfo, Opd, Term, Test, FALSE, TRUE};
