//! Checker: resolves names against the schema and the file's constants, checks types,
//! interns category strings, and produces the typed tree ([`TExpr`]) that both the
//! compiler and the reference interpreter consume.
//!
//! Types: numbers (`f32`, `NaN` = missing), booleans, categorical field values (compared
//! with `==`, `!=` or `in` against string literals of the field's vocabulary, or with `==`
//! and `!=` against another categorical field, by value, see [`CatPair`]), and lists
//! (only on the right of `in`).
//!
//! Missing values: arithmetic with a missing value is missing; division or remainder by
//! zero and `log` of a non-positive number are missing; `min`/`max` with a missing
//! argument are missing; **every comparison and `in` with a missing operand is false**
//! (so `!(x > 5)` is true when `x` is missing); `is_missing(x)` tests for it.
//!
//! Files, lowest first: `ops` (operators and their semantics), `catpair` (two categorical
//! fields compared by value), `typed` (the typed tree), `scope` (the checking itself) and
//! `interpret` (the reference interpreter).

mod catpair;
mod interpret;
mod ops;
mod scope;
mod typed;

pub use catpair::{cat_cmp, CatPair};
pub use interpret::interpret;
pub use ops::{Arith, Cmp, Func};
pub use scope::{ConstVal, Scope, MAX_LIST};
pub use typed::{TExpr, Ty};
