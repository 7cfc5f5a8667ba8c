//! Block / allow lists with per-entry expiry, changed at run time and from files.
//!
//! Each list holds keys of one source (devices, cards, IPs, e-mails, merchants, ...).
//! An entry is live while the clock's wall time is before its expiry (exactly:
//! `now < expires_at_ms`). Runtime changes are appended to `<dir>/<list>.journal` and
//! synced before the call returns (an acknowledged change survives a crash); a list's
//! file (`value[,expires_at_ms]` per line, `#` comments) is read at start and by
//! [`Lists::reload`], all or nothing: a bad file is refused naming file:line and the
//! list keeps serving what it had. The journal is replayed over the file.

use super::def::ListDef;
use super::plan::CKey;
use super::StateError;
use crate::clock::Clock;
use crate::hash::{email_hash, key_hash, splitmix};
use crate::schema::FeatureSchema;
use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SHARDS: usize = 16;
/// Longest list file read (bytes).
pub const MAX_LIST_FILE: u64 = 256 << 20;
/// Longest entry value (bytes).
pub const MAX_VALUE_LEN: usize = 512;
const NEVER: i64 = i64::MAX;

/// The key of a list entry's text for `src`.
pub(crate) fn entry_key(src: CKey, schema: &FeatureSchema, s: &str) -> Result<u64, String> {
    let s = s.trim();
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
}

struct List {
    def: ListDef,
    key: CKey,
    table: ArcSwap<Table>,
    /// Held while the journal is written and the table changed or swapped (a change
    /// is never lost to a concurrent reload).
    journal: Mutex<Option<File>>,
}

/// Every configured list.
pub struct Lists {
    lists: Vec<List>,
    schema: Arc<FeatureSchema>,
    clock: Arc<dyn Clock>,
    dir: Option<PathBuf>,
}

impl std::fmt::Debug for Lists {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.lists.iter().map(|l| &l.def.name))
            .finish()
    }
}

/// One parsed line: `+` add (value key, expiry) or `-` remove.
enum Op {
    Add(u64, i64),
    Remove(u64),
}

