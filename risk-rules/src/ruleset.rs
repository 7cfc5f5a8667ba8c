//! [`RuleSet`]: a compiled, immutable rule file; and [`Expression`]: one compiled
//! expression (for tools, tests and ad-hoc analysis).

use crate::branch::Branches;
use crate::checker::{interpret, Scope, TExpr, Ty};
use crate::compiler::{Emitter, MAX_STACK};
use crate::error::{ErrorKind, Raw, RuleError, Span};
use crate::lexer::lex;
use crate::lint::RuleWarning;
use crate::parser::file::{parse_file, HitPolicy, Outcome};
use crate::parser::parse_expr;
use crate::vm::{run, Op};
use risk_core::{Action, FeatureSchema, Features, ReasonCode, VersionId};
use std::path::Path;
use std::sync::Arc;

/// Most rules in one file.
pub const MAX_RULES: usize = 10_000;
/// Largest rule file in bytes.
pub const MAX_SOURCE: usize = 8 << 20;

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Id (unique in the set).
    pub id: String,
    /// Description.
    pub description: String,
    /// Reason code reported when it fires.
    pub reason: ReasonCode,
    /// What it does when it fires.
    pub outcome: Outcome,
    /// Higher first.
    pub priority: i32,
    /// Evaluated at all.
    pub enabled: bool,
    /// Its action overrides the model.
    pub hard: bool,
    /// Evaluated and recorded apart ([`Hits::shadow`]), never counted in the score or
    /// the action.
    pub shadow: bool,
    /// The condition's source text.
    pub condition: String,
    /// Line of the rule in its file.
    pub line: usize,
    /// Column of its id.
    pub col: usize,
    /// The id, interned: what a decision's `rules_fired` holds.
    pub name: ReasonCode,
    /// Its segment of the linked program: entry and hit node (`u32::MAX`: not
    /// evaluated, or a condition that can never hold).
    seg: (u32, u32),
    pub(crate) texpr: TExpr,
}

impl Rule {
    /// Its segment of the linked program (entry, hit node); `None` when it is not
    /// evaluated or can never hold.
    pub(crate) fn segment(&self) -> Option<(u32, u32)> {
        (self.seg.0 != u32::MAX).then_some(self.seg)
    }

    /// The rule's contribution to the rule score when it fires.
    pub fn contribution(&self, review_score: f32) -> f32 {
        match self.outcome {
            Outcome::Score(s) => s,
            Outcome::Action(Action::Approve) => 0.0,
            Outcome::Action(Action::Review) => review_score,
            Outcome::Action(Action::Decline) => 1.0,
        }
    }
}

/// The code generator of [`RuleSet::native_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeBackend {
    /// x86-64 templates on x86-64 System V hosts (unless `RISK_RULES_JIT=cranelift`),
    /// Cranelift elsewhere.
    Auto,
    /// Cranelift on every host it supports.
    Cranelift,
}

/// A compiled rule file: immutable, `Send + Sync`, share it with `Arc`.
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// Enabled live rules in evaluation order (priority desc, then file order).
    plan: Vec<u32>,
    /// Enabled shadow rules, in the same order.
    shadow_plan: Vec<u32>,
    /// Every enabled rule's condition, linked into one program (see [`crate::branch`]).
    branches: Branches,
    start: u32,
    /// The same program as native code, once [`native`](Self::native) built it (or
    /// failed: the reason).
    #[cfg(feature = "jit")]
    native: std::sync::OnceLock<Result<crate::jit::Native, String>>,
    /// Hits of each shadow rule served through [`RuleScorer`](crate::RuleScorer).
    shadow_counts: Vec<std::sync::atomic::AtomicU64>,
    policy: HitPolicy,
    review_score: f32,
    version: String,
    file: String,
    schema_fingerprint: u64,
    version_id: VersionId,
    source: Arc<str>,
    warnings: Vec<RuleWarning>,
}

/// The rule tier's answer for one transaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Rule score in `[0, 1]` under the hit policy.
    pub score: f32,
    /// The most severe action among fired hard rules.
    pub directive: Option<Action>,
    /// Number of rules that fired.
    pub hits: usize,
}

