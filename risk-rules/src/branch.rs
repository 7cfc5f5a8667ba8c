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

use crate::checker::{cat_cmp, Arith, CatPair, Cmp, Func, TExpr};
use crate::compiler::{Emitter, MAX_OPS, MAX_STACK};
use crate::error::{err, ErrorKind, Result, Span};
use crate::parser::{BinOp, Expr, ExprKind, UnOp};
use crate::vm::{contains, run};

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
    arith: Vec<ArithCmp>,
    pairs: Vec<CatPair>,
    /// Stack code and sets of [`Test::Code`] and [`Test::Set`] leaves.
    pub em: Emitter,
}

#[inline(always)]
fn at(x: &[f32], s: u32) -> f32 {
    x.get(s as usize).copied().unwrap_or(f32::NAN)
}

#[inline(always)]
fn opd(x: &[f32], o: Opd) -> f32 {
    match o {
        Opd::Slot(s) => at(x, s),
        Opd::K(k) => k,
    }
}

#[inline(always)]
fn term(x: &[f32], t: &Term) -> f32 {
    match t.op {
        None => opd(x, t.a),
        Some((op, b)) => op.apply(opd(x, t.a), opd(x, b)),
    }
}

impl Branches {
    /// Compiles the condition `e` (checked from `src`, for spans) into a program;
    /// returns its entry (a node index or an exit).
    pub fn compile(&mut self, e: &TExpr, src: &Expr) -> Result<u32> {
        let base = self.nodes.len();
        let entry = self.gen(e, Some(src), src.span, TRUE, FALSE)?;
        if self.nodes.len() - base > MAX_OPS {
            return err(
                ErrorKind::TooLarge(format!("condition compiles to more than {MAX_OPS} tests")),
                src.span,
            );
        }
        // Built back to front (a successor exists before its predecessor); reverse the
        // rule's nodes so that evaluation runs forward through memory, entry first.
        let end = self.nodes.len();
        let map = |i: u32| {
            if i >= FALSE {
                i
            } else {
                (base + end - 1 - i as usize) as u32
            }
        };
        self.nodes[base..end].reverse();
        self.info[base..end].reverse();
        for n in &mut self.nodes[base..end] {
            n.t = map(n.t);
            n.f = map(n.f);
        }
        Ok(map(entry))
    }

    fn gen(&mut self, e: &TExpr, src: Option<&Expr>, span: Span, t: u32, f: u32) -> Result<u32> {
        // The checker maps `&&`, `||` and `!` one to one, so the source tree is walked
        // alongside for the leaves' spans.
        let (sa, sb) = match src.map(|s| &s.kind) {
            Some(ExprKind::Binary(BinOp::And | BinOp::Or, a, b)) => (Some(&**a), Some(&**b)),
            Some(ExprKind::Unary(UnOp::Not, a)) => (Some(&**a), None),
            _ => (None, None),
        };
        let sp = |s: Option<&Expr>| s.map_or(span, |s| s.span);
        match e {
            TExpr::Bool(true) => Ok(t),
            TExpr::Bool(false) => Ok(f),
            TExpr::And(a, b) => {
                let eb = self.gen(b, sb, sp(sb), t, f)?;
                self.gen(a, sa, sp(sa), eb, f)
            }
            TExpr::Or(a, b) => {
                let eb = self.gen(b, sb, sp(sb), t, f)?;
                self.gen(a, sa, sp(sa), t, eb)
            }
            TExpr::Not(a) => self.gen(a, sa, sp(sa), f, t),
            leaf => {
                let Some(test) = self.leaf(leaf, span)? else {
                    // A constant comparison: decided at compile time.
                    return Ok(if crate::checker::interpret(leaf, &[]) != 0.0 {
                        t
                    } else {
                        f
                    });
                };
                let mut slots = Vec::new();
                slots_of(leaf, &mut slots);
                self.nodes.push(Node { test, t, f });
                self.info.push(NodeInfo { span, slots });
                Ok((self.nodes.len() - 1) as u32)
            }
        }
    }

