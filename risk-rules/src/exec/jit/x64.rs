//! Native code for a linked rule program on x86-64 (System V), emitted directly as
//! machine code with `dynasm-rs`: one template per node, no IR, no register allocation.
//!
//! Why not Cranelift here: its `define_function` cost ~20 µs per node on this project's
//! machines (15 ms for the mixed 100-rule set, BENCHMARKS.md [12]), three times the
//! 5 ms compile budget, and most of it is register allocation and lowering that these
//! programs do not need: every node is a load, a compare and a branch, and nothing is
//! live from one node to the next. A template costs well under a microsecond per node.
//! Cranelift stays the backend everywhere else (and on request, `RISK_RULES_JIT=cranelift`).
//!
//! Registers for the whole function: `rbx` = `x`, `r12` / `r13` = where the next live /
//! shadow hit is written (bumped by 4 per hit), `r14` = the [`Branches`] context, `r15`
//! = the call-back, `rbp` = the frame (a standard `rbp` chain, so debuggers, profilers
//! and valgrind unwind through the code); `[rsp]` / `[rsp + 8]` hold the buffers'
//! starts, so the counts are pointer differences, and `[rsp + 16]` holds `len`. All are
//! callee-saved, so a call-back preserves them; the stack is 16-byte aligned at each call. Tests use `xmm0`-`xmm3`, `rax`,
//! `rcx`, `rdx` only within one node.
//!
//! Semantics match the interpreter ([`Branches`]'s `test`) exactly: `ucomiss` sets the
//! parity flag on `NaN` (a missing value), and every template sends that case where the
//! language says (every comparison false, `is_missing` true); ranges are inclusive; a
//! category id is a value whose truncation converts back to it exactly; division by
//! zero is false whatever the comparison (it yields `NaN`, as [`Arith::apply`] does).
//! Sets, `%` and stack-VM leaves call back into [`Branches`], as in the Cranelift code.
#![deny(unsafe_code)]

use super::abi::native_arith;
use crate::checker::{Arith, CatPair, Cmp};
use crate::exec::branch::{Branches, Opd, Term, Test};
use dynasmrt::x64::Assembler;
use dynasmrt::{dynasm, AssemblyOffset, DynamicLabel, DynasmApi, DynasmLabelApi, ExecutableBuffer};

/// Compiled code: the buffer and the entry's offset in it.
pub struct Code {
    /// The executable buffer (freed on drop).
    pub buf: ExecutableBuffer,
    /// The entry point.
    pub entry: AssemblyOffset,
    /// Slots read (rows shorter than this are interpreted).
    pub min_len: usize,
}

