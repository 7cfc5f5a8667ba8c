//! Building a [`RuleSet`]: rule-file text lexed, parsed, checked, each condition compiled
//! to a branch program, the programs linked in evaluation order, the static checks run.

use super::set::RuleSet;
use crate::checker::{Scope, Ty};
use crate::error::{locate, ErrorKind, Raw, RuleError, Span};
use crate::exec::branch::Branches;
use crate::lexer::lex;
use crate::lint;
use crate::parser::file::{parse_file, HitPolicy, Outcome};
use crate::rule::Rule;
use risk_core::{FeatureSchema, ReasonCode, VersionId};
use std::path::Path;
use std::sync::Arc;

/// Most rules in one file.
pub const MAX_RULES: usize = 10_000;
/// Largest rule file in bytes.
pub const MAX_SOURCE: usize = 8 << 20;

/// Failure to load a rule file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read rule file {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// The file did not compile.
    #[error("{0}")]
    Compile(#[from] RuleError),
}

impl RuleSet {
    /// Compiles rule-file text named `file` against `schema`.
    pub fn compile(src: &str, file: &str, schema: &Arc<FeatureSchema>) -> Result<Self, RuleError> {
        Self::compile_with(src, file, schema, false)
    }

    /// This set with its shadow rules live: what it would decide if they were
    /// promoted (for [`shadow_impact`](crate::impact::shadow_impact)).
    pub fn with_shadow_live(&self, schema: &Arc<FeatureSchema>) -> Result<Self, RuleError> {
        Self::compile_with(&self.source, &self.file, schema, true)
    }

    fn compile_with(
        src: &str,
        file: &str,
        schema: &Arc<FeatureSchema>,
        promote_shadow: bool,
    ) -> Result<Self, RuleError> {
        let loc = locate(file, src);
        if src.len() > MAX_SOURCE {
            return Err(loc(Raw {
                kind: ErrorKind::TooLarge(format!("{} bytes (max {MAX_SOURCE})", src.len())),
                span: Span::new(0, 0),
            }));
        }
        let toks = lex(src).map_err(&loc)?;
        let ast = parse_file(&toks).map_err(&loc)?;
        let mut scope = Scope::new(schema);
        for (name, span, e) in &ast.consts {
            scope.define(name, *span, e).map_err(&loc)?;
        }
        if ast.rules.len() > MAX_RULES {
            return Err(loc(Raw {
                kind: ErrorKind::TooLarge(format!("{} rules (max {MAX_RULES})", ast.rules.len())),
                span: ast.rules[MAX_RULES].id_span,
            }));
        }
        let mut branches = Branches::default();
        let mut entries: Vec<u32> = Vec::with_capacity(ast.rules.len());
        let mut rules: Vec<Rule> = Vec::with_capacity(ast.rules.len());
        for r in &ast.rules {
            if rules.iter().any(|x| x.id == r.id) {
                return Err(loc(Raw {
                    kind: ErrorKind::DuplicateRule(r.id.clone()),
                    span: r.id_span,
                }));
            }
            let missing = |clause| {
                loc(Raw {
                    kind: ErrorKind::MissingClause {
                        rule: r.id.clone(),
                        clause,
                    },
                    span: r.id_span,
                })
            };
            let when = r.when.as_ref().ok_or_else(|| missing("when"))?;
            let (outcome, ospan) = r.outcome.ok_or_else(|| missing("score or action"))?;
            if r.hard && !matches!(outcome, Outcome::Action(_)) {
                return Err(loc(Raw {
                    kind: ErrorKind::InvalidValue(
                        "a hard rule needs an action (approve, review or decline), not a score"
                            .into(),
                    ),
                    span: ospan,
                }));
            }
            let (texpr, _) = scope.check(when, Some(Ty::Bool)).map_err(&loc)?;
            let entry = branches.compile(&texpr, when).map_err(&loc)?;
            entries.push(entry);
            rules.push(Rule {
                id: r.id.clone(),
                description: r.description.clone(),
                reason: ReasonCode::intern(r.reason.as_deref().unwrap_or(&r.id)),
                outcome,
                priority: r.priority,
                enabled: r.enabled,
                hard: r.hard,
                shadow: r.shadow && !promote_shadow,
                condition: src[when.span.start..when.span.end].to_owned(),
                line: src[..r.id_span.start].matches('\n').count() + 1,
                col: src[..r.id_span.start]
                    .rsplit('\n')
                    .next()
                    .map_or(0, |l| l.chars().count())
                    + 1,
                name: ReasonCode::intern(&r.id),
                seg: (u32::MAX, u32::MAX),
                texpr,
            });
        }
        let mut order: Vec<u32> = (0..rules.len() as u32)
            .filter(|&i| rules[i as usize].enabled)
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(rules[i as usize].priority));
        let (shadow_plan, plan): (Vec<u32>, Vec<u32>) =
            order.iter().partition(|&&i| rules[i as usize].shadow);
        let with_entry = |p: &[u32]| -> Vec<(u32, u32)> {
            p.iter().map(|&i| (i, entries[i as usize])).collect()
        };
        let (branches, linked) = branches.link(
            &with_entry(&plan),
            &with_entry(&shadow_plan),
            ast.policy == HitPolicy::FirstHit,
        );
        for &(i, entry, hit) in &linked.segments {
            rules[i as usize].seg = (entry, hit);
        }
        let version = ast.version.unwrap_or_else(|| "unversioned".into());
        let version_id = VersionId::new(
            &format!("rules:{file}"),
            &version,
            risk_core::schema::Fnv::hash(src.as_bytes()),
        );
        let shadow_counts = (0..rules.len()).map(|_| Default::default()).collect();
        let warnings = lint::check(&rules, &order, ast.policy, file, schema);
        Ok(Self {
            rules,
            plan,
            shadow_plan,
            branches,
            start: linked.live_start,
            #[cfg(feature = "jit")]
            native: std::sync::OnceLock::new(),
            shadow_counts,
            policy: ast.policy,
            review_score: ast.review_score,
            version,
            file: file.to_owned(),
            schema_fingerprint: schema.fingerprint(),
            version_id,
            source: src.into(),
            warnings,
        })
    }

    /// Reads and compiles a rule file.
    pub fn from_file(
        path: impl AsRef<Path>,
        schema: &Arc<FeatureSchema>,
    ) -> Result<Self, LoadError> {
        let p = path.as_ref();
        let src = std::fs::read_to_string(p).map_err(|source| LoadError::Io {
            path: p.display().to_string(),
            source,
        })?;
        Ok(Self::compile(&src, &p.display().to_string(), schema)?)
    }
}
