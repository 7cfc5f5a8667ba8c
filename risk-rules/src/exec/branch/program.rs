//! The program: typed tests, nodes with two successors, and the side tables they read.

use crate::checker::{Arith, CatPair, Cmp};
use crate::compiler::Emitter;
use crate::error::Span;

/// Exit: the condition holds.
pub const TRUE: u32 = u32::MAX;
/// Exit: the condition does not hold.
pub const FALSE: u32 = u32::MAX - 1;

/// An operand of an arithmetic test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Opd {
    /// A slot's value.
    Slot(u32),
    /// A constant.
    K(f32),
}

/// `a` or `a ⊕ b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Term {
    /// First operand.
    pub a: Opd,
    /// The operation with `b`, if any.
    pub op: Option<(Arith, Opd)>,
}

/// `l op r` over two terms (side table of [`Test::Arith`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArithCmp {
    /// Left.
    pub l: Term,
    /// Comparison.
    pub op: Cmp,
    /// Right.
    pub r: Term,
}

/// One typed test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Test {
    /// `lo <= x[slot] <= hi` (false when missing).
    Range {
        /// Slot.
        slot: u32,
        /// Lower bound, inclusive (`NaN`: never).
        lo: f32,
        /// Upper bound, inclusive (`NaN`: never).
        hi: f32,
    },
    /// `x[slot] != k` (false when missing).
    Ne {
        /// Slot.
        slot: u32,
        /// Constant.
        k: f32,
    },
    /// `x[slot]` is an integer `i < 64` with bit `i` of `mask` set.
    Mask {
        /// Slot.
        slot: u32,
        /// Members.
        mask: u64,
    },
    /// `x[slot]` is in the sorted set `sets[set]`.
    Set {
        /// Slot.
        slot: u32,
        /// Set index.
        set: u32,
    },
    /// `x[a] op x[b]`.
    Pair {
        /// Left slot.
        a: u32,
        /// Comparison.
        op: Cmp,
        /// Right slot.
        b: u32,
    },
    /// `arith[idx]`.
    Arith(u32),
    /// Two categorical fields by value: `pairs[idx]`.
    Cat {
        /// `Eq` or `Ne`.
        op: Cmp,
        /// Pair index.
        idx: u32,
    },
    /// `x[slot]` is missing.
    Missing(u32),
    /// `code[start..end]` (stack VM) is true.
    Code(u32, u32),
    /// Linked programs only: rule `i` fired; record it and go on at `t`.
    Hit(u32),
    /// Linked programs only: shadow rule `i` fired; record it apart and go on at `t`.
    Shadow(u32),
}

/// One step: a test and its two successors (a node index, [`TRUE`] or [`FALSE`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Node {
    /// The test.
    pub test: Test,
    /// Next when it holds.
    pub t: u32,
    /// Next when it does not.
    pub f: u32,
}

/// Where each rule of a linked program is.
#[derive(Debug, Default, Clone)]
pub struct Linked {
    /// First node of the live rules.
    pub live_start: u32,
    /// First node of the shadow rules.
    pub shadow_start: u32,
    /// Per rule (index, entry, hit node), live rules first in evaluation order.
    pub segments: Vec<(u32, u32, u32)>,
}

/// What explain needs of a node; kept apart so that the nodes stay small.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// The leaf's source span.
    pub span: Span,
    /// Slots it reads.
    pub slots: Vec<u32>,
}

/// The branch programs of a whole rule set.
#[derive(Debug, Default, Clone)]
pub struct Branches {
    /// Nodes; each rule's are contiguous, its entry first.
    pub nodes: Vec<Node>,
    /// Per node, for explain.
    pub info: Vec<NodeInfo>,
    pub(super) arith: Vec<ArithCmp>,
    pub(super) pairs: Vec<CatPair>,
    /// Stack code and sets of [`Test::Code`] and [`Test::Set`] leaves.
    pub em: Emitter,
}