/// Reusable buffer receiving the indices of fired rules, in evaluation order.
/// Keep one per thread: after its first use, evaluation allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct Hits {
    idx: Vec<u32>,
    shadow: Vec<u32>,
}

impl Hits {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }
    /// Indices (into [`RuleSet::rules`]) of the live rules that fired.
    pub fn indices(&self) -> &[u32] {
        &self.idx
    }
    /// Indices of the shadow rules that fired (they count in neither score nor action).
    pub fn shadow(&self) -> &[u32] {
        &self.shadow
    }
}

fn locate<'s>(file: &str, src: &'s str) -> impl Fn(Raw) -> RuleError + 's {
    let file = file.to_owned();
    move |r: Raw| r.locate(&file, src)
}

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
    /// promoted (for [`shadow_impact`](crate::shadow_impact)).
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
        let warnings = crate::lint::check(&rules, &order, ast.policy, file, schema);
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

    /// Every rule, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The hit policy.
    pub fn policy(&self) -> HitPolicy {
        self.policy
    }

    /// The file's `version` (or `unversioned`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Probability given to a fired non-hard `review` rule.
    pub fn review_score(&self) -> f32 {
        self.review_score
    }

    /// Identity recorded on decisions: `rules:<file>`, the file's `version`, and the
    /// FNV-1a 64 of its source text.
    pub fn version_id(&self) -> VersionId {
        self.version_id
    }

    /// The static checks' warnings (rules that can never fire, are redundant or
    /// duplicate), each with `file:line:col`; the set compiles and serves regardless.
    pub fn warnings(&self) -> &[RuleWarning] {
        &self.warnings
    }

    /// The source text it was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The file name it was compiled from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Fingerprint of the schema it was compiled against.
    pub fn schema_fingerprint(&self) -> u64 {
        self.schema_fingerprint
    }

    /// Compiles the set's program to native code (feature `jit`: x86-64 templates on
    /// x86-64 System V, else Cranelift), once; later calls return the first outcome.
    /// Until it has run, and where it fails (a host neither generator supports, or
    /// `RISK_RULES_JIT=0`), [`evaluate`](Self::evaluate) runs the branch-program
    /// interpreter, with the same results. [`RuleScorer`](crate::RuleScorer) runs it in
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
                    NativeBackend::Auto => crate::jit::compile(&self.branches, self.start),
                    NativeBackend::Cranelift => {
                        crate::jit::compile_cranelift(&self.branches, self.start)
                    }
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

    /// Enabled rules in evaluation order: live, then shadow.
    pub(crate) fn plan_order(&self) -> Vec<u32> {
        self.plan.iter().chain(&self.shadow_plan).copied().collect()
    }

    /// The linked program.
    pub(crate) fn program(&self) -> &Branches {
        &self.branches
    }

    /// Counts one hit of shadow rule `i` (the rule tier does, per scored transaction).
    pub fn count_shadow(&self, i: u32) {
        if let Some(c) = self.shadow_counts.get(i as usize) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Each shadow rule (id) with its hits counted since this set was compiled.
    pub fn shadow_hits(&self) -> Vec<(&str, u64)> {
        self.rules
            .iter()
            .zip(&self.shadow_counts)
            .filter(|(r, _)| r.shadow)
            .map(|(r, c)| (r.id.as_str(), c.load(std::sync::atomic::Ordering::Relaxed)))
            .collect()
    }

    /// How the set is evaluated now: `"native"` or `"interpreter"`.
    pub fn backend(&self) -> &'static str {
        #[cfg(feature = "jit")]
        if let Some(Ok(_)) = self.native.get() {
            return "native";
        }
        "interpreter"
    }

    /// Number of tests and stack instructions (all rules).
    pub fn code_len(&self) -> usize {
        self.branches.nodes.len() + self.branches.em.code.len()
    }

    /// Evaluates every enabled rule (or up to the first hit) over `f`, filling `hits`.
    /// Allocates nothing once `hits` has grown to the number of rules.
    #[inline]
    pub fn evaluate(&self, f: &Features, hits: &mut Hits) -> Verdict {
        #[cfg(feature = "jit")]
        if let Some(Ok(n)) = self.native.get() {
            let (live, shadow) = (self.plan.len(), self.shadow_plan.len());
            let x = f.values();
            if n.run(
                &self.branches,
                x,
                &mut hits.idx,
                &mut hits.shadow,
                live,
                shadow,
            )
            .is_some()
            {
                return self.verdict(hits);
            }
        }
        self.evaluate_interpreted(f, hits)
    }

    /// The same evaluation on the branch-program interpreter (what runs where native
    /// code is not available; for tests and comparisons).
    pub fn evaluate_interpreted(&self, f: &Features, hits: &mut Hits) -> Verdict {
        hits.idx.clear();
        hits.shadow.clear();
        self.branches
            .run_linked(self.start, f.values(), &mut hits.idx, &mut hits.shadow);
        self.verdict(hits)
    }

    fn verdict(&self, hits: &Hits) -> Verdict {
        let mut score = 0.0f32;
        let mut directive: Option<Action> = None;
        for &i in &hits.idx {
            let r = &self.rules[i as usize];
            let c = r.contribution(self.review_score);
            score = match self.policy {
                HitPolicy::CollectSum { cap } => (score + c).min(cap),
                HitPolicy::CollectMax | HitPolicy::FirstHit => score.max(c),
            };
            if let (true, Outcome::Action(a)) = (r.hard, r.outcome) {
                directive = Some(directive.map_or(a, |d| d.max(a)));
            }
        }
        Verdict {
            score,
            directive,
            hits: hits.idx.len(),
        }
    }

    /// The same evaluation by the reference interpreter over the typed trees (slow; for
    /// tests and audits of the compiler).
    pub fn evaluate_reference(&self, f: &Features, hits: &mut Hits) -> Verdict {
        hits.idx.clear();
        hits.shadow.clear();
        let holds = |i: u32| interpret(&self.rules[i as usize].texpr, f.values()) != 0.0;
        for &i in &self.plan {
            if holds(i) {
                hits.idx.push(i);
                if self.policy == HitPolicy::FirstHit {
                    break;
                }
            }
        }
        hits.shadow
            .extend(self.shadow_plan.iter().copied().filter(|&i| holds(i)));
        self.verdict(hits)
    }
}

