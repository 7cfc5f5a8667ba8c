//! Native code for a linked rule program (feature `jit`): the entry point, and the
//! Cranelift generator. On x86-64 System V, [`compile`] uses the templates of
//! [`crate::jit_x64`] instead (same edges, same semantics, ~8x faster to emit for the
//! mixed set and faster to run, BENCHMARKS.md [12]); Cranelift serves every other host
//! and `RISK_RULES_JIT=cranelift`.
//!
//! Why: the branch-program interpreter ([`crate::branch`]) dispatches every test through
//! one `match` and picks every successor at one branch site, so on varied rows the
//! processor cannot predict either; a mixed 100-rule set cost ~2 µs per row that way
//! against ~0.3 µs for the same rules written as a Rust if-chain (BENCHMARKS.md, [12]).
//! Emitting each node as its own compare-and-branch gives every test its own branch
//! site, as compiled code has: the same program, the same edges, no interpretation.
//!
//! What is emitted, per node of the linked program: ranges, `!=`, 64-bit category masks,
//! field-vs-field and one-operation arithmetic comparisons (Cranelift's ordered float
//! compares are false on `NaN`, the language's missing-value rule; division by zero
//! yields `NaN` as in [`Arith::apply`]) and `is_missing`; hit nodes store the rule index
//! and count. Sets, categorical pairs, `%` and stack-VM leaves call back into
//! [`Branches`] (one indirect call), so every program compiles. The function reads only
//! `x[..len]` with `len` checked by the caller, and writes at most one index per rule.

use crate::branch::{ArithCmp, Branches, Opd, Term, Test, FALSE};
use crate::checker::{Arith, Cmp};
use crate::compiler::MAX_STACK;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{
    types, AbiParam, Block, InstBuilder, MemFlags, Signature, StackSlotData, StackSlotKind, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};

/// `fn(x, out, shadow_out, ctx, slow, len) -> live hits | shadow hits << 32`.
type Entry =
    unsafe extern "C" fn(*const f32, *mut u32, *mut u32, *const Branches, SlowFn, usize) -> u64;

/// The call-back for tests without native code: `(ctx, node, x, len) -> holds`.
type SlowFn = extern "C" fn(*const Branches, u32, *const f32, usize) -> u8;

extern "C" fn slow(ctx: *const Branches, node: u32, x: *const f32, len: usize) -> u8 {
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

/// The memory holding a program's code, per backend.
enum Mem {
    /// Cranelift's module (freed explicitly on drop; boxed: it is large).
    Cranelift(Box<JITModule>),
    /// The x86-64 templates' buffer (unmapped when dropped).
    #[cfg(all(target_arch = "x86_64", unix))]
    X64(#[allow(dead_code)] dynasmrt::ExecutableBuffer),
}

/// A compiled rule program.
pub struct Native {
    module: Option<Mem>,
    entry: Entry,
    /// Which backend emitted it: `"x64"` or `"cranelift"`.
    pub backend: &'static str,
    /// Slots read: rows shorter than this run on the interpreter.
    pub min_len: usize,
}

// SAFETY: after `finalize_definitions` the module is never used again except to free
// its memory on drop (which needs `&mut self`, so no other reference exists then); the
// code it holds is immutable and reentrant (its only state is on the stack and in the
// caller's buffers), so calling it from many threads at once is sound.
unsafe impl Send for Native {}
// SAFETY: as for `Send`: shared references only ever call the immutable code.
unsafe impl Sync for Native {}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native")
            .field("min_len", &self.min_len)
            .finish()
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        if let Some(Mem::Cranelift(m)) = self.module.take() {
            // SAFETY: `&mut self`: no call into the code is in flight, and `entry`
            // is never used after this.
            unsafe { m.free_memory() };
        }
    }
}

