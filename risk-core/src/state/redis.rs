//! The Redis store (feature `redis`): entity state shared by every host that sees a
//! card, read and updated atomically in **one round trip per decision**: one server-side
//! script per key source (`redis.lua`, the same arithmetic as the in-process store),
//! pipelined. Each key is one hash, expiring after the longest window it holds (idle
//! keys are evicted by Redis).
//!
//! The decide path never waits longer than `state.redis.timeout_ms` per socket read or
//! write. A slow, failing or unreachable Redis makes the decision answer with the
//! features missing (`NaN`), flagged on the decision ([`StateStatus`]) and counted; after
//! a failure Redis is skipped for `retry_ms` (no connection attempt per decision while it
//! is down). Outcome-filtered features and the transactions remembered for labels are
//! written by a background thread through a bounded queue (a full queue sheds, counted).
//!
//! Transactions remembered for labels are capped (`state.redis.max_pending`, 256 shards,
//! each an index sorted by arrival: a full shard drops its oldest, counted); labels reuse
//! a small pool of connections. With a pseudonymiser, every identifier in a key name or a
//! value is its keyed pseudonym (entity keys in [`Domain::Entity`], other key sources in
//! [`Domain::Group`], transaction ids in [`Domain::Txn`]); the arithmetic is unchanged.
//! Errors and logs name the server without credentials.

use super::def::RedisConfig;
use super::group::Kind;
use super::mem::Applied;
use super::plan::CKey;
use super::plan::{Plan, Request, MAX_GROUPS};
use super::redis_conn::{Access, Client, Conn};
use super::{LabelApplied, StateError, Ticket};
use crate::decision::{Action, StateFault};
use crate::error::ConfigError;
use crate::pseudo::{Domain, Pseudonymiser};
use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;
use redis::{Cmd, Value};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::group::GroupRead;

const SCRIPT: &str = include_str!("redis.lua");

/// Shards of the pending-label index (hash tags `{00}`..`{ff}`: spread over a cluster).
const PENDING_SHARDS: u64 = 256;

/// Remembers a transaction for labels and keeps its shard within its cap.
/// KEYS[1] the record, KEYS[2] the shard's index (same hash tag); ARGV: ttl_ms, cap,
/// member (the id in hex), the record's key prefix, then field/value pairs.
/// Returns how many older records it dropped.
const REMEMBER: &str = r"
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], now, ARGV[3])
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - ttl))
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[2])
if over <= 0 then return 0 end
local old = redis.call('ZPOPMIN', KEYS[2], over)
local dropped = 0
for i = 1, #old, 2 do dropped = dropped + redis.call('DEL', ARGV[4] .. old[i]) end
return dropped
";

/// Sets one field of a record that still exists (never re-creates an expired or dropped
/// one without its expiry). KEYS[1] the record; ARGV field, value.
const SET_IF_EXISTS: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
";

/// Connections kept for labels.
const LABEL_POOL: usize = 4;

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
    pool: Mutex<Vec<Conn>>,
    /// The pseudonym domain of each key source.
    domains: Vec<Domain>,
    pseudo: Option<Pseudonymiser>,
    /// Records per pending shard.
    shard_cap: usize,
    script: redis::Script,
    cfg: RedisConfig,
    prefix: String,
    ttl_ms: i64,
    base: Instant,
    /// Nanoseconds since `base` before which Redis is skipped.
    down_until: AtomicI64,
    pub counters: Arc<RedisCounters>,
    jobs: Sender<Job>,
}

fn is_timeout(e: &redis::RedisError) -> bool {
    e.is_timeout()
}

