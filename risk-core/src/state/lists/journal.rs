//! A list's journal: the runtime changes of one list, appended and synced one line each,
//! replayed over the list's file at start, and compacted.
//!
//! Lines (one change each; `#` lines are comments):
//! - `>HEX,EXPIRY` adds (or re-dates) the entry whose table key is `HEX` (16 hex digits),
//!   live while the clock is before `EXPIRY` (ms since the epoch);
//! - `<HEX` removes it;
//! - `+VALUE,EXPIRY` and `-VALUE`: the same by the entry's text (journals written before
//!   keys were journalled; read, never written).
//!
//! The first line names what the keys are: `# risk list journal v2; keys: raw` (the list's
//! `u64` keys: a device id, an unkeyed hash of an e-mail or IP) or `keys: pseudonyms ID`
//! (keyed pseudonyms, [`Domain::List`](crate::pseudo::Domain::List), of the key named by its
//! id): with a `[privacy] key` the journal never holds an entry's text nor its raw key.
//!
//! Compaction rewrites the journal (atomically, `0600`) with the last change of each key,
//! dropping adds that have expired and removes of keys the list's file does not hold live:
//! at every load, and when the journal's lines exceed twice what the last compaction kept
//! plus [`COMPACT_MIN_LINES`].

use crate::pseudo::{Domain, Pseudonymiser};
use std::collections::HashMap;

/// Journal lines appended since the last compaction, beyond twice the lines it kept, that
/// trigger the next one.
pub const COMPACT_MIN_LINES: usize = 128;

const HEADER: &str = "# risk list journal v2; keys: ";

/// One change: add (table key, expiry in ms) or remove (table key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Add(u64, i64),
    Remove(u64),
}

impl Op {
    fn key(self) -> u64 {
        match self {
            Op::Add(k, _) | Op::Remove(k) => k,
        }
    }

    /// The op's journal line (with its newline).
    pub(super) fn line(self) -> String {
        match self {
            Op::Add(k, e) => format!(">{k:016x},{e}\n"),
            Op::Remove(k) => format!("<{k:016x}\n"),
        }
    }
}

/// The header line a journal written under `p` starts with.
pub(super) fn header(p: Option<&Pseudonymiser>) -> String {
    match p {
        None => format!("{HEADER}raw\n"),
        Some(p) => format!("{HEADER}pseudonyms {}\n", p.key_id()),
    }
}

/// How the key lines of a journal map to table keys under `p`, from its header line
/// (`None`: not a header). Raw keys are pseudonymised when a key is configured; keys
/// pseudonymised by another key (or when none is configured) are refused.
pub(super) fn keys_from_header(
    line: &str,
    p: Option<&Pseudonymiser>,
) -> Option<Result<KeyMap, String>> {
    let what = line.strip_prefix(HEADER)?.trim();
    Some(match (what, p) {
        ("raw", None) => Ok(KeyMap::AsIs),
        ("raw", Some(_)) => Ok(KeyMap::Pseudonymise),
        (w, p) => match (w.strip_prefix("pseudonyms "), p) {
            (Some(id), Some(p)) if id == p.key_id() => Ok(KeyMap::AsIs),
            (Some(id), Some(p)) => Err(format!(
                "the journal's keys are pseudonyms of key id {id}; the configured [privacy] key has id {}",
                p.key_id()
            )),
            (Some(id), None) => Err(format!(
                "the journal's keys are pseudonyms of key id {id}; no [privacy] key is configured"
            )),
            (None, _) => Err(format!("unknown journal keys {w:?}")),
        },
    })
}

/// What a key line's key is in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyMap {
    /// The table key itself.
    AsIs,
    /// A raw key, pseudonymised into the table's.
    Pseudonymise,
}

impl KeyMap {
    pub(super) fn apply(self, k: u64, p: Option<&Pseudonymiser>) -> u64 {
        match (self, p) {
            (KeyMap::Pseudonymise, Some(p)) => p.u64(Domain::List, k),
            _ => k,
        }
    }
}

/// The journal after compaction over a file that gives `file`: the last change of each
/// key, sorted by key; an add that has expired at `now_ms` and a remove become a remove
/// when the file holds the key live, and nothing otherwise.
pub(super) fn compact(file: &[Op], journal: &[Op], now_ms: i64) -> Vec<Op> {
    let mut base: HashMap<u64, i64> = HashMap::new();
    for op in file {
        match *op {
            Op::Add(k, e) => {
                base.insert(k, e);
            }
            Op::Remove(k) => {
                base.remove(&k);
            }
        }
    }
    let mut last: HashMap<u64, Op> = HashMap::with_capacity(journal.len());
    for op in journal {
        last.insert(op.key(), *op);
    }
    let file_live = |k: u64| base.get(&k).is_some_and(|&e| now_ms < e);
    let mut out: Vec<Op> = last
        .into_values()
        .filter_map(|op| match op {
            Op::Add(_, e) if now_ms < e => Some(op),
            Op::Add(k, _) | Op::Remove(k) => file_live(k).then_some(Op::Remove(k)),
        })
        .collect();
    out.sort_by_key(|o| o.key());
    out
}

/// Whether a journal of `lines` lines, of which the last compaction kept `kept`, is due.
pub(super) fn due(lines: usize, kept: usize) -> bool {
    lines >= 2 * kept + COMPACT_MIN_LINES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_keeps_the_last_live_change_of_each_key() {
        let file = [Op::Add(1, 100), Op::Add(2, 100), Op::Add(3, 10)];
        let journal = [
            Op::Add(9, 100),
            Op::Remove(9),
            Op::Add(7, 100),
            Op::Remove(1),
            Op::Add(2, 5),
            Op::Remove(3),
            Op::Add(8, 20),
            Op::Add(8, 200),
        ];
        assert_eq!(
            compact(&file, &journal, 50),
            vec![
                Op::Remove(1),
                Op::Remove(2),
                Op::Add(7, 100),
                Op::Add(8, 200)
            ]
        );
    }

    #[test]
    fn headers_map_keys_or_refuse_another_key() {
        let a = Pseudonymiser::new("privacy.key", b"0123456789abcdef-A").unwrap();
        let b = Pseudonymiser::new("privacy.key", b"0123456789abcdef-B").unwrap();
        let raw = header(None);
        let pa = header(Some(&a));
        assert_eq!(
            keys_from_header(raw.trim_end(), None),
            Some(Ok(KeyMap::AsIs))
        );
        assert_eq!(
            keys_from_header(raw.trim_end(), Some(&a)),
            Some(Ok(KeyMap::Pseudonymise))
        );
        assert_eq!(
            keys_from_header(pa.trim_end(), Some(&a)),
            Some(Ok(KeyMap::AsIs))
        );
        let e = keys_from_header(pa.trim_end(), Some(&b))
            .unwrap()
            .unwrap_err();
        assert!(e.contains(&a.key_id()) && e.contains(&b.key_id()), "{e}");
        assert!(keys_from_header(pa.trim_end(), None).unwrap().is_err());
        assert_eq!(keys_from_header("# a comment", None), None);
    }
}
