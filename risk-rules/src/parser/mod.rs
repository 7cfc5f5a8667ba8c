//! Parser: tokens → AST with spans. Expressions by precedence climbing; rule files in
//! [`file`].
//!
//! Precedence, loosest first: `||`; `&&`; `==` `!=`; `<` `<=` `>` `>=` `in`; `+` `-`;
//! `*` `/` `%`; unary `!` `-`; calls, literals, lists, parentheses.

pub mod file;

use crate::error::{err, ErrorKind, Result, Span};
use crate::lexer::{Tok, Token};

/// Nesting limit (parentheses, unary operators, calls, lists), enforced while parsing
/// (before any recursion can blow the stack).
pub const MAX_DEPTH: usize = 64;

/// Height limit of an expression tree, enforced while parsing. A chain of binary
/// operators (`a + a + ... + a`) nests no parentheses but builds a tree as tall as the
/// chain, and every later pass (checker, compiler, interpreter, `Drop`) recurses over
/// it: bounding the height here bounds them all. 256 levels cost a few hundred bytes of
/// stack each, well inside a JVM or Go thread's stack; longer lists belong in `in [...]`.
pub const MAX_TREE_DEPTH: usize = 256;

/// A parsed expression with the height of its tree.
type Node = (Expr, usize);

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl BinOp {
    /// Source text.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }
}

/// Unary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// An expression node.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where.
    pub span: Span,
}

/// Expression kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// Number literal.
    Num(f64),
    /// String literal.
    Str(String),
    /// `true` / `false`.
    Bool(bool),
    /// A field or constant name.
    Ident(String),
    /// `[a, b, ...]`
    List(Vec<Expr>),
    /// Unary operation.
    Unary(UnOp, Box<Expr>),
    /// Binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `x in list`
    In(Box<Expr>, Box<Expr>),
    /// `f(args)`
    Call(String, Vec<Expr>),
}

/// A cursor over tokens.
pub(crate) struct Parser<'t> {
    toks: &'t [Token],
    pos: usize,
}

impl<'t> Parser<'t> {
    pub(crate) fn new(toks: &'t [Token]) -> Self {
        Self { toks, pos: 0 }
    }

    pub(crate) fn peek(&self) -> &Token {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    pub(crate) fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    pub(crate) fn at_punct(&self, p: &str) -> bool {
        matches!(&self.peek().tok, Tok::Punct(q) if *q == p)
    }

    pub(crate) fn at_ident(&self, name: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(s) if s == name)
    }

    pub(crate) fn expect_punct(&mut self, p: &'static str) -> Result<Span> {
        if self.at_punct(p) {
            return Ok(self.next().span);
        }
        let t = self.peek();
        err(
            ErrorKind::Expected {
                expected: format!("`{p}`"),
                found: t.tok.describe(),
            },
            t.span,
        )
    }

    pub(crate) fn expected<T>(&self, what: &str) -> Result<T> {
        let t = self.peek();
        err(
            ErrorKind::Expected {
                expected: what.to_owned(),
                found: t.tok.describe(),
            },
            t.span,
        )
    }

    /// Parses one expression.
    pub(crate) fn expr(&mut self) -> Result<Expr> {
        Ok(self.binary(0, 0)?.0)
    }

    /// The node `kind` over children of heights `a` and `b`, refused past
    /// [`MAX_TREE_DEPTH`] at `at` (the operator that crossed the limit).
    fn join(kind: ExprKind, span: Span, a: usize, b: usize, at: Span) -> Result<Node> {
        let h = 1 + a.max(b);
        if h > MAX_TREE_DEPTH {
            return err(ErrorKind::TooDeep(MAX_TREE_DEPTH), at);
        }
        Ok((Expr { kind, span }, h))
    }

