//! Lists shared by the fleet (feature `redis`; with `[state.redis]` and `share_lists =
//! true`, the default): every list's entries live on Redis, and each host serves them from
//! a local copy that a background thread keeps coherent. The decide path never touches the
//! network: [`Lists::member`](super::Lists::member) reads the local copy exactly as with the
//! file store.
//!
//! ## On Redis
//! A list named `N` of key source `S` is the keys `P:list:{N:S}:base|chg|ver|mark|digest`
//! (`P` the `[state.redis] prefix`, so an ACL `~P:*` covers them; one hash tag, so one
//! cluster slot; the ACL user needs `+@pubsub` besides what the feature store needs):
//! - `base`: the entries of the list's file (field: the entry's table key as 16 hex
//!   digits, the keyed pseudonym with a `[privacy] key`; value: expiry in ms since the
//!   epoch), replaced by a host's start or `reload` when its file differs (`digest`);
//! - `chg`: runtime changes over it (an expiry, or `-`: removed), as the journal is
//!   replayed over the file;
//! - `ver`: a counter every change increments; `mark`: what the keys are (`raw` or
//!   `pseudonyms ID`): a host with another `[privacy] key` is refused.
//!
//! Each change runs as one script that updates the hashes, increments `ver` and publishes
//! the change (`P:lists` channel: `TAG VER a KEY EXPIRY`, `TAG VER r KEY`, `TAG VER s`
//! for a new base, `TAG VER p NOW` for a purge). A raw entry's text never reaches Redis.
//!
//! ## Coherence
//! The subscriber applies messages in version order; a gap (a lost message) reloads the
//! list from Redis (`HGETALL` of both hashes and `ver`, one script: atomic). Every
//! `lists_check_ms` it also reads each list's `ver` and reloads a list that moved without
//! a message. A change made on this host is applied here before `add` / `remove`
//! return (unless this host is behind: then by the subscriber). So a change is seen by
//! every host within the pub/sub latency, and at worst within `lists_check_ms`.
//!
//! ## Outages
//! When Redis cannot be reached (connection lost, a check timing out), the lists are
//! **stale**: the last known entries keep serving (expiry still applies), decisions say
//! so (`Decision::lists_stale`), `Engine::health()` is degraded, and the subscriber
//! reconnects every `lists_check_ms`; once back it reloads every list in full. A Redis
//! that lost its data (restarted without persistence) is re-seeded from the hosts' files
//! (runtime changes made since are lost with it). Changes made while Redis is down fail
//! ([`StateError::ListStore`]); nothing changes locally.

use super::journal::Op;
use super::sync::{build, purge_table, ListSyncStatus, Seed};
use super::List;
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::state::def::RedisConfig;
use crate::state::redis_conn::{Access, Client, Conn};
use crate::state::StateError;
use parking_lot::Mutex;
use redis::Cmd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// KEYS base chg ver mark; ARGV channel tag marker op key [expiry]. `{ver, had}`.
const CHANGE: &str = include_str!("lua/change.lua");

/// KEYS base chg ver mark digest; ARGV channel tag marker digest ('' no file) then
/// key/expiry pairs. Sets the mark; replaces the base when the digest differs.
const SEED: &str = include_str!("lua/seed.lua");

/// KEYS base chg ver mark: `{ver, mark, base pairs, chg pairs}` (atomic).
const SNAPSHOT: &str = include_str!("lua/snapshot.lua");

/// KEYS base chg ver; ARGV channel tag marker now. Drops what expired by `now` (an
/// expired change over a base entry becomes a removal); the new version or 0.
const PURGE: &str = include_str!("lua/purge.lua");

/// One list's Redis keys.
struct Keys {
    tag: String,
    base: String,
    chg: String,
    ver: String,
    mark: String,
    digest: String,
}

