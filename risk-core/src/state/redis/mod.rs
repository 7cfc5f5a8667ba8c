//! The Redis store (feature `redis`): entity state shared by every host that sees a
//! card, read and updated atomically in **one round trip and one script call per
//! decision** (`state.lua`: every key of the decision in one call; on a Redis Cluster,
//! where a decision's keys live in different slots, one call per key in one pipeline).
//! The script is loaded as a function library (Redis 7: `FCALL`, its code and parsed
//! layouts kept between calls); a server that refuses the library is called with
//! `EVALSHA`. It runs the in-process store's arithmetic step for step, so both stores
//! give the same features bit for bit.
//!
//! **Layout.** Each key is one Redis string: a header of doubles (magic, a check of the
//! layout, the key's clock, then per group its ring head, running totals, last time,
//! head bucket and occupancy bits) and one ring region per group (distinct sets as
//! packed `(hash, bucket)` pairs, or 128 register bytes per bucket past the exact
//! limit). [`script`] computes the layout once per plan. A call reads the header with
//! one `GETRANGE`, a ring only when an occupied slot of it is needed, and writes back
//! the header and the slots that changed with `SETRANGE`: an emptied ring is cleared by
//! its occupancy bits, not rewritten. Replies are packed doubles, only what each group's
//! kind reads. Keys expire after the longest window they hold plus a day (idle keys are
//! evicted by Redis; the TTL is set again once a key's clock has moved 12 hours).
//!
//! **Values of an earlier version.** A key still holding the MessagePack hash of the
//! format before this one (or a string of the wrong layout) is **reset**: the decision
//! reads it as a new key and the value is replaced by the current layout; each reset is
//! counted by reason (`StateStats::store_reset_old_format`, `store_reset_corrupt`). Not
//! migrated: the old format held the same buckets, but a reset costs at most one window
//! of history per key. Keys are named under the configured prefix and the
//! definitions' fingerprint ([`super::fingerprint`]), so hosts with other definitions
//! never share keys, even when only a window's field or filter differs (the same value
//! layout); a rolling deploy that changes the features moves those hosts to new keys,
//! each built on its first decision from the card's key of the previous definitions
//! ([`carry_keys`]: every window defined alike carried; the old keys expire by their
//! TTL). The fingerprint covers fields and filters, and the card is a key name's hash
//! tag, since 2026-12-07: upgrading to that version starts every host's state under new
//! keys once.
//!
//! **Specs by id.** The function library keeps each key source's parsed layout; a
//! decision's call sends only its id once a call in full went through, and a server
//! that does not hold it (restarted, the library loaded again) refuses the call before
//! writing anything (`NOSPEC`): it is sent again in full (`store_specs_resent`).
//!
//! **Connections.** A few pipelined connections shared by every concurrent decision
//! ([`lanes`], `connections`, default 2; each a [`mux`]: an I/O thread, a bounded
//! queue, a lone caller's call made on its own thread), so throughput is not round trips
//! × threads; a cluster uses a pool of cluster connections. The decide path never waits longer
//! than `state.redis.timeout_ms` for its reply. A slow, failing or unreachable Redis
//! makes the decision answer with the features missing (`NaN`), flagged on the decision
//! ([`StateStatus`](crate::decision::StateStatus)) and counted; after a failure Redis is
//! skipped for `retry_ms` (no connection attempt per decision while it is down).
//! Outcome-filtered features and the transactions remembered for labels are written by
//! a background thread through a bounded queue (a full queue sheds, counted).
//!
//! Transactions remembered for labels ([`pending`]) are capped (`state.redis.max_pending`);
//! labels reuse a small pool of connections. With a pseudonymiser, every identifier in a
//! key name or a value is its keyed pseudonym (entity keys in [`Domain::Entity`], other
//! key sources in [`Domain::Group`], transaction ids in [`Domain::Txn`]); the arithmetic is
//! unchanged. Errors and logs name the server without credentials.

mod carrier;
mod carry_keys;
mod cmds;
mod lanes;
mod mux;
mod pending;
mod region;
mod script;
mod seq;
mod wire;

pub(crate) use region::SeqReply;

