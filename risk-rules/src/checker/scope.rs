//! Checking: names resolved against the schema and the file's constants, types checked,
//! category strings interned; the result is the typed tree ([`TExpr`]).

use super::catpair::CatPair;
use super::ops::{Arith, Cmp, Func};
use super::typed::{TExpr, Ty};
use crate::error::{err, ErrorKind, Result, Span};
use crate::parser::{BinOp, Expr, ExprKind, UnOp};
use risk_core::schema::FieldKind;
use risk_core::{FeatureSchema, Slot};
use std::collections::HashMap;

/// Most list items (after constant expansion) in one `in`.
pub const MAX_LIST: usize = 10_000;

/// A constant's value.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstVal {
    /// Number.
    Num(f64),
    /// String.
    Str(String),
    /// Boolean.
    Bool(bool),
    /// List of numbers.
    NumList(Vec<f64>),
    /// List of strings.
    StrList(Vec<String>),
}

impl ConstVal {
    fn describe(&self) -> &'static str {
        match self {
            ConstVal::Num(_) => "number",
            ConstVal::Str(_) => "string",
            ConstVal::Bool(_) => "boolean",
            ConstVal::NumList(_) => "list of numbers",
            ConstVal::StrList(_) => "list of strings",
        }
    }
}

/// Names visible to expressions.
#[derive(Debug)]
pub struct Scope<'a> {
    /// The schema.
    pub schema: &'a FeatureSchema,
    /// Constants by name.
    pub consts: HashMap<String, ConstVal>,
}

/// What an untyped sub-expression turned out to be before it is placed.
enum Checked {
    Typed(TExpr, Ty),
    Str(String),
    List(ConstVal),
}

fn describe_ty(schema: &FeatureSchema, t: &Ty) -> String {
    match t {
        Ty::Num => "number".into(),
        Ty::Bool => "boolean".into(),
        Ty::Cat(s) => format!("categorical `{}`", schema.field(*s).name),
    }
}

impl<'a> Scope<'a> {
    /// A scope with no constants.
    pub fn new(schema: &'a FeatureSchema) -> Self {
        Self {
            schema,
            consts: HashMap::new(),
        }
    }

    /// Evaluates a `const` definition (literals, negated numbers, lists, earlier consts).
    pub fn define(&mut self, name: &str, span: Span, e: &Expr) -> Result<()> {
        if self.consts.contains_key(name) || self.schema.slot(name).is_some() {
            return err(ErrorKind::DuplicateConst(name.to_owned()), span);
        }
        let v = self.const_value(e)?;
        self.consts.insert(name.to_owned(), v);
        Ok(())
    }

    fn const_value(&self, e: &Expr) -> Result<ConstVal> {
        Ok(match &e.kind {
            ExprKind::Num(n) => ConstVal::Num(*n),
            ExprKind::Unary(UnOp::Neg, x) => match self.const_value(x)? {
                ConstVal::Num(n) => ConstVal::Num(-n),
                other => return mismatch("number", other.describe(), x.span),
            },
            ExprKind::Str(s) => ConstVal::Str(s.clone()),
            ExprKind::Bool(b) => ConstVal::Bool(*b),
            ExprKind::Ident(n) => match self.consts.get(n) {
                Some(v) => v.clone(),
                None => return err(ErrorKind::UnknownField(n.clone()), e.span),
            },
            ExprKind::List(items) => {
                if items.len() > MAX_LIST {
                    return err(
                        ErrorKind::TooLarge(format!("list of {} items", items.len())),
                        e.span,
                    );
                }
                let mut nums = Vec::new();
                let mut strs = Vec::new();
                for it in items {
                    match self.const_value(it)? {
                        ConstVal::Num(n) if strs.is_empty() => nums.push(n),
                        ConstVal::Str(s) if nums.is_empty() => strs.push(s),
                        other => {
                            let want = if nums.is_empty() && !strs.is_empty() {
                                "string"
                            } else {
                                "number"
                            };
                            return mismatch(want, other.describe(), it.span);
                        }
                    }
                }
                if strs.is_empty() {
                    ConstVal::NumList(nums)
                } else {
                    ConstVal::StrList(strs)
                }
            }
            _ => {
                return err(
                    ErrorKind::Expected {
                        expected: "a literal, a list of literals or a constant".into(),
                        found: "an expression".into(),
                    },
                    e.span,
                )
            }
        })
    }

