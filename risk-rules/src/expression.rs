//! [`Expression`]: one compiled expression over a schema (for tools, tests and ad-hoc
//! analysis), run on the stack VM.

use crate::checker::{interpret, Scope, TExpr, Ty};
use crate::compiler::{Emitter, Op, MAX_STACK};
use crate::error::{locate, RuleError};
use crate::exec::vm::run;
use crate::lexer::lex;
use crate::parser::file::parse_file;
use crate::parser::parse_expr;
use risk_core::{FeatureSchema, Features};
use std::sync::Arc;

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
