//! The checker on small crates written to a temporary folder: each rule fails when broken,
//! naming the file and line, and a clean crate passes.

use std::path::Path;

use risk_layers::{check, Problem};

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

const FLOORS: &[&[&str]] = &[&["clock", "hash"], &["state"], &["engine"]];

fn clean() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            ("lib.rs", "pub mod clock; pub mod hash; pub mod state; pub mod engine;\npub use state::Store;\n"),
            ("clock.rs", "pub struct Clock;\n"),
            ("hash.rs", "pub fn key_hash(x: u64) -> u64 { x }\n"),
            ("state/mod.rs", "mod mem;\npub use mem::Store;\nuse crate::hash::key_hash;\npub fn f() -> u64 { key_hash(1) }\n"),
            ("state/mem.rs", "use super::f;\n/// Uses the clock.\npub struct Store(pub crate::clock::Clock);\npub fn g() -> u64 { f() }\n"),
            ("engine/mod.rs", "use crate::state::{self, Store};\npub fn run(_: Store) -> u64 { state::f() }\n"),
        ],
    );
    dir
}

#[test]
fn a_layered_crate_passes() {
    let dir = clean();
    check(dir.path(), FLOORS).unwrap();
}

#[test]
fn an_upward_import_is_named_by_file_and_line() {
    let dir = clean();
    write(
        dir.path(),
        &[("state/mem.rs", "use super::f;\n\npub struct Store;\npub fn g() -> u64 { let _ = crate::engine::run; f() }\n")],
    );
    let err = check(dir.path(), FLOORS).unwrap_err();
    assert_eq!(
        err.problems,
        vec![Problem::Upward {
            file: "state/mem.rs".into(),
            line: 4,
            path: "crate::engine::run".into(),
            target: "engine".into(),
            from_floor: 1,
            to_floor: 2,
        }],
        "{err}"
    );
    assert!(
        err.to_string().contains(
            "state/mem.rs:4: `crate::engine::run` imports `engine` (floor 2) from floor 1"
        ),
        "{err}"
    );
}

#[test]
fn an_upward_path_inside_a_macro_or_a_use_group_is_found() {
    let dir = clean();
    write(
        dir.path(),
        &[
            ("hash.rs", "pub fn key_hash(x: u64) -> u64 {\n    assert!(x > 0, \"{:?}\", crate::state::f());\n    x\n}\n"),
            ("clock.rs", "use crate::{hash, engine::run};\n#[derive(Debug)]\n#[doc = \"x\"]\n#[cfg_attr(test, must_use = crate::state::X)]\npub struct Clock;\n"),
        ],
    );
    let err = check(dir.path(), FLOORS).unwrap_err();
    let lines: Vec<String> = err.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("hash.rs:2: `crate::state::f`")),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("clock.rs:1: `crate::engine::run`")),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("clock.rs:4: `crate::state::X`")),
        "{err}"
    );
    // hash -> state is also part of a cycle through state -> hash.
    assert!(
        err.problems
            .iter()
            .any(|p| matches!(p, Problem::Cycle { .. })),
        "{err}"
    );
}

#[test]
fn an_import_through_the_root_reexports_is_refused() {
    let dir = clean();
    write(
        dir.path(),
        &[(
            "engine/mod.rs",
            "use crate::Store;\npub fn run(_: Store) {}\n",
        )],
    );
    let err = check(dir.path(), FLOORS).unwrap_err();
    assert_eq!(
        err.problems,
        vec![Problem::ThroughRoot {
            file: "engine/mod.rs".into(),
            line: 1,
            path: "crate::Store".into()
        }]
    );
}

#[test]
fn a_cycle_between_files_of_one_floor_is_reported() {
    let dir = clean();
    write(
        dir.path(),
        &[
            (
                "state/mod.rs",
                "mod mem;\nmod disk;\npub use mem::Store;\npub fn f() -> u64 { 1 }\n",
            ),
            (
                "state/mem.rs",
                "use super::disk::Disk;\npub struct Store(pub Disk);\n",
            ),
            (
                "state/disk.rs",
                "\n\nuse super::mem::Store;\npub struct Disk;\npub fn h(_: &Store) {}\n",
            ),
        ],
    );
    let err = check(dir.path(), FLOORS).unwrap_err();
    assert_eq!(
        err.problems,
        vec![Problem::Cycle {
            edges: vec![
                "state/disk.rs:3 -> state/mem".into(),
                "state/mem.rs:1 -> state/disk".into()
            ]
        }],
        "{err}"
    );
}

#[test]
fn a_module_outside_the_table_and_a_file_that_does_not_parse_are_reported() {
    let dir = clean();
    write(dir.path(), &[("extra.rs", "pub fn x() {}\n")]);
    let err = check(dir.path(), FLOORS).unwrap_err();
    assert_eq!(
        err.problems,
        vec![Problem::Unplaced {
            file: "extra.rs".into(),
            module: "extra".into()
        }]
    );
    write(dir.path(), &[("extra.rs", "pub fn x( {}\n")]);
    let err = check(
        dir.path(),
        &[&["clock", "hash", "extra"], &["state"], &["engine"]],
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("extra.rs:1: not valid Rust"),
        "{err}"
    );
}