    /// Checks an expression that must produce `want` (`None`: any value type).
    pub fn check(&self, e: &Expr, want: Option<Ty>) -> Result<(TExpr, Ty)> {
        let (t, ty) = self.value(e)?;
        if let Some(w) = want {
            if ty != w {
                return mismatch(
                    &describe_ty(self.schema, &w),
                    &describe_ty(self.schema, &ty),
                    e.span,
                );
            }
        }
        Ok((t, ty))
    }

    /// A sub-expression that must be a value (not a bare string or list).
    fn value(&self, e: &Expr) -> Result<(TExpr, Ty)> {
        match self.any(e)? {
            Checked::Typed(t, ty) => Ok((t, ty)),
            Checked::Str(_) => mismatch("a number, boolean or field", "string", e.span),
            Checked::List(_) => mismatch("a number, boolean or field", "list", e.span),
        }
    }

    fn num(&self, e: &Expr) -> Result<TExpr> {
        let (t, ty) = self.value(e)?;
        if ty != Ty::Num {
            return mismatch("number", &describe_ty(self.schema, &ty), e.span);
        }
        Ok(t)
    }

    fn boolean(&self, e: &Expr) -> Result<TExpr> {
        let (t, ty) = self.value(e)?;
        if ty != Ty::Bool {
            return mismatch("boolean", &describe_ty(self.schema, &ty), e.span);
        }
        Ok(t)
    }

    fn any(&self, e: &Expr) -> Result<Checked> {
        use Checked::Typed;
        Ok(match &e.kind {
            ExprKind::Num(n) => Typed(TExpr::Num(*n as f32), Ty::Num),
            ExprKind::Bool(b) => Typed(TExpr::Bool(*b), Ty::Bool),
            ExprKind::Str(s) => Checked::Str(s.clone()),
            ExprKind::List(_) => Checked::List(self.const_value(e)?),
            ExprKind::Ident(name) => {
                if let Some(c) = self.consts.get(name) {
                    match c {
                        ConstVal::Num(n) => Typed(TExpr::Num(*n as f32), Ty::Num),
                        ConstVal::Bool(b) => Typed(TExpr::Bool(*b), Ty::Bool),
                        ConstVal::Str(s) => Checked::Str(s.clone()),
                        l => Checked::List(l.clone()),
                    }
                } else if let Some(slot) = self.schema.slot(name) {
                    match self.schema.field(slot).kind {
                        FieldKind::Numeric => Typed(TExpr::Slot(slot), Ty::Num),
                        FieldKind::Categorical => Typed(TExpr::Slot(slot), Ty::Cat(slot)),
                    }
                } else {
                    return err(ErrorKind::UnknownField(name.clone()), e.span);
                }
            }
            ExprKind::Unary(UnOp::Neg, x) => Typed(TExpr::Neg(Box::new(self.num(x)?)), Ty::Num),
            ExprKind::Unary(UnOp::Not, x) => {
                Typed(TExpr::Not(Box::new(self.boolean(x)?)), Ty::Bool)
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b)?,
            ExprKind::In(a, b) => self.membership(a, b)?,
            ExprKind::Call(name, args) => self.call(name, args, e.span)?,
        })
    }

