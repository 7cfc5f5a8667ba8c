//! The native-code swap: a [`RuleSet`]'s linked program compiled to machine code once, in
//! the background, after which evaluation runs it instead of the interpreter.

use super::set::RuleSet;
#[cfg(feature = "jit")]
use crate::exec::jit;

/// The code generator of [`RuleSet::native_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeBackend {
    /// x86-64 templates on x86-64 System V hosts (unless `RISK_RULES_JIT=cranelift`),
    /// Cranelift elsewhere.
    Auto,
    /// Cranelift on every host it supports.
    Cranelift,
}

impl RuleSet {
    /// Compiles the set's program to native code (feature `jit`: x86-64 templates on
    /// x86-64 System V, else Cranelift), once; later calls return the first outcome.
    /// Until it has run, and where it fails (a host neither generator supports, or
    /// `RISK_RULES_JIT=0`), [`evaluate`](Self::evaluate) runs the branch-program
    /// interpreter, with the same results. [`RuleScorer`](crate::scorer::RuleScorer) runs it in
    /// the background after each swap, so a set serves from the moment it is compiled
    /// and turns native right after (BENCHMARKS.md [12]).
    pub fn native(&self) -> Result<(), String> {
        self.native_with(NativeBackend::Auto)
    }

    /// [`native`](Self::native) with a chosen code generator (the first call decides).
    pub fn native_with(&self, backend: NativeBackend) -> Result<(), String> {
        #[cfg(feature = "jit")]
        {
            let r = self.native.get_or_init(|| {
                if std::env::var("RISK_RULES_JIT").is_ok_and(|v| v == "0") {
                    return Err("RISK_RULES_JIT=0".into());
                }
                match backend {
                    NativeBackend::Auto => jit::compile(&self.branches, self.start),
                    NativeBackend::Cranelift => jit::compile_cranelift(&self.branches, self.start),
                }
            });
            r.as_ref().map(|_| ()).map_err(Clone::clone)
        }
        #[cfg(not(feature = "jit"))]
        {
            let _ = backend;
            Err("built without the `jit` feature".into())
        }
    }

    /// Which generator built the native code, once it is built: `"x64"` (templates,
    /// x86-64 System V) or `"cranelift"`.
    pub fn native_backend(&self) -> Option<&'static str> {
        #[cfg(feature = "jit")]
        if let Some(Ok(n)) = self.native.get() {
            return Some(n.backend);
        }
        None
    }

    /// How the set is evaluated now: `"native"` or `"interpreter"`.
    pub fn backend(&self) -> &'static str {
        #[cfg(feature = "jit")]
        if let Some(Ok(_)) = self.native.get() {
            return "native";
        }
        "interpreter"
    }
}