impl Lists {
    pub(crate) fn open(
        defs: &[(ListDef, CKey)],
        schema: Arc<FeatureSchema>,
        clock: Arc<dyn Clock>,
        dir: Option<PathBuf>,
    ) -> Result<Self, StateError> {
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).map_err(|e| StateError::io(d, e))?;
        }
        let mut lists = Vec::with_capacity(defs.len());
        for (def, key) in defs {
            let l = List {
                def: def.clone(),
                key: *key,
                table: ArcSwap::from_pointee(Table::new()),
                journal: Mutex::new(None),
            };
            lists.push(l);
        }
        let me = Self {
            lists,
            schema,
            clock,
            dir,
        };
        for i in 0..me.lists.len() {
            let t = me.build_table(i)?;
            me.lists[i].table.store(Arc::new(t));
        }
        Ok(me)
    }

    fn journal_path(&self, i: usize) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}.journal", self.lists[i].def.name)))
    }

    fn parse_lines(
        &self,
        i: usize,
        path: &Path,
        text: &str,
        journal: bool,
    ) -> Result<Vec<Op>, StateError> {
        let key = self.lists[i].key;
        let mut ops = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| StateError::BadListFile {
                path: path.to_path_buf(),
                line: n + 1,
                reason: why,
            };
            let (remove, body) = match (journal, line.as_bytes()[0]) {
                (true, b'+') => (false, &line[1..]),
                (true, b'-') => (true, &line[1..]),
                (true, _) => return Err(bad("a journal line starts with + or -".into())),
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
            let k = entry_key(key, &self.schema, value).map_err(bad)?;
            ops.push(if remove {
                Op::Remove(k)
            } else {
                Op::Add(k, exp)
            });
        }
        Ok(ops)
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

    /// The list's table from its file and journal (nothing changes on error).
    fn build_table(&self, i: usize) -> Result<Table, StateError> {
        let t = Table::new();
        let mut ops = Vec::new();
        if let Some(f) = &self.lists[i].def.file {
            ops.extend(self.parse_lines(i, f, &Self::read_file(f)?, false)?);
        }
        if let Some(j) = self.journal_path(i) {
            if j.exists() {
                ops.extend(self.parse_lines(i, &j, &Self::read_file(&j)?, true)?);
            }
        }
        for op in ops {
            match op {
                Op::Add(k, e) => {
                    t.shard(k).write().insert(k, e);
                }
                Op::Remove(k) => {
                    t.shard(k).write().remove(&k);
                }
            }
        }
        Ok(t)
    }

    /// The list's index and `value`'s key in it.
    fn entry(&self, list: &str, value: &str) -> Result<(usize, u64), StateError> {
        let i = self.index(list)?;
        let k = entry_key(self.lists[i].key, &self.schema, value).map_err(|reason| {
            StateError::BadEntry {
                list: list.to_owned(),
                reason,
            }
        })?;
        Ok((i, k))
    }

    fn index(&self, list: &str) -> Result<usize, StateError> {
        self.lists
            .iter()
            .position(|l| l.def.name == list)
            .ok_or_else(|| StateError::UnknownList(list.to_owned()))
    }

    fn journal(&self, i: usize, j: &mut Option<File>, line: &str) -> Result<(), StateError> {
        let Some(path) = self.journal_path(i) else {
            return Ok(());
        };
        if j.is_none() {
            *j = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| StateError::io(&path, e))?,
            );
        }
        let f = j.as_mut().expect("opened above");
        f.write_all(line.as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(|e| StateError::io(&path, e))
    }

    /// Adds (or re-dates) `value` in `list`, live until `expires_at_ms` (ms since the
    /// epoch; `None`: never). Journalled and synced before it returns.
    pub fn add(
        &self,
        list: &str,
        value: &str,
        expires_at_ms: Option<i64>,
    ) -> Result<(), StateError> {
        let (i, k) = self.entry(list, value)?;
        let exp = expires_at_ms.unwrap_or(NEVER);
        if value.contains(['\n', '\r']) || value.contains(',') {
            return Err(StateError::BadEntry {
                list: list.to_owned(),
                reason: "an entry may not contain a comma or a line break".into(),
            });
        }
        let mut j = self.lists[i].journal.lock();
        self.journal(i, &mut j, &format!("+{},{exp}\n", value.trim()))?;
        self.lists[i].table.load().shard(k).write().insert(k, exp);
        Ok(())
    }

    /// Removes `value` from `list`; whether it was there (live or expired).
    pub fn remove(&self, list: &str, value: &str) -> Result<bool, StateError> {
        let (i, k) = self.entry(list, value)?;
        let mut j = self.lists[i].journal.lock();
        self.journal(i, &mut j, &format!("-{}\n", value.trim()))?;
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
        Ok(self.member(i, k, self.clock.unix_ms()))
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

    /// Re-reads every list's file (and journal); a list whose file is bad keeps what it
    /// had, and the first error is returned after the others were reloaded.
    pub fn reload(&self) -> Result<(), StateError> {
        let mut first = None;
        for i in 0..self.lists.len() {
            let _j = self.lists[i].journal.lock();
            match self.build_table(i) {
                Ok(t) => self.lists[i].table.store(Arc::new(t)),
                Err(e) => {
                    tracing::warn!(target: "risk::state", list = %self.lists[i].def.name, error = %e, "list reload refused");
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Drops expired entries (memory); returns how many.
    pub fn purge_expired(&self) -> usize {
        let now = self.clock.unix_ms();
        let mut n = 0;
        for l in &self.lists {
            let t = l.table.load();
            for s in t.shards.iter() {
                let mut m = s.write();
                let before = m.len();
                m.retain(|_, &mut e| now < e);
                n += before - m.len();
            }
        }
        n
    }

    /// Whether key `k` is live in list `i` at `now_ms` (the decide path: one read lock).
    #[inline]
    pub(crate) fn member(&self, i: usize, k: u64, now_ms: i64) -> bool {
        let t = self.lists[i].table.load();
        let hit = t.shard(k).read().get(&k).is_some_and(|&e| now_ms < e);
        hit
    }
}
