//! A compiled rule program ([`Native`]): the memory holding its code, whichever generator
//! emitted it, and the call into it; [`compile`] picks the generator.

use super::abi::{slow, Entry};
use super::cranelift;
#[cfg(all(target_arch = "x86_64", unix))]
use super::x64;
use crate::exec::branch::Branches;
use cranelift_jit::JITModule;

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

/// Compiles the linked program `b` entered at `start`: with the x86-64 templates
/// ([`super::x64`]) on x86-64 System V hosts, else (or with
/// `RISK_RULES_JIT=cranelift`) with Cranelift. `Err`: the host is not supported or the
/// backend refused (the caller interprets instead).
pub fn compile(b: &Branches, start: u32) -> Result<Native, String> {
    #[cfg(all(target_arch = "x86_64", unix))]
    if !std::env::var("RISK_RULES_JIT").is_ok_and(|v| v == "cranelift") {
        let c = x64::compile(b, start)?;
        let code = c.buf.ptr(c.entry);
        // SAFETY: `code` is the entry of a function emitted by `x64` with
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
    let c = cranelift::compile(b, start)?;
    // SAFETY: `c.code` is the finalized function defined with exactly `Entry`'s
    // signature (six pointer-sized arguments, one i64 result, the default C calling
    // convention), and it lives as long as `c.module`, which `Native` owns.
    let entry = unsafe { std::mem::transmute::<*const u8, Entry>(c.code) };
    Ok(Native {
        module: Some(Mem::Cranelift(Box::new(c.module))),
        entry,
        backend: "cranelift",
        min_len: c.min_len,
    })
}
