//! Block / allow lists with per-entry expiry, changed at run time and from files.
//!
//! Each list holds keys of one source (devices, cards, IPs, e-mails, merchants, ...).
//! An entry is live while the clock's wall time is before its expiry (exactly:
//! `now < expires_at_ms`). Runtime changes are appended to `<dir>/<list>.journal` (`0600`
//! in a `0700` directory; a directory others can write is refused) and synced before the
//! call returns (an acknowledged change survives a crash); a list's file
//! (`value[,expires_at_ms]` per line, `#` comments) is read at start and by
//! [`Lists::reload`], all or nothing: a bad file is refused naming file:line and the list
//! keeps serving what it had. The journal is replayed over the file and compacted (see
//! [`journal`](self::journal)); it holds the entries' keys, never their text.
//!
//! An entry's text may not hold a control character (a line break would forge journal
//! lines) nor a comma. With a [`Pseudonymiser`], every key (from the file, the journal, a
//! runtime change or a transaction on the decide path) is replaced by its keyed pseudonym
//! ([`Domain::List`]) before it reaches the table or the journal.
//!
//! With `[state.redis]` (feature `redis`; `share_lists = true`, the default) the entries
//! live on Redis instead of in journals, shared by every host: see
//! [`redis`](self::redis) for the layout, the coherence bound and outages.

mod journal;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod shared;
#[cfg(feature = "redis")]
mod sync;

use super::def::ListDef;
use super::plan::CKey;
use super::{StateError, StatePrivacy};
use crate::clock::Clock;
use crate::files;
use crate::hash::{email_hash, key_hash, splitmix};
use crate::pseudo::{Domain, Pseudonymiser};
use crate::schema::FeatureSchema;
use arc_swap::ArcSwap;
pub use journal::COMPACT_MIN_LINES;
use journal::{KeyMap, Op};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
#[cfg(feature = "redis")]
pub use sync::ListSyncStatus;

const SHARDS: usize = 16;
/// Longest list file read (bytes).
pub const MAX_LIST_FILE: u64 = 256 << 20;
/// Longest entry value (bytes).
pub const MAX_VALUE_LEN: usize = 512;
const NEVER: i64 = i64::MAX;

/// The key of a list entry's text for `src`.
pub(crate) fn entry_key(src: CKey, schema: &FeatureSchema, s: &str) -> Result<u64, String> {
    let s = s.trim();
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(format!(
            "an entry may not contain a control character ({c:?})"
        ));
    }
    if s.is_empty() || s.len() > MAX_VALUE_LEN {
        return Err(format!("an entry must have 1 to {MAX_VALUE_LEN} bytes"));
    }
    Ok(match src {
        CKey::Entity => s
            .parse::<u64>()
            .unwrap_or_else(|_| crate::txn::EntityKey::from_str_hash(s).0),
        CKey::Device => s
            .parse::<u64>()
            .map_err(|_| format!("{s:?} is not a device id (a decimal u64)"))?,
        CKey::Merchant | CKey::Ip => key_hash(s),
        CKey::Email => email_hash(s),
        CKey::Country => {
            let c = crate::txn::Country::new(s).map_err(|e| e.to_string())?;
            let b = c.as_str().as_bytes();
            (u64::from(b[0]) << 8 | u64::from(b[1])) + 1
        }
        CKey::Slot(slot) => {
            let f = schema.field(slot);
            f.lookup(s)
                .map(|i| i as u64 + 1)
                .ok_or_else(|| format!("{s:?} is not in the vocabulary of {:?}", f.name))?
        }
    })
}

struct Table {
    shards: Box<[RwLock<HashMap<u64, i64>>]>,
}

impl Table {
    fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }
    fn shard(&self, k: u64) -> &RwLock<HashMap<u64, i64>> {
        &self.shards[(splitmix(k) >> 60) as usize % SHARDS]
    }
    fn apply(&self, op: Op) {
        match op {
            Op::Add(k, e) => {
                self.shard(k).write().insert(k, e);
            }
            Op::Remove(k) => {
                self.shard(k).write().remove(&k);
            }
        }
    }
}