    /// The test of a leaf (`None`: a comparison of constants).
    fn leaf(&mut self, e: &TExpr, span: Span) -> Result<Option<Test>> {
        let slot = |e: &TExpr| match e {
            TExpr::Slot(s) => Some(s.0),
            _ => None,
        };
        let num = |e: &TExpr| match e {
            TExpr::Num(k) => Some(*k),
            _ => None,
        };
        Ok(Some(match e {
            TExpr::Cmp(op, a, b) => match (slot(a), num(a), slot(b), num(b)) {
                (Some(s), _, _, Some(k)) => range(s, *op, k),
                (_, Some(k), Some(s), _) => range(s, op.flip(), k),
                (Some(x), _, Some(y), _) => Test::Pair {
                    a: x,
                    op: *op,
                    b: y,
                },
                (_, Some(_), _, Some(_)) => return Ok(None),
                _ => match (self.term(a), self.term(b)) {
                    (Some(l), Some(r)) => {
                        self.arith.push(ArithCmp { l, op: *op, r });
                        Test::Arith((self.arith.len() - 1) as u32)
                    }
                    _ => self.code(e, span)?,
                },
            },
            TExpr::In(a, set) => match slot(a) {
                Some(s) => self.membership(s, set),
                None => self.code(e, span)?,
            },
            TExpr::CatCmp(op, pair) => {
                self.pairs.push((**pair).clone());
                Test::Cat {
                    op: *op,
                    idx: (self.pairs.len() - 1) as u32,
                }
            }
            TExpr::Call(Func::IsMissing, args) if args.len() == 1 && slot(&args[0]).is_some() => {
                Test::Missing(slot(&args[0]).unwrap_or(0))
            }
            _ => self.code(e, span)?,
        }))
    }

    /// `e` as an arithmetic term of one or two operands, if it is one.
    fn term(&self, e: &TExpr) -> Option<Term> {
        let o = |e: &TExpr| match e {
            TExpr::Slot(s) => Some(Opd::Slot(s.0)),
            TExpr::Num(k) => Some(Opd::K(*k)),
            _ => None,
        };
        match e {
            TExpr::Arith(op, a, b) => Some(Term {
                a: o(a)?,
                op: Some((*op, o(b)?)),
            }),
            _ => Some(Term { a: o(e)?, op: None }),
        }
    }

    fn membership(&mut self, slot: u32, set: &[f32]) -> Test {
        let small = set
            .iter()
            .all(|&v| (0.0..64.0).contains(&v) && v.fract() == 0.0);
        if small {
            let mask = set.iter().fold(0u64, |m, &v| m | 1 << (v as u32));
            return Test::Mask { slot, mask };
        }
        let mut s: Vec<f32> = set.iter().map(|v| v + 0.0).collect();
        s.sort_by(f32::total_cmp);
        s.dedup();
        self.em.sets.push(s.into());
        Test::Set {
            slot,
            set: (self.em.sets.len() - 1) as u32,
        }
    }

    fn code(&mut self, e: &TExpr, span: Span) -> Result<Test> {
        let (a, b) = self.em.compile(e, span)?;
        Ok(Test::Code(a, b))
    }

    /// The categorical pair of a [`Test::Cat`].
    pub fn pair_at(&self, i: u32) -> Option<&CatPair> {
        self.pairs.get(i as usize)
    }

    /// The arithmetic comparison of a [`Test::Arith`].
    pub fn arith_at(&self, i: u32) -> Option<ArithCmp> {
        self.arith.get(i as usize).copied()
    }

    /// Whether the test of node `n` holds on `x` (hit nodes: true).
    pub fn test_node(&self, n: &Node, x: &[f32], st: &mut [f32; MAX_STACK]) -> bool {
        self.test(n, x, st)
    }

