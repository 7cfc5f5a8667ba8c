//! # risk-layers
//!
//! A test tool that keeps a crate's modules layered: it parses every file under `src/` (with
//! `syn`, so comments, strings, nested modules and macro bodies are read as rustc reads them)
//! and reports
//!
//! - an import that runs **upward** against a floor table (a module may use its own floor and
//!   the floors below it, never one above);
//! - an import **through the crate root** (`crate::Action` where `lib.rs` only re-exports it):
//!   inside the crate every import names the module that defines the item;
//! - an import **cycle** between files (edges from a module to its own sub-modules are the
//!   parent's business and do not count);
//! - a file that **no floor** places.
//!
//! Each crate's integration tests call [`check`] with the floor table written in the test, so
//! the table is reviewed with the code it governs.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("lib.rs"), "mod low; mod high;")?;
//! std::fs::write(dir.path().join("low.rs"), "use crate::high::Thing;")?;
//! std::fs::write(dir.path().join("high.rs"), "pub struct Thing;")?;
//! let err = risk_layers::check(dir.path(), &[&["low"], &["high"]]).unwrap_err();
//! assert!(err.to_string().contains("low.rs:1"), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod graph;
mod scan;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use scan::Import;

/// One thing wrong with the crate's layering.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// `file:line` imports a module on a higher floor.
    Upward {
        /// The importing file, relative to `src/`.
        file: String,
        /// Line of the import.
        line: usize,
        /// The path as written (`crate::engine::Engine`).
        path: String,
        /// The module the path resolves to (`engine`).
        target: String,
        /// Floor of the importing file.
        from_floor: usize,
        /// Floor of the imported module.
        to_floor: usize,
    },
    /// `file:line` imports an item through the crate root's re-exports.
    ThroughRoot {
        /// The importing file, relative to `src/`.
        file: String,
        /// Line of the import.
        line: usize,
        /// The path as written (`crate::Action`).
        path: String,
    },
    /// Files that import each other, directly or through others.
    Cycle {
        /// One `file:line -> module` edge per file of the cycle.
        edges: Vec<String>,
    },
    /// A file under `src/` could not be read or parsed.
    Unreadable {
        /// What went wrong, naming the file.
        message: String,
    },
    /// A module that no entry of the floor table places.
    Unplaced {
        /// The file, relative to `src/`.
        file: String,
        /// Its module path (`state/mem`).
        module: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Upward { file, line, path, target, from_floor, to_floor } => write!(
                f,
                "{file}:{line}: `{path}` imports `{target}` (floor {to_floor}) from floor {from_floor}: upward"
            ),
            Problem::ThroughRoot { file, line, path } => write!(
                f,
                "{file}:{line}: `{path}` imports through the crate root's re-exports; name the defining module"
            ),
            Problem::Cycle { edges } => write!(f, "import cycle: {}", edges.join(", ")),
            Problem::Unreadable { message } => f.write_str(message),
            Problem::Unplaced { file, module } => {
                write!(f, "{file}: module `{module}` is on no floor of the table")
            }
        }
    }
}

/// Everything [`check`] found, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The problems, one per import (cycles once each).
    pub problems: Vec<Problem>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} layering problem(s):", self.problems.len())?;
        for p in &self.problems {
            writeln!(f, "  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Report {}

/// Why the crate could not be read at all.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadError {
    /// A file or folder under `src/` could not be read.
    Io(PathBuf, std::io::Error),
    /// A file is not valid Rust.
    Parse(PathBuf, syn::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            ReadError::Parse(p, e) => {
                let at = e.span().start();
                write!(f, "{}:{}: not valid Rust: {e}", p.display(), at.line)
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// Checks the crate whose sources are under `src` against `floors`, lowest floor first.
///
/// Each floor lists module paths (`"clock"`, `"state"`, `"engine/replay"`); a file belongs to
/// the floor of the longest entry that is a prefix of its module path. The crate root (`lib.rs`
/// or `main.rs`) is above every floor. A file that cannot be read or parsed is reported as
/// [`Problem::Unreadable`].
pub fn check(src: &Path, floors: &[&[&str]]) -> Result<(), Report> {
    let report = match try_check(src, floors) {
        Ok(report) => report,
        Err(e) => Report {
            problems: vec![Problem::Unreadable {
                message: e.to_string(),
            }],
        },
    };
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(report)
    }
}

/// Like [`check`], but tells an unreadable crate apart and returns the report even when it
/// is empty.
pub fn try_check(src: &Path, floors: &[&[&str]]) -> Result<Report, ReadError> {
    let modules = scan::discover(src)?;
    let known: Vec<Vec<String>> = modules.keys().cloned().collect();
    let mut imports = BTreeMap::new();
    for (module, file) in &modules {
        imports.insert(module.clone(), scan::imports(src, file, module, &known)?);
    }
    Ok(graph::judge(&modules, &imports, floors))
}