    fn binary(&self, op: BinOp, a: &Expr, b: &Expr) -> Result<Checked> {
        let arith = |x: Arith| -> Result<Checked> {
            Ok(Checked::Typed(
                TExpr::Arith(x, Box::new(self.num(a)?), Box::new(self.num(b)?)),
                Ty::Num,
            ))
        };
        let cmp = match op {
            BinOp::Or | BinOp::And => {
                let (x, y) = (Box::new(self.boolean(a)?), Box::new(self.boolean(b)?));
                let t = if op == BinOp::Or {
                    TExpr::Or(x, y)
                } else {
                    TExpr::And(x, y)
                };
                return Ok(Checked::Typed(t, Ty::Bool));
            }
            BinOp::Add => return arith(Arith::Add),
            BinOp::Sub => return arith(Arith::Sub),
            BinOp::Mul => return arith(Arith::Mul),
            BinOp::Div => return arith(Arith::Div),
            BinOp::Rem => return arith(Arith::Rem),
            BinOp::Eq => Cmp::Eq,
            BinOp::Ne => Cmp::Ne,
            BinOp::Lt => Cmp::Lt,
            BinOp::Le => Cmp::Le,
            BinOp::Gt => Cmp::Gt,
            BinOp::Ge => Cmp::Ge,
        };
        let equality = matches!(cmp, Cmp::Eq | Cmp::Ne);
        let (l, r) = (self.any(a)?, self.any(b)?);
        let t = match (l, r) {
            (Checked::Typed(x, Ty::Cat(s)), Checked::Str(v)) => {
                self.cat_eq(equality, cmp, x, s, &v, b.span, a.span)?
            }
            (Checked::Str(v), Checked::Typed(x, Ty::Cat(s))) => {
                self.cat_eq(equality, cmp, x, s, &v, a.span, b.span)?
            }
            (Checked::Typed(x, Ty::Num), Checked::Typed(y, Ty::Num)) => {
                TExpr::Cmp(cmp, Box::new(x), Box::new(y))
            }
            (
                Checked::Typed(TExpr::Slot(x), Ty::Cat(_)),
                Checked::Typed(TExpr::Slot(y), Ty::Cat(_)),
            ) if equality => TExpr::CatCmp(cmp, Box::new(CatPair::new(self.schema, x, y))),
            (Checked::Typed(x, Ty::Bool), Checked::Typed(y, Ty::Bool)) if equality => {
                TExpr::Cmp(cmp, Box::new(x), Box::new(y))
            }
            (Checked::Typed(_, lt), Checked::Typed(_, rt)) => {
                let found = format!(
                    "{} {} {}",
                    describe_ty(self.schema, &lt),
                    op.symbol(),
                    describe_ty(self.schema, &rt)
                );
                let expected = if equality {
                    "two numbers, two booleans, two categorical fields, or a categorical field and a string"
                } else {
                    "two numbers"
                };
                return mismatch(expected, &found, a.span.to(b.span));
            }
            (Checked::Str(_), _) => {
                return mismatch("a categorical field to compare with", "string", a.span)
            }
            (_, Checked::Str(_)) => {
                return mismatch("a categorical field to compare with", "string", b.span)
            }
            (Checked::List(_), _) => return mismatch("a value", "list", a.span),
            (_, Checked::List(_)) => {
                return mismatch("a value (lists go after `in`)", "list", b.span)
            }
        };
        Ok(Checked::Typed(t, Ty::Bool))
    }

    #[allow(clippy::too_many_arguments)]
    fn cat_eq(
        &self,
        equality: bool,
        cmp: Cmp,
        x: TExpr,
        slot: Slot,
        value: &str,
        value_span: Span,
        field_span: Span,
    ) -> Result<TExpr> {
        if !equality {
            return mismatch(
                "`==`, `!=` or `in` on a categorical field",
                "an ordering comparison",
                field_span.to(value_span),
            );
        }
        let id = self.intern(slot, value, value_span)?;
        Ok(TExpr::Cmp(cmp, Box::new(x), Box::new(TExpr::Num(id))))
    }

    fn intern(&self, slot: Slot, value: &str, span: Span) -> Result<f32> {
        let field = self.schema.field(slot);
        match field.lookup(value) {
            Some(id) => Ok(id as f32),
            None => err(
                ErrorKind::UnknownCategory {
                    field: field.name.clone(),
                    value: value.to_owned(),
                },
                span,
            ),
        }
    }