use super::def::RedisConfig;
use super::group::{GroupRead, Kind};
use super::mem::Applied;
use super::plan::CKey;
use super::plan::{Plan, Request, MAX_GROUPS};
use super::redis_conn::{Access, Client, Conn};
use super::seq_plan::SeqPlans;
use super::Ticket;
use crate::decision::{Action, StateFault};
use crate::error::ConfigError;
use crate::pseudo::{Domain, Pseudonymiser};
use crossbeam_channel::{bounded, Sender, TrySendError};
use lanes::Lanes;
use parking_lot::Mutex;
use redis::{Cmd, Value};
use script::{Code, Met};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters of the Redis store.
#[derive(Debug, Default)]
pub(crate) struct RedisCounters {
    pub calls: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub skipped: AtomicU64,
    pub shed: AtomicU64,
    /// Pending-label records dropped by a full shard.
    pub pending_dropped: AtomicU64,
    /// Connections opened for labels.
    pub label_connects: AtomicU64,
    /// Keys met in the format of an earlier version (a MessagePack hash), reset.
    pub reset_old_format: AtomicU64,
    /// Keys built from the key of other definitions.
    pub carried: AtomicU64,
    /// Decide calls sent again with their specs in full (`NOSPEC`).
    pub specs_resent: AtomicU64,
    /// Keys met holding a value of the wrong layout, reset.
    pub reset_corrupt: AtomicU64,
    /// Sequence rows whose write failed or found the shared connection's queue full.
    pub seq_lost: Arc<AtomicU64>,
    /// Sequence rows carried in a later decision's call.
    pub seq_carried: AtomicU64,
    /// Sequence rows sent in a call of their own (no call came within the linger).
    pub seq_alone: AtomicU64,
    /// Decisions' calls made on the caller's thread, the shared connection idle.
    pub direct: AtomicU64,
    /// Socket reads of the decide path's connections that found bytes while polling
    /// (`read_spin_us`), and those that blocked first.
    pub reads_polled: AtomicU64,
    pub reads_blocked: AtomicU64,
}

enum Job {
    /// Commands; `true`: the first reply is a count of dropped pending records.
    Cmds(Vec<Cmd>, bool),
    /// Answered once every job queued before it was written.
    Flush(crossbeam_channel::Sender<()>),
}

pub(crate) struct RedisStore {
    client: Client,
    /// Labels: off the decide path, longer timeouts, connections reused.
    label_client: Client,
    label_pool: Mutex<Vec<Conn>>,
    access: Access,
    /// Cluster connections (a cluster has no shared pipelined connection).
    pool: Mutex<Vec<Conn>>,
    /// The shared pipelined connections (one server).
    lanes: Option<Lanes>,
    /// The key source whose sequences hold rows for the next call (its key picks the
    /// lane), if one does.
    lane_source: Option<usize>,
    /// The pseudonym domain of each key source.
    domains: Vec<Domain>,
    /// The script's layout of each key source (fixed for the plan).
    specs: Vec<script::KeySpec>,
    pseudo: Option<Pseudonymiser>,
    /// Records per pending shard.
    shard_cap: usize,
    code: Code,
    /// The server took the function library: calls are `FCALL` (else `EVALSHA`).
    fcall: AtomicBool,
    /// A decide call with the specs in full went through the library: the next ones
    /// send them by id (cleared when the server refuses one, `NOSPEC`).
    specs_held: AtomicBool,
    cfg: RedisConfig,
    prefix: String,
    ttl_ms: i64,
    base: Instant,
    /// Nanoseconds since `base` before which Redis is skipped.
    down_until: AtomicI64,
    pub counters: Arc<RedisCounters>,
    jobs: Sender<Job>,
}

/// How long a key holding sequences lives without an event, at least.
const SEQUENCE_TTL_MS: i64 = 30 * 86_400_000;

fn is_timeout(e: &redis::RedisError) -> bool {
    e.is_timeout()
}

/// Whether a server lacks the script or the function (restarted, flushed): nothing ran.
fn missing(v: &Value) -> bool {
    match v {
        Value::ServerError(e) => {
            e.kind() == Some(redis::ServerErrorKind::NoScript)
                || e.details()
                    .is_some_and(|d| d.contains("Function not found"))
        }
        _ => false,
    }
}

/// Whether the script refused a call whose specs it does not hold (sent by id):
/// nothing ran.
fn lacks_spec(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSPEC")
}

/// [`missing`] for an error.
fn missing_err(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || e.detail().is_some_and(|d| d.contains("Function not found"))
        // A pipeline's error has no detail of its own: its text holds the first reply's.
        || e.to_string().contains("Function not found")
}