impl Native {
    /// Runs the program from `start` over `x`; live hits into `hits`, shadow hits into
    /// `shadow` (cleared first). `None` when `x` is too short for the code.
    #[inline]
    pub fn run(
        &self,
        b: &Branches,
        x: &[f32],
        hits: &mut Vec<u32>,
        shadow: &mut Vec<u32>,
        live: usize,
        shadows: usize,
    ) -> Option<()> {
        if x.len() < self.min_len {
            return None;
        }
        hits.clear();
        shadow.clear();
        hits.reserve(live);
        shadow.reserve(shadows);
        // SAFETY: the code reads `x[..min_len]` only (checked above), writes at most
        // one index per hit node into each buffer, and there are `live` live and
        // `shadows` shadow hit nodes, each reached at most once (every edge goes
        // forward): within the capacity reserved. `b` outlives the call.
        let n = unsafe {
            (self.entry)(
                x.as_ptr(),
                hits.as_mut_ptr(),
                shadow.as_mut_ptr(),
                b,
                slow,
                x.len(),
            )
        };
        let (nh, ns) = ((n & 0xffff_ffff) as usize, (n >> 32) as usize);
        if nh > live || ns > shadows {
            return None;
        }
        // SAFETY: the code initialised the first `nh` / `ns` entries (above), within
        // the capacity reserved (checked).
        unsafe {
            hits.set_len(nh);
            shadow.set_len(ns);
        }
        Some(())
    }
}

fn cc(op: Cmp) -> FloatCC {
    match op {
        Cmp::Eq => FloatCC::Equal,
        Cmp::Ne => FloatCC::OrderedNotEqual,
        Cmp::Lt => FloatCC::LessThan,
        Cmp::Le => FloatCC::LessThanOrEqual,
        Cmp::Gt => FloatCC::GreaterThan,
        Cmp::Ge => FloatCC::GreaterThanOrEqual,
    }
}

/// Compiles the linked program `b` entered at `start`: with the x86-64 templates
/// ([`crate::jit_x64`]) on x86-64 System V hosts, else (or with
/// `RISK_RULES_JIT=cranelift`) with Cranelift. `Err`: the host is not supported or the
/// backend refused (the caller interprets instead).
pub fn compile(b: &Branches, start: u32) -> Result<Native, String> {
    #[cfg(all(target_arch = "x86_64", unix))]
    if !std::env::var("RISK_RULES_JIT").is_ok_and(|v| v == "cranelift") {
        let c = crate::jit_x64::compile(b, start)?;
        let code = c.buf.ptr(c.entry);
        // SAFETY: `code` is the entry of a function emitted by `jit_x64` with
        // exactly `Entry`'s System V signature (six integer arguments in rdi..r9, a
        // u64 in rax, callee-saved registers restored, the stack aligned at calls),
        // and it lives as long as the buffer, which `Native` owns.
        let entry = unsafe { std::mem::transmute::<*const u8, Entry>(code) };
        return Ok(Native {
            module: Some(Mem::X64(c.buf)),
            entry,
            backend: "x64",
            min_len: c.min_len,
        });
    }
    compile_cranelift(b, start)
}

