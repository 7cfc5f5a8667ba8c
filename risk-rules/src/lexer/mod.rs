//! Lexer: source text → tokens with spans. Shared by expressions and rule files.
//!
//! Comments run from `#` to the end of the line. Strings use `"` or `'` with `\\`, `\"`,
//! `\'`, `\n` and `\t` escapes. Numbers are decimal (`12`, `0.5`, `1e-3`, `1_000`).
//! Identifiers are `[A-Za-z_][A-Za-z0-9_.]*` (dots allow namespaced feature names).

use crate::error::{err, ErrorKind, Result, Span};

/// A token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// Number literal.
    Num(f64),
    /// String literal (unescaped).
    Str(String),
    /// Identifier or keyword.
    Ident(String),
    /// Punctuation or operator.
    Punct(&'static str),
    /// End of input.
    Eof,
}

impl Tok {
    /// How the token is shown in "expected X, found Y".
    pub fn describe(&self) -> String {
        match self {
            Tok::Num(n) => format!("number {n}"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "end of input".into(),
        }
    }
}

/// A token and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Its bytes.
    pub span: Span,
}

const PUNCT: [&str; 21] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "(", ")", "[", "]",
    ",", "{", "}",
];
const PUNCT_EXTRA: [&str; 1] = ["="];

/// Tokenises `src` (all of it, ending with [`Tok::Eof`]).
pub fn lex(src: &str) -> Result<Vec<Token>> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == b'.'
                    || b[i] == b'_'
                    || ((b[i] == b'+' || b[i] == b'-') && matches!(b[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            let text: String = src[start..i].chars().filter(|&c| c != '_').collect();
            let span = Span::new(start, i);
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() && !text.contains(['x', 'X', 'i', 'n', 'N']) => {
                    out.push(Token {
                        tok: Tok::Num(v),
                        span,
                    })
                }
                _ => return err(ErrorKind::BadNumber(src[start..i].to_owned()), span),
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(src[start..i].to_owned()),
                span: Span::new(start, i),
            });
            continue;
        }
        if c == b'"' || c == b'\'' {
            let quote = c;
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&d) = b.get(i) else {
                    return err(ErrorKind::UnterminatedString, Span::new(start, i));
                };
                if d == quote {
                    i += 1;
                    break;
                }
                if d == b'\n' {
                    return err(ErrorKind::UnterminatedString, Span::new(start, i));
                }
                if d == b'\\' {
                    let e = b.get(i + 1).copied();
                    s.push(match e {
                        Some(b'n') => '\n',
                        Some(b't') => '\t',
                        Some(b'\\') => '\\',
                        Some(b'"') => '"',
                        Some(b'\'') => '\'',
                        _ => {
                            // The escaped character may be multi-byte: span it whole.
                            let ch = src[i + 1..].chars().next().unwrap_or('\\');
                            return err(
                                ErrorKind::UnexpectedChar(ch),
                                Span::new(i, i + 1 + ch.len_utf8()),
                            );
                        }
                    });
                    i += 2;
                    continue;
                }
                // Copy one UTF-8 character.
                let ch = src[i..].chars().next().unwrap_or('\u{fffd}');
                s.push(ch);
                i += ch.len_utf8();
            }
            out.push(Token {
                tok: Tok::Str(s),
                span: Span::new(start, i),
            });
            continue;
        }
        if let Some(p) = PUNCT
            .iter()
            .chain(PUNCT_EXTRA.iter())
            .find(|p| src[i..].starts_with(*p))
        {
            i += p.len();
            out.push(Token {
                tok: Tok::Punct(p),
                span: Span::new(start, i),
            });
            continue;
        }
        let ch = src[i..].chars().next().unwrap_or('\u{fffd}');
        return err(
            ErrorKind::UnexpectedChar(ch),
            Span::new(i, i + ch.len_utf8()),
        );
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span::new(src.len(), src.len()),
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens() {
        assert_eq!(
            toks("a.b >= 1_000.5 && !x # c\n'it\\'s'"),
            vec![
                Tok::Ident("a.b".into()),
                Tok::Punct(">="),
                Tok::Num(1000.5),
                Tok::Punct("&&"),
                Tok::Punct("!"),
                Tok::Ident("x".into()),
                Tok::Str("it's".into()),
                Tok::Eof
            ]
        );
        assert_eq!(toks("1e-3")[0], Tok::Num(0.001));
    }

    #[test]
    fn errors() {
        assert_eq!(
            lex("a @ b").unwrap_err().kind,
            ErrorKind::UnexpectedChar('@')
        );
        assert_eq!(
            lex("\"abc").unwrap_err().kind,
            ErrorKind::UnterminatedString
        );
        assert!(matches!(
            lex("1.2.3").unwrap_err().kind,
            ErrorKind::BadNumber(_)
        ));
        assert!(matches!(
            lex("12abc").unwrap_err().kind,
            ErrorKind::BadNumber(_)
        ));
        assert!(matches!(
            lex("1e999").unwrap_err().kind,
            ErrorKind::BadNumber(_)
        ));
        // Found by the fuzzer: an invalid escape before a multi-byte character
        // (fuzz/regressions/rules_compile/bad_escape_before_multibyte_char.rules).
        let e = lex("\"\\\u{7a8} ").unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnexpectedChar('\u{7a8}'));
        assert_eq!(e.span, Span::new(1, 4));
    }
}