/// The journal's open file and its size in lines.
#[derive(Default)]
struct Journal {
    file: Option<File>,
    /// Change lines in the file.
    lines: usize,
    /// Change lines the last compaction wrote.
    kept: usize,
}

struct List {
    def: ListDef,
    key: CKey,
    table: ArcSwap<Table>,
    /// Held while the journal is written and the table changed or swapped (a change
    /// is never lost to a concurrent reload).
    journal: Mutex<Journal>,
}

impl List {
    /// An empty list of `def` keyed by `key` (its table filled at open).
    fn new(def: &ListDef, key: CKey) -> Self {
        Self {
            def: def.clone(),
            key,
            table: ArcSwap::from_pointee(Table::new()),
            journal: Mutex::new(Journal::default()),
        }
    }
}

/// Every configured list.
pub struct Lists {
    lists: Arc<[List]>,
    schema: Arc<FeatureSchema>,
    clock: Arc<dyn Clock>,
    dir: Option<PathBuf>,
    opts: StatePrivacy,
    /// The lists' Redis when they are shared (no journals then).
    #[cfg(feature = "redis")]
    shared: Option<redis::Shared>,
}

impl std::fmt::Debug for Lists {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.lists.iter().map(|l| &l.def.name))
            .finish()
    }
}

impl Lists {
    pub(crate) fn open(
        defs: &[(ListDef, CKey)],
        schema: Arc<FeatureSchema>,
        clock: Arc<dyn Clock>,
        dir: Option<PathBuf>,
        opts: StatePrivacy,
    ) -> Result<Self, StateError> {
        if let Some(d) = &dir {
            files::create_dir(d, opts.file_mode)?;
        }
        let lists: Arc<[List]> = defs.iter().map(|(def, key)| List::new(def, *key)).collect();
        let me = Self {
            lists,
            schema,
            clock,
            dir,
            opts,
            #[cfg(feature = "redis")]
            shared: None,
        };
        for i in 0..me.lists.len() {
            let mut j = me.lists[i].journal.lock();
            let t = me.build_table(i, &mut j)?;
            me.lists[i].table.store(Arc::new(t));
        }
        Ok(me)
    }

    /// Whether the lists are shared through Redis and it cannot be reached now: the last
    /// known entries serve (see [`sync_status`](Self::sync_status)). One relaxed load.
    #[inline]
    pub fn stale(&self) -> bool {
        #[cfg(feature = "redis")]
        if let Some(sh) = &self.shared {
            return sh.stale();
        }
        false
    }

    fn pseudo(&self) -> Option<&Pseudonymiser> {
        self.opts.pseudonymiser.as_ref()
    }

    /// The table key of raw key `k` (its pseudonym when a key is configured).
    #[inline]
    fn table_key(&self, k: u64) -> u64 {
        match self.pseudo() {
            Some(p) => p.u64(Domain::List, k),
            None => k,
        }
    }