/// A value produced by an [`Expression`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A number.
    Num(f32),
    /// A boolean.
    Bool(bool),
    /// A missing number (or category).
    Missing,
}

/// One compiled expression over a schema, with optional constants (`const` lines).
#[derive(Debug)]
pub struct Expression {
    code: Vec<Op>,
    sets: Vec<Box<[f32]>>,
    range: (u32, u32),
    texpr: TExpr,
    ty: Ty,
}

impl Expression {
    /// Compiles `src`. `consts` is rule-file text with `const` definitions (may be empty).
    pub fn compile(
        src: &str,
        consts: &str,
        schema: &Arc<FeatureSchema>,
    ) -> Result<Self, RuleError> {
        let mut scope = Scope::new(schema);
        if !consts.is_empty() {
            let loc = locate("<consts>", consts);
            let ast = parse_file(&lex(consts).map_err(&loc)?).map_err(&loc)?;
            for (n, s, e) in &ast.consts {
                scope.define(n, *s, e).map_err(&loc)?;
            }
        }
        let loc = locate("<expr>", src);
        let toks = lex(src).map_err(&loc)?;
        let e = parse_expr(&toks).map_err(&loc)?;
        let (texpr, ty) = scope.check(&e, None).map_err(&loc)?;
        let mut em = Emitter::default();
        let range = em.compile(&texpr, e.span).map_err(&loc)?;
        Ok(Self {
            code: em.code,
            sets: em.sets,
            range,
            texpr,
            ty,
        })
    }

    fn value(&self, v: f32) -> Value {
        match self.ty {
            Ty::Bool => Value::Bool(v != 0.0),
            _ if v.is_nan() => Value::Missing,
            _ => Value::Num(v),
        }
    }

    /// Evaluates with the compiled program.
    pub fn eval(&self, f: &Features) -> Value {
        let mut st = [0f32; MAX_STACK];
        self.value(run(
            &self.code,
            self.range.0,
            self.range.1,
            &self.sets,
            f.values(),
            &mut st,
        ))
    }

    /// Evaluates with the reference interpreter.
    pub fn eval_reference(&self, f: &Features) -> Value {
        self.value(interpret(&self.texpr, f.values()))
    }
}
