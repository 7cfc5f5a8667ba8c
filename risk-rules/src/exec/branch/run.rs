//! The interpreter: a loop of *test, pick an edge*, over a whole linked program or, for
//! explain, one rule's segment.

use super::program::{ArithCmp, Branches, Node, Opd, Term, Test};
use crate::checker::{cat_cmp, CatPair};
use crate::compiler::MAX_STACK;
use crate::exec::vm::{contains, run};

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
