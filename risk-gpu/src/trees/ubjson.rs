//! UBJSON (Universal Binary JSON, draft 12) read into a [`serde_json::Value`]: the format
//! of XGBoost's `save_model("m.ubj")` (its default since 2.0), then checked by the same
//! code as a JSON model.
//!
//! Markers: `Z` null, `N` no-op, `T`/`F`, integers `i` (i8) `U` (u8) `I` (i16) `l` (i32)
//! `L` (i64), floats `d` (f32) `D` (f64), `H` (a number as text), `C` (one byte), `S`
//! (string: a length, then UTF-8), `[`…`]` arrays and `{`…`}` objects (keys are a length
//! and UTF-8, no `S`), both optionally with `$<type>` (every element of one type, its
//! marker omitted) and `#<count>` (no closing marker). Multi-byte numbers are big-endian.
//!
//! Bounds, so that a hostile file is refused with a [`TreeError`] naming the byte offset
//! and never panics or allocates beyond what it holds: nesting at most [`MAX_DEPTH`];
//! every count or length is at most what the bytes left could encode (typed containers
//! of zero-size elements at most [`MAX_ITEMS`]); the whole value must use every byte.
//! Floats that are not finite (JSON has no such numbers) are refused, naming where.
//!
//! Hand-written (~200 lines): the UBJSON crates on crates.io are single early releases
//! that bound neither nesting nor the counts a file states.

use super::TreeError;
use serde_json::{Map, Number, Value};

/// Deepest nesting of arrays and objects.
pub const MAX_DEPTH: usize = 64;
/// Most elements of a typed container whose elements take no bytes (`$Z`, `$T`, `$F`).
pub const MAX_ITEMS: usize = 1 << 24;

/// Whether `bytes` look like UBJSON rather than JSON: an object whose first key length,
/// type or count marker follows the `{` (JSON has whitespace, `"` or `}` there).
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'{')
        && matches!(
            bytes.get(1),
            Some(b'i' | b'U' | b'I' | b'l' | b'L' | b'$' | b'#')
        )
}