struct Inner {
    lists: Arc<[List]>,
    keys: Vec<Keys>,
    channel: String,
    marker: String,
    access: Access,
    server: String,
    client: Client,
    subscribers: Vec<redis::Client>,
    control: Mutex<Option<Conn>>,
    control_timeout: Duration,
    check: Duration,
    clock: Arc<dyn Clock>,
    applied: Vec<AtomicU64>,
    seeds: Mutex<Vec<Option<Seed>>>,
    stale: AtomicBool,
    stale_since: Mutex<Option<Instant>>,
    stop: AtomicBool,
    changes: AtomicU64,
    resyncs: AtomicU64,
    errors: AtomicU64,
    refused: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// The shared lists' client and subscriber; dropping it stops the subscriber.
pub(super) struct Shared {
    inner: Arc<Inner>,
    thread: std::thread::Thread,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.inner.stop.store(true, Relaxed);
        self.thread.unpark();
    }
}

fn script(src: &str, k: &Keys, n: usize) -> Cmd {
    let mut c = redis::cmd("EVAL");
    c.arg(src).arg(n);
    for key in [&k.base, &k.chg, &k.ver, &k.mark, &k.digest]
        .into_iter()
        .take(n)
    {
        c.arg(key.as_str());
    }
    c
}

impl Shared {
    /// Connects, seeds every list's base from its file, loads every list and starts the
    /// subscriber. Redis must be reachable (a wrong address is a build error).
    pub(super) fn open(
        cfg: &RedisConfig,
        lists: Arc<[List]>,
        marker: String,
        seeds: Vec<Option<Seed>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        if cfg.lists_check < Duration::from_millis(1) {
            return Err(ConfigError::invalid(
                "state.redis.lists_check_ms",
                "must be at least 1",
            ));
        }
        let access = Access::from_config(cfg)?;
        let control_timeout = cfg.timeout.max(Duration::from_secs(2));
        let client = Client::open(cfg, &access, control_timeout)?;
        let subscribers = Client::subscribers(cfg, &access)?;
        let keys = lists
            .iter()
            .map(|l| {
                let tag = format!("{}:{}", l.def.name, l.def.key.name());
                let h = format!("{}:list:{{{tag}}}", cfg.prefix);
                Keys {
                    base: format!("{h}:base"),
                    chg: format!("{h}:chg"),
                    ver: format!("{h}:ver"),
                    mark: format!("{h}:mark"),
                    digest: format!("{h}:digest"),
                    tag,
                }
            })
            .collect();
        let inner = Arc::new(Inner {
            applied: lists.iter().map(|_| AtomicU64::new(0)).collect(),
            lists,
            keys,
            channel: format!("{}:lists", cfg.prefix),
            marker,
            server: cfg.server(),
            client,
            subscribers,
            control: Mutex::new(None),
            control_timeout,
            check: cfg.lists_check,
            clock,
            seeds: Mutex::new(seeds),
            stale: AtomicBool::new(false),
            stale_since: Mutex::new(None),
            stop: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            resyncs: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            last_error: Mutex::new(None),
            access,
        });
        let mut con = inner
            .client
            .connect(control_timeout)
            .map_err(|e| inner.access.config_error(cfg, &e))?;
        for i in 0..inner.lists.len() {
            inner
                .seed(i, &mut con)
                .map_err(|e| inner.open_error(cfg, e))?;
            inner
                .resync(i, &mut con)
                .map_err(|e| inner.open_error(cfg, e))?;
        }
        *inner.control.lock() = Some(con);
        let bg = Arc::clone(&inner);
        let handle = std::thread::Builder::new()
            .name("risk-lists-sync".into())
            .spawn(move || bg.run())
            .map_err(|e| {
                ConfigError::invalid(
                    "state.redis",
                    format!("cannot start the lists' subscriber: {e}"),
                )
            })?;
        Ok(Self {
            thread: handle.thread().clone(),
            inner,
        })
    }

    /// Whether the lists are stale (Redis unreachable): one relaxed load.
    #[inline]
    pub(super) fn stale(&self) -> bool {
        self.inner.stale.load(Relaxed)
    }