impl RedisStore {
    pub fn open(cfg: RedisConfig, plan: &Plan, fp: u64) -> Result<Self, ConfigError> {
        if cfg.max_pending == 0 {
            return Err(ConfigError::invalid(
                "state.redis.max_pending",
                "must be at least 1",
            ));
        }
        let access = Access::from_config(&cfg)?;
        let t = cfg.timeout.max(Duration::from_millis(1));
        let client = Client::open(&cfg, &access, t)?;
        let label_client = Client::open(&cfg, &access, Duration::from_secs(2))?;
        let script = redis::Script::new(SCRIPT);
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
            .saturating_add(86_400_000);
        let counters = Arc::new(RedisCounters::default());
        let (tx, rx) = bounded::<Job>(cfg.queue.max(1));
        let bg_timeout = cfg.timeout.max(Duration::from_millis(100));
        let bg_client = Client::open(&cfg, &access, bg_timeout)?;
        let bg_counters = Arc::clone(&counters);
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
                    match c.pipeline(&cmds) {
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
        let me = Self {
            client,
            label_client,
            label_pool: Mutex::new(Vec::new()),
            access,
            pool: Mutex::new(Vec::new()),
            domains,
            pseudo: cfg.pseudonymiser.clone(),
            shard_cap: (cfg.max_pending / PENDING_SHARDS as usize).max(1),
            script,
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
        me.pool.lock().push(con);
        Ok(me)
    }

    /// `EVALSHA <hash>` or, when a server lacks the script, `EVAL <script>`.
    fn script_cmd(&self, eval: bool) -> Cmd {
        let mut c = redis::cmd(if eval { "EVAL" } else { "EVALSHA" });
        if eval {
            c.arg(SCRIPT);
        } else {
            c.arg(self.script.get_hash());
        }
        c
    }

    /// `SCRIPT LOAD` (a cluster routes it to every primary).
    fn load_script(&self, con: &mut Conn) -> redis::RedisResult<()> {
        let mut c = redis::cmd("SCRIPT");
        c.arg("LOAD").arg(SCRIPT);
        match con {
            Conn::One(_) => con.query::<String>(&c).map(drop),
            Conn::Cluster(_) => con.query::<Value>(&c).map(drop),
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
        format!("{}:{s}:{pkey:x}", self.prefix)
    }

    /// Transaction `id` as Redis sees it.
    fn ptxn(&self, id: u64) -> u64 {
        match &self.pseudo {
            Some(p) => p.u64(Domain::Txn, id),
            None => id,
        }
    }

    /// The pending record of transaction `id` (raw): `(record key, shard key prefix,
    /// shard index key, member)`.
    fn pending(&self, id: u64) -> (String, String, String, String) {
        let pid = self.ptxn(id);
        let shard = pid % PENDING_SHARDS;
        let base = format!("{}:p:{{{shard:02x}}}:", self.prefix);
        let member = format!("{pid:x}");
        (
            format!("{base}{member}"),
            base,
            format!("{}:pi:{{{shard:02x}}}", self.prefix),
            member,
        )
    }

    fn pending_key(&self, id: u64) -> String {
        self.pending(id).0
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

    /// The script call of source `s` for `req` (`outcome`: only the groups `action`
    /// enters, at the event's effective time).
    fn call(
        &self,
        plan: &Plan,
        req: &Request,
        s: usize,
        lateness_ms: i64,
        outcome: Option<(Action, i64)>,
        eval: bool,
    ) -> Cmd {
        let mut c = self.script_cmd(eval);
        c.arg(1).arg(self.key(s, self.pkey(s, req.keys[s])));
        let groups: Vec<usize> = plan.by_source[s]
            .iter()
            .copied()
            .filter(|&g| outcome.is_none_or(|(a, _)| plan.outcome_passes(g, a)))
            .collect();
        let (mode, ts) = match outcome {
            None => ("u", req.ts),
            Some((_, te)) => ("o", te),
        };
        c.arg(mode)
            .arg(ts)
            .arg(lateness_ms)
            .arg(self.ttl_ms)
            .arg(groups.len());
        for g in groups {
            let grp = &plan.groups[g];
            let sp = &grp.spec;
            let inp = &req.inputs[g];
            let kind = match sp.kind {
                Kind::Stats => 1,
                Kind::Last => 2,
                Kind::Distinct => 3,
                Kind::Label => 4,
            };
            let add = outcome.is_some() || grp.outcome == 0;
            c.arg(g)
                .arg(kind)
                .arg(sp.width_ms)
                .arg(sp.window_b)
                .arg(sp.delay_b)
                .arg(sp.exact_limit)
                .arg(sp.cols as u8 + 1)
                .arg(add as u8)
                .arg(inp.pass as u8)
                .arg(format!("{:?}", inp.value))
                .arg(self.value_hash(inp.hash));
        }
        c
    }

    /// Reads and updates every source's key in one pipelined round trip.
    pub fn read_update(
        &self,
        plan: &Plan,
        req: &Request,
        lateness_ms: i64,
        reads: &mut [GroupRead; MAX_GROUPS],
    ) -> Result<Applied, StateFault> {
        let mut a = Applied::new(req.ts);
        let sources: Vec<usize> = (0..plan.sources.len())
            .filter(|&s| req.keys[s] != 0)
            .collect();
        if sources.is_empty() {
            return Ok(a);
        }
        if self.now_ns() < self.down_until.load(Relaxed) {
            self.counters.skipped.fetch_add(1, Relaxed);
            return Err(StateFault::Unavailable);
        }
        self.counters.calls.fetch_add(1, Relaxed);
        let mut con = match self.pool.lock().pop() {
            Some(c) => c,
            None => self.connect().map_err(|e| self.trip(&e))?,
        };
        let run = |con: &mut Conn, eval: bool| -> redis::RedisResult<Vec<Value>> {
            let cmds: Vec<Cmd> = sources
                .iter()
                .map(|&s| self.call(plan, req, s, lateness_ms, None, eval))
                .collect();
            con.pipeline(&cmds)
        };
        let noscript = |e: &redis::RedisError| {
            e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        };
        let out = match run(&mut con, false) {
            // One server lacks the script (restarted): every command failed, run them again
            // with the script's text (it caches it).
            Err(e) if noscript(&e) && matches!(con, Conn::One(_)) => run(&mut con, true),
            // A cluster node lacks it: the other nodes' commands ran, so the pipeline is not
            // repeated (it would count twice); the script is loaded on every primary and
            // this decision goes without its features (counted as an error).
            Err(e) if noscript(&e) => {
                let _ = self.load_script(&mut con);
                Err(e)
            }
            r => r,
        };
        let out = match out {
            Ok(v) => v,
            Err(e) => return Err(self.trip(&e)),
        };
        self.pool.lock().push(con);
        for (&s, v) in sources.iter().zip(out) {
            parse(plan, s, v, reads, &mut a).map_err(|why| {
                self.counters.errors.fetch_add(1, Relaxed);
                tracing::error!(target: "risk::state", why, "malformed reply from the Redis state script");
                StateFault::Error
            })?;
        }
        Ok(a)
    }

    /// A distinct group's value hash as Redis sees it: 52 bits, keyed when configured
    /// (equal values still collide, so counts are unchanged below the exact limit).
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
    pub fn flush(&self, timeout: Duration) -> bool {
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
            .map(|s| self.call(plan, &t.req, s, 0, Some((action, t.applied.te[s])), true))
            .collect();
        if !cmds.is_empty() {
            self.offer(cmds);
        }
    }

    /// Queues the pending-label record of a decided transaction.
    /// Its shard keeps at most `shard_cap` records: the oldest beyond are dropped
    /// (counted); the keys stored are the keys as Redis sees them.
    pub fn remember(&self, id: u64, ts: i64, at: &[(u8, u64, i64)]) {
        let (key, base, index, member) = self.pending(id);
        let mut h = redis::cmd("EVAL");
        h.arg(REMEMBER)
            .arg(2)
            .arg(&key)
            .arg(&index)
            .arg(self.cfg.pending_ttl.as_millis().max(1) as u64)
            .arg(self.shard_cap)
            .arg(&member)
            .arg(&base)
            .arg("ts")
            .arg(ts)
            .arg("label")
            .arg(0);
        for &(s, k, te) in at.iter().filter(|a| a.0 != u8::MAX) {
            let pk = self.pkey(s as usize, k);
            h.arg(format!("s{s}")).arg(format!("{pk:x}:{te}"));
        }
        self.offer_job(Job::Cmds(vec![h], true));
    }

    /// A label connection: one from the pool, else a new one (counted).
    fn label_conn(&self) -> redis::RedisResult<(Conn, bool)> {
        if let Some(c) = self.label_pool.lock().pop() {
            return Ok((c, true));
        }
        self.counters.label_connects.fetch_add(1, Relaxed);
        Ok((self.label_client.connect(Duration::from_secs(2))?, false))
    }

    /// A label: reads the remembered transaction, applies the change to its label
    /// windows. Not on the decide path (a connection of its own, longer timeouts).
    pub fn label(
        &self,
        plan: &Plan,
        id: u64,
        fraud: bool,
        at_ms: i64,
    ) -> Result<LabelApplied, StateError> {
        let io = |e: redis::RedisError| StateError::Io {
            path: self.where_().into(),
            source: std::io::Error::other(self.access.scrub(&e.to_string())),
        };
        let key = self.pending_key(id);
        let read =
            |con: &mut Conn| -> redis::RedisResult<std::collections::HashMap<String, String>> {
                con.query(redis::cmd("HGETALL").arg(&key))
            };
        let (mut con, reused) = self.label_conn().map_err(io)?;
        let fields = match read(&mut con) {
            Ok(f) => f,
            // A pooled connection the server dropped (restart, idle timeout): nothing was
            // written yet, so one new connection tries again.
            Err(e) if reused && (e.is_io_error() || e.is_connection_dropped()) => {
                self.counters.label_connects.fetch_add(1, Relaxed);
                con = self
                    .label_client
                    .connect(Duration::from_secs(2))
                    .map_err(io)?;
                read(&mut con).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let got = self.label_with(plan, &mut con, &key, fields, id, fraud, at_ms);
        // A connection that failed mid-call is dropped; a good one goes back.
        if !matches!(&got, Err(StateError::Io { .. })) {
            let mut pool = self.label_pool.lock();
            if pool.len() < LABEL_POOL {
                pool.push(con);
            }
        }
        got
    }

    #[allow(clippy::too_many_arguments)]
    fn label_with(
        &self,
        plan: &Plan,
        con: &mut Conn,
        key: &str,
        fields: std::collections::HashMap<String, String>,
        id: u64,
        fraud: bool,
        at_ms: i64,
    ) -> Result<LabelApplied, StateError> {
        let io = |e: redis::RedisError| StateError::Io {
            path: self.where_().into(),
            source: std::io::Error::other(self.access.scrub(&e.to_string())),
        };
        let Some(ts) = fields.get("ts").and_then(|t| t.parse::<i64>().ok()) else {
            return Err(StateError::UnknownTxn(id));
        };
        if at_ms < ts {
            return Err(StateError::LabelBeforeTxn { at_ms, txn_ms: ts });
        }
        let prev: i8 = fields
            .get("label")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let delta = match (prev == 1, fraud) {
            (false, true) => 1,
            (true, false) => -1,
            _ => 0,
        };
        con.query::<i64>(
            redis::cmd("EVAL")
                .arg(SET_IF_EXISTS)
                .arg(1)
                .arg(key)
                .arg("label")
                .arg(if fraud { 1 } else { -1 }),
        )
        .map_err(io)?;
        let applied = |reached| LabelApplied {
            reached,
            action: fields
                .get("action")
                .and_then(|a| a.parse::<usize>().ok())
                .and_then(|a| Action::ALL.get(a).copied()),
            prev: match prev {
                1 => Some(true),
                -1 => Some(false),
                _ => None,
            },
        };
        let mut reached = 0;
        if delta == 0 {
            return Ok(applied(0));
        }
        for (f, v) in &fields {
            let Some(s) = f.strip_prefix('s').and_then(|s| s.parse::<usize>().ok()) else {
                continue;
            };
            let Some((k, te)) = v.split_once(':') else {
                continue;
            };
            let (Ok(k), Ok(te)) = (u64::from_str_radix(k, 16), te.parse::<i64>()) else {
                continue;
            };
            let groups: Vec<usize> = plan
                .by_source
                .get(s)
                .into_iter()
                .flatten()
                .copied()
                .filter(|&g| plan.groups[g].spec.kind == Kind::Label)
                .collect();
            let script = |eval: bool| {
                let mut c = self.script_cmd(eval);
                c.arg(1)
                    .arg(self.key(s, k))
                    .arg("l")
                    .arg(te)
                    .arg(delta)
                    .arg(groups.len());
                for &g in &groups {
                    let sp = &plan.groups[g].spec;
                    c.arg(g).arg(sp.width_ms).arg(sp.window_b).arg(sp.delay_b);
                }
                c
            };
            let n: usize = match con.query(&script(false)) {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    con.query(&script(true)).map_err(io)?
                }
                r => r.map_err(io)?,
            };
            reached += n;
        }
        Ok(applied(reached))
    }

    /// Queues the decided action of a remembered transaction (the label monitor).
    pub fn note_action(&self, id: u64, action: u8) {
        let mut h = redis::cmd("EVAL");
        h.arg(SET_IF_EXISTS)
            .arg(1)
            .arg(self.pending_key(id))
            .arg("action")
            .arg(action);
        self.offer(vec![h]);
    }
}

fn num(v: &Value) -> Result<Option<f64>, String> {
    let s = match v {
        Value::BulkString(b) => std::str::from_utf8(b).map_err(|e| e.to_string())?,
        Value::SimpleString(s) => s.as_str(),
        Value::Int(i) => return Ok(Some(*i as f64)),
        Value::Nil => return Ok(None),
        other => return Err(format!("expected a number, got {other:?}")),
    };
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<f64>()
        .map(Some)
        .map_err(|e| format!("{s:?}: {e}"))
}

/// One source's script reply into the reads.
fn parse(
    plan: &Plan,
    s: usize,
    v: Value,
    reads: &mut [GroupRead; MAX_GROUPS],
    a: &mut Applied,
) -> Result<(), String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let groups = &plan.by_source[s];
    if items.len() != 2 + 10 * groups.len() {
        return Err(format!(
            "{} values for {} groups",
            items.len(),
            groups.len()
        ));
    }
    a.present[s] = true;
    a.te[s] = num(&items[0])?.ok_or("no te")? as i64;
    if num(&items[1])? == Some(1.0) {
        a.late += 1;
    }
    for (k, &g) in groups.iter().enumerate() {
        let f = |i: usize| num(&items[2 + 10 * k + i]);
        reads[g] = GroupRead {
            n: f(0)?.unwrap_or(0.0),
            sum: f(1)?.unwrap_or(0.0),
            sumsq: f(2)?.unwrap_or(0.0),
            min: f(3)?.unwrap_or(f64::NAN),
            max: f(4)?.unwrap_or(f64::NAN),
            last_ms: f(5)?.map(|x| x as i64),
            distinct_before: f(6)?.unwrap_or(0.0),
            distinct_after: f(7)?.unwrap_or(0.0),
            txns: f(8)?.unwrap_or(0.0),
            frauds: f(9)?.unwrap_or(0.0),
        };
    }
    Ok(())
}
