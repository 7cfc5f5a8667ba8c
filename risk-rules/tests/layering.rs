//! The crate's modules import only downward: the floor table below is the layering,
//! lowest floor first (a module may use its own floor and those below, never one above;
//! no import through the crate root's re-exports; no import cycle between files).

use std::path::Path;

/// risk-rules' floors, lowest first. A file belongs to the floor of the longest entry
/// that prefixes its module path (`checker/scope` is on `checker`'s floor).
const FLOORS: &[&[&str]] = &[
    // Errors with spans and `file:line:col`, used by every stage.
    &["error"],
    // The pipeline: text to tokens to AST.
    &["lexer"],
    &["parser"],
    // The typed tree: operators, categorical pairs, the tree itself, then the checking and
    // the reference interpreter.
    &["checker/ops"],
    &["checker/catpair"],
    &["checker/typed"],
    &["checker"],
    // The stack program: its instructions (which the VM runs), then the emitter.
    &["compiler/op"],
    &["compiler"],
    // Execution: the stack VM, branch programs (which run the VM for some leaves), then
    // native code: what both generators share, the generators (which do not know each
    // other), and the compiled program that owns their code.
    &["exec/vm"],
    &["exec/branch"],
    &["exec/jit/abi"],
    &["exec/jit/x64", "exec/jit/cranelift"],
    &["exec", "exec/jit"],
    // A compiled rule, the static checks over rules, then whole sets and expressions.
    &["rule"],
    &["lint"],
    &["ruleset", "expression"],
    // What reads rule sets.
    &["explain", "impact", "history"],
    // The engine's rule tier.
    &["scorer"],
    // the rule tier's report (JSON) for the bindings
    &["report"],
];

#[test]
fn modules_import_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    if let Err(e) = risk_layers::check(src.as_path(), FLOORS) {
        panic!("{e}");
    }
}