impl RedisStore {
    pub fn open(
        cfg: RedisConfig,
        plan: &Plan,
        seqs: &SeqPlans,
        fp: u64,
    ) -> Result<Self, ConfigError> {
        if cfg.max_pending == 0 {
            return Err(ConfigError::invalid(
                "state.redis.max_pending",
                "must be at least 1",
            ));
        }
        lanes::check(&cfg)?;
        let access = Access::from_config(&cfg)?;
        let t = cfg.timeout.max(Duration::from_millis(1));
        let client = Client::open(&cfg, &access, t)?;
        let label_client = Client::open(&cfg, &access, Duration::from_secs(2))?;
        // The longest history any group keeps, plus a day: idle keys expire.
        let ttl_ms = plan
            .groups
            .iter()
            .map(|g| {
                let s = &g.spec;
                match s.kind {
                    Kind::Last => 0,
                    _ => s.width_ms.saturating_mul(s.ring_len() as i64),
                }
            })
            .max()
            .unwrap_or(0)
            .saturating_add(86_400_000)
            // A key's sequences are its last events however old: kept 30 days idle.
            .max(if seqs.is_empty() { 0 } else { SEQUENCE_TTL_MS });
        let counters = Arc::new(RedisCounters::default());
        let (tx, rx) = bounded::<Job>(cfg.queue.max(1));
        let bg_timeout = cfg.timeout.max(Duration::from_millis(100));
        let bg_client = Client::open(&cfg, &access, bg_timeout)?;
        let bg_counters = Arc::clone(&counters);
        let code = Code::new();
        let loads = [code.script_load_cmd(), code.function_load_cmd()];
        std::thread::Builder::new()
            .name("risk-state-redis".into())
            .spawn(move || {
                let mut con: Option<Conn> = None;
                for job in rx {
                    let (cmds, counted) = match job {
                        Job::Cmds(c, counted) => (c, counted),
                        Job::Flush(done) => {
                            let _ = done.send(());
                            continue;
                        }
                    };
                    if con.is_none() {
                        con = bg_client.connect(bg_timeout).ok();
                    }
                    let Some(c) = con.as_mut() else {
                        bg_counters.errors.fetch_add(1, Relaxed);
                        continue;
                    };
                    let mut got = c.pipeline(&cmds);
                    // One server without the script (a restart): none of these calls ran
                    // (a job is either script calls by name or other commands); loaded
                    // again, they go once more.
                    if let (Err(e), Conn::One(_)) = (&got, &*c) {
                        if missing_err(e) {
                            let _ = c.query::<Value>(&loads[0]);
                            let _ = c.query::<Value>(&loads[1]);
                            got = c.pipeline(&cmds);
                        }
                    }
                    match got {
                        Ok(out) => {
                            if let (true, Some(Value::Int(n))) = (counted, out.first()) {
                                bg_counters.pending_dropped.fetch_add(*n as u64, Relaxed);
                            }
                        }
                        Err(_) => {
                            bg_counters.errors.fetch_add(1, Relaxed);
                            con = None;
                        }
                    }
                }
            })
            .map_err(|e| {
                ConfigError::invalid(
                    "state.redis",
                    format!("cannot start its writer thread: {e}"),
                )
            })?;
        let domains = plan
            .sources
            .iter()
            .map(|k| match k {
                CKey::Entity => Domain::Entity,
                _ => Domain::Group,
            })
            .collect();
        let (lanes, lane_source) = match &client {
            Client::One(one) => {
                let (n, source) = lanes::shape(&cfg, plan, seqs);
                let dial = wire::Dial::of(one, &access, cfg.read_spin)
                    .map_err(|e| access.config_error(&cfg, &e))?;
                let l = Lanes::start(
                    n,
                    source.is_some(),
                    &dial,
                    t,
                    cfg.rows_linger,
                    &counters,
                    &code.eval_cmd(),
                )
                .map_err(|e| {
                    ConfigError::invalid("state.redis", format!("cannot start its I/O thread: {e}"))
                })?;
                (Some(l), source)
            }
            Client::Cluster(_) => (None, None),
        };
        let specs = (0..plan.sources.len())
            .map(|s| script::key_spec(plan, seqs, s))
            .collect();
        let mut me = Self {
            client,
            lanes,
            lane_source,
            specs,
            label_client,
            label_pool: Mutex::new(Vec::new()),
            access,
            pool: Mutex::new(Vec::new()),
            domains,
            pseudo: cfg.pseudonymiser.clone(),
            shard_cap: (cfg.max_pending / pending::PENDING_SHARDS as usize).max(1),
            code,
            fcall: AtomicBool::new(false),
            specs_held: AtomicBool::new(false),
            prefix: format!("{}:{fp:016x}", cfg.prefix),
            cfg,
            ttl_ms,
            base: Instant::now(),
            down_until: AtomicI64::new(0),
            counters,
            jobs: tx,
        };
        // Reachable at start (a wrong address is a build error); one server gets the
        // script now, cluster nodes on first use (EVAL when a node lacks it).
        let mut con = me
            .connect()
            .map_err(|e| me.access.config_error(&me.cfg, &e))?;
        me.load_script(&mut con)
            .map_err(|e| me.access.config_error(&me.cfg, &e))?;
        if me.cfg.carry_keys {
            me.carry_from_registry(&mut con, plan, seqs, fp);
        }
        if me.lanes.is_none() {
            me.pool.lock().push(con);
        }
        Ok(me)
    }

