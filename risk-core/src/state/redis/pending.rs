//! Transactions remembered for labels on Redis, and labels applied to the label windows
//! of the keys they were decided at (any host may take a label: the record lives in
//! Redis). Off the decide path: its own connections (a small pool), longer timeouts.
//!
//! Each record is a hash `<prefix>:p:{shard}:<id>` with its transaction time, label,
//! action and `s<source>` = `<key>:<te>`; 256 shards (hash tags `{00}`..`{ff}`, spread
//! over a cluster), each with an index sorted by arrival that keeps the shard within
//! its cap (a full shard drops its oldest, counted).

use super::super::group::Kind;
use super::super::plan::Plan;
use super::super::redis_conn::Conn;
use super::super::{LabelApplied, StateError};
use super::script::{label_blob, label_key_blob};
use super::{Job, RedisStore};
use crate::decision::Action;
use crate::pseudo::Domain;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Shards of the pending-label index (hash tags `{00}`..`{ff}`: spread over a cluster).
pub(super) const PENDING_SHARDS: u64 = 256;

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

impl RedisStore {
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
        let io = |e: redis::RedisError| self.io_error(e);
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
        let io = |e: redis::RedisError| self.io_error(e);
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
            let Some(spec) = self.specs.get(s) else {
                continue;
            };
            if !plan.by_source[s]
                .iter()
                .any(|&g| plan.groups[g].spec.kind == Kind::Label)
            {
                continue;
            }
            let blob = label_key_blob(spec);
            let script = |eval: bool| {
                let mut c = self.script_cmd(eval);
                c.arg(1)
                    .arg(self.key(s, k))
                    .arg("l")
                    .arg(&label_blob(te, delta)[..])
                    .arg(&blob[..]);
                c
            };
            let n: usize = match con.query(&script(false)) {
                Err(e) if super::missing_err(&e) => con.query(&script(true)).map_err(io)?,
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

impl RedisStore {
    /// A Redis error as a typed I/O error naming the server, its text scrubbed of
    /// credentials.
    fn io_error(&self, e: redis::RedisError) -> StateError {
        StateError::Io {
            path: self.where_().into(),
            source: std::io::Error::other(self.access.scrub(&e.to_string())),
        }
    }
}