    fn journal_path(&self, i: usize) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}.journal", self.lists[i].def.name)))
    }

    /// The changes of a list file (`journal == false`) or a journal, in table keys.
    fn parse_lines(
        &self,
        i: usize,
        path: &Path,
        text: &str,
        journal: bool,
    ) -> Result<Vec<Op>, StateError> {
        let key = self.lists[i].key;
        let mut keys = KeyMap::Pseudonymise;
        let mut ops = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            let bad = |why: String| StateError::BadListFile {
                path: path.to_path_buf(),
                line: n + 1,
                reason: why,
            };
            if journal {
                if let Some(m) = journal::keys_from_header(line, self.pseudo()) {
                    keys = m.map_err(bad)?;
                    continue;
                }
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (remove, body) = match (journal, line.as_bytes()[0]) {
                (true, b'+') => (false, &line[1..]),
                (true, b'-') => (true, &line[1..]),
                (true, b'>') | (true, b'<') => {
                    ops.push(Self::key_line(line, keys, self.pseudo()).map_err(bad)?);
                    continue;
                }
                (true, _) => return Err(bad("a journal line starts with +, -, > or <".into())),
                (false, _) => (false, line),
            };
            let (value, exp) = match body.rsplit_once(',') {
                Some((v, e)) if !remove => {
                    let e = e.trim().parse::<i64>().map_err(|_| {
                        bad(format!("{e:?} is not an expiry in ms since the epoch"))
                    })?;
                    (v, e)
                }
                _ => (body, NEVER),
            };
            let k = self.table_key(entry_key(key, &self.schema, value).map_err(bad)?);
            ops.push(if remove {
                Op::Remove(k)
            } else {
                Op::Add(k, exp)
            });
        }
        Ok(ops)
    }

    /// A `>HEX,EXPIRY` or `<HEX` journal line.
    fn key_line(line: &str, keys: KeyMap, p: Option<&Pseudonymiser>) -> Result<Op, String> {
        let (body, exp) = match line.split_once(',') {
            Some((b, e)) if line.starts_with('>') => {
                let e = e
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| format!("{e:?} is not an expiry in ms since the epoch"))?;
                (b, Some(e))
            }
            None if line.starts_with('<') => (line, None),
            _ => return Err("a key line is >KEY,EXPIRY or <KEY".into()),
        };
        let k = u64::from_str_radix(&body[1..], 16)
            .map_err(|_| format!("{:?} is not a 16-hex-digit key", &body[1..]))?;
        let k = keys.apply(k, p);
        Ok(match exp {
            Some(e) => Op::Add(k, e),
            None => Op::Remove(k),
        })
    }

    fn read_file(path: &Path) -> Result<String, StateError> {
        let len = std::fs::metadata(path)
            .map_err(|e| StateError::io(path, e))?
            .len();
        if len > MAX_LIST_FILE {
            return Err(StateError::BadListFile {
                path: path.to_path_buf(),
                line: 0,
                reason: format!("{len} bytes is over the {MAX_LIST_FILE}-byte limit"),
            });
        }
        std::fs::read_to_string(path).map_err(|e| StateError::io(path, e))
    }

    /// The changes of the list's file and of its journal.
    fn read_ops(&self, i: usize) -> Result<(Vec<Op>, Vec<Op>), StateError> {
        let mut file = Vec::new();
        if let Some(f) = &self.lists[i].def.file {
            file = self.parse_lines(i, f, &Self::read_file(f)?, false)?;
        }
        let mut journal = Vec::new();
        if let Some(j) = self.journal_path(i) {
            if j.exists() {
                journal = self.parse_lines(i, &j, &Self::read_file(&j)?, true)?;
            }
        }
        Ok((file, journal))
    }

    /// Rewrites list `i`'s journal from `file` and `journal`, compacted; the compacted
    /// changes. Nothing is written when there is no journal file.
    fn compact_into(
        &self,
        i: usize,
        j: &mut Journal,
        file: &[Op],
        journal: &[Op],
    ) -> Result<Vec<Op>, StateError> {
        let ops = journal::compact(file, journal, self.clock.unix_ms());
        if let Some(path) = self.journal_path(i).filter(|p| p.exists()) {
            let mut text = journal::header(self.pseudo());
            for op in &ops {
                text.push_str(&op.line());
            }
            files::write_atomic(&path, text.as_bytes(), self.opts.file_mode)?;
            *j = Journal {
                file: None,
                lines: ops.len(),
                kept: ops.len(),
            };
        }
        Ok(ops)
    }

    /// The list's table from its file and journal, the journal compacted (nothing
    /// changes on error but the journal's compaction).
    fn build_table(&self, i: usize, j: &mut Journal) -> Result<Table, StateError> {
        let (file, journal) = self.read_ops(i)?;
        let ops = self.compact_into(i, j, &file, &journal)?;
        let now = self.clock.unix_ms();
        let t = Table::new();
        for op in file {
            if matches!(op, Op::Add(_, e) if now < e) {
                t.apply(op);
            }
        }
        for op in ops {
            t.apply(op);
        }
        Ok(t)
    }

    /// Compacts list `i`'s journal from what is on disk now.
    fn compact(&self, i: usize, j: &mut Journal) -> Result<(), StateError> {
        let (file, journal) = self.read_ops(i)?;
        self.compact_into(i, j, &file, &journal).map(drop)
    }

    /// Refuses text that could forge a journal line or hide in a log.
    fn check_text(list: &str, value: &str) -> Result<(), StateError> {
        let reason = if let Some(c) = value.chars().find(|c| c.is_control()) {
            format!("an entry may not contain a control character ({c:?})")
        } else if value.contains(',') {
            "an entry may not contain a comma".into()
        } else {
            return Ok(());
        };
        Err(StateError::BadEntry {
            list: list.to_owned(),
            reason,
        })
    }

    /// The list's index and `value`'s table key in it.
    fn entry(&self, list: &str, value: &str) -> Result<(usize, u64), StateError> {
        let i = self.index(list)?;
        Self::check_text(list, value)?;
        let k = entry_key(self.lists[i].key, &self.schema, value).map_err(|reason| {
            StateError::BadEntry {
                list: list.to_owned(),
                reason,
            }
        })?;
        Ok((i, self.table_key(k)))
    }

    fn index(&self, list: &str) -> Result<usize, StateError> {
        self.lists
            .iter()
            .position(|l| l.def.name == list)
            .ok_or_else(|| StateError::UnknownList(list.to_owned()))
    }

    /// Appends `op` to list `i`'s journal (synced), compacting it when due.
    fn journal(&self, i: usize, j: &mut Journal, op: Op) -> Result<(), StateError> {
        let Some(path) = self.journal_path(i) else {
            return Ok(());
        };
        if j.file.is_none() {
            let mut f = files::open_append(&path, self.opts.file_mode)
                .map_err(|e| StateError::io(&path, e))?;
            let empty = f.metadata().map_err(|e| StateError::io(&path, e))?.len() == 0;
            if empty {
                f.write_all(journal::header(self.pseudo()).as_bytes())
                    .map_err(|e| StateError::io(&path, e))?;
                *j = Journal::default();
            }
            j.file = Some(f);
        }
        let f = j.file.as_mut().expect("opened above");
        f.write_all(op.line().as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(|e| StateError::io(&path, e))?;
        j.lines += 1;
        if journal::due(j.lines, j.kept) {
            if let Err(e) = self.compact(i, j) {
                tracing::warn!(target: "risk::state", list = %self.lists[i].def.name, error = %e, "list journal compaction failed");
                j.kept = j.lines;
            }
        }
        Ok(())
    }

    /// Adds (or re-dates) `value` in `list`, live until `expires_at_ms` (ms since the
    /// epoch; `None`: never). Journalled and synced before it returns (shared lists: made
    /// on Redis and applied here, else [`StateError::ListStore`]). A value with a
    /// control character or a comma is refused ([`StateError::BadEntry`]).
    pub fn add(
        &self,
        list: &str,
        value: &str,
        expires_at_ms: Option<i64>,
    ) -> Result<(), StateError> {
        let (i, k) = self.entry(list, value)?;
        let exp = expires_at_ms.unwrap_or(NEVER);
        #[cfg(feature = "redis")]
        if let Some(sh) = &self.shared {
            return sh.change(i, Op::Add(k, exp)).map(drop);
        }
        let mut j = self.lists[i].journal.lock();
        self.journal(i, &mut j, Op::Add(k, exp))?;
        self.lists[i].table.load().shard(k).write().insert(k, exp);
        Ok(())
    }

    /// Removes `value` from `list`; whether it was there (live or expired). Refuses what
    /// [`add`](Self::add) refuses.
    pub fn remove(&self, list: &str, value: &str) -> Result<bool, StateError> {
        let (i, k) = self.entry(list, value)?;
        #[cfg(feature = "redis")]
        if let Some(sh) = &self.shared {
            return sh.change(i, Op::Remove(k));
        }
        let mut j = self.lists[i].journal.lock();
        self.journal(i, &mut j, Op::Remove(k))?;
        let had = self.lists[i]
            .table
            .load()
            .shard(k)
            .write()
            .remove(&k)
            .is_some();
        Ok(had)
    }

    /// Whether `value` is a live entry of `list` now.
    pub fn contains(&self, list: &str, value: &str) -> Result<bool, StateError> {
        let (i, k) = self.entry(list, value)?;
        Ok(self.live(i, k, self.clock.unix_ms()))
    }

    /// Live entries of `list` now.
    pub fn len(&self, list: &str) -> Result<usize, StateError> {
        let i = self.index(list)?;
        let now = self.clock.unix_ms();
        let t = self.lists[i].table.load();
        Ok(t.shards
            .iter()
            .map(|s| s.read().values().filter(|&&e| now < e).count())
            .sum())
    }

    /// Whether there are no lists.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// The lists' names.
    pub fn names(&self) -> Vec<&str> {
        self.lists.iter().map(|l| l.def.name.as_str()).collect()
    }

    /// Lines in `list`'s journal (0 without one): what compaction bounds.
    pub fn journal_lines(&self, list: &str) -> Result<usize, StateError> {
        let i = self.index(list)?;
        let j = self.lists[i].journal.lock();
        Ok(j.lines)
    }

    /// Re-reads every list's file (and journal, compacting it; shared lists: the file
    /// replaces the base on Redis when it differs, and the list is reloaded from Redis); a
    /// list whose file is bad keeps what it had, and the first error is returned after the
    /// others were reloaded.
    pub fn reload(&self) -> Result<(), StateError> {
        let mut first = None;
        for i in 0..self.lists.len() {
            #[cfg(feature = "redis")]
            if let Some(sh) = &self.shared {
                if let Err(e) = self.seed(i).and_then(|s| sh.reseed(i, s)) {
                    tracing::warn!(target: "risk::state", list = %self.lists[i].def.name, error = %e, "shared list reload refused");
                    first.get_or_insert(e);
                }
                continue;
            }
            let mut j = self.lists[i].journal.lock();
            match self.build_table(i, &mut j) {
                Ok(t) => self.lists[i].table.store(Arc::new(t)),
                Err(e) => {
                    tracing::warn!(target: "risk::state", list = %self.lists[i].def.name, error = %e, "list reload refused");
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Drops expired entries from memory and from the journals of the lists that had
    /// some (shared lists: from Redis, and every host drops them); returns how many here.
    pub fn purge_expired(&self) -> usize {
        let now = self.clock.unix_ms();
        let mut n = 0;
        for (i, l) in self.lists.iter().enumerate() {
            #[cfg(feature = "redis")]
            if let Some(sh) = &self.shared {
                // Local first (the count); then on Redis, which tells every host.
                let t = l.table.load();
                let before: usize = t.shards.iter().map(|s| s.read().len()).sum();
                sync::purge_table(&t, now);
                n += before - t.shards.iter().map(|s| s.read().len()).sum::<usize>();
                if let Err(e) = sh.purge(i, now) {
                    tracing::warn!(target: "risk::state", list = %l.def.name, error = %e, "shared list purge failed");
                }
                continue;
            }
            let mut j = l.journal.lock();
            let t = l.table.load();
            let mut purged = 0;
            for s in t.shards.iter() {
                let mut m = s.write();
                let before = m.len();
                m.retain(|_, &mut e| now < e);
                purged += before - m.len();
            }
            if purged > 0 {
                if let Err(e) = self.compact(i, &mut j) {
                    tracing::warn!(target: "risk::state", list = %l.def.name, error = %e, "list journal compaction failed");
                }
            }
            n += purged;
        }
        n
    }

    /// Whether table key `k` is live in list `i` at `now_ms`.
    #[inline]
    fn live(&self, i: usize, k: u64, now_ms: i64) -> bool {
        let t = self.lists[i].table.load();
        let hit = t.shard(k).read().get(&k).is_some_and(|&e| now_ms < e);
        hit
    }

    /// Whether raw key `k` (from a transaction) is live in list `i` at `now_ms` (the
    /// decide path: one keyed hash when pseudonymised, one read lock).
    #[inline]
    pub(crate) fn member(&self, i: usize, k: u64, now_ms: i64) -> bool {
        self.live(i, self.table_key(k), now_ms)
    }
}
