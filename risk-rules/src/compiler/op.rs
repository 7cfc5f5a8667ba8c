//! The instructions of the stack program and its bounds: what the compiler emits and the
//! stack VM ([`crate::exec::vm`]) runs.

use crate::checker::Cmp;

/// Deepest evaluation stack a compiled expression may need.
pub const MAX_STACK: usize = 64;

/// One instruction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// Push a constant.
    Const(f32),
    /// Push a slot's value.
    Load(u32),
    /// Push `slot op k` (fused).
    CmpK {
        /// Slot.
        slot: u32,
        /// Comparison.
        op: Cmp,
        /// Constant.
        k: f32,
    },
    /// Push `slot in set` (fused).
    InK {
        /// Slot.
        slot: u32,
        /// Set index.
        set: u32,
    },
    /// Push `x[a] op x[b]` for two categorical fields by value
    /// ([`CatPair`](crate::checker::CatPair)): `sets[pair]` is `[a, b, common]`,
    /// `sets[pair + 1]` and `sets[pair + 2]` the two maps.
    CatCmp {
        /// `Eq` or `Ne`.
        op: Cmp,
        /// First of the three tables.
        pair: u32,
    },
    /// Pop b, a; push `a op b`.
    Cmp(Cmp),
    /// Replace the top with `top in set`.
    In(u32),
    /// Pop b, a; push `a + b`.
    Add,
    /// Pop b, a; push `a - b`.
    Sub,
    /// Pop b, a; push `a * b`.
    Mul,
    /// Pop b, a; push `a / b` (missing if `b == 0`).
    Div,
    /// Pop b, a; push `a % b` (missing if `b == 0`).
    Rem,
    /// Negate the top.
    Neg,
    /// Boolean not of the top.
    Not,
    /// `abs` of the top.
    Abs,
    /// `log` of the top (missing if not positive).
    Log,
    /// Pop n, push their minimum (missing if any is).
    Min(u8),
    /// Pop n, push their maximum (missing if any is).
    Max(u8),
    /// Replace the top with whether it is missing.
    IsMissing,
    /// `&&`: if the top is false jump (keeping it), else pop it.
    JumpIfFalseElsePop(u32),
    /// `||`: if the top is true jump (keeping it), else pop it.
    JumpIfTrueElsePop(u32),
    /// Unconditional jump (only as a placeholder during compilation).
    Jump(u32),
}
