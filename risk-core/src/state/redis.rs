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

use super::def::RedisConfig;
use super::group::Kind;
use super::mem::Applied;
use super::plan::{Plan, Request, MAX_GROUPS};
use super::redis_conn::{Client, Conn};
use super::{LabelApplied, StateError, Ticket};
use crate::decision::{Action, StateFault};
use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;
use redis::{Cmd, Value};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::group::GroupRead;

const SCRIPT: &str = include_str!("redis.lua");

/// Counters of the Redis store.
#[derive(Debug, Default)]
pub(crate) struct RedisCounters {
    pub calls: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub skipped: AtomicU64,
    pub shed: AtomicU64,
}

enum Job {
    Cmds(Vec<Cmd>),
    /// Answered once every job queued before it was written.
    Flush(crossbeam_channel::Sender<()>),
}

pub(crate) struct RedisStore {
    client: Client,
    /// Labels: off the decide path, longer timeouts.
    label_client: Client,
    pool: Mutex<Vec<Conn>>,
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
    pub fn open(cfg: RedisConfig, plan: &Plan, fp: u64) -> Result<Self, String> {
        let t = cfg.timeout.max(Duration::from_millis(1));
        let client = Client::open(&cfg, t)?;
        let label_client = Client::open(&cfg, Duration::from_secs(2))?;
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
        let bg_client = Client::open(&cfg, bg_timeout)?;
        let bg_counters = Arc::clone(&counters);
        std::thread::Builder::new()
            .name("risk-state-redis".into())
            .spawn(move || {
                let mut con: Option<Conn> = None;
                for job in rx {
                    let cmds = match job {
                        Job::Cmds(c) => c,
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
                    if c.pipeline(&cmds).is_err() {
                        bg_counters.errors.fetch_add(1, Relaxed);
                        con = None;
                    }
                }
            })
            .map_err(|e| format!("state.redis: cannot start its writer thread: {e}"))?;
        let me = Self {
            client,
            label_client,
            pool: Mutex::new(Vec::new()),
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
            .map_err(|e| format!("state.redis: {} unreachable: {e}", me.where_()))?;
        me.load_script(&mut con)
            .map_err(|e| format!("state.redis: loading the state script: {e}"))?;
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

    fn where_(&self) -> String {
        if self.cfg.cluster.is_empty() {
            self.cfg.url.clone()
        } else {
            format!("cluster {:?}", self.cfg.cluster)
        }
    }

    fn connect(&self) -> redis::RedisResult<Conn> {
        self.client
            .connect(self.cfg.timeout.max(Duration::from_millis(1)))
    }

    fn key(&self, s: usize, key: u64) -> String {
        format!("{}:{s}:{key:x}", self.prefix)
    }

    fn pending_key(&self, id: u64) -> String {
        format!("{}:p:{id:x}", self.prefix)
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
        tracing::warn!(target: "risk::state", error = %e, "Redis state store failed: features missing until a retry");
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
        c.arg(1).arg(self.key(s, req.keys[s]));
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
                .arg(inp.hash);
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

    fn offer(&self, cmds: Vec<Cmd>) {
        match self.jobs.try_send(Job::Cmds(cmds)) {
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
    pub fn remember(&self, id: u64, ts: i64, at: &[(u8, u64, i64)]) {
        let key = self.pending_key(id);
        let mut h = redis::cmd("HSET");
        h.arg(&key).arg("ts").arg(ts).arg("label").arg(0);
        for &(s, k, te) in at.iter().filter(|a| a.0 != u8::MAX) {
            h.arg(format!("s{s}")).arg(format!("{k:x}:{te}"));
        }
        let mut x = redis::cmd("PEXPIRE");
        x.arg(&key).arg(self.cfg.pending_ttl.as_millis() as u64);
        self.offer(vec![h, x]);
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
            source: std::io::Error::other(e.to_string()),
        };
        let mut con = self
            .label_client
            .connect(Duration::from_secs(2))
            .map_err(io)?;
        let key = self.pending_key(id);
        let fields: std::collections::HashMap<String, String> =
            con.query(redis::cmd("HGETALL").arg(&key)).map_err(io)?;
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
        con.query::<()>(
            redis::cmd("HSET")
                .arg(&key)
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
        let mut h = redis::cmd("HSET");
        h.arg(self.pending_key(id)).arg("action").arg(action);
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
