//! The operators of the typed tree, with their semantics on `f32` values (`NaN` =
//! missing): built-in functions, comparisons and arithmetic.

/// Built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// `abs(x)`
    Abs,
    /// `log(x)`, natural; missing for `x <= 0`.
    Log,
    /// `min(a, b, ...)`
    Min,
    /// `max(a, b, ...)`
    Max,
    /// `is_missing(x)`
    IsMissing,
}

/// Comparison operators on numbers (and on category ids, for `==` / `!=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Cmp {
    /// The operator with its operands swapped: `k < x` is `x > k`.
    pub fn flip(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            o => o,
        }
    }

    /// `a op b` with the missing-value rule: false if either is `NaN`.
    #[inline(always)]
    pub fn apply(self, a: f32, b: f32) -> bool {
        if a.is_nan() || b.is_nan() {
            return false;
        }
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (by zero: missing)
    Div,
    /// `%` (by zero: missing)
    Rem,
}

impl Arith {
    /// `a op b` with the missing-value rules.
    #[inline(always)]
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            Arith::Add => a + b,
            Arith::Sub => a - b,
            Arith::Mul => a * b,
            Arith::Div if b == 0.0 => f32::NAN,
            Arith::Div => a / b,
            Arith::Rem if b == 0.0 => f32::NAN,
            Arith::Rem => a % b,
        }
    }
}
