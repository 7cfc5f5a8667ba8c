//! The typed tree the checker produces and every later stage consumes.

use super::catpair::CatPair;
use super::ops::{Arith, Cmp, Func};
use risk_core::Slot;

/// A typed expression. Numbers and category ids are `f32` (`NaN` = missing).
#[derive(Debug, Clone, PartialEq)]
pub enum TExpr {
    /// A number.
    Num(f32),
    /// A boolean.
    Bool(bool),
    /// A numeric or categorical slot.
    Slot(Slot),
    /// `-x`
    Neg(Box<TExpr>),
    /// `!b`
    Not(Box<TExpr>),
    /// Arithmetic.
    Arith(Arith, Box<TExpr>, Box<TExpr>),
    /// Comparison (numbers, category ids, or booleans as 0/1).
    Cmp(Cmp, Box<TExpr>, Box<TExpr>),
    /// `&&`
    And(Box<TExpr>, Box<TExpr>),
    /// `||`
    Or(Box<TExpr>, Box<TExpr>),
    /// Membership in a sorted constant set.
    In(Box<TExpr>, Vec<f32>),
    /// A function call.
    Call(Func, Vec<TExpr>),
    /// `a == b` / `a != b` between two categorical fields, by value.
    CatCmp(Cmp, Box<CatPair>),
}

/// The type of a checked expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// A number.
    Num,
    /// A boolean.
    Bool,
    /// A value of a categorical field.
    Cat(Slot),
}