/// [`compile`] with Cranelift.
pub fn compile_cranelift(b: &Branches, start: u32) -> Result<Native, String> {
    let mut flags = settings::builder();
    // The verifier (on by default) doubled compile time; the IR is built by this file
    // alone and checked by the property tests against the interpreter instead.
    for (k, v) in [
        ("opt_level", "speed"),
        ("is_pic", "false"),
        ("enable_verifier", "false"),
    ] {
        flags.set(k, v).map_err(|e| e.to_string())?;
    }
    let isa = cranelift_native::builder()
        .map_err(str::to_owned)?
        .finish(settings::Flags::new(flags))
        .map_err(|e| e.to_string())?;
    let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
    let ptr = module.target_config().pointer_type();
    let mut ctx = module.make_context();
    for _ in 0..6 {
        ctx.func.signature.params.push(AbiParam::new(ptr));
    }
    ctx.func.signature.returns.push(AbiParam::new(types::I64));
    let mut slow_sig = Signature::new(module.target_config().default_call_conv);
    for t in [ptr, types::I32, ptr, ptr] {
        slow_sig.params.push(AbiParam::new(t));
    }
    slow_sig.returns.push(AbiParam::new(types::I8));

    let mut fctx = FunctionBuilderContext::new();
    let mut f = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let slow_ref = f.import_signature(slow_sig);
    let entry = f.create_block();
    f.append_block_params_for_function_params(entry);
    let blocks: Vec<Block> = (0..b.nodes.len()).map(|_| f.create_block()).collect();
    let end = f.create_block();
    let mut min_len = 0usize;
    f.switch_to_block(entry);
    let p = f.block_params(entry).to_vec();
    let (x, out, sout, bctx, cb, len) = (p[0], p[1], p[2], p[3], p[4], p[5]);
    // The hit counters live in a stack slot, not in SSA variables: a variable defined
    // in hit blocks and read after them would become a parameter of every join block.
    let counts = f.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 3));
    // Only `x` stays in a register: the other arguments are read from a stack slot where
    // used (hit nodes, call-backs), so the register allocator does not carry six values
    // through every block (and around every call).
    let args = f.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 40, 3));
    for (v, off) in [(out, 0), (sout, 8), (bctx, 16), (cb, 24), (len, 32)] {
        f.ins().stack_store(v, args, off);
    }
    let zero = f.ins().iconst(types::I64, 0);
    f.ins().stack_store(zero, counts, 0);
    f.ins().stack_store(zero, counts, 8);
    let goto = |t: u32| -> Block { blocks.get(t as usize).copied().unwrap_or(end) };
    f.ins().jump(goto(start), &[]);
    let trusted = MemFlags::trusted();
    let env = Env {
        ptr,
        x,
        args,
        slow: slow_ref,
    };
    for (k, n) in b.nodes.iter().enumerate() {
        f.switch_to_block(blocks[k]);
        if let Test::Hit(rule) | Test::Shadow(rule) = n.test {
            let (at_count, buf) = if matches!(n.test, Test::Hit(_)) {
                (0, f.ins().stack_load(ptr, args, 0))
            } else {
                (8, f.ins().stack_load(ptr, args, 8))
            };
            let c = f.ins().stack_load(types::I64, counts, at_count);
            let off = f.ins().imul_imm(c, 4);
            let at = f.ins().iadd(buf, off);
            let r = f.ins().iconst(types::I32, rule as i64);
            f.ins().store(trusted, r, at, 0);
            let c1 = f.ins().iadd_imm(c, 1);
            f.ins().stack_store(c1, counts, at_count);
            f.ins().jump(goto(n.t), &[]);
            continue;
        }
        let cond = emit_test(&mut f, b, k, &env, &mut min_len);
        match cond {
            Some(c) => {
                f.ins().brif(c, goto(n.t), &[], goto(n.f), &[]);
            }
            None => {
                f.ins().jump(goto(n.f), &[]);
            }
        }
    }
    f.switch_to_block(end);
    let h = f.ins().stack_load(types::I64, counts, 0);
    let s = f.ins().stack_load(types::I64, counts, 8);
    let s = f.ins().ishl_imm(s, 32);
    let r = f.ins().bor(h, s);
    f.ins().return_(&[r]);
    f.seal_all_blocks();
    f.finalize();
    let id = module
        .declare_function("risk_rules", Linkage::Local, &ctx.func.signature)
        .map_err(|e| e.to_string())?;
    module
        .define_function(id, &mut ctx)
        .map_err(|e| e.to_string())?;
    module.clear_context(&mut ctx);
    module.finalize_definitions().map_err(|e| e.to_string())?;
    let code = module.get_finalized_function(id);
    // SAFETY: `code` is the finalized function just defined with exactly `Entry`'s
    // signature (six pointer-sized arguments, one i64 result, the default C calling
    // convention), and it lives as long as `module`, which `Native` owns.
    let entry = unsafe { std::mem::transmute::<*const u8, Entry>(code) };
    debug_assert!(FALSE > b.nodes.len() as u32);
    Ok(Native {
        module: Some(Mem::Cranelift(Box::new(module))),
        entry,
        backend: "cranelift",
        min_len,
    })
}

/// The function's arguments a test may use.
struct Env {
    ptr: types::Type,
    x: Value,
    /// `out`, `shadow_out`, `ctx`, `slow`, `len` at offsets 0, 8, 16, 24, 32.
    args: cranelift_codegen::ir::StackSlot,
    slow: cranelift_codegen::ir::SigRef,
}