    /// `SCRIPT LOAD` and `FUNCTION LOAD` (a cluster routes both to every primary). A
    /// server that refuses the library (before Redis 7, or an ACL without it) is called
    /// with `EVALSHA`.
    fn load_script(&self, con: &mut Conn) -> redis::RedisResult<()> {
        let mut c = redis::cmd("SCRIPT");
        c.arg("LOAD").arg(&self.code.eval);
        let f = self.load_function_cmd();
        let loaded = match con {
            Conn::One(_) => {
                con.query::<String>(&c)?;
                con.query::<String>(&f).map(drop)
            }
            Conn::Cluster(_) => {
                con.query::<Value>(&c)?;
                con.query::<Value>(&f).map(drop)
            }
        };
        match loaded {
            Ok(()) => self.fcall.store(true, Relaxed),
            // Loaded by another host (or an earlier start) of this release.
            Err(e) if e.to_string().contains("already exists") => self.fcall.store(true, Relaxed),
            Err(e) if e.code().is_some() => {
                self.fcall.store(false, Relaxed);
                let error = self.access.scrub(&e.to_string());
                tracing::info!(target: "risk::state", server = %self.where_(), error, "the Redis state store calls its script with EVALSHA (the server took no function library)");
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// [`carry_keys::from_registry`], logged: a registry that cannot be read or written
    /// leaves keys uncarried, and the store works without it.
    fn carry_from_registry(&mut self, con: &mut Conn, plan: &Plan, seqs: &SeqPlans, fp: u64) {
        let prefix = self.cfg.prefix.clone();
        match carry_keys::from_registry(con, &prefix, plan, seqs, &mut self.specs, fp) {
            Ok(None) => {}
            Ok(Some(old)) => {
                tracing::info!(target: "risk::state", server = %self.where_(), from = format!("{old:016x}"), "Redis keys missing under these definitions are carried from the newest other definitions that share windows");
            }
            Err(e) => {
                let error = self.access.scrub(&e.to_string());
                tracing::warn!(target: "risk::state", server = %self.where_(), error, "the Redis state store cannot use its definitions' registry: keys of other definitions are not carried");
            }
        }
    }

    /// The server as it may be printed (no credentials).
    fn where_(&self) -> String {
        self.cfg.server()
    }

    fn connect(&self) -> redis::RedisResult<Conn> {
        self.client
            .connect(self.cfg.timeout.max(Duration::from_millis(1)))
    }

    /// Source `s`'s key as Redis sees it (its pseudonym when configured).
    fn pkey(&self, s: usize, key: u64) -> u64 {
        match &self.pseudo {
            Some(p) => p.u64(self.domains[s], key),
            None => key,
        }
    }

    /// The key name of source `s`'s key `pkey` (already as Redis sees it).
    fn key(&self, s: usize, pkey: u64) -> String {
        format!("{}:{s}:{{{pkey:x}}}", self.prefix)
    }

    fn now_ns(&self) -> i64 {
        self.base.elapsed().as_nanos() as i64
    }

    fn trip(&self, e: &redis::RedisError) -> StateFault {
        let fault = if is_timeout(e) {
            self.counters.timeouts.fetch_add(1, Relaxed);
            StateFault::Timeout
        } else {
            self.counters.errors.fetch_add(1, Relaxed);
            StateFault::Error
        };
        let until = self.now_ns() + self.cfg.retry.as_nanos() as i64;
        self.down_until.store(until, Relaxed);
        let error = self.access.scrub(&e.to_string());
        tracing::warn!(target: "risk::state", server = %self.where_(), error, "Redis state store failed: features missing until a retry");
        fault
    }

    /// Reads and updates every source's key in one round trip (one script call on one
    /// server; one pipeline of per-key calls on a cluster), waiting at most the timeout.
    pub fn read_update(
        &self,
        plan: &Plan,
        req: &Request,
        lateness_ms: i64,
        reads: &mut [GroupRead; MAX_GROUPS],
        seq: &mut SeqReply,
    ) -> Result<Applied, StateFault> {
        let mut a = Applied::new(req.ts);
        let mut sources = [0usize; super::plan::MAX_SOURCES];
        let mut n = 0;
        for s in (0..plan.sources.len()).filter(|&s| req.keys[s] != 0) {
            sources[n] = s;
            n += 1;
        }
        let sources = &sources[..n];
        if sources.is_empty() {
            return Ok(a);
        }
        if self.now_ns() < self.down_until.load(Relaxed) {
            self.counters.skipped.fetch_add(1, Relaxed);
            return Err(StateFault::Unavailable);
        }
        self.counters.calls.fetch_add(1, Relaxed);
        let replies = match &self.lanes {
            Some(m) => self.call_one(m, plan, req, sources, lateness_ms, seq)?,
            None => self.call_cluster(plan, req, sources, lateness_ms, seq)?,
        };
        for (&s, v) in sources.iter().zip(replies) {
            let met = match v {
                Value::BulkString(b) => {
                    script::parse_reply(plan, &self.specs[s], s, &b, reads, &mut a, seq)
                }
                other => Err(format!("expected a string, got {other:?}")),
            };
            match met {
                Ok(Met::Ok) => {}
                Ok(Met::Carried) => {
                    self.counters.carried.fetch_add(1, Relaxed);
                }
                Ok(Met::OldFormat) => {
                    self.counters.reset_old_format.fetch_add(1, Relaxed);
                }
                Ok(Met::Corrupt) => {
                    self.counters.reset_corrupt.fetch_add(1, Relaxed);
                    tracing::warn!(target: "risk::state", "a Redis state value of the wrong layout was reset");
                }
                Err(why) => {
                    self.counters.errors.fetch_add(1, Relaxed);
                    tracing::error!(target: "risk::state", why, "malformed reply from the Redis state script");
                    return Err(StateFault::Error);
                }
            }
        }
        Ok(a)
    }

    fn value_hash(&self, h: u64) -> u64 {
        match &self.pseudo {
            Some(p) if h != 0 => p.u64(Domain::Group, h) >> 12,
            _ => h,
        }
    }

    fn offer(&self, cmds: Vec<Cmd>) {
        self.offer_job(Job::Cmds(cmds, false));
    }

    fn offer_job(&self, job: Job) {
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters.shed.fetch_add(1, Relaxed);
            }
        }
    }

    /// Waits until the background writes queued so far are done (or `timeout`).
    /// Sequence rows held for the next call go first, each in a call of its own.
    pub fn flush(&self, timeout: Duration) -> bool {
        if let Some(m) = &self.lanes {
            // A timeout past what an `Instant` holds: a year is as good as forever here.
            let deadline = Instant::now()
                .checked_add(timeout)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86_400));
            if !m.flush(deadline) {
                return false;
            }
        }
        let (tx, rx) = bounded(1);
        if self.jobs.send_timeout(Job::Flush(tx), timeout).is_err() {
            return false;
        }
        rx.recv_timeout(timeout).is_ok()
    }

    /// Queues the outcome groups' update (background, never blocks).
    pub fn record_outcome(&self, plan: &Plan, t: &Ticket, action: Action) {
        let cmds: Vec<Cmd> = (0..plan.sources.len())
            .filter(|&s| t.applied.present[s])
            .filter(|&s| {
                plan.by_source[s]
                    .iter()
                    .any(|&g| plan.outcome_passes(g, action))
            })
            .collect::<Vec<usize>>()
            .chunks(if self.lanes.is_some() { usize::MAX } else { 1 })
            // One server: by the script's name (a server that lost it gets it again from
            // the writer); a cluster: with its text (nodes are not tracked one by one).
            .map(|ss| {
                let eval = self.lanes.is_none();
                self.call(plan, &t.req, ss, 0, Some(action), &t.applied.te, eval, None)
            })
            .collect();
        if !cmds.is_empty() {
            self.offer(cmds);
        }
    }
}