/// Emits `b` entered at `start`. `Err`: the assembler could not map memory.
pub fn compile(b: &Branches, start: u32) -> Result<Code, String> {
    let mut ops = Assembler::new().map_err(|e| e.to_string())?;
    let labels: Vec<DynamicLabel> = (0..b.nodes.len())
        .map(|_| ops.new_dynamic_label())
        .collect();
    let end = ops.new_dynamic_label();
    let mut e = Emit {
        ops,
        labels,
        end,
        min_len: 0,
    };
    let entry = e.ops.offset();
    // A standard frame (`rbp` chain), so that debuggers, profilers and valgrind unwind
    // through the generated code to its Rust caller.
    dynasm!(e.ops
        ; .arch x64
        ; push rbp
        ; mov rbp, rsp
        ; push rbx
        ; push r12
        ; push r13
        ; push r14
        ; push r15
        ; sub rsp, 24
        ; mov rbx, rdi
        ; mov r12, rsi
        ; mov r13, rdx
        ; mov r14, rcx
        ; mov r15, r8
        ; mov [rsp], rsi
        ; mov [rsp + 8], rdx
        ; mov [rsp + 16], r9
    );
    e.jump(start, 0);
    for (k, n) in b.nodes.iter().enumerate() {
        let here = e.labels[k];
        dynasm!(e.ops ; .arch x64 ; =>here);
        let next = k as u32 + 1;
        let fail = e.label(n.f);
        match n.test {
            Test::Hit(rule) => {
                let r = rule as i32;
                dynasm!(e.ops ; .arch x64 ; mov DWORD [r12], r ; add r12, 4);
            }
            Test::Shadow(rule) => {
                let r = rule as i32;
                dynasm!(e.ops ; .arch x64 ; mov DWORD [r13], r ; add r13, 4);
            }
            Test::Range { slot, lo, hi } => e.range(slot, lo, hi, fail),
            Test::Ne { slot, k } => {
                e.load(0, slot);
                e.konst(1, k);
                dynasm!(e.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jp =>fail ; je =>fail);
            }
            Test::Mask { slot, mask } => {
                e.load(0, slot);
                e.id(fail);
                let m = mask as i64;
                dynasm!(e.ops
                    ; .arch x64
                    ; cmp eax, 64
                    ; jae =>fail
                    ; mov rdx, QWORD m
                    ; bt rdx, rax
                    ; jnc =>fail
                );
            }
            Test::Pair { a, op, b: c } => {
                e.load(0, a);
                e.load(1, c);
                e.cmp(op, fail);
            }
            Test::Arith(i) => match b.arith_at(i) {
                Some(ac) if native_arith(&ac) => {
                    e.term(0, &ac.l, fail);
                    e.term(1, &ac.r, fail);
                    e.cmp(ac.op, fail);
                }
                _ => e.slow(k, fail),
            },
            Test::Missing(s) => {
                e.load(0, s);
                dynasm!(e.ops ; .arch x64 ; ucomiss xmm0, xmm0 ; jnp =>fail);
            }
            Test::Cat { op, idx } => match b.pair_at(idx) {
                Some(p) => e.cat(p, op, fail),
                None => dynasm!(e.ops ; .arch x64 ; jmp =>fail),
            },
            Test::Set { .. } | Test::Code(..) => e.slow(k, fail),
        }
        e.jump(n.t, next);
    }
    dynasm!(e.ops
        ; .arch x64
        ; =>end
        ; mov rax, r12
        ; sub rax, [rsp]
        ; shr rax, 2
        ; mov rdx, r13
        ; sub rdx, [rsp + 8]
        // (bytes / 4) << 32: the byte count is a multiple of 4.
        ; shl rdx, 30
        ; or rax, rdx
        ; add rsp, 24
        ; pop r15
        ; pop r14
        ; pop r13
        ; pop r12
        ; pop rbx
        ; pop rbp
        ; ret
    );
    let min_len = e.min_len;
    let buf = e
        .ops
        .finalize()
        .map_err(|_| "could not make the rule code executable".to_string())?;
    Ok(Code {
        buf,
        entry,
        min_len,
    })
}

struct Emit {
    ops: Assembler,
    labels: Vec<DynamicLabel>,
    end: DynamicLabel,
    min_len: usize,
}

impl Emit {
    /// The label of successor `t` (a node, or the end for either exit).
    fn label(&self, t: u32) -> DynamicLabel {
        self.labels.get(t as usize).copied().unwrap_or(self.end)
    }

    /// Goes on at `t`, unless `t` is the node emitted next (`next`).
    fn jump(&mut self, t: u32, next: u32) {
        if t != next || t as usize >= self.labels.len() {
            let l = self.label(t);
            dynasm!(self.ops ; .arch x64 ; jmp =>l);
        }
    }

    /// `xmm{r}` = `x[slot]`.
    fn load(&mut self, r: u8, slot: u32) {
        self.min_len = self.min_len.max(slot as usize + 1);
        let off = (slot * 4) as i32;
        match r {
            0 => dynasm!(self.ops ; .arch x64 ; movss xmm0, DWORD [rbx + off]),
            1 => dynasm!(self.ops ; .arch x64 ; movss xmm1, DWORD [rbx + off]),
            2 => dynasm!(self.ops ; .arch x64 ; movss xmm2, DWORD [rbx + off]),
            _ => dynasm!(self.ops ; .arch x64 ; movss xmm3, DWORD [rbx + off]),
        }
    }

    /// `xmm{r}` = `k`.
    fn konst(&mut self, r: u8, k: f32) {
        let bits = k.to_bits() as i32;
        dynasm!(self.ops ; .arch x64 ; mov eax, bits);
        match r {
            0 => dynasm!(self.ops ; .arch x64 ; movd xmm0, eax),
            1 => dynasm!(self.ops ; .arch x64 ; movd xmm1, eax),
            2 => dynasm!(self.ops ; .arch x64 ; movd xmm2, eax),
            _ => dynasm!(self.ops ; .arch x64 ; movd xmm3, eax),
        }
    }

