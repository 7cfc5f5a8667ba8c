//! The emitter: a typed tree appended to a shared stack program and its set tables.

use super::op::{Op, MAX_STACK};
use crate::checker::{Arith, Func, TExpr};
use crate::error::{err, ErrorKind, Result, Span};

/// Most instructions one expression may compile to.
pub const MAX_OPS: usize = 8_192;

/// Output of compilation: appended to shared code and set tables.
#[derive(Debug, Default, Clone)]
pub struct Emitter {
    /// Instructions.
    pub code: Vec<Op>,
    /// Sorted constant sets for `in`.
    pub sets: Vec<Box<[f32]>>,
}

impl Emitter {
    /// Compiles `e` (spanning `span`, for errors); returns the code range.
    pub fn compile(&mut self, e: &TExpr, span: Span) -> Result<(u32, u32)> {
        let start = self.code.len();
        let mut depth = 0usize;
        let mut max = 0usize;
        self.emit(e, &mut depth, &mut max);
        if max > MAX_STACK {
            return err(ErrorKind::TooDeep(MAX_STACK), span);
        }
        if self.code.len() - start > MAX_OPS {
            return err(
                ErrorKind::TooLarge(format!(
                    "expression compiles to more than {MAX_OPS} instructions"
                )),
                span,
            );
        }
        Ok((start as u32, self.code.len() as u32))
    }

    fn push(&mut self, op: Op, depth: &mut usize, max: &mut usize, delta: isize) {
        self.code.push(op);
        *depth = (*depth as isize + delta) as usize;
        *max = (*max).max(*depth);
    }

    fn set(&mut self, s: &[f32]) -> u32 {
        self.sets.push(s.into());
        (self.sets.len() - 1) as u32
    }

    fn emit(&mut self, e: &TExpr, d: &mut usize, m: &mut usize) {
        match e {
            TExpr::Num(n) => self.push(Op::Const(*n), d, m, 1),
            TExpr::Bool(b) => self.push(Op::Const(*b as u8 as f32), d, m, 1),
            TExpr::Slot(s) => self.push(Op::Load(s.0), d, m, 1),
            TExpr::Cmp(op, a, b) => match (&**a, &**b) {
                (TExpr::Slot(s), TExpr::Num(k)) => self.push(
                    Op::CmpK {
                        slot: s.0,
                        op: *op,
                        k: *k,
                    },
                    d,
                    m,
                    1,
                ),
                (TExpr::Num(k), TExpr::Slot(s)) => self.push(
                    Op::CmpK {
                        slot: s.0,
                        op: op.flip(),
                        k: *k,
                    },
                    d,
                    m,
                    1,
                ),
                _ => {
                    self.emit(a, d, m);
                    self.emit(b, d, m);
                    self.push(Op::Cmp(*op), d, m, -1);
                }
            },
            TExpr::In(a, set) => {
                let id = self.set(set);
                match &**a {
                    TExpr::Slot(s) => self.push(Op::InK { slot: s.0, set: id }, d, m, 1),
                    _ => {
                        self.emit(a, d, m);
                        self.push(Op::In(id), d, m, 0);
                    }
                }
            }
            TExpr::CatCmp(op, pair) => {
                // Three tables: [slot a, slot b, common], then each side's map (the `Op`
                // stays 12 bytes).
                let header = [pair.a.0 as f32, pair.b.0 as f32, pair.common as f32];
                let at = self.set(&header);
                self.set(&pair.map_a);
                self.set(&pair.map_b);
                self.push(Op::CatCmp { op: *op, pair: at }, d, m, 1);
            }
            TExpr::Neg(a) => {
                self.emit(a, d, m);
                self.push(Op::Neg, d, m, 0);
            }
            TExpr::Not(a) => {
                self.emit(a, d, m);
                self.push(Op::Not, d, m, 0);
            }
            TExpr::Arith(op, a, b) => {
                self.emit(a, d, m);
                self.emit(b, d, m);
                let o = match op {
                    Arith::Add => Op::Add,
                    Arith::Sub => Op::Sub,
                    Arith::Mul => Op::Mul,
                    Arith::Div => Op::Div,
                    Arith::Rem => Op::Rem,
                };
                self.push(o, d, m, -1);
            }
            TExpr::And(a, b) | TExpr::Or(a, b) => {
                self.emit(a, d, m);
                let at = self.code.len();
                // Placeholder, patched below: on short-circuit the left value stays.
                self.push(Op::Jump(0), d, m, 0);
                *d -= 1; // the taken-through path pops the left value
                self.emit(b, d, m);
                let end = self.code.len() as u32;
                self.code[at] = if matches!(e, TExpr::And(..)) {
                    Op::JumpIfFalseElsePop(end)
                } else {
                    Op::JumpIfTrueElsePop(end)
                };
            }
            TExpr::Call(f, args) => {
                for a in args {
                    self.emit(a, d, m);
                }
                let n = args.len();
                let (op, delta) = match f {
                    Func::Abs => (Op::Abs, 0),
                    Func::Log => (Op::Log, 0),
                    Func::IsMissing => (Op::IsMissing, 0),
                    Func::Min => (Op::Min(n as u8), 1 - n as isize),
                    Func::Max => (Op::Max(n as u8), 1 - n as isize),
                };
                self.push(op, d, m, delta);
            }
        }
    }
}