    fn binop(&self) -> Option<(BinOp, u8)> {
        let Tok::Punct(p) = &self.peek().tok else {
            return None;
        };
        Some(match *p {
            "||" => (BinOp::Or, 1),
            "&&" => (BinOp::And, 2),
            "==" => (BinOp::Eq, 3),
            "!=" => (BinOp::Ne, 3),
            "<" => (BinOp::Lt, 4),
            "<=" => (BinOp::Le, 4),
            ">" => (BinOp::Gt, 4),
            ">=" => (BinOp::Ge, 4),
            "+" => (BinOp::Add, 5),
            "-" => (BinOp::Sub, 5),
            "*" => (BinOp::Mul, 6),
            "/" => (BinOp::Div, 6),
            "%" => (BinOp::Rem, 6),
            _ => return None,
        })
    }

    fn binary(&mut self, min_prec: u8, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return err(ErrorKind::TooDeep(MAX_DEPTH), self.peek().span);
        }
        let (mut lhs, mut h) = self.unary(depth + 1)?;
        loop {
            // `in` binds like a comparison.
            if self.at_ident("in") && 4 > min_prec {
                let at = self.next().span;
                let (rhs, rh) = self.binary(4, depth + 1)?;
                let span = lhs.span.to(rhs.span);
                let kind = ExprKind::In(Box::new(lhs), Box::new(rhs));
                (lhs, h) = Self::join(kind, span, h, rh, at)?;
                continue;
            }
            let Some((op, prec)) = self.binop() else {
                return Ok((lhs, h));
            };
            if prec <= min_prec {
                return Ok((lhs, h));
            }
            let at = self.next().span;
            let (rhs, rh) = self.binary(prec, depth + 1)?;
            let span = lhs.span.to(rhs.span);
            let kind = ExprKind::Binary(op, Box::new(lhs), Box::new(rhs));
            (lhs, h) = Self::join(kind, span, h, rh, at)?;
        }
    }

    fn unary(&mut self, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return err(ErrorKind::TooDeep(MAX_DEPTH), self.peek().span);
        }
        for (p, op) in [("!", UnOp::Not), ("-", UnOp::Neg)] {
            if self.at_punct(p) {
                let start = self.next().span;
                let (e, h) = self.unary(depth + 1)?;
                let span = start.to(e.span);
                return Self::join(ExprKind::Unary(op, Box::new(e)), span, h, 0, start);
            }
        }
        self.primary(depth)
    }

    fn primary(&mut self, depth: usize) -> Result<Node> {
        let t = self.next();
        let kind = match t.tok {
            Tok::Num(n) => ExprKind::Num(n),
            Tok::Str(s) => ExprKind::Str(s),
            Tok::Ident(s) if s == "true" => ExprKind::Bool(true),
            Tok::Ident(s) if s == "false" => ExprKind::Bool(false),
            Tok::Ident(s) if s == "in" => {
                return err(
                    ErrorKind::Expected {
                        expected: "an expression".into(),
                        found: "`in`".into(),
                    },
                    t.span,
                )
            }
            Tok::Ident(name) => {
                if self.at_punct("(") {
                    self.next();
                    let (args, h, end) = self.list_items(")", depth)?;
                    let kind = ExprKind::Call(name, args);
                    return Self::join(kind, t.span.to(end), h, 0, t.span);
                }
                ExprKind::Ident(name)
            }
            Tok::Punct("(") => {
                // Parentheses add no node: the height is the inner expression's.
                let (e, h) = self.binary(0, depth + 1)?;
                let end = self.expect_punct(")")?;
                let span = t.span.to(end);
                return Ok((Expr { kind: e.kind, span }, h));
            }
            Tok::Punct("[") => {
                let (items, h, end) = self.list_items("]", depth)?;
                return Self::join(ExprKind::List(items), t.span.to(end), h, 0, t.span);
            }
            other => {
                return err(
                    ErrorKind::Expected {
                        expected: "an expression".into(),
                        found: other.describe(),
                    },
                    t.span,
                )
            }
        };
        Ok((Expr { kind, span: t.span }, 1))
    }

    /// Comma-separated expressions up to `close` (already past the opener), with the
    /// tallest item's height.
    fn list_items(
        &mut self,
        close: &'static str,
        depth: usize,
    ) -> Result<(Vec<Expr>, usize, Span)> {
        let mut items = Vec::new();
        let mut h = 0;
        if self.at_punct(close) {
            return Ok((items, h, self.next().span));
        }
        loop {
            let (e, eh) = self.binary(0, depth + 1)?;
            items.push(e);
            h = h.max(eh);
            if self.at_punct(",") {
                self.next();
                if self.at_punct(close) {
                    return Ok((items, h, self.next().span));
                }
                continue;
            }
            if self.at_punct(close) {
                return Ok((items, h, self.next().span));
            }
            return self.expected(&format!("`,` or `{close}`"));
        }
    }
}

