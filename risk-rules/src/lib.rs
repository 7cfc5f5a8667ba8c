//! # risk-rules
//!
//! The rule tier of **risk**: the answer that cannot fail and the hard guardrails
//! (blocklists, limits, sanctions). A risk analyst's rule file is compiled once into a
//! flat program over feature slots and interned category ids, and evaluated without
//! allocating: about 100 rules in a microsecond or less (see BENCHMARKS.md).
//!
//! The pipeline is visible in the tree: [`lexer`] → [`parser`] (AST with spans) →
//! [`checker`] (names, types, categories; errors with `file:line:col` and a caret) →
//! [`compiler`] (flat program, fused comparisons, bounded stack) → [`exec`] (the stack
//! [`vm`], the linked [`branch`] program every rule set runs as, and its native code).
//! [`RuleSet`] is the compiled file; [`RuleScorer`] serves it as the engine's rule tier
//! with atomic hot reload; [`impact()`] compares a candidate set with the serving one.
//!
//! ## Layers
//! Modules import only downward, and `tests/layering.rs` keeps it so (its floor table is
//! the reference), lowest first: `error`; `lexer`; `parser`; `checker`; `compiler` (with
//! the stack program's instructions, `compiler::Op`); `exec` (`vm`, `branch`, `jit`:
//! `abi` shared by the `x64` and `cranelift` generators, then `native`); `rule`; `lint`;
//! `ruleset` and `expression`; `explain`, `impact` and `history`; `scorer`. This file only
//! declares modules and re-exports; inside the crate every import names the defining
//! module.
//!
//! ```
//! use risk_core::{FeatureSchema, Transaction, Channel, Scorer, Action};
//! use risk_rules::{RuleScorer, RuleSet};
//!
//! let schema = FeatureSchema::builder()
//!     .numeric_required("amount")
//!     .categorical("country", &["US", "GB", "NG", "RU"])
//!     .numeric("small_count_1h")
//!     .build()?;
//! let src = r#"
//!     version "example-1"
//!     const HIGH_RISK = ["NG", "RU"]
//!     rule R_CARD_TESTING { when small_count_1h >= 3  score 0.6  reason "CARD_TESTING" }
//!     rule R_HIGH_RISK_BIG { when country in HIGH_RISK && amount > 1000  decline  hard }
//! "#;
//! let rules = RuleScorer::new(RuleSet::compile(src, "example.rules", &schema)?, schema.clone());
//! let txn = Transaction::builder(&schema)
//!     .amount(2500.0, "USD").country("NG").numeric("small_count_1h", 4.0).build()?;
//! let s = rules.score(&txn)?;
//! assert_eq!(s.directive, Some(Action::Decline));
//! assert_eq!(s.reasons.as_slice()[0].code.name(), "R_HIGH_RISK_BIG");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The language
//! See [`parser::file`] for rule files and [`checker`] for types and missing values.
//! Operators: `||`, `&&`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `in [..]`, `+ - * / %`,
//! unary `!` and `-`, parentheses. Functions: `abs`, `min`, `max`, `log`, `is_missing`.
//! Strings compare with categorical fields and must be in the field's vocabulary.
#![deny(missing_docs)]
// Unsafe code only in `exec::jit` (calling generated code), each block with its SAFETY
// note.
#![deny(unsafe_code)]

pub mod checker;
pub mod compiler;
pub mod error;
pub mod exec;
mod explain;
mod expression;
mod history;
mod impact;
pub mod lexer;
mod lint;
pub mod parser;
mod report;
mod rule;
mod ruleset;
mod scorer;

pub use exec::{branch, vm};

pub use error::{Details, ErrorKind, RuleError, Span};
pub use explain::{Explanation, FieldValue, RuleExplanation, Step};
pub use expression::{Expression, Value};
pub use history::{History, HistoryError, RuleVersion, MAX_KEEP};
pub use impact::{impact, shadow_impact, ImpactExample, ImpactReport, RuleDelta};
pub use lint::{RuleWarning, WarningKind};
pub use parser::file::{HitPolicy, Outcome};
pub use rule::Rule;
pub use ruleset::{Hits, LoadError, NativeBackend, RuleSet, Verdict, MAX_RULES, MAX_SOURCE};
pub use scorer::{
    register, register_keeping, scorer_from_spec, ReloadError, ReloadStats, RuleScorer, RuleSlot,
    Watcher, RULE_TIER_KEY,
};

/// The default rule set for the synthetic schema (`risk_core::synth::schema()`), as text.
pub const DEFAULT_RULES: &str = include_str!("../rules/default.rules");