/// Emits the test of node `k` (not a hit node); `None`: it never holds.
fn emit_test(
    f: &mut FunctionBuilder<'_>,
    b: &Branches,
    k: usize,
    e: &Env,
    min_len: &mut usize,
) -> Option<Value> {
    let (x, trusted) = (e.x, MemFlags::trusted());
    let n = &b.nodes[k];
    let mut load = |f: &mut FunctionBuilder<'_>, s: u32| -> Value {
        *min_len = (*min_len).max(s as usize + 1);
        f.ins().load(types::F32, trusted, x, (s * 4) as i32)
    };
    let k32 = |f: &mut FunctionBuilder<'_>, v: f32| f.ins().f32const(Ieee32::with_float(v));
    match n.test {
        Test::Range { slot, lo, hi } => {
            if lo.is_nan() || hi.is_nan() {
                None
            } else {
                let v = load(f, slot);
                Some(if lo == hi {
                    let c = k32(f, lo);
                    f.ins().fcmp(FloatCC::Equal, v, c)
                } else if lo == f32::NEG_INFINITY {
                    let c = k32(f, hi);
                    f.ins().fcmp(FloatCC::LessThanOrEqual, v, c)
                } else if hi == f32::INFINITY {
                    let c = k32(f, lo);
                    f.ins().fcmp(FloatCC::GreaterThanOrEqual, v, c)
                } else {
                    let (a, c) = (k32(f, lo), k32(f, hi));
                    let ge = f.ins().fcmp(FloatCC::GreaterThanOrEqual, v, a);
                    let le = f.ins().fcmp(FloatCC::LessThanOrEqual, v, c);
                    f.ins().band(ge, le)
                })
            }
        }
        Test::Ne { slot, k } => {
            let v = load(f, slot);
            let c = k32(f, k);
            Some(f.ins().fcmp(FloatCC::OrderedNotEqual, v, c))
        }
        Test::Mask { slot, mask } => {
            let v = load(f, slot);
            let i = f.ins().fcvt_to_uint_sat(types::I32, v);
            let back = f.ins().fcvt_from_uint(types::F32, i);
            let exact = f.ins().fcmp(FloatCC::Equal, back, v);
            let small = f.ins().icmp_imm(IntCC::UnsignedLessThan, i, 64);
            let i64v = f.ins().uextend(types::I64, i);
            let m = f.ins().iconst(types::I64, mask as i64);
            let sh = f.ins().ushr(m, i64v);
            let bit = f.ins().band_imm(sh, 1);
            let set = f.ins().icmp_imm(IntCC::NotEqual, bit, 0);
            let a = f.ins().band(exact, small);
            Some(f.ins().band(a, set))
        }
        Test::Pair { a, op, b: c } => {
            let (va, vb) = (load(f, a), load(f, c));
            Some(f.ins().fcmp(cc(op), va, vb))
        }
        Test::Arith(i) => match b.arith_at(i) {
            Some(ac) if native_arith(&ac) => {
                let mut term = |f: &mut FunctionBuilder<'_>, t: &Term| -> Value {
                    let mut o = |f: &mut FunctionBuilder<'_>, o: Opd| match o {
                        Opd::Slot(s) => load(f, s),
                        Opd::K(v) => f.ins().f32const(Ieee32::with_float(v)),
                    };
                    let a = o(f, t.a);
                    match t.op {
                        None => a,
                        Some((op, ob)) => {
                            let c = o(f, ob);
                            match op {
                                Arith::Add => f.ins().fadd(a, c),
                                Arith::Sub => f.ins().fsub(a, c),
                                Arith::Mul => f.ins().fmul(a, c),
                                _ => {
                                    let q = f.ins().fdiv(a, c);
                                    let z = f.ins().f32const(Ieee32::with_float(0.0));
                                    let nan = f.ins().f32const(Ieee32::with_float(f32::NAN));
                                    let is0 = f.ins().fcmp(FloatCC::Equal, c, z);
                                    f.ins().select(is0, nan, q)
                                }
                            }
                        }
                    }
                };
                let l = term(f, &ac.l);
                let r = term(f, &ac.r);
                Some(f.ins().fcmp(cc(ac.op), l, r))
            }
            _ => Some(call_slow(f, e, k)),
        },
        Test::Missing(s) => {
            let v = load(f, s);
            Some(f.ins().fcmp(FloatCC::Unordered, v, v))
        }
        Test::Cat { op, idx } => match b.pair_at(idx) {
            Some(p) => Some(cat(f, p, op, e, min_len)),
            None => Some(f.ins().iconst(types::I8, 0)),
        },
        Test::Set { .. } | Test::Code(..) => Some(call_slow(f, e, k)),
        Test::Hit(_) | Test::Shadow(_) => None,
    }
}

