//! Stack VM: runs compiled stack programs ([`crate::compiler`]) over a feature vector on a
//! fixed stack. Allocates nothing. Booleans are `1.0` / `0.0`; `NaN` is a missing value.

use crate::compiler::MAX_STACK;

/// The instructions it runs (defined with the compiler that emits them).
pub use crate::compiler::Op;

/// Membership with the missing-value rule; `set` is sorted and normalised (no `-0.0`).
#[inline(always)]
pub fn contains(set: &[f32], v: f32) -> bool {
    if v.is_nan() {
        return false;
    }
    let v = v + 0.0;
    if set.len() <= 16 {
        set.contains(&v)
    } else {
        set.binary_search_by(|s| s.total_cmp(&v)).is_ok()
    }
}

#[inline(always)]
fn b(v: bool) -> f32 {
    v as u8 as f32
}

/// Runs `code[start..end]` over `x` and returns the value left on the stack.
#[inline]
pub fn run(
    code: &[Op],
    start: u32,
    end: u32,
    sets: &[Box<[f32]>],
    x: &[f32],
    st: &mut [f32; MAX_STACK],
) -> f32 {
    let mut sp = 0usize;
    let mut pc = start as usize;
    let end = end as usize;
    while pc < end {
        match code[pc] {
            Op::Const(k) => {
                st[sp] = k;
                sp += 1;
            }
            Op::Load(s) => {
                st[sp] = x[s as usize];
                sp += 1;
            }
            Op::CmpK { slot, op, k } => {
                st[sp] = b(op.apply(x[slot as usize], k));
                sp += 1;
            }
            Op::InK { slot, set } => {
                st[sp] = b(contains(&sets[set as usize], x[slot as usize]));
                sp += 1;
            }
            Op::CatCmp { op, pair } => {
                let p = pair as usize;
                let h = &sets[p];
                st[sp] = b(crate::checker::cat_cmp(
                    op,
                    x[h[0] as usize],
                    x[h[1] as usize],
                    &sets[p + 1],
                    &sets[p + 2],
                    h[2] as u32,
                ));
                sp += 1;
            }
            Op::Cmp(op) => {
                sp -= 1;
                st[sp - 1] = b(op.apply(st[sp - 1], st[sp]));
            }
            Op::In(set) => st[sp - 1] = b(contains(&sets[set as usize], st[sp - 1])),
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Rem => {
                sp -= 1;
                let (a, c) = (st[sp - 1], st[sp]);
                st[sp - 1] = match code[pc] {
                    Op::Add => a + c,
                    Op::Sub => a - c,
                    Op::Mul => a * c,
                    Op::Div if c == 0.0 => f32::NAN,
                    Op::Div => a / c,
                    Op::Rem if c == 0.0 => f32::NAN,
                    _ => a % c,
                };
            }
            Op::Neg => st[sp - 1] = -st[sp - 1],
            Op::Not => st[sp - 1] = b(st[sp - 1] == 0.0),
            Op::Abs => st[sp - 1] = st[sp - 1].abs(),
            Op::Log => {
                let v = st[sp - 1];
                st[sp - 1] = if v > 0.0 { v.ln() } else { f32::NAN };
            }
            Op::Min(n) | Op::Max(n) => {
                let n = n as usize;
                let args = &st[sp - n..sp];
                let v = if args.iter().any(|v| v.is_nan()) {
                    f32::NAN
                } else if matches!(code[pc], Op::Min(_)) {
                    args.iter().copied().fold(f32::INFINITY, f32::min)
                } else {
                    args.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                };
                sp -= n;
                st[sp] = v;
                sp += 1;
            }
            Op::IsMissing => st[sp - 1] = b(st[sp - 1].is_nan()),
            Op::JumpIfFalseElsePop(t) => {
                if st[sp - 1] == 0.0 {
                    pc = t as usize;
                    continue;
                }
                sp -= 1;
            }
            Op::JumpIfTrueElsePop(t) => {
                if st[sp - 1] != 0.0 {
                    pc = t as usize;
                    continue;
                }
                sp -= 1;
            }
            Op::Jump(t) => {
                pc = t as usize;
                continue;
            }
        }
        pc += 1;
    }
    if sp == 0 {
        f32::NAN
    } else {
        st[sp - 1]
    }
}
