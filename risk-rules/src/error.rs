//! Rule errors with positions: `file:line:col: message`, the source line and a caret.

use std::fmt;

/// A byte range in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// A span.
    pub fn new(start: usize, end: usize) -> Self {
        Self { start, end }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// What went wrong. Each kind has a stable snake-case name ([`ErrorKind::name`]) used by
/// the golden test vectors.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A character that starts no token.
    UnexpectedChar(char),
    /// A string without its closing quote.
    UnterminatedString,
    /// A malformed number literal.
    BadNumber(String),
    /// The parser expected something else.
    Expected {
        /// What it expected.
        expected: String,
        /// What it found.
        found: String,
    },
    /// A name that is neither a field of the schema nor a constant.
    UnknownField(String),
    /// A function the language does not have.
    UnknownFunction(String),
    /// A function called with the wrong number of arguments.
    WrongArity {
        /// The function.
        name: String,
        /// What it takes.
        expected: String,
        /// What it got.
        got: usize,
    },
    /// An operand of the wrong type.
    TypeMismatch {
        /// What was needed.
        expected: String,
        /// What was there.
        found: String,
    },
    /// A string compared with a categorical field that does not have that value.
    UnknownCategory {
        /// The field.
        field: String,
        /// The value.
        value: String,
    },
    /// A rule id used twice.
    DuplicateRule(String),
    /// A constant defined twice, or with the name of a field.
    DuplicateConst(String),
    /// A rule without `when`, or without an outcome.
    MissingClause {
        /// The rule.
        rule: String,
        /// The missing clause.
        clause: &'static str,
    },
    /// A clause given twice in one rule.
    DuplicateClause(String),
    /// A value out of range (score, priority, cap).
    InvalidValue(String),
    /// Nesting deeper than the limit.
    TooDeep(usize),
    /// More rules, code or list items than the limits allow.
    TooLarge(String),
}

impl ErrorKind {
    /// Stable name of the kind.
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::UnexpectedChar(_) => "unexpected_char",
            ErrorKind::UnterminatedString => "unterminated_string",
            ErrorKind::BadNumber(_) => "bad_number",
            ErrorKind::Expected { .. } => "expected",
            ErrorKind::UnknownField(_) => "unknown_field",
            ErrorKind::UnknownFunction(_) => "unknown_function",
            ErrorKind::WrongArity { .. } => "wrong_arity",
            ErrorKind::TypeMismatch { .. } => "type_mismatch",
            ErrorKind::UnknownCategory { .. } => "unknown_category",
            ErrorKind::DuplicateRule(_) => "duplicate_rule",
            ErrorKind::DuplicateConst(_) => "duplicate_const",
            ErrorKind::MissingClause { .. } => "missing_clause",
            ErrorKind::DuplicateClause(_) => "duplicate_clause",
            ErrorKind::InvalidValue(_) => "invalid_value",
            ErrorKind::TooDeep(_) => "too_deep",
            ErrorKind::TooLarge(_) => "too_large",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::UnexpectedChar(c) => write!(f, "unexpected character {c:?}"),
            ErrorKind::UnterminatedString => write!(f, "unterminated string"),
            ErrorKind::BadNumber(s) => write!(f, "malformed number {s:?}"),
            ErrorKind::Expected { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            ErrorKind::UnknownField(n) => write!(f, "unknown field or constant `{n}`"),
            ErrorKind::UnknownFunction(n) => write!(
                f,
                "unknown function `{n}` (functions: abs, min, max, log, is_missing)"
            ),
            ErrorKind::WrongArity {
                name,
                expected,
                got,
            } => write!(f, "`{name}` takes {expected} argument(s), got {got}"),
            ErrorKind::TypeMismatch { expected, found } => {
                write!(f, "type mismatch: expected {expected}, found {found}")
            }
            ErrorKind::UnknownCategory { field, value } => {
                write!(f, "{value:?} is not a value of categorical field `{field}`")
            }
            ErrorKind::DuplicateRule(r) => write!(f, "rule `{r}` is defined twice"),
            ErrorKind::DuplicateConst(c) => {
                write!(f, "constant `{c}` is defined twice or shadows a field")
            }
            ErrorKind::MissingClause { rule, clause } => {
                write!(f, "rule `{rule}` has no `{clause}`")
            }
            ErrorKind::DuplicateClause(c) => write!(f, "clause `{c}` is given twice"),
            ErrorKind::InvalidValue(m) => write!(f, "invalid value: {m}"),
            ErrorKind::TooDeep(n) => write!(f, "expression nested deeper than {n} levels"),
            ErrorKind::TooLarge(m) => write!(f, "too large: {m}"),
        }
    }
}

/// A compile error with its position and a caret excerpt of the source. Boxed (one
/// pointer) so `Result`s stay small; fields are read through `Deref` ([`Details`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleError(Box<Details>);

impl std::ops::Deref for RuleError {
    type Target = Details;
    fn deref(&self) -> &Details {
        &self.0
    }
}

/// The fields of a [`RuleError`].
#[derive(Debug, Clone, PartialEq)]
pub struct Details {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Where, in bytes.
    pub span: Span,
    /// File name (or `<expr>`).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    /// The source line and a caret under the span.
    pub excerpt: String,
}

impl std::error::Error for RuleError {}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}\n{}",
            self.file, self.line, self.col, self.kind, self.excerpt
        )
    }
}

/// An error of a pipeline stage, before it is placed in a file with [`Raw::locate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Raw {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Where.
    pub span: Span,
}

/// Result of a pipeline stage.
pub type Result<T> = std::result::Result<T, Raw>;

pub(crate) fn err<T>(kind: ErrorKind, span: Span) -> Result<T> {
    Err(Raw { kind, span })
}

/// Places a stage's errors in `src` (named `file`), for `map_err`.
pub(crate) fn locate<'s>(file: &str, src: &'s str) -> impl Fn(Raw) -> RuleError + 's {
    let file = file.to_owned();
    move |r: Raw| r.locate(&file, src)
}

impl Raw {
    /// Places the error in `src` (named `file`): line, column, excerpt.
    pub fn locate(self, file: &str, src: &str) -> RuleError {
        // Spans are byte offsets; snap them to character boundaries so that no span, even
        // a wrong one, can make the rendering panic.
        let snap = |mut i: usize| {
            i = i.min(src.len());
            while !src.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let start = snap(self.span.start);
        let end = snap(self.span.end.max(start));
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line = src[..start].matches('\n').count() + 1;
        let col = src[line_start..start].chars().count() + 1;
        let text = &src[line_start..line_end];
        let width = src[start..end.clamp(start, line_end)]
            .chars()
            .count()
            .max(1);
        let excerpt = format!(
            "{:>5} | {}\n      | {}{}",
            line,
            text,
            " ".repeat(col - 1),
            "^".repeat(width)
        );
        RuleError(Box::new(Details {
            kind: self.kind,
            span: self.span,
            file: file.to_owned(),
            line,
            col,
            excerpt,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_line_col_and_caret() {
        let src = "rule A {\n  when amonut > 3\n}";
        let at = src.find("amonut").unwrap();
        let e = Raw {
            kind: ErrorKind::UnknownField("amonut".into()),
            span: Span::new(at, at + 6),
        }
        .locate("x.rules", src);
        assert_eq!((e.line, e.col), (2, 8));
        let shown = e.to_string();
        assert!(
            shown.starts_with("x.rules:2:8: unknown field or constant `amonut`"),
            "{shown}"
        );
        assert!(shown.ends_with("|        ^^^^^^"), "{shown}");
    }
}
