//! The script calls the Redis store sends: the call over a decision's keys (packed, or
//! in parts for the shared connection to carry held sequence rows in), and the commands
//! that load the script.

use super::super::plan::{Plan, Request};
use super::mux::Carrier;
use super::script;
use super::RedisStore;
use super::SeqReply;
use crate::decision::Action;
use redis::Cmd;
use std::sync::atomic::Ordering::Relaxed;

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
        let (keys, common, blobs) = self.parts(plan, req, sources, lateness_ms, outcome, te, rows);
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

    /// A decision's `"u"` call over `sources`' keys, in parts for the shared connection.
    pub(super) fn carrier(
        &self,
        plan: &Plan,
        req: &Request,
        sources: &[usize],
        lateness_ms: i64,
        eval: bool,
        rows: &SeqReply,
    ) -> Carrier {
        let (keys, common, blobs) =
            self.parts(plan, req, sources, lateness_ms, None, &[], Some(rows));
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
                script::key_blob(&self.specs[s], plan, req, s, o, h, &mut blob);
                if let Some(r) = rows {
                    blob.extend_from_slice(&r.early[s]);
                }
                blob
            })
            .collect();
        (keys, common, blobs)
    }
}