    /// Runs `op` on list `i` on Redis and applies it here; whether the key was in the
    /// list (live or expired) before.
    pub(super) fn change(&self, i: usize, op: Op) -> Result<bool, StateError> {
        let n = &*self.inner;
        let k = &n.keys[i];
        let mut c = script(CHANGE, k, 4);
        c.arg(&n.channel).arg(&k.tag).arg(&n.marker);
        match op {
            Op::Add(key, e) => c.arg("a").arg(format!("{key:016x}")).arg(e),
            Op::Remove(key) => c.arg("r").arg(format!("{key:016x}")),
        };
        let got = n.control(|con| match con.query::<(u64, u8)>(&c) {
            Err(e) if e.code() == Some("RISKLISTS") && e.detail() == Some("uninit") => {
                // Redis lost the list (a restart without persistence): seed, then retry.
                n.seed(i, con).map_err(RedisOr::Other)?;
                con.query::<(u64, u8)>(&c).map_err(RedisOr::Redis)
            }
            Err(e) if e.code() == Some("RISKLISTS") => {
                Err(RedisOr::Other(n.foreign(i, e.detail().unwrap_or_default())))
            }
            r => r.map_err(RedisOr::Redis),
        });
        let (v, had) = got.map_err(|e| n.list_error(i, e))?;
        let _g = n.lists[i].journal.lock();
        if n.applied[i].load(Relaxed) + 1 == v {
            n.lists[i].table.load().apply(op);
            n.applied[i].store(v, Relaxed);
        }
        Ok(had == 1)
    }

    /// Replaces list `i`'s base on Redis with `seed` (when it differs) and reloads it.
    pub(super) fn reseed(&self, i: usize, seed: Option<Seed>) -> Result<(), StateError> {
        let n = &*self.inner;
        n.seeds.lock()[i] = seed;
        n.control(|con| {
            n.seed(i, con).map_err(RedisOr::Other)?;
            n.resync(i, con).map_err(RedisOr::Other)
        })
        .map_err(|e| n.list_error(i, e))
    }

    /// Drops entries expired by `now_ms` on Redis (every host drops them when told).
    pub(super) fn purge(&self, i: usize, now_ms: i64) -> Result<(), StateError> {
        let n = &*self.inner;
        let k = &n.keys[i];
        let mut c = script(PURGE, k, 3);
        c.arg(&n.channel).arg(&k.tag).arg(&n.marker).arg(now_ms);
        let v: u64 = n
            .control(|con| con.query(&c).map_err(RedisOr::Redis))
            .map_err(|e| n.list_error(i, e))?;
        let _g = n.lists[i].journal.lock();
        if v != 0 && n.applied[i].load(Relaxed) + 1 == v {
            n.applied[i].store(v, Relaxed);
        }
        Ok(())
    }

    /// How the shared lists stand.
    pub(super) fn status(&self) -> ListSyncStatus {
        let n = &*self.inner;
        ListSyncStatus {
            stale: n.stale.load(Relaxed),
            stale_for: n.stale_since.lock().map_or(Duration::ZERO, |t| t.elapsed()),
            changes_applied: n.changes.load(Relaxed),
            resyncs: n.resyncs.load(Relaxed),
            errors: n.errors.load(Relaxed),
            refused: n.refused.load(Relaxed),
            versions: n
                .lists
                .iter()
                .zip(&n.applied)
                .map(|(l, v)| (l.def.name.clone(), v.load(Relaxed)))
                .collect(),
            last_error: n.last_error.lock().clone(),
        }
    }
}

/// A Redis failure or another reason (a refused reload), before it is scrubbed.
enum RedisOr {
    Redis(redis::RedisError),
    Other(String),
}

impl Inner {
    fn text(&self, e: RedisOr) -> String {
        match e {
            RedisOr::Redis(e) => format!("{}: {}", self.server, self.access.scrub(&e.to_string())),
            RedisOr::Other(s) => s,
        }
    }

    fn list_error(&self, i: usize, e: RedisOr) -> StateError {
        StateError::ListStore {
            list: self.lists[i].def.name.clone(),
            reason: self.text(e),
        }
    }

    fn open_error(&self, cfg: &RedisConfig, e: String) -> ConfigError {
        let key = if cfg.cluster.is_empty() {
            "state.redis.url"
        } else {
            "state.redis.cluster"
        };
        ConfigError::invalid(key, format!("shared lists: {e}"))
    }

