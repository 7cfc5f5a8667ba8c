//! The reference interpreter: evaluates a typed tree directly, the straightforward
//! semantics the compiled programs are tested against.

use super::ops::Func;
use super::typed::TExpr;

/// Evaluates a typed tree directly (the straightforward interpreter the compiled
/// program is tested against). Booleans are `1.0` / `0.0`.
pub fn interpret(e: &TExpr, x: &[f32]) -> f32 {
    let b = |v: bool| v as u8 as f32;
    match e {
        TExpr::Num(n) => *n,
        TExpr::Bool(v) => b(*v),
        TExpr::Slot(s) => x[s.index()],
        TExpr::Neg(a) => -interpret(a, x),
        TExpr::Not(a) => b(interpret(a, x) == 0.0),
        TExpr::Arith(op, a, c) => op.apply(interpret(a, x), interpret(c, x)),
        TExpr::Cmp(op, a, c) => b(op.apply(interpret(a, x), interpret(c, x))),
        TExpr::And(a, c) => b(interpret(a, x) != 0.0 && interpret(c, x) != 0.0),
        TExpr::Or(a, c) => b(interpret(a, x) != 0.0 || interpret(c, x) != 0.0),
        TExpr::In(a, set) => {
            let v = interpret(a, x);
            b(!v.is_nan() && set.contains(&v))
        }
        TExpr::CatCmp(op, pair) => b(pair.eval(*op, x)),
        TExpr::Call(f, args) => {
            let vals: Vec<f32> = args.iter().map(|a| interpret(a, x)).collect();
            match f {
                Func::Abs => vals[0].abs(),
                Func::Log => {
                    if vals[0] > 0.0 {
                        vals[0].ln()
                    } else {
                        f32::NAN
                    }
                }
                Func::Min | Func::Max => {
                    if vals.iter().any(|v| v.is_nan()) {
                        f32::NAN
                    } else if *f == Func::Min {
                        vals.iter().copied().fold(f32::INFINITY, f32::min)
                    } else {
                        vals.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                    }
                }
                Func::IsMissing => b(vals[0].is_nan()),
            }
        }
    }
}