    fn membership(&self, a: &Expr, b: &Expr) -> Result<Checked> {
        if let (ExprKind::Ident(k), ExprKind::Ident(l)) = (&a.kind, &b.kind) {
            if let Some(list) = l.strip_prefix("list.") {
                if !self.consts.contains_key(l) && self.schema.slot(l).is_none() {
                    return self.list_membership(k, list, b.span);
                }
            }
        }
        let (x, ty) = self.value(a)?;
        let list = match self.any(b)? {
            Checked::List(l) => l,
            Checked::Str(_) => return mismatch("a list", "string", b.span),
            Checked::Typed(_, t) => {
                return mismatch("a list", &describe_ty(self.schema, &t), b.span)
            }
        };
        let mut set: Vec<f32> = match (&ty, list) {
            (Ty::Num, ConstVal::NumList(v)) => v.iter().map(|&n| n as f32).collect(),
            (Ty::Cat(slot), ConstVal::StrList(v)) => {
                // Locate each item's span when the list is written inline.
                let spans: Vec<Span> = match &b.kind {
                    ExprKind::List(items) => items.iter().map(|i| i.span).collect(),
                    _ => vec![b.span; v.len()],
                };
                let mut ids = Vec::with_capacity(v.len());
                for (s, sp) in v.iter().zip(spans) {
                    ids.push(self.intern(*slot, s, sp)?);
                }
                ids
            }
            (Ty::Cat(_), ConstVal::NumList(v)) if v.is_empty() => Vec::new(),
            (Ty::Num, ConstVal::StrList(_)) => {
                return mismatch("a list of numbers", "a list of strings", b.span)
            }
            (Ty::Cat(_), ConstVal::NumList(_)) => {
                return mismatch("a list of strings", "a list of numbers", b.span)
            }
            (t, _) => {
                return mismatch(
                    "a number or categorical field before `in`",
                    &describe_ty(self.schema, t),
                    a.span,
                )
            }
        };
        // Normalise -0.0 to 0.0 so that ordered search agrees with `==`.
        set.iter_mut().for_each(|v| *v += 0.0);
        set.sort_by(f32::total_cmp);
        set.dedup();
        Ok(Checked::Typed(TExpr::In(Box::new(x), set), Ty::Bool))
    }

    /// `key in list.name`: the entity-state list membership field `list.<name>.<key>`
    /// (1 when the transaction's key is a live entry; missing when it has no such key,
    /// so `key in list.x` is false and `!(key in list.x)` true).
    fn list_membership(&self, key: &str, list: &str, span: Span) -> Result<Checked> {
        let src = risk_core::state::KeySource::parse(key);
        let field = format!("list.{list}.{}", src.name());
        if let Some(slot) = self.schema.slot(&field) {
            let t = TExpr::Cmp(
                Cmp::Eq,
                Box::new(TExpr::Slot(slot)),
                Box::new(TExpr::Num(1.0)),
            );
            return Ok(Checked::Typed(t, Ty::Bool));
        }
        let prefix = format!("list.{list}.");
        match self
            .schema
            .fields()
            .iter()
            .find_map(|f| f.name.strip_prefix(&prefix))
        {
            Some(held) => mismatch(
                &format!("a {held} key (list {list} holds {held} keys)"),
                src.name(),
                span,
            ),
            None => err(ErrorKind::UnknownField(format!("list.{list}")), span),
        }
    }

    fn call(&self, name: &str, args: &[Expr], span: Span) -> Result<Checked> {
        let (f, arity): (Func, (usize, usize)) = match name {
            "abs" => (Func::Abs, (1, 1)),
            "log" => (Func::Log, (1, 1)),
            "min" => (Func::Min, (1, 16)),
            "max" => (Func::Max, (1, 16)),
            "is_missing" => (Func::IsMissing, (1, 1)),
            _ => return err(ErrorKind::UnknownFunction(name.to_owned()), span),
        };
        if args.len() < arity.0 || args.len() > arity.1 {
            let expected = if arity.0 == arity.1 {
                arity.0.to_string()
            } else {
                format!("{} to {}", arity.0, arity.1)
            };
            return err(
                ErrorKind::WrongArity {
                    name: name.to_owned(),
                    expected,
                    got: args.len(),
                },
                span,
            );
        }
        let targs = if f == Func::IsMissing {
            let (t, ty) = self.value(&args[0])?;
            if ty == Ty::Bool {
                return mismatch("a number or a field", "boolean", args[0].span);
            }
            vec![t]
        } else {
            args.iter()
                .map(|a| self.num(a))
                .collect::<Result<Vec<_>>>()?
        };
        let ty = if f == Func::IsMissing {
            Ty::Bool
        } else {
            Ty::Num
        };
        Ok(Checked::Typed(TExpr::Call(f, targs), ty))
    }
}

fn mismatch<T>(expected: &str, found: &str, span: Span) -> Result<T> {
    err(
        ErrorKind::TypeMismatch {
            expected: expected.to_owned(),
            found: found.to_owned(),
        },
        span,
    )
}
