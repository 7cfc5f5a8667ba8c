//! Building a rule's program from its typed condition: `&&`, `||` and `!` become edges,
//! each leaf one normalised test (or a stack-VM range where no typed test fits).

use super::program::{ArithCmp, Branches, Node, NodeInfo, Opd, Term, Test, FALSE, TRUE};
use crate::checker::{interpret, Cmp, Func, TExpr};
use crate::compiler::MAX_OPS;
use crate::error::{err, ErrorKind, Result, Span};
use crate::parser::{BinOp, Expr, ExprKind, UnOp};

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
                    return Ok(if interpret(leaf, &[]) != 0.0 { t } else { f });
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