/// Parses a standalone expression (the whole input).
pub fn parse_expr(toks: &[Token]) -> Result<Expr> {
    let mut p = Parser::new(toks);
    let e = p.expr()?;
    if p.peek().tok != Tok::Eof {
        return p.expected("an operator or end of expression");
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::lex;

    fn p(s: &str) -> Expr {
        parse_expr(&lex(s).unwrap()).unwrap()
    }

    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Num(n) => format!("{n}"),
            ExprKind::Str(s) => format!("{s:?}"),
            ExprKind::Bool(b) => format!("{b}"),
            ExprKind::Ident(s) => s.clone(),
            ExprKind::List(v) => format!("[{}]", v.iter().map(show).collect::<Vec<_>>().join(",")),
            ExprKind::Unary(op, x) => format!("({op:?} {})", show(x)),
            ExprKind::Binary(op, a, b) => format!("({} {} {})", show(a), op.symbol(), show(b)),
            ExprKind::In(a, b) => format!("({} in {})", show(a), show(b)),
            ExprKind::Call(f, a) => {
                format!("{f}({})", a.iter().map(show).collect::<Vec<_>>().join(","))
            }
        }
    }

    #[test]
    fn precedence() {
        assert_eq!(show(&p("a || b && c")), "(a || (b && c))");
        assert_eq!(
            show(&p("1 + 2 * 3 > 4 == true")),
            "(((1 + (2 * 3)) > 4) == true)"
        );
        assert_eq!(show(&p("!a && -b < 3")), "((Not a) && ((Neg b) < 3))");
        assert_eq!(show(&p("x in [1, 2,] && y")), "((x in [1,2]) && y)");
        assert_eq!(show(&p("a - b - c")), "((a - b) - c)");
        assert_eq!(show(&p("max(a, 1) / (b + 2)")), "(max(a,1) / (b + 2))");
    }

    #[test]
    fn spans_cover_the_source() {
        let src = "abs(x) > 10";
        let e = p(src);
        assert_eq!((e.span.start, e.span.end), (0, src.len()));
    }

    #[test]
    fn errors() {
        let e = |s: &str| parse_expr(&lex(s).unwrap()).unwrap_err();
        assert!(matches!(e("a >").kind, ErrorKind::Expected { .. }));
        assert!(matches!(e("(a").kind, ErrorKind::Expected { .. }));
        assert!(matches!(e("a b").kind, ErrorKind::Expected { .. }));
        assert!(matches!(e("f(a b)").kind, ErrorKind::Expected { .. }));
        let deep = "(".repeat(200) + "1" + &")".repeat(200);
        assert_eq!(e(&deep).kind, ErrorKind::TooDeep(MAX_DEPTH));
        let nots = "!".repeat(500) + "a";
        assert_eq!(e(&nots).kind, ErrorKind::TooDeep(MAX_DEPTH));
        // A chain of binary operators nests no parentheses but builds a tree as tall as
        // the chain: refused at the operator that crosses the limit.
        let ok = vec!["a"; MAX_TREE_DEPTH].join(" + ");
        assert!(parse_expr(&lex(&ok).unwrap()).is_ok());
        let long = vec!["a"; MAX_TREE_DEPTH + 1].join(" + ");
        let err = e(&long);
        assert_eq!(err.kind, ErrorKind::TooDeep(MAX_TREE_DEPTH));
        assert_eq!(err.span.start, long.rfind('+').unwrap());
        let ors = vec!["x == 1"; 300].join(" || ");
        assert_eq!(e(&ors).kind, ErrorKind::TooDeep(MAX_TREE_DEPTH));
    }
}
