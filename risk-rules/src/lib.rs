//! # risk-rules
//!
//! The rule tier of **risk**: the answer that cannot fail and the hard guardrails
//! (blocklists, limits, sanctions). This crate will hold, as its own folders, the
//! pipeline of issue [2]: `lexer/` → `parser/` (AST with spans) → `checker/` (errors with
//! file:line:col) → `compiler/` (a flat program over feature slots and interned category
//! ids) → `vm/` (evaluation without allocation), plus rule files, hot reload, impact
//! analysis and a `RuleScorer` implementing [`risk_core::Scorer`].
//!
//! It is empty until that issue lands; the engine takes any [`risk_core::Scorer`] as its
//! rule tier meanwhile (the quickstart uses a transparent rule scorer of its own).
#![deny(missing_docs)]
#![forbid(unsafe_code)]