/// [`cat_cmp`](crate::checker::cat_cmp) inline: each side's id mapped through its
/// table into the shared numbering (`None` when missing, fractional, out of range or
/// outside the vocabulary), then compared. The tables are the pair's own vectors in
/// [`Branches`], which the [`Native`] code never outlives (both belong to the rule set).
fn cat(
    f: &mut FunctionBuilder<'_>,
    p: &crate::checker::CatPair,
    op: Cmp,
    e: &Env,
    min_len: &mut usize,
) -> Value {
    let trusted = MemFlags::trusted();
    let mut side = |f: &mut FunctionBuilder<'_>, slot: u32, map: &[f32]| -> (Value, Value, Value) {
        *min_len = (*min_len).max(slot as usize + 1);
        let v = f.ins().load(types::F32, trusted, e.x, (slot * 4) as i32);
        let i = f.ins().fcvt_to_uint_sat(types::I32, v);
        let back = f.ins().fcvt_from_uint(types::F32, i);
        let exact = f.ins().fcmp(FloatCC::Equal, back, v);
        let inside = f
            .ins()
            .icmp_imm(IntCC::UnsignedLessThan, i, map.len() as i64);
        let valid = f.ins().band(exact, inside);
        let zero = f.ins().iconst(types::I32, 0);
        let at = f.ins().select(valid, i, zero);
        let at = f.ins().uextend(e.ptr, at);
        let off = f.ins().imul_imm(at, 4);
        let base = f.ins().iconst(e.ptr, map.as_ptr() as i64);
        let addr = f.ins().iadd(base, off);
        let m = f.ins().load(types::F32, trusted, addr, 0);
        let z = f.ins().f32const(Ieee32::with_float(0.0));
        let known = f.ins().fcmp(FloatCC::GreaterThanOrEqual, m, z);
        let present = f.ins().fcmp(FloatCC::Ordered, v, v);
        (f.ins().band(valid, known), m, present)
    };
    let (ka, ma, pa) = side(f, p.a.0, &p.map_a);
    let (kb, mb, pb) = side(f, p.b.0, &p.map_b);
    let ne = op == Cmp::Ne;
    // Both known: the values compare.
    let same = f.ins().fcmp(FloatCC::Equal, ma, mb);
    let both = f.ins().band(ka, kb);
    let both_r = if ne { f.ins().bnot(same) } else { same };
    let both_r = f.ins().band(both, both_r);
    if !ne {
        return both_r;
    }
    // One known, in both vocabularies: surely different.
    let common = f.ins().f32const(Ieee32::with_float(p.common as f32));
    let a_common = f.ins().fcmp(FloatCC::LessThan, ma, common);
    let b_common = f.ins().fcmp(FloatCC::LessThan, mb, common);
    let nkb = f.ins().bnot(kb);
    let nka = f.ins().bnot(ka);
    let only_a = f.ins().band(ka, nkb);
    let only_a = f.ins().band(only_a, a_common);
    let only_b = f.ins().band(kb, nka);
    let only_b = f.ins().band(only_b, b_common);
    let one = f.ins().bor(only_a, only_b);
    // A missing side (not merely outside its vocabulary) makes it false.
    let present = f.ins().band(pa, pb);
    let one = f.ins().band(one, present);
    let r = f.ins().bor(both_r, one);
    // `bnot` flipped every bit of the i8 truth values: keep bit 0.
    f.ins().band_imm(r, 1)
}

/// Whether an arithmetic test compiles natively (`%` calls back); both generators.
pub(crate) fn native_arith(a: &ArithCmp) -> bool {
    [a.l, a.r]
        .iter()
        .all(|t| !matches!(t.op, Some((Arith::Rem, _))))
}

fn call_slow(f: &mut FunctionBuilder<'_>, e: &Env, node: usize) -> Value {
    let ctx = f.ins().stack_load(e.ptr, e.args, 16);
    let cb = f.ins().stack_load(e.ptr, e.args, 24);
    let len = f.ins().stack_load(e.ptr, e.args, 32);
    let n = f.ins().iconst(types::I32, node as i64);
    let call = f.ins().call_indirect(e.slow, cb, &[ctx, n, e.x, len]);
    f.inst_results(call)[0]
}