    fn opd(&mut self, r: u8, o: Opd) {
        match o {
            Opd::Slot(s) => self.load(r, s),
            Opd::K(k) => self.konst(r, k),
        }
    }

    /// `lo <= xmm0 = x[slot] <= hi`, else `fail` (`NaN` bounds: never).
    fn range(&mut self, slot: u32, lo: f32, hi: f32, fail: DynamicLabel) {
        if lo.is_nan() || hi.is_nan() {
            dynasm!(self.ops ; .arch x64 ; jmp =>fail);
            return;
        }
        self.load(0, slot);
        if lo == hi {
            self.konst(1, lo);
            dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jp =>fail ; jne =>fail);
            return;
        }
        if lo != f32::NEG_INFINITY {
            // x < lo, or unordered: CF = 1.
            self.konst(1, lo);
            dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jb =>fail);
        }
        if hi != f32::INFINITY {
            // hi < x, or unordered: CF = 1.
            self.konst(1, hi);
            dynasm!(self.ops ; .arch x64 ; ucomiss xmm1, xmm0 ; jb =>fail);
        }
        if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
            // Any value but missing.
            dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm0 ; jp =>fail);
        }
    }

    /// `xmm0 op xmm1`, else `fail` (false when either is `NaN`).
    fn cmp(&mut self, op: Cmp, fail: DynamicLabel) {
        match op {
            // a < b  <=>  b > a: `ucomiss b, a` leaves CF = ZF = 0 ("above").
            Cmp::Lt => dynasm!(self.ops ; .arch x64 ; ucomiss xmm1, xmm0 ; jbe =>fail),
            Cmp::Le => dynasm!(self.ops ; .arch x64 ; ucomiss xmm1, xmm0 ; jb =>fail),
            Cmp::Gt => dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jbe =>fail),
            Cmp::Ge => dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jb =>fail),
            Cmp::Eq => dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jp =>fail ; jne =>fail),
            Cmp::Ne => dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm1 ; jp =>fail ; je =>fail),
        }
    }

    /// `xmm{r}` = the term (`xmm2` is scratch); a division by zero goes to `fail`.
    fn term(&mut self, r: u8, t: &Term, fail: DynamicLabel) {
        self.opd(r, t.a);
        let Some((op, b)) = t.op else { return };
        self.opd(2, b);
        if op == Arith::Div {
            // `b == 0` (either sign): NaN, so the comparison is false.
            dynasm!(self.ops
                ; .arch x64
                ; xorps xmm3, xmm3
                ; ucomiss xmm2, xmm3
                ; je =>fail
            );
        }
        match (r, op) {
            (0, Arith::Add) => dynasm!(self.ops ; .arch x64 ; addss xmm0, xmm2),
            (0, Arith::Sub) => dynasm!(self.ops ; .arch x64 ; subss xmm0, xmm2),
            (0, Arith::Mul) => dynasm!(self.ops ; .arch x64 ; mulss xmm0, xmm2),
            (0, _) => dynasm!(self.ops ; .arch x64 ; divss xmm0, xmm2),
            (_, Arith::Add) => dynasm!(self.ops ; .arch x64 ; addss xmm1, xmm2),
            (_, Arith::Sub) => dynasm!(self.ops ; .arch x64 ; subss xmm1, xmm2),
            (_, Arith::Mul) => dynasm!(self.ops ; .arch x64 ; mulss xmm1, xmm2),
            (_, _) => dynasm!(self.ops ; .arch x64 ; divss xmm1, xmm2),
        }
    }

    /// `eax` = the category id in `xmm0`, or `not_id` when `xmm0` is not one (missing,
    /// fractional, negative or too large); uses `xmm3`.
    fn id(&mut self, not_id: DynamicLabel) {
        dynasm!(self.ops
            ; .arch x64
            ; cvttss2si eax, xmm0
            ; xorps xmm3, xmm3
            ; cvtsi2ss xmm3, eax
            ; ucomiss xmm3, xmm0
            ; jp =>not_id
            ; jne =>not_id
            ; test eax, eax
            ; js =>not_id
        );
    }

    /// One side of a categorical pair: `xmm0` = `x[slot]` mapped through `map` into
    /// `xmm{r}` (1 or 2), or `unknown` (not an id of the vocabulary; a missing value
    /// jumps to `fail` first, since a missing side makes either comparison false).
    fn side(&mut self, slot: u32, map: &[f32], r: u8, unknown: DynamicLabel, fail: DynamicLabel) {
        self.load(0, slot);
        dynasm!(self.ops ; .arch x64 ; ucomiss xmm0, xmm0 ; jp =>fail);
        self.id(unknown);
        let len = map.len() as i32;
        let base = map.as_ptr() as i64;
        dynasm!(self.ops
            ; .arch x64
            ; cmp eax, len
            ; jae =>unknown
            ; mov rdx, QWORD base
        );
        match r {
            1 => dynasm!(self.ops ; .arch x64 ; movss xmm1, DWORD [rdx + rax * 4]),
            _ => dynasm!(self.ops ; .arch x64 ; movss xmm2, DWORD [rdx + rax * 4]),
        }
        // Outside the vocabulary: -1.
        dynasm!(self.ops ; .arch x64 ; xorps xmm3, xmm3);
        match r {
            1 => dynasm!(self.ops ; .arch x64 ; ucomiss xmm1, xmm3 ; jb =>unknown),
            _ => dynasm!(self.ops ; .arch x64 ; ucomiss xmm2, xmm3 ; jb =>unknown),
        }
    }

    /// [`cat_cmp`](crate::checker::cat_cmp) as branches. The tables are the pair's own
    /// vectors in [`Branches`], which the code never outlives (both belong to the set).
    fn cat(&mut self, p: &CatPair, op: Cmp, fail: DynamicLabel) {
        let ne = op == Cmp::Ne;
        let a_unknown = self.ops.new_dynamic_label();
        let b_unknown = self.ops.new_dynamic_label();
        let b_only_a = self.ops.new_dynamic_label();
        let holds = self.ops.new_dynamic_label();
        // A missing side makes either comparison false: `side` sends it to `fail`, and
        // every path that can hold reads both sides.
        self.side(p.a.0, &p.map_a, 1, a_unknown, fail);
        // a known (xmm1).
        self.side(p.b.0, &p.map_b, 2, b_only_a, fail);
        // Both known: the shared numbers compare.
        dynasm!(self.ops ; .arch x64 ; ucomiss xmm1, xmm2);
        if ne {
            dynasm!(self.ops ; .arch x64 ; je =>fail ; jmp =>holds);
        } else {
            dynasm!(self.ops ; .arch x64 ; jne =>fail ; jmp =>holds);
        }
        let common = p.common as f32;
        // a known, b not: `!=` holds when a's value is in both vocabularies.
        dynasm!(self.ops ; .arch x64 ; =>b_only_a);
        if ne {
            self.konst(3, common);
            dynasm!(self.ops ; .arch x64 ; ucomiss xmm3, xmm1 ; jbe =>fail ; jmp =>holds);
        } else {
            dynasm!(self.ops ; .arch x64 ; jmp =>fail);
        }
        // a unknown: `!=` holds when b is known and in both vocabularies.
        dynasm!(self.ops ; .arch x64 ; =>a_unknown);
        if ne {
            self.side(p.b.0, &p.map_b, 2, b_unknown, fail);
            self.konst(3, common);
            dynasm!(self.ops ; .arch x64 ; ucomiss xmm3, xmm2 ; jbe =>fail ; jmp =>holds);
            dynasm!(self.ops ; .arch x64 ; =>b_unknown ; jmp =>fail);
        } else {
            dynasm!(self.ops ; .arch x64 ; =>b_unknown ; jmp =>fail);
        }
        dynasm!(self.ops ; .arch x64 ; =>holds);
    }

    /// The call-back `slow(ctx, node, x, len)`; false goes to `fail`.
    fn slow(&mut self, node: usize, fail: DynamicLabel) {
        let n = node as i32;
        dynasm!(self.ops
            ; .arch x64
            ; mov rdi, r14
            ; mov esi, n
            ; mov rdx, rbx
            ; mov rcx, [rsp + 16]
            ; call r15
            ; test al, al
            ; jz =>fail
        );
    }
}
