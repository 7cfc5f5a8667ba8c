//! Free-text fields of a transaction: merchant descriptor, user agent, e-mail domain,
//! memo. Trees and rules read numbers; a text tier (the BERT fast tier, the deep tier's
//! prompt) reads these, by name, through a template (`{{t:merchant_descriptor}}`).
//!
//! Bounded so that a hostile caller cannot make a tier do unbounded work:
//! at most [`TextFields::MAX_FIELDS`] fields, names of 1 to [`TextFields::MAX_NAME`]
//! characters from `[a-z0-9_]`, values of at most [`TextFields::MAX_VALUE`] bytes of UTF-8
//! without control characters other than tab. Setting a name twice replaces its value.
//! Copying ([`TextFields::copy_from`]) reuses the buffers, so the tier pool's per-worker
//! transaction copy does not allocate in steady state.

use crate::error::DecideError;

/// The text fields of one transaction, in the order they were first set.
#[derive(Debug, Clone, Default)]
pub struct TextFields {
    items: Vec<(String, String)>,
    len: usize,
}

impl PartialEq for TextFields {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for TextFields {}

impl TextFields {
    /// Most text fields on one transaction.
    pub const MAX_FIELDS: usize = 16;
    /// Longest field name, in bytes.
    pub const MAX_NAME: usize = 64;
    /// Longest value, in bytes.
    pub const MAX_VALUE: usize = 4096;

    /// No fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks a field name: `[a-z0-9_]{1,64}`.
    pub fn check_name(name: &str) -> Result<(), DecideError> {
        let ok = !name.is_empty()
            && name.len() <= Self::MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(())
        } else {
            Err(DecideError::InvalidField {
                field: "text",
                reason: format!(
                    "field name {:?} must be 1 to {} characters of [a-z0-9_]",
                    name.chars().take(80).collect::<String>(),
                    Self::MAX_NAME
                ),
            })
        }
    }

    /// Sets `name` to `value` (replacing an earlier value of the same name).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), DecideError> {
        Self::check_name(name)?;
        if value.len() > Self::MAX_VALUE {
            return Err(DecideError::InvalidField {
                field: "text",
                reason: format!(
                    "{name}: {} bytes (at most {})",
                    value.len(),
                    Self::MAX_VALUE
                ),
            });
        }
        if let Some(c) = value.chars().find(|c| c.is_control() && *c != '\t') {
            return Err(DecideError::InvalidField {
                field: "text",
                reason: format!("{name}: control character {c:?}"),
            });
        }
        if let Some(i) = self.position(name) {
            let v = &mut self.items[i].1;
            v.clear();
            v.push_str(value);
            return Ok(());
        }
        if self.len == Self::MAX_FIELDS {
            return Err(DecideError::InvalidField {
                field: "text",
                reason: format!("more than {} text fields", Self::MAX_FIELDS),
            });
        }
        self.push(name, value);
        Ok(())
    }

    fn push(&mut self, name: &str, value: &str) {
        if self.len < self.items.len() {
            let (n, v) = &mut self.items[self.len];
            n.clear();
            n.push_str(name);
            v.clear();
            v.push_str(value);
        } else {
            self.items.push((name.to_owned(), value.to_owned()));
        }
        self.len += 1;
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.items[..self.len].iter().position(|(n, _)| n == name)
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.position(name).map(|i| self.items[i].1.as_str())
    }

    /// Every field, in the order first set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.items[..self.len]
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No fields.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every field, keeping the buffers.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Copies `other` into `self`, reusing `self`'s buffers (no allocation once they are
    /// large enough). `other` was validated when it was built.
    pub fn copy_from(&mut self, other: &TextFields) {
        self.len = 0;
        for (n, v) in other.iter() {
            self.push(n, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replace_bounds() {
        let mut t = TextFields::new();
        t.set("merchant_descriptor", "AMZN Mktp US*2K4L81").unwrap();
        t.set("email_domain", "gmail.com").unwrap();
        t.set("merchant_descriptor", "SQ *JOES PIZZA").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.get("merchant_descriptor"), Some("SQ *JOES PIZZA"));
        assert_eq!(t.get("memo"), None);
        assert!(t.set("Bad", "x").is_err());
        assert!(t.set("", "x").is_err());
        assert!(t.set("memo", "a\nb").is_err());
        assert!(t
            .set("memo", &"x".repeat(TextFields::MAX_VALUE + 1))
            .is_err());
        t.set("memo", "").unwrap();
        assert_eq!(t.get("memo"), Some(""));
        for i in 3..TextFields::MAX_FIELDS {
            t.set(&format!("f{i}"), "v").unwrap();
        }
        let e = t.set("one_more", "v").unwrap_err();
        assert!(e.to_string().contains("more than 16"), "{e}");
    }

    #[test]
    fn copy_reuses_buffers() {
        let mut a = TextFields::new();
        a.set("a", "first value").unwrap();
        a.set("b", "second").unwrap();
        let mut b = TextFields::new();
        b.set("z", "a much longer value than any of the above")
            .unwrap();
        b.set("y", "another long value for the buffer").unwrap();
        let p = b.items[0].1.as_ptr();
        b.copy_from(&a);
        assert_eq!(b, {
            let mut c = b.clone();
            c.copy_from(&a);
            c
        });
        assert_eq!(b.iter().collect::<Vec<_>>(), a.iter().collect::<Vec<_>>());
        assert_eq!(b.items[0].1.as_ptr(), p, "buffer reused");
        b.clear();
        assert!(b.is_empty() && b.get("a").is_none());
    }
}
