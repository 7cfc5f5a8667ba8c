//! The Cranelift generator: each node of a linked rule program as its own
//! compare-and-branch block. It serves every host but x86-64 System V (where the templates
//! of [`super::x64`] are ~8x faster to emit, BENCHMARKS.md [12]) and
//! `RISK_RULES_JIT=cranelift`.
//!
//! What is emitted, per node of the linked program: ranges, `!=`, 64-bit category masks,
//! field-vs-field and one-operation arithmetic comparisons (Cranelift's ordered float
//! compares are false on `NaN`, the language's missing-value rule; division by zero
//! yields `NaN` as in [`Arith::apply`]) and `is_missing`; hit nodes store the rule index
//! and count. Sets, `%` and stack-VM leaves call back into [`Branches`] (one indirect
//! call), so every program compiles; categorical pairs are compared inline. The function
//! reads only `x[..len]` with `len` checked by the caller, and writes at most one index
//! per rule.
#![deny(unsafe_code)]

use super::abi::native_arith;
use crate::checker::{Arith, Cmp};
use crate::exec::branch::{Branches, Opd, Term, Test, FALSE};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{
    types, AbiParam, Block, InstBuilder, MemFlags, Signature, StackSlotData, StackSlotKind, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};

/// Compiled code: Cranelift's module and the entry point in it.
pub struct Code {
    /// The module holding the code (its owner frees the memory).
    pub module: JITModule,
    /// The finalized function, with [`Entry`](super::abi::Entry)'s signature.
    pub code: *const u8,
    /// Slots read (rows shorter than this are interpreted).
    pub min_len: usize,
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

/// Emits `b` entered at `start`. `Err`: the host is not supported or Cranelift refused.
pub fn compile(b: &Branches, start: u32) -> Result<Code, String> {
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
    debug_assert!(FALSE > b.nodes.len() as u32);
    Ok(Code {
        module,
        code,
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

fn call_slow(f: &mut FunctionBuilder<'_>, e: &Env, node: usize) -> Value {
    let ctx = f.ins().stack_load(e.ptr, e.args, 16);
    let cb = f.ins().stack_load(e.ptr, e.args, 24);
    let len = f.ins().stack_load(e.ptr, e.args, 32);
    let n = f.ins().iconst(types::I32, node as i64);
    let call = f.ins().call_indirect(e.slow, cb, &[ctx, n, e.x, len]);
    f.inst_results(call)[0]
}
