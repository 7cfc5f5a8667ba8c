//! Why a tier answered as it did: interned [`ReasonCode`]s, weighted [`Reasons`] and the
//! names of the rules that fired ([`FiredRules`]), all fixed-size and allocation-free so
//! every floor (scorers, versions, policy, state, deploys, rules) can carry them.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

// ===== Reason codes =====

/// An interned reason code such as `RULE_VELOCITY_1H` or `model:amount`.
///
/// Codes are interned process-wide, so a code is a `u32`, copying one is free and
/// [`Reasons`] never allocates. The number of distinct codes is bounded by what rule files
/// and models declare; interning the same text twice returns the same code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReasonCode(u32);

struct Interner {
    ids: HashMap<&'static str, u32>,
    names: Vec<&'static str>,
}

fn interner() -> &'static RwLock<Interner> {
    static I: OnceLock<RwLock<Interner>> = OnceLock::new();
    I.get_or_init(|| {
        RwLock::new(Interner {
            ids: HashMap::new(),
            names: Vec::new(),
        })
    })
}

impl ReasonCode {
    /// A placeholder that names no reason (its name is empty); for fixed-size buffers.
    pub const UNSET: ReasonCode = ReasonCode(u32::MAX);

    /// Interns `name` (leaks one copy of each distinct name, once).
    pub fn intern(name: &str) -> Self {
        if let Some(&id) = interner().read().ids.get(name) {
            return Self(id);
        }
        let mut w = interner().write();
        if let Some(&id) = w.ids.get(name) {
            return Self(id);
        }
        let id = w.names.len() as u32;
        let s: &'static str = Box::leak(name.to_owned().into_boxed_str());
        w.names.push(s);
        w.ids.insert(s, id);
        Self(id)
    }

    /// The code's text.
    pub fn name(self) -> &'static str {
        interner()
            .read()
            .names
            .get(self.0 as usize)
            .copied()
            .unwrap_or("")
    }

    /// The numeric id (stable within a process only).
    pub fn id(self) -> u32 {
        self.0
    }

    /// The code with numeric id `id`, if one was interned (for codes that crossed an
    /// FFI boundary as numbers).
    pub fn from_id(id: u32) -> Option<Self> {
        ((id as usize) < interner().read().names.len()).then_some(Self(id))
    }
}

impl fmt::Debug for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One reason: a code and its weight (rule score contribution, SHAP value, ...).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reason {
    /// The code.
    pub code: ReasonCode,
    /// Its weight; larger magnitude = more important.
    pub weight: f32,
}

/// Up to [`Reasons::CAPACITY`] reasons, inline, no allocation. When full, a new reason
/// replaces the one with the smallest `|weight|` if it is larger.
#[derive(Clone, Copy, PartialEq)]
pub struct Reasons {
    len: u8,
    items: [Reason; Reasons::CAPACITY],
}

impl Default for Reasons {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Reasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Reasons {
    /// How many reasons fit.
    pub const CAPACITY: usize = 8;

    /// No reasons.
    pub const fn new() -> Self {
        Self {
            len: 0,
            items: [Reason {
                code: ReasonCode::UNSET,
                weight: 0.0,
            }; Self::CAPACITY],
        }
    }

    /// Adds a reason (see the type docs for the full case).
    pub fn push(&mut self, code: ReasonCode, weight: f32) {
        let r = Reason { code, weight };
        if (self.len as usize) < Self::CAPACITY {
            self.items[self.len as usize] = r;
            self.len += 1;
            return;
        }
        let (i, min) = self
            .items
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.weight.abs().total_cmp(&b.1.weight.abs()))
            .map(|(i, r)| (i, r.weight.abs()))
            .unwrap_or((0, 0.0));
        if weight.abs() > min {
            self.items[i] = r;
        }
    }

    /// Sorts by decreasing `|weight|`.
    pub fn sort(&mut self) {
        self.items[..self.len as usize].sort_by(|a, b| b.weight.abs().total_cmp(&a.weight.abs()));
    }

    /// The reasons.
    pub fn iter(&self) -> impl Iterator<Item = &Reason> {
        self.items[..self.len as usize].iter()
    }

    /// The reasons as a slice.
    pub fn as_slice(&self) -> &[Reason] {
        &self.items[..self.len as usize]
    }

    /// Number of reasons.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// ===== Fired rules =====

/// The names of the rules that fired, in evaluation order, inline (no allocation): the
/// first [`FiredRules::CAPACITY`] are kept and [`total`](Self::total) counts them all,
/// so an audit record says when the list was cut.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FiredRules {
    len: u8,
    total: u32,
    names: [ReasonCode; FiredRules::CAPACITY],
}

impl Default for FiredRules {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FiredRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FiredRules {
    /// How many names are kept.
    pub const CAPACITY: usize = 16;

    /// None fired.
    pub const fn new() -> Self {
        Self {
            len: 0,
            total: 0,
            names: [ReasonCode::UNSET; Self::CAPACITY],
        }
    }

    /// Records a fired rule (its interned name).
    #[inline]
    pub fn push(&mut self, name: ReasonCode) {
        if (self.len as usize) < Self::CAPACITY {
            self.names[self.len as usize] = name;
            self.len += 1;
        }
        self.total = self.total.saturating_add(1);
    }

    /// The kept names' codes.
    pub fn codes(&self) -> &[ReasonCode] {
        &self.names[..self.len as usize]
    }

    /// The kept names.
    pub fn iter(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.codes().iter().map(|c| c.name())
    }

    /// How many fired (kept or not).
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Whether none fired.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Whether `name` is among the kept names.
    pub fn contains(&self, name: &str) -> bool {
        self.iter().any(|n| n == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable() {
        let a = ReasonCode::intern("R_TEST_A");
        let b = ReasonCode::intern("R_TEST_A");
        assert_eq!(a, b);
        assert_eq!(a.name(), "R_TEST_A");
        assert_ne!(a, ReasonCode::intern("R_TEST_B"));
    }

    #[test]
    fn reasons_keep_the_largest() {
        let mut r = Reasons::new();
        for i in 0..20 {
            r.push(ReasonCode::intern(&format!("R{i}")), i as f32);
        }
        assert_eq!(r.len(), Reasons::CAPACITY);
        r.sort();
        let w: Vec<f32> = r.iter().map(|x| x.weight).collect();
        assert_eq!(w, vec![19.0, 18.0, 17.0, 16.0, 15.0, 14.0, 13.0, 12.0]);
    }
}