    /// Runs `f` on the control connection, made anew after a failure; a kept connection
    /// that the server dropped since (a restart) is replaced and `f` run once more
    /// (changes are idempotent).
    fn control<T>(&self, mut f: impl FnMut(&mut Conn) -> Result<T, RedisOr>) -> Result<T, RedisOr> {
        let mut slot = self.control.lock();
        let kept = slot.is_some();
        for attempt in 0..2 {
            if slot.is_none() {
                *slot = Some(
                    self.client
                        .connect(self.control_timeout)
                        .map_err(RedisOr::Redis)?,
                );
            }
            let r = f(slot.as_mut().expect("connected above"));
            match &r {
                Ok(_) => return r,
                Err(RedisOr::Redis(e))
                    if attempt == 0
                        && kept
                        && (e.is_connection_dropped() || e.is_io_error())
                        && !e.is_timeout() =>
                {
                    *slot = None;
                }
                Err(_) => {
                    *slot = None;
                    return r;
                }
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Sets list `i`'s mark (refusing another key's) and its base from its seed.
    fn seed(&self, i: usize, con: &mut Conn) -> Result<(), String> {
        let k = &self.keys[i];
        let mut c = script(SEED, k, 5);
        c.arg(&self.channel).arg(&k.tag).arg(&self.marker);
        let now = self.clock.unix_ms();
        match &self.seeds.lock()[i] {
            None => {
                c.arg("");
            }
            Some(s) => {
                c.arg(&s.digest);
                for &(key, e) in s.entries.iter().filter(|&&(_, e)| now < e) {
                    c.arg(format!("{key:016x}")).arg(e);
                }
            }
        }
        con.query::<u64>(&c).map(drop).map_err(|e| match e.code() {
            Some("RISKLISTS") => self.foreign(i, e.detail().unwrap_or_default()),
            _ => self.text(RedisOr::Redis(e)),
        })
    }

    /// Why list `i` on Redis, whose keys are `theirs`, cannot be read here.
    fn foreign(&self, i: usize, theirs: &str) -> String {
        format!(
            "list {:?}: Redis holds keys of \"{}\"; this host's are \"{}\" (every host needs the same [privacy] key)",
            self.lists[i].def.name,
            theirs.trim_start_matches("keys "),
            self.marker
        )
    }

    /// Reloads list `i` from Redis (re-seeding a list Redis lost); a malformed entry
    /// refuses the whole reload (the last known entries serve).
    fn resync(&self, i: usize, con: &mut Conn) -> Result<(), String> {
        type Snap = (u64, Option<String>, Vec<String>, Vec<String>);
        // Held from before the snapshot is read until it is stored: a change this host
        // made meanwhile (`change` applies it under this lock once Redis answered) then
        // lands either in the snapshot or on top of it, never under an older snapshot
        // stored after it (which lost the change until its message came).
        let _g = self.lists[i].journal.lock();
        let k = &self.keys[i];
        let snap = |con: &mut Conn| {
            con.query::<Snap>(&script(SNAPSHOT, k, 4))
                .map_err(|e| self.text(RedisOr::Redis(e)))
        };
        let mut s = snap(con)?;
        if s.1.is_none() {
            self.seed(i, con)?;
            s = snap(con)?;
        }
        let name = &self.lists[i].def.name;
        if s.1.as_deref() != Some(self.marker.as_str()) {
            return Err(self.foreign(i, s.1.as_deref().unwrap_or_default()));
        }
        let (ver, _, base, chg) = s;
        let table = match build(&base, &chg) {
            Ok(t) => t,
            Err(why) => {
                let e = format!("list {name:?}: refused a reload from Redis: {why}");
                *self.last_error.lock() = Some(e.clone());
                self.refused.fetch_add(1, Relaxed);
                return Err(e);
            }
        };
        self.lists[i].table.store(Arc::new(table));
        self.applied[i].store(ver, Relaxed);
        self.resyncs.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Applies one published change, or reloads its list when one was missed.
    fn on_message(&self, payload: &str, con: &mut Conn) -> Result<(), String> {
        let mut w = payload.split(' ');
        let (Some(tag), Some(ver)) = (w.next(), w.next().and_then(|v| v.parse::<u64>().ok()))
        else {
            return Ok(());
        };
        let Some(i) = self.keys.iter().position(|k| k.tag == tag) else {
            return Ok(()); // a list this host does not have
        };
        let (op, a, b) = (w.next(), w.next(), w.next());
        let hex = |x: Option<&str>| x.and_then(|x| u64::from_str_radix(x, 16).ok());
        let dec = |x: Option<&str>| x.and_then(|x| x.parse::<i64>().ok());
        {
            let _g = self.lists[i].journal.lock();
            let applied = self.applied[i].load(Relaxed);
            if ver <= applied {
                return Ok(());
            }
            let t = self.lists[i].table.load();
            let done = ver == applied + 1
                && match (op, hex(a), dec(b), dec(a)) {
                    (Some("a"), Some(k), Some(e), _) => {
                        t.apply(Op::Add(k, e));
                        true
                    }
                    (Some("r"), Some(k), _, _) => {
                        t.apply(Op::Remove(k));
                        true
                    }
                    (Some("p"), _, _, Some(now)) => {
                        purge_table(&t, now);
                        true
                    }
                    _ => false,
                };
            if done {
                self.applied[i].store(ver, Relaxed);
                self.changes.fetch_add(1, Relaxed);
                return Ok(());
            }
        }
        self.resync(i, con)
    }

    /// Reloads every list whose version on Redis is not the one applied here.
    fn check(&self, con: &mut Conn) -> Result<(), String> {
        let cmds: Vec<Cmd> = self
            .keys
            .iter()
            .map(|k| {
                let mut c = redis::cmd("GET");
                c.arg(&k.ver);
                c
            })
            .collect();
        let vals = con
            .pipeline(&cmds)
            .map_err(|e| self.text(RedisOr::Redis(e)))?;
        for (i, v) in vals.iter().enumerate() {
            let v: u64 = redis::from_redis_value_ref::<Option<u64>>(v)
                .ok()
                .flatten()
                .unwrap_or(0);
            if v != self.applied[i].load(Relaxed) {
                self.resync(i, con)?;
            }
        }
        Ok(())
    }

    fn set_stale(&self, e: String) {
        self.errors.fetch_add(1, Relaxed);
        if !self.stale.swap(true, Relaxed) {
            *self.stale_since.lock() = Some(Instant::now());
            tracing::warn!(target: "risk::state", error = %e, "shared lists stale: serving the last known entries");
        }
        *self.last_error.lock() = Some(e);
    }

    fn set_fresh(&self) {
        if self.stale.swap(false, Relaxed) {
            *self.stale_since.lock() = None;
            tracing::info!(target: "risk::state", "shared lists reloaded from Redis: fresh again");
        }
    }

    /// The subscriber: a session until it fails, then a pause of `check` (woken early
    /// by the owner's drop), then a new session.
    fn run(self: Arc<Self>) {
        let mut node = 0;
        while !self.stop.load(Relaxed) {
            if let Err(e) = self.session(node) {
                if self.stop.load(Relaxed) {
                    break;
                }
                self.set_stale(e);
                node += 1;
                std::thread::park_timeout(self.check);
            }
        }
    }

    /// Subscribes, reloads every list, then applies changes and checks versions until
    /// a failure (or the owner is dropped: `Ok`).
    fn session(&self, node: usize) -> Result<(), String> {
        let red = |e: redis::RedisError| self.text(RedisOr::Redis(e));
        let sub = &self.subscribers[node % self.subscribers.len()];
        let mut sc = sub.get_connection_with_timeout(self.check).map_err(red)?;
        sc.set_write_timeout(Some(self.check)).map_err(red)?;
        let mut ps = sc.as_pubsub();
        ps.set_read_timeout(Some(self.check)).map_err(red)?;
        ps.subscribe(&self.channel).map_err(red)?;
        let mut con = self.client.connect(self.check).map_err(red)?;
        for i in 0..self.lists.len() {
            self.resync(i, &mut con)?;
        }
        self.set_fresh();
        let mut next = Instant::now() + self.check;
        while !self.stop.load(Relaxed) {
            match ps.get_message() {
                Ok(m) => {
                    let p: String = m.get_payload().map_err(red)?;
                    self.on_message(&p, &mut con)?;
                }
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(red(e)),
            }
            if Instant::now() >= next {
                self.check(&mut con)?;
                next = Instant::now() + self.check;
            }
        }
        Ok(())
    }
}