    /// Whether the test of node `n` holds on `x`.
    #[inline(always)]
    fn test(&self, n: &Node, x: &[f32], st: &mut [f32; MAX_STACK]) -> bool {
        match n.test {
            Test::Range { slot, lo, hi } => {
                let v = at(x, slot);
                lo <= v && v <= hi
            }
            Test::Ne { slot, k } => {
                let v = at(x, slot);
                !v.is_nan() && v != k
            }
            Test::Mask { slot, mask } => {
                let v = at(x, slot);
                let i = v as u32;
                i < 64 && (mask >> i) & 1 == 1 && i as f32 == v
            }
            Test::Set { slot, set } => self
                .em
                .sets
                .get(set as usize)
                .is_some_and(|s| contains(s, at(x, slot))),
            Test::Pair { a, op, b } => op.apply(at(x, a), at(x, b)),
            Test::Arith(i) => self
                .arith
                .get(i as usize)
                .is_some_and(|c| c.op.apply(term(x, &c.l), term(x, &c.r))),
            Test::Cat { op, idx } => self.pairs.get(idx as usize).is_some_and(|p| {
                cat_cmp(op, at(x, p.a.0), at(x, p.b.0), &p.map_a, &p.map_b, p.common)
            }),
            Test::Missing(s) => at(x, s).is_nan(),
            Test::Code(a, b) => run(&self.em.code, a, b, &self.em.sets, x, st) != 0.0,
            Test::Hit(_) | Test::Shadow(_) => true,
        }
    }

    /// Links the separately compiled rules into one program: `live` rules (index,
    /// entry) in evaluation order, then `shadow` rules. Each rule's true exit goes to a
    /// [`Test::Hit`] (or [`Test::Shadow`]) node that records it, its false exit straight
    /// to the next rule, so a whole evaluation is one loop with a single exit. With
    /// `first_hit`, a live hit ends the live part. Returns the program and, per rule in
    /// the order given, its segment `(entry, hit node)`.
    pub fn link(
        &self,
        live: &[(u32, u32)],
        shadow: &[(u32, u32)],
        first_hit: bool,
    ) -> (Branches, Linked) {
        let mut out = Branches {
            nodes: Vec::with_capacity(self.nodes.len() + live.len() + shadow.len()),
            info: Vec::with_capacity(self.nodes.len() + live.len() + shadow.len()),
            arith: self.arith.clone(),
            pairs: self.pairs.clone(),
            em: self.em.clone(),
        };
        let mut linked = Linked::default();
        let mut patch_end: Vec<usize> = Vec::new();
        for (part, rules) in [(0, live), (1, shadow)] {
            let part_start = out.nodes.len() as u32;
            // Hit nodes of `first_hit` live rules, to point at the shadow part.
            let mut to_shadow: Vec<usize> = Vec::new();
            for &(rule, entry) in rules {
                if entry == FALSE {
                    continue;
                }
                let base = out.nodes.len();
                let (lo, hi) = if entry == TRUE {
                    (0, 0)
                } else {
                    (entry as usize, self.rule_end(entry as usize))
                };
                let hit = (base + (hi - lo)) as u32;
                let next = hit + 1;
                let map = |i: u32| match i {
                    TRUE => hit,
                    i if (lo as u32..hi as u32).contains(&i) => base as u32 + (i - lo as u32),
                    // FALSE, or the successor of a node no path reaches.
                    _ => next,
                };
                for k in lo..hi {
                    let n = self.nodes[k];
                    out.nodes.push(Node {
                        test: n.test,
                        t: map(n.t),
                        f: map(n.f),
                    });
                    out.info.push(self.info[k].clone());
                }
                out.nodes.push(Node {
                    test: if part == 0 {
                        Test::Hit(rule)
                    } else {
                        Test::Shadow(rule)
                    },
                    t: next,
                    f: next,
                });
                out.info.push(NodeInfo {
                    span: Span::new(0, 0),
                    slots: Vec::new(),
                });
                if part == 0 && first_hit {
                    to_shadow.push(hit as usize);
                }
                linked.segments.push((rule, base as u32, hit));
            }
            if part == 0 {
                linked.live_start = part_start;
                patch_end = to_shadow;
            } else {
                linked.shadow_start = part_start;
            }
        }
        // The live part falls through into the shadow part, which falls off the end.
        let shadow_start = linked.shadow_start;
        for i in patch_end {
            out.nodes[i].t = shadow_start;
            out.nodes[i].f = shadow_start;
        }
        let end = out.nodes.len() as u32;
        for n in &mut out.nodes {
            for t in [&mut n.t, &mut n.f] {
                if *t >= end && *t < FALSE {
                    *t = FALSE;
                }
            }
        }
        (out, linked)
    }