/// Reads one UBJSON value that spans all of `bytes`.
pub fn to_value(bytes: &[u8]) -> Result<Value, TreeError> {
    let mut r = Reader { b: bytes, pos: 0 };
    let m = r.marker()?;
    let v = r.value(m, 0)?;
    while r.pos < r.b.len() && r.b[r.pos] == b'N' {
        r.pos += 1;
    }
    if r.pos != r.b.len() {
        return Err(r.err(format!("{} bytes after the value", r.b.len() - r.pos)));
    }
    Ok(v)
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

/// Bytes an element of type `m` takes in a typed container (0 where it takes none).
fn width(m: u8) -> usize {
    match m {
        b'i' | b'U' | b'C' => 1,
        b'I' => 2,
        b'l' | b'd' => 4,
        b'L' | b'D' => 8,
        // A string or number-as-text takes at least its length marker and one byte.
        b'S' | b'H' => 2,
        _ => 0,
    }
}

impl<'a> Reader<'a> {
    fn err(&self, what: impl std::fmt::Display) -> TreeError {
        TreeError::Format(format!("UBJSON at byte {}: {what}", self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TreeError> {
        if n > self.b.len() - self.pos {
            return Err(self.err(format!(
                "{n} bytes wanted, {} left",
                self.b.len() - self.pos
            )));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], TreeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// The next marker, skipping no-ops.
    fn marker(&mut self) -> Result<u8, TreeError> {
        loop {
            let m = self.take(1)?[0];
            if m != b'N' {
                return Ok(m);
            }
        }
    }

    fn int(&mut self, m: u8) -> Result<i64, TreeError> {
        Ok(match m {
            b'i' => i8::from_be_bytes(self.array()?) as i64,
            b'U' => u8::from_be_bytes(self.array()?) as i64,
            b'I' => i16::from_be_bytes(self.array()?) as i64,
            b'l' => i32::from_be_bytes(self.array()?) as i64,
            b'L' => i64::from_be_bytes(self.array()?),
            _ => return Err(self.err(format!("{:?} where an integer was expected", m as char))),
        })
    }

    /// A length or count: an integer marker and value, non-negative, at most `most`.
    fn len(&mut self, most: usize) -> Result<usize, TreeError> {
        let m = self.marker()?;
        let n = self.int(m)?;
        if n < 0 || n as u64 > most as u64 {
            return Err(self.err(format!("length {n} (at most {most} here)")));
        }
        Ok(n as usize)
    }

    fn left(&self) -> usize {
        self.b.len() - self.pos
    }

    fn text(&mut self) -> Result<String, TreeError> {
        let n = self.len(self.left())?;
        let s = self.take(n)?;
        std::str::from_utf8(s)
            .map(str::to_owned)
            .map_err(|e| self.err(format!("string is not UTF-8 ({e})")))
    }

    fn float(&self, x: f64) -> Result<Value, TreeError> {
        Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| self.err(format!("non-finite number {x}")))
    }

    fn value(&mut self, m: u8, depth: usize) -> Result<Value, TreeError> {
        Ok(match m {
            b'Z' => Value::Null,
            b'T' => Value::Bool(true),
            b'F' => Value::Bool(false),
            b'i' | b'U' | b'I' | b'l' | b'L' => Value::from(self.int(m)?),
            b'd' => {
                let x = f32::from_be_bytes(self.array()?) as f64;
                self.float(x)?
            }
            b'D' => {
                let x = f64::from_be_bytes(self.array()?);
                self.float(x)?
            }
            b'H' => {
                let s = self.text()?;
                serde_json::from_str::<Number>(&s)
                    .map(Value::Number)
                    .map_err(|_| self.err(format!("{s:?} is not a number")))?
            }
            b'C' => Value::String((self.take(1)?[0] as char).to_string()),
            b'S' => Value::String(self.text()?),
            b'[' => self.container(false, depth + 1)?,
            b'{' => self.container(true, depth + 1)?,
            _ => return Err(self.err(format!("unknown marker {:?}", m as char))),
        })
    }

    /// The rest of an array or object after its opening marker.
    fn container(&mut self, object: bool, depth: usize) -> Result<Value, TreeError> {
        if depth > MAX_DEPTH {
            return Err(self.err(format!("nested deeper than {MAX_DEPTH}")));
        }
        let close = if object { b'}' } else { b']' };
        let mut typ = None;
        let mut counted = false;
        match self.b.get(self.pos) {
            Some(b'$') => {
                self.pos += 1;
                let t = self.take(1)?[0];
                let sized = width(t) > 0 || matches!(t, b'Z' | b'T' | b'F');
                if !sized {
                    return Err(self.err(format!("{:?} as a container's element type", t as char)));
                }
                typ = Some(t);
                if self.take(1)? != b"#" {
                    return Err(self.err("a typed container without a count ('$' needs '#')"));
                }
                counted = true;
            }
            Some(b'#') => {
                self.pos += 1;
                counted = true;
            }
            _ => {}
        }
        let count = if counted {
            // Each element takes at least its width (a key at least two more bytes), or
            // one byte (its marker) when untyped.
            let each = typ.map_or(1, width) + if object { 2 } else { 0 };
            let most = self.left().checked_div(each).unwrap_or(MAX_ITEMS);
            Some(self.len(most)?)
        } else {
            None
        };
        let mut items = Vec::new();
        let mut map = Map::new();
        let mut i = 0usize;
        loop {
            if let Some(n) = count {
                if i == n {
                    break;
                }
            } else {
                while self.b.get(self.pos) == Some(&b'N') {
                    self.pos += 1;
                }
                if self.b.get(self.pos) == Some(&close) {
                    self.pos += 1;
                    break;
                }
            }
            let key = if object { Some(self.text()?) } else { None };
            let m = match typ {
                Some(t) => t,
                None => self.marker()?,
            };
            let v = self.value(m, depth)?;
            match key {
                Some(k) => {
                    map.insert(k, v);
                }
                None => items.push(v),
            }
            i += 1;
        }
        Ok(if object {
            Value::Object(map)
        } else {
            Value::Array(items)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shapes_xgboost_writes() {
        // {"a": [1, 2] as $l#U2, "s": "hi", "f": 0.5 as d, "n": [Z T F], "h": H"1e3"}
        let mut b = b"{U\x01a[$l#U\x02\x00\x00\x00\x01\x00\x00\x00\x02".to_vec();
        b.extend(b"U\x01sSU\x02hi");
        b.extend(b"U\x01fd");
        b.extend(0.5f32.to_be_bytes());
        b.extend(b"U\x01n[ZTFN]U\x01hHU\x031e3}");
        assert!(looks_like(&b));
        let v = to_value(&b).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": [1, 2], "s": "hi", "f": 0.5, "n": [null, true, false], "h": 1e3})
        );
    }

    #[test]
    fn refuses_what_does_not_fit_and_names_where() {
        let bad: [(&[u8], &str); 8] = [
            (b"{U\x01a[$d#L\x7f\xff\xff\xff\xff\xff\xff\xff}", "length"),
            (b"{U\x01aSU\x09hi}", "length 9"),
            (b"[", "wanted"),
            (b"{U\x01aX}", "unknown marker"),
            (b"[$[#U\x01", "element type"),
            (
                b"{U\x01a[$l#U\x01\x00\x00\x00\x01]}",
                "integer was expected",
            ),
            (b"{U\x01a[$l#U\x01\x00\x00\x00\x01}}", "after the value"),
            (b"{U\x01a[$i]}", "'#'"),
        ];
        for (b, want) in bad {
            let e = to_value(b).unwrap_err().to_string();
            assert!(
                e.contains("UBJSON at byte") && e.contains(want),
                "{b:?}: {e}"
            );
        }
        let deep = [b'['; 100];
        let e = to_value(&deep).unwrap_err().to_string();
        assert!(e.contains("nested deeper"), "{e}");
        let mut nan = b"[$d#U\x01".to_vec();
        nan.extend(f32::NAN.to_be_bytes());
        assert!(to_value(&nan)
            .unwrap_err()
            .to_string()
            .contains("non-finite"));
        assert!(!looks_like(b"{\"learner\": {}}"));
    }
}
