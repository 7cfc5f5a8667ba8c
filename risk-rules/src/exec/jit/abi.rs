//! What both generators share: the signature of the emitted function, the call-back into
//! the interpreter for tests without native code, and which arithmetic tests compile
//! natively.

use crate::checker::Arith;
use crate::compiler::MAX_STACK;
use crate::exec::branch::{ArithCmp, Branches};

/// `fn(x, out, shadow_out, ctx, slow, len) -> live hits | shadow hits << 32`.
pub(super) type Entry =
    unsafe extern "C" fn(*const f32, *mut u32, *mut u32, *const Branches, SlowFn, usize) -> u64;

/// The call-back for tests without native code: `(ctx, node, x, len) -> holds`.
pub(super) type SlowFn = extern "C" fn(*const Branches, u32, *const f32, usize) -> u8;

/// The call-back itself: node `node`'s test on the interpreter (false if it panics).
pub(super) extern "C" fn slow(ctx: *const Branches, node: u32, x: *const f32, len: usize) -> u8 {
    // A panic must not unwind into native code: it would abort the host.
    std::panic::catch_unwind(|| {
        // SAFETY: `ctx` is the `Branches` the code was compiled from, borrowed by
        // `Native::run` for the whole call, and `x` points at `len` initialised f32
        // (a slice the caller holds), both passed through unchanged by the code.
        let (b, x) = unsafe { (&*ctx, std::slice::from_raw_parts(x, len)) };
        let mut st = [0f32; MAX_STACK];
        b.nodes
            .get(node as usize)
            .is_some_and(|n| b.test_node(n, x, &mut st)) as u8
    })
    .unwrap_or(0)
}

/// Whether an arithmetic test compiles natively (`%` calls back); both generators.
pub(super) fn native_arith(a: &ArithCmp) -> bool {
    [a.l, a.r]
        .iter()
        .all(|t| !matches!(t.op, Some((Arith::Rem, _))))
}
