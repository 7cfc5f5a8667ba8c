//! Two categorical fields compared by value (`card_country != ip_country`), whatever
//! their vocabularies: the shared numbering and the comparison used by the interpreter,
//! the stack VM, branch programs and native code.

use super::ops::Cmp;
use risk_core::{FeatureSchema, Slot};
use std::collections::HashMap;

/// Two categorical fields compared by value, whatever their vocabularies
/// (`card_country != ip_country`).
///
/// Each field's ids map into one shared numbering of the union of both vocabularies;
/// values present in both vocabularies come first (`common` of them). Semantics, with the
/// missing-value rule of every comparison:
/// - either side missing: false (for `==` and `!=`);
/// - both in their vocabularies: the values are compared;
/// - one side outside its vocabulary ([`OTHER`](risk_core::schema::OTHER)): its value is
///   not known, but it is surely different from a value that its field's vocabulary
///   holds, so `!=` is true when the other side's value is in both vocabularies; otherwise
///   the comparison cannot be decided and is false, like a missing value;
/// - both outside: false.
#[derive(Debug, Clone, PartialEq)]
pub struct CatPair {
    /// Left field.
    pub a: Slot,
    /// Right field.
    pub b: Slot,
    /// Left ids to shared numbers (`-1`: outside the vocabulary).
    pub map_a: Vec<f32>,
    /// Right ids to shared numbers (`-1`: outside the vocabulary).
    pub map_b: Vec<f32>,
    /// Shared numbers below this are in both vocabularies.
    pub common: u32,
}

impl CatPair {
    pub(crate) fn new(schema: &FeatureSchema, a: Slot, b: Slot) -> Self {
        use std::collections::HashSet;
        let (va, vb) = (schema.field(a).vocab(), schema.field(b).vocab());
        let (in_a, in_b): (HashSet<&str>, HashSet<&str>) = (
            va.iter().map(String::as_str).collect(),
            vb.iter().map(String::as_str).collect(),
        );
        // Values in both vocabularies first (vocabularies hold no duplicates), then the
        // rest of each.
        let both: Vec<&str> = va
            .iter()
            .map(String::as_str)
            .filter(|v| in_b.contains(v))
            .collect();
        let only = va
            .iter()
            .map(String::as_str)
            .filter(|v| !in_b.contains(v))
            .chain(vb.iter().map(String::as_str).filter(|v| !in_a.contains(v)));
        let common = both.len() as u32;
        let shared: HashMap<&str, u32> = both
            .iter()
            .copied()
            .chain(only)
            .enumerate()
            .map(|(k, v)| (v, k as u32))
            .collect();
        // Ids start at 1; id 0 is OTHER (outside the vocabulary).
        let map = |vocab: &[String]| -> Vec<f32> {
            std::iter::once(-1.0)
                .chain(vocab.iter().map(|v| shared[v.as_str()] as f32))
                .collect()
        };
        CatPair {
            a,
            b,
            map_a: map(va),
            map_b: map(vb),
            common,
        }
    }

    /// `x[a] op x[b]` (`op` is `Eq` or `Ne`).
    #[inline]
    pub fn eval(&self, op: Cmp, x: &[f32]) -> bool {
        cat_cmp(
            op,
            x[self.a.index()],
            x[self.b.index()],
            &self.map_a,
            &self.map_b,
            self.common,
        )
    }
}

/// The shared number of category id `v` through `map` (`None`: missing, outside the
/// vocabulary, or not an id).
#[inline(always)]
fn shared_id(map: &[f32], v: f32) -> Option<f32> {
    if !(v >= 0.0 && v < map.len() as f32) {
        return None;
    }
    let m = map[v as usize];
    (v.fract() == 0.0 && m >= 0.0).then_some(m)
}

/// The comparison of [`CatPair`] on raw values and maps (shared by the interpreter and
/// the VM).
#[inline]
pub fn cat_cmp(op: Cmp, va: f32, vb: f32, map_a: &[f32], map_b: &[f32], common: u32) -> bool {
    if va.is_nan() || vb.is_nan() {
        return false;
    }
    let ne = op == Cmp::Ne;
    match (shared_id(map_a, va), shared_id(map_b, vb)) {
        (Some(x), Some(y)) => (x == y) != ne,
        (Some(k), None) | (None, Some(k)) => ne && k < common as f32,
        (None, None) => false,
    }
}
