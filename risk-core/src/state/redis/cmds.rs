//! The script calls the Redis store sends: the call over a decision's keys (packed, or
//! in parts for the shared connection to carry held sequence rows in), the decide
//! path's round trip on one server or a cluster, and the commands that load the script.

use super::super::plan::{Plan, Request};
use super::super::redis_conn::Conn;
use super::lanes::Lanes;
use super::mux::{Carrier, MuxError};
use super::script;
use super::RedisStore;
use super::SeqReply;
use super::{lacks_spec, missing, missing_err};
use crate::decision::{Action, StateFault};
use redis::{Cmd, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A call's arguments after the script's name: its keys, the common blob, a blob per key.
type Parts = (Vec<Vec<u8>>, Vec<u8>, Vec<Vec<u8>>);

impl RedisStore {
    /// `FCALL <function>` (or `EVALSHA <hash>` where the server took no library) or,
    /// when a server lacks it, `EVAL <script>`.
    pub(super) fn script_cmd(&self, eval: bool) -> Cmd {
        if eval {
            self.code.eval_cmd()
        } else if self.fcall.load(Relaxed) {
            let mut c = redis::cmd("FCALL");
            c.arg(&self.code.function);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(self.code.script.get_hash());
            c
        }
    }

    /// `FUNCTION LOAD` of the library (a cluster routes it to every primary).
    pub(super) fn load_function_cmd(&self) -> Cmd {
        self.code.function_load_cmd()
    }

    /// The script call over `sources`' keys for `req` (`outcome`: only the groups
    /// `action` enters, each key at its event's effective time).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn call(
        &self,
        plan: &Plan,
        req: &Request,
        sources: &[usize],
        lateness_ms: i64,
        outcome: Option<Action>,
        te: &[i64],
        eval: bool,
        rows: Option<&SeqReply>,
    ) -> Cmd {
        let (keys, common, blobs) =
            self.parts(plan, req, sources, lateness_ms, outcome, te, rows, true);
        let mut c = self.script_cmd(eval);
        c.arg(keys.len());
        for k in &keys {
            c.arg(&k[..]);
        }
        c.arg(if outcome.is_some() { "o" } else { "u" })
            .arg(&common[..]);
        for b in &blobs {
            c.arg(&b[..]);
        }
        c
    }

    /// A decision's `"u"` call over `sources`' keys, in parts for the shared connection
    /// (`full`: with the keys' specs in full, else by id).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn carrier(
        &self,
        plan: &Plan,
        req: &Request,
        sources: &[usize],
        lateness_ms: i64,
        eval: bool,
        full: bool,
        rows: &SeqReply,
    ) -> Carrier {
        let (keys, common, blobs) =
            self.parts(plan, req, sources, lateness_ms, None, &[], Some(rows), full);
        Carrier {
            head: self.script_cmd(eval),
            keys,
            common,
            blobs,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn parts(
        &self,
        plan: &Plan,
        req: &Request,
        sources: &[usize],
        lateness_ms: i64,
        outcome: Option<Action>,
        te: &[i64],
        rows: Option<&SeqReply>,
        full: bool,
    ) -> Parts {
        let keys = sources
            .iter()
            .map(|&s| self.key(s, self.pkey(s, req.keys[s])).into_bytes())
            .collect();
        let common = script::common_blob(req.ts, lateness_ms, self.ttl_ms).to_vec();
        let blobs = sources
            .iter()
            .map(|&s| {
                let mut blob = Vec::with_capacity(512);
                let o = outcome.map(|a| (a, te[s]));
                let h = |h| self.value_hash(h);
                script::key_blob(&self.specs[s], plan, req, s, o, h, full, &mut blob);
                if let Some(r) = rows {
                    blob.extend_from_slice(&r.early[s]);
                }
                blob
            })
            .collect();
        (keys, common, blobs)
    }
}

/// The decide path's calls: one server (the shared connections) or a cluster.
impl RedisStore {
    /// One server: one script call over every key, on the shared connection.
    pub(super) fn call_one(
        &self,
        m: &Lanes,
        plan: &Plan,
        req: &Request,
        sources: &[usize],
        lateness_ms: i64,
        seq: &mut SeqReply,
    ) -> Result<Vec<Value>, StateFault> {
        let deadline = Instant::now() + self.cfg.timeout.max(Duration::from_millis(1));
        let key = self.lane_source.map(|s| req.keys[s]).filter(|&k| k != 0);
        let run = |eval: bool, full: bool, seq: &SeqReply| {
            let c = self.carrier(plan, req, sources, lateness_ms, eval, full, seq);
            m.call_carrier(c, deadline, key)
        };
        // Specs by id once a call in full went through the function library (a plain
        // script holds none between calls).
        let by_id = self.fcall.load(Relaxed) && self.specs_held.load(Relaxed);
        let mut got = run(false, !by_id, seq);
        let first = |got: &Result<Vec<Value>, MuxError>, f: fn(&Value) -> bool| matches!(got, Ok(v) if v.first().is_some_and(f));
        // The server does not hold the specs (restarted, the library loaded again):
        // nothing ran; again with them in full.
        if first(&got, lacks_spec) {
            self.specs_held.store(false, Relaxed);
            self.counters.specs_resent.fetch_add(1, Relaxed);
            got = run(false, true, seq);
        }
        // The server lacks the script (restarted): nothing ran; again with its text, and
        // the library loaded again in the background.
        if first(&got, missing) {
            got = run(true, true, seq);
            seq.eval = true;
            if self.fcall.load(Relaxed) {
                self.offer(vec![self.load_function_cmd()]);
            }
        } else if !by_id && matches!(&got, Ok(v) if matches!(v.first(), Some(Value::Array(_)))) {
            self.specs_held.store(true, Relaxed);
        }
        let v = match got {
            Ok(mut v) => v.pop().unwrap_or(Value::Nil),
            Err(MuxError::Redis(e)) => return Err(self.trip(&e)),
            Err(MuxError::Timeout) => {
                let e = redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply within state.redis.timeout_ms",
                ));
                return Err(self.trip(&e));
            }
            Err(MuxError::Busy) => {
                self.counters.shed.fetch_add(1, Relaxed);
                return Err(StateFault::Error);
            }
        };
        match v {
            Value::Array(items) if items.len() == sources.len() => Ok(items),
            Value::ServerError(e) => {
                let e: redis::RedisError = e.into();
                Err(self.trip(&e))
            }
            other => {
                self.counters.errors.fetch_add(1, Relaxed);
                tracing::error!(target: "risk::state", reply = ?other, "malformed reply from the Redis state script");
                Err(StateFault::Error)
            }
        }
    }

    /// A cluster: one call per key (each in its own slot), one pipeline.
    pub(super) fn call_cluster(
        &self,
        plan: &Plan,
        req: &Request,
        sources: &[usize],
        lateness_ms: i64,
        seq: &SeqReply,
    ) -> Result<Vec<Value>, StateFault> {
        let mut con = match self.pool.lock().pop() {
            Some(c) => c,
            None => self.connect().map_err(|e| self.trip(&e))?,
        };
        let run = |con: &mut Conn, eval: bool| -> redis::RedisResult<Vec<Value>> {
            let cmds: Vec<Cmd> = sources
                .iter()
                .map(|&s| self.call(plan, req, &[s], lateness_ms, None, &[], eval, Some(seq)))
                .collect();
            con.pipeline(&cmds)
        };
        let out = match run(&mut con, false) {
            // A node lacks the script: the other nodes' commands ran, so the pipeline is
            // not repeated (it would count twice); the script is loaded on every primary
            // and this decision goes without its features (counted as an error).
            Err(e) if missing_err(&e) => {
                let _ = self.load_script(&mut con);
                Err(e)
            }
            r => r,
        };
        let out = out.map_err(|e| self.trip(&e))?;
        self.pool.lock().push(con);
        // Each call answers an array of its one key's reply.
        Ok(out
            .into_iter()
            .map(|v| match v {
                Value::Array(mut one) if one.len() == 1 => one.pop().unwrap_or(Value::Nil),
                other => other,
            })
            .collect())
    }
}
