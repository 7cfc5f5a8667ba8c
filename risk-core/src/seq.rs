//! Sequences for sequence models: a key's last `N` events as an `[N, F]` tensor with
//! its length (`[[state.sequences]]`, filled by entity state in stage 1 of a decision).
//!
//! Rows are in event-time order, oldest first; the first [`Sequence::len`] rows hold
//! events and the rest are zero padding (mask 0). A GRU or an attention layer reading
//! the mask sees the events only: padding comes after them, so a causal model's outputs
//! at the real rows do not depend on it.

use crate::error::DecideError;
use std::sync::Arc;

/// One sequence of one transaction: `rows` × `width` values, row-major. `Debug` shows its
/// shape, not its values (a card's history).
#[derive(Clone, PartialEq)]
pub struct Sequence {
    name: Arc<str>,
    rows: usize,
    width: usize,
    len: usize,
    values: Vec<f32>,
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("name", &self.name)
            .field("rows", &self.rows)
            .field("width", &self.width)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Sequence {
    /// An empty sequence (every row padding) of `rows` × `width`.
    pub fn empty(name: Arc<str>, rows: usize, width: usize) -> Self {
        Self {
            name,
            rows,
            width,
            len: 0,
            values: vec![0.0; rows * width],
        }
    }

    /// A sequence a caller built (from its own history store): `rows` × `width` values,
    /// row-major, the first `len` rows holding events (oldest first) and the rest zero.
    /// Refused when the values do not make that shape or a value is not finite.
    pub fn new(
        name: &str,
        rows: usize,
        width: usize,
        len: usize,
        values: Vec<f32>,
    ) -> Result<Self, DecideError> {
        let bad = |reason: String| DecideError::InvalidField {
            field: "sequences",
            reason: format!("sequence {name:?}: {reason}"),
        };
        if rows == 0 || width == 0 || rows.checked_mul(width) != Some(values.len()) {
            return Err(bad(format!(
                "{} values do not make {rows} rows of {width}",
                values.len()
            )));
        }
        if len > rows {
            return Err(bad(format!("{len} events in {rows} rows")));
        }
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(bad(format!("value {i} is not finite")));
        }
        if values[len * width..].iter().any(|&v| v != 0.0) {
            return Err(bad(format!("padding after row {len} is not zero")));
        }
        Ok(Self {
            name: name.into(),
            rows,
            width,
            len,
            values,
        })
    }

    /// The sequence's name (its `[[state.sequences]]` entry).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `N`: rows of the tensor (events held and padding).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// `F`: values per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Rows holding events (the rest is padding).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no row holds an event.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `[N, F]` tensor, row-major.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Row `i` (`i < rows`).
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.width..(i + 1) * self.width]
    }

    /// The mask: 1 for the first [`len`](Self::len) rows, 0 for padding.
    pub fn mask(&self) -> impl Iterator<Item = f32> + '_ {
        (0..self.rows).map(|i| if i < self.len { 1.0 } else { 0.0 })
    }

    /// Fills the tensor: `len` events, `fill(i, row)` writing every value of event `i`'s
    /// row (oldest first); the rows past `len` are zeroed.
    pub(crate) fn set(&mut self, len: usize, mut fill: impl FnMut(usize, &mut [f32])) {
        let len = len.min(self.rows);
        self.len = len;
        let (rows, pad) = self.values.split_at_mut(len * self.width);
        for (i, row) in rows.chunks_exact_mut(self.width).enumerate() {
            fill(i, row);
        }
        pad.fill(0.0);
    }
}

/// The sequences attached to a transaction (none until entity state fills them).
/// Cloning shares them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sequences(Option<Arc<[Sequence]>>);

impl Sequences {
    /// The sequence named `name`, when state filled one.
    pub fn get(&self, name: &str) -> Option<&Sequence> {
        self.0.as_deref()?.iter().find(|s| s.name() == name)
    }

    /// Every sequence, in `[[state.sequences]]` order.
    pub fn all(&self) -> &[Sequence] {
        self.0.as_deref().unwrap_or(&[])
    }

    /// Whether none is attached.
    pub fn is_empty(&self) -> bool {
        self.all().is_empty()
    }

    /// Attaches `seqs`.
    pub fn new(seqs: Vec<Sequence>) -> Self {
        Self((!seqs.is_empty()).then(|| seqs.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_then_padding() {
        let mut s = Sequence::empty("card".into(), 4, 2);
        s.set(2, |i, r| {
            r[0] = i as f32;
            r[1] = 10.0 + i as f32;
        });
        assert_eq!(s.values(), &[0.0, 10.0, 1.0, 11.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(s.mask().collect::<Vec<_>>(), vec![1.0, 1.0, 0.0, 0.0]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.row(1), &[1.0, 11.0]);
        let seqs = Sequences::new(vec![s.clone()]);
        assert_eq!(seqs.get("card"), Some(&s));
        assert!(seqs.get("device").is_none());
        assert!(Sequences::default().is_empty());
        let built = Sequence::new("card", 4, 2, 2, s.values().to_vec()).unwrap();
        assert_eq!(built, s);
        assert!(Sequence::new("card", 4, 2, 5, vec![0.0; 8]).is_err());
        assert!(Sequence::new("card", 4, 2, 2, vec![0.0; 7]).is_err());
        assert!(Sequence::new("card", 4, 2, 2, vec![f32::NAN; 8]).is_err());
        assert!(Sequence::new("card", 4, 2, 1, vec![1.0; 8]).is_err());
    }
}