    /// One past the last node of the rule program entered at `entry` (programs are
    /// contiguous, entry first; the end is the largest node index reachable).
    fn rule_end(&self, entry: usize) -> usize {
        let mut end = entry + 1;
        let mut k = entry;
        while k < end {
            let n = &self.nodes[k];
            for t in [n.t, n.f] {
                if t < FALSE {
                    end = end.max(t as usize + 1);
                }
            }
            k += 1;
        }
        end
    }

    /// Runs a linked program from `start`: live hits into `hits`, shadow hits into
    /// `shadow`. Allocates only if a buffer must grow.
    #[inline]
    pub fn run_linked(&self, start: u32, x: &[f32], hits: &mut Vec<u32>, shadow: &mut Vec<u32>) {
        let mut st = [0f32; MAX_STACK];
        let mut pc = start;
        while let Some(n) = self.nodes.get(pc as usize) {
            let r = match n.test {
                Test::Hit(i) => {
                    hits.push(i);
                    true
                }
                Test::Shadow(i) => {
                    shadow.push(i);
                    true
                }
                _ => self.test(n, x, &mut st),
            };
            pc = if r { n.t } else { n.f };
        }
    }

    /// In a linked program, runs one rule's segment (entered at `entry`, recorded at
    /// `hit`), listing the nodes evaluated with their outcomes (the last one decided);
    /// returns whether the rule fired.
    pub fn trace(&self, entry: u32, hit: u32, x: &[f32], out: &mut Vec<(u32, bool)>) -> bool {
        let mut st = [0f32; MAX_STACK];
        let mut pc = entry;
        while pc >= entry && pc < hit {
            let Some(n) = self.nodes.get(pc as usize) else {
                return false;
            };
            let r = self.test(n, x, &mut st);
            out.push((pc, r));
            pc = if r { n.t } else { n.f };
        }
        pc == hit
    }
}

/// `x[slot] op k` as a test: every ordering and equality is one inclusive range.
fn range(slot: u32, op: Cmp, k: f32) -> Test {
    if k.is_nan() {
        // Every comparison with a missing value is false.
        return Test::Range {
            slot,
            lo: f32::NAN,
            hi: f32::NAN,
        };
    }
    let (lo, hi) = match op {
        Cmp::Eq => (k, k),
        Cmp::Ne => return Test::Ne { slot, k },
        Cmp::Le => (f32::NEG_INFINITY, k),
        Cmp::Ge => (k, f32::INFINITY),
        // Strict bounds: the neighbouring float; nothing is below -inf or above +inf.
        Cmp::Lt if k == f32::NEG_INFINITY => (f32::NAN, f32::NAN),
        Cmp::Gt if k == f32::INFINITY => (f32::NAN, f32::NAN),
        Cmp::Lt => (f32::NEG_INFINITY, k.next_down()),
        Cmp::Gt => (k.next_up(), f32::INFINITY),
    };
    Test::Range { slot, lo, hi }
}

/// The slots `e` reads, in order, without repeats.
pub fn slots_of(e: &TExpr, out: &mut Vec<u32>) {
    let push = |s: u32, out: &mut Vec<u32>| {
        if !out.contains(&s) {
            out.push(s)
        }
    };
    match e {
        TExpr::Num(_) | TExpr::Bool(_) => {}
        TExpr::Slot(s) => push(s.0, out),
        TExpr::Neg(a) | TExpr::Not(a) | TExpr::In(a, _) => slots_of(a, out),
        TExpr::Arith(_, a, b) | TExpr::Cmp(_, a, b) | TExpr::And(a, b) | TExpr::Or(a, b) => {
            slots_of(a, out);
            slots_of(b, out);
        }
        TExpr::Call(_, args) => args.iter().for_each(|a| slots_of(a, out)),
        TExpr::CatCmp(_, p) => {
            push(p.a.0, out);
            push(p.b.0, out);
        }
    }
}
