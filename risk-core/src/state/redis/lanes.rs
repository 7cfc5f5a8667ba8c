//! The decide path's connections to one server (`state.redis.connections`), each a
//! pipelined [`Mux`] with its I/O thread, so concurrent decisions are in flight at once.
//!
//! Why more than one: a [`Mux`] writes what callers queued, then blocks reading the
//! oldest reply (the crate's synchronous connection cannot be read and written from two
//! threads); calls that arrive during that read wait for it to end before they are
//! written. Two callers that alternate therefore got one call per round trip between
//! them: two threads decided no faster than one (BENCHMARKS.md [18]). With a lane per
//! concurrent caller, each writes and reads on its own connection (a lone caller on an
//! idle lane makes its call on its own thread, [`Mux`]'s direct path), and Redis runs
//! one lane's script while another's request or reply is on the wire.
//!
//! Which lane: the first with no caller waiting on it (so a lone caller keeps reusing the
//! first, warm one), else the one with the fewest callers waiting (its I/O thread writes
//! them together). Order: concurrent decisions are not ordered by Redis anyway (each
//! script call is atomic, and which runs first was the queue's accident); a caller's
//! own calls are, since it waits for each reply. Held sequence rows need more (a row is
//! entered before every later call of this host, [`Mux`]): a plan whose sequences hold
//! rows for the next call keeps one lane.

use super::mux::{Carrier, Mux, MuxError, Row};
use super::RedisCounters;
use crate::state::redis_conn::Client;
use redis::{Cmd, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lanes at most (`state.redis.connections`).
pub(crate) const MAX_LANES: usize = 64;

/// The decide path's connections to one server.
pub(super) struct Lanes {
    all: Vec<Mux>,
}

impl Lanes {
    /// `n` lanes (at least one), each [`Mux::start`]ed with these settings; each
    /// connects on its first call.
    pub fn start(
        n: usize,
        client: &Client,
        timeout: Duration,
        linger: Duration,
        counters: &Arc<RedisCounters>,
        eval: &Cmd,
    ) -> std::io::Result<Self> {
        let all = (0..n.clamp(1, MAX_LANES))
            .map(|_| {
                Mux::start(
                    client.clone(),
                    timeout,
                    linger,
                    Arc::clone(counters),
                    eval.clone(),
                )
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Self { all })
    }

    /// Lanes open.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// The lane for a call now: the first that no caller waits on, else the least
    /// waited on. Two callers may pick the same idle lane at once; the second then
    /// queues on it (as with one lane), never waits for the choice.
    fn pick(&self) -> &Mux {
        let mut best = &self.all[0];
        let mut least = usize::MAX;
        for m in &self.all {
            let w = m.waiting();
            if w == 0 {
                return m;
            }
            if w < least {
                best = m;
                least = w;
            }
        }
        best
    }

    /// A decision's call on a lane (see [`Mux::call_carrier`]).
    pub fn call_carrier(&self, c: Carrier, deadline: Instant) -> Result<Vec<Value>, MuxError> {
        self.pick().call_carrier(c, deadline)
    }

    /// A row held for this host's next call (see [`Mux::defer`]): only plans with one
    /// lane hold rows, so it is that lane's.
    pub fn defer(&self, row: Row) -> Result<(), MuxError> {
        self.all[0].defer(row)
    }

    /// Every lane's held rows sent and its calls answered (or `deadline`).
    pub fn flush(&self, deadline: Instant) -> bool {
        // Every lane flushed, whichever fails.
        let mut ok = true;
        for m in &self.all {
            ok &= m.flush(deadline);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    //! Against the server of `tools/servers.sh start redis` (`RISK_REDIS_URL`).
    use super::*;
    use crate::state::def::RedisConfig;
    use crate::state::redis_conn::Access;
    use std::sync::atomic::Ordering::Relaxed;

    fn lanes(n: usize) -> (Lanes, Arc<RedisCounters>) {
        let cfg = RedisConfig {
            url: std::env::var("RISK_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6390/".into()),
            ..RedisConfig::default()
        };
        let t = Duration::from_secs(5);
        let access = Access::from_config(&cfg).unwrap();
        let client = Client::open(&cfg, &access, t).unwrap();
        let counters = Arc::new(RedisCounters::default());
        let eval = redis::cmd("EVAL");
        let l = Lanes::start(n, &client, t, Duration::from_millis(1), &counters, &eval).unwrap();
        (l, counters)
    }

    /// A call as the store makes it (`EVAL <script> 1 <key> u <common> <blob>`): the
    /// script answers its one key's blob.
    fn call(l: &Lanes, blob: &[u8]) -> Vec<Value> {
        let mut head = redis::cmd("EVAL");
        head.arg("return {ARGV[3]}");
        let c = Carrier {
            head,
            keys: vec![b"risk-test-lanes".to_vec()],
            common: vec![0; 24],
            blobs: vec![blob.to_vec()],
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        l.call_carrier(c, deadline)
            .unwrap_or_else(|_| panic!("no reply from Redis (tools/servers.sh start redis)"))
    }

    fn answer(blob: &[u8]) -> Vec<Value> {
        vec![Value::Array(vec![Value::BulkString(blob.to_vec())])]
    }

    /// A caller waiting on the first lane sends the next call to the second, which
    /// makes it on the caller's thread once connected; with one lane it queues behind.
    #[test]
    fn a_call_takes_the_lane_no_caller_waits_on() {
        let (l, counters) = lanes(2);
        assert_eq!(l.len(), 2);
        // The first lane connects (through its thread), then goes direct.
        assert_eq!(call(&l, b"a"), answer(b"a"));
        assert_eq!(call(&l, b"b"), answer(b"b"));
        assert_eq!(counters.direct.load(Relaxed), 1);
        // A caller waits on the first lane: the second connects, then goes direct.
        let busy = l.all[0].hold();
        assert_eq!(call(&l, b"c"), answer(b"c"));
        assert_eq!(counters.direct.load(Relaxed), 1);
        assert_eq!(call(&l, b"d"), answer(b"d"));
        assert_eq!(
            counters.direct.load(Relaxed),
            2,
            "the idle lane was not taken"
        );
        drop(busy);
        // The first lane is idle again: taken first.
        assert_eq!(call(&l, b"e"), answer(b"e"));
        assert_eq!(counters.direct.load(Relaxed), 3);

        // One lane: a call while a caller waits on it queues (never direct).
        let (one, counters) = lanes(1);
        assert_eq!(call(&one, b"a"), answer(b"a"));
        let busy = one.all[0].hold();
        assert_eq!(call(&one, b"b"), answer(b"b"));
        assert_eq!(call(&one, b"c"), answer(b"c"));
        assert_eq!(counters.direct.load(Relaxed), 0);
        drop(busy);
    }

    #[test]
    fn flush_answers_for_every_lane() {
        let (l, _) = lanes(3);
        assert_eq!(call(&l, b"x"), answer(b"x"));
        assert!(l.flush(Instant::now() + Duration::from_secs(5)));
    }
}
