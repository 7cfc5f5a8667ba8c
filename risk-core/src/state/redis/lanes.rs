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
//! own calls are, since it waits for each reply. Held sequence rows need more: a row is
//! entered before every later call of this host that reads its key ([`Mux`] keeps that
//! order on one connection). So when a plan's sequences hold rows for the next call (on
//! one key source), lanes have affinity: a decision's call and its held rows take the
//! lane of that source's key (a hash of it), whether or not another caller waits there;
//! a decision without that key takes any lane as above. A plan holding rows on two key
//! sources keeps one lane.

use super::mux::{Carrier, Mux, MuxError, Row};
use super::wire::{Dial, MAX_SPIN};
use super::RedisCounters;
use crate::error::ConfigError;
use crate::state::def::RedisConfig;
use crate::state::plan::Plan;
use crate::state::seq_plan::SeqPlans;
use redis::{Cmd, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lanes at most (`state.redis.connections`).
pub(super) const MAX_LANES: usize = 64;

/// Refuses `connections` out of `1..=MAX_LANES` and a read spin longer than the
/// timeout or [`MAX_SPIN`], naming the key.
pub(super) fn check(cfg: &RedisConfig) -> Result<(), ConfigError> {
    if !(1..=MAX_LANES).contains(&cfg.connections) {
        return Err(ConfigError::invalid(
            "state.redis.connections",
            format!("{} is not in 1..={MAX_LANES}", cfg.connections),
        ));
    }
    // A read polls, then blocks for up to the timeout: a spin longer than the timeout
    // would more than double how long a read may take.
    if cfg.read_spin > cfg.timeout {
        return Err(ConfigError::invalid(
            "state.redis.read_spin_us",
            format!(
                "{} us is longer than state.redis.timeout_ms ({} us)",
                cfg.read_spin.as_micros(),
                cfg.timeout.as_micros()
            ),
        ));
    }
    if cfg.read_spin > MAX_SPIN {
        return Err(ConfigError::invalid(
            "state.redis.read_spin_us",
            format!(
                "{} us is more than {} us",
                cfg.read_spin.as_micros(),
                MAX_SPIN.as_micros()
            ),
        ));
    }
    Ok(())
}

/// The lanes for `plan`: `connections`, with affinity by the key of the one source whose
/// sequences hold rows for the next call (`Some(source)`), or one lane when two sources
/// do.
pub(super) fn shape(cfg: &RedisConfig, plan: &Plan, seqs: &SeqPlans) -> (usize, Option<usize>) {
    let holding: Vec<usize> = (0..plan.sources.len())
        .filter(|&s| seqs.of(s).any(|q| !q.early))
        .collect();
    match holding[..] {
        [] => (cfg.connections, None),
        [s] => (cfg.connections, Some(s)),
        _ => (1, None),
    }
}

/// The decide path's connections to one server.
pub(super) struct Lanes {
    all: Vec<Mux>,
    /// Calls carrying a key take the lane of that key (held rows' order).
    affinity: bool,
}

impl Lanes {
    /// `n` lanes (at least one), each [`Mux::start`]ed with these settings; each
    /// connects on its first call. `affinity`: calls and rows that name a key take its
    /// lane.
    pub fn start(
        n: usize,
        affinity: bool,
        dial: &Dial,
        timeout: Duration,
        linger: Duration,
        counters: &Arc<RedisCounters>,
        eval: &Cmd,
    ) -> std::io::Result<Self> {
        let all = (0..n.max(1))
            .map(|_| {
                Mux::start(
                    dial.clone(),
                    timeout,
                    linger,
                    Arc::clone(counters),
                    eval.clone(),
                )
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Self { all, affinity })
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

    /// The lane of `key` (a multiplicative hash: keys may be small or strided).
    fn of_key(&self, key: u64) -> &Mux {
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        &self.all[(h % self.all.len() as u64) as usize]
    }

    /// A decision's call (see [`Mux::call_carrier`]) on the lane of `key` (the key of
    /// the source whose sequences hold rows, when the decision has one) with affinity,
    /// else on the first lane no caller waits on.
    pub fn call_carrier(
        &self,
        c: Carrier,
        deadline: Instant,
        key: Option<u64>,
    ) -> Result<Vec<Value>, MuxError> {
        match key {
            Some(k) if self.affinity => self.of_key(k),
            _ => self.pick(),
        }
        .call_carrier(c, deadline)
    }

    /// A row of `key` held for this host's next call on the key's lane (see
    /// [`Mux::defer`]).
    pub fn defer(&self, row: Row, key: u64) -> Result<(), MuxError> {
        if self.affinity {
            self.of_key(key).defer(row)
        } else {
            self.all[0].defer(row)
        }
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
    use crate::state::redis_conn::{Access, Client};
    use std::sync::atomic::Ordering::Relaxed;

    fn lanes(n: usize) -> (Lanes, Arc<RedisCounters>) {
        lanes_with(n, false)
    }

    fn lanes_with(n: usize, affinity: bool) -> (Lanes, Arc<RedisCounters>) {
        lanes_spin(n, affinity, Duration::ZERO)
    }

    fn lanes_spin(n: usize, affinity: bool, spin: Duration) -> (Lanes, Arc<RedisCounters>) {
        let cfg = RedisConfig {
            url: std::env::var("RISK_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6390/".into()),
            ..RedisConfig::default()
        };
        let t = Duration::from_secs(5);
        let access = Access::from_config(&cfg).unwrap();
        let Client::One(client) = Client::open(&cfg, &access, t).unwrap() else {
            unreachable!("one server")
        };
        let dial = Dial::of(&client, &access, spin).unwrap();
        let counters = Arc::new(RedisCounters::default());
        let eval = redis::cmd("EVAL");
        let l = Lanes::start(
            n,
            affinity,
            &dial,
            t,
            Duration::from_millis(1),
            &counters,
            &eval,
        )
        .unwrap();
        (l, counters)
    }

    /// A call as the store makes it (`EVAL <script> 1 <key> u <common> <blob>`, carried
    /// rows' keys and blobs before the decision's): the script answers the last blob.
    fn call(l: &Lanes, blob: &[u8]) -> Vec<Value> {
        call_key(l, blob, None)
    }

    fn call_key(l: &Lanes, blob: &[u8], key: Option<u64>) -> Vec<Value> {
        let mut head = redis::cmd("EVAL");
        head.arg("return {ARGV[#ARGV]}");
        let c = Carrier {
            head,
            keys: vec![b"risk-test-lanes".to_vec()],
            common: vec![0; 24],
            blobs: vec![blob.to_vec()],
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        l.call_carrier(c, deadline, key)
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

    /// With a read spin, a caller whose call queues (another waits on the one lane)
    /// polls for its reply, and gets each its own, in order; a lone caller's reads poll.
    #[test]
    fn with_a_spin_queued_and_direct_callers_get_their_own_replies() {
        let (one, counters) = lanes_spin(1, false, Duration::from_millis(5));
        assert_eq!(call(&one, b"a"), answer(b"a"));
        let busy = one.all[0].hold();
        for i in 0..50u8 {
            assert_eq!(call(&one, &[b'q', i]), answer(&[b'q', i]));
        }
        assert_eq!(counters.direct.load(Relaxed), 0);
        drop(busy);
        for i in 0..50u8 {
            assert_eq!(call(&one, &[b'd', i]), answer(&[b'd', i]));
        }
        assert!(counters.direct.load(Relaxed) > 0);
        let polled = counters.reads_polled.load(Relaxed);
        let blocked = counters.reads_blocked.load(Relaxed);
        assert!(polled > 0 && polled + blocked >= 101, "{polled} {blocked}");
    }

    /// With affinity a call naming a key takes its key's lane even while a caller waits
    /// there (it queues), and a row held for the next call rides the next call on its
    /// key's lane only.
    #[test]
    fn with_affinity_a_key_keeps_its_lane_and_its_rows_ride_it() {
        let (l, counters) = lanes_with(2, true);
        let lane = |k: u64| std::ptr::from_ref(l.of_key(k)) == std::ptr::from_ref(&l.all[1]);
        let k0 = (1..).find(|&k| !lane(k)).unwrap();
        let k1 = (1..).find(|&k| lane(k)).unwrap();
        // Both lanes connected, then direct.
        for k in [k0, k0, k1, k1] {
            assert_eq!(call_key(&l, b"a", Some(k)), answer(b"a"));
        }
        assert_eq!(counters.direct.load(Relaxed), 2);
        // A caller waits on k1's lane: a call of k1 queues there (lane 0 is idle).
        let busy = l.all[1].hold();
        assert_eq!(call_key(&l, b"b", Some(k1)), answer(b"b"));
        assert_eq!(counters.direct.load(Relaxed), 2, "k1's call left its lane");
        drop(busy);
        // A row of k1 held: a call of k0 does not carry it, the next of k1 does.
        let row = Row {
            key: b"risk-test-lanes-row".to_vec(),
            blob: b"row".to_vec(),
            alone: Vec::new(),
        };
        l.defer(row, k1)
            .unwrap_or_else(|_| panic!("the row was refused"));
        assert_eq!(call_key(&l, b"c", Some(k0)), answer(b"c"));
        assert_eq!(counters.seq_carried.load(Relaxed), 0);
        assert_eq!(call_key(&l, b"d", Some(k1)), answer(b"d"));
        assert_eq!(counters.seq_carried.load(Relaxed), 1);
    }

    #[test]
    fn flush_answers_for_every_lane() {
        let (l, _) = lanes(3);
        assert_eq!(call(&l, b"x"), answer(b"x"));
        assert!(l.flush(Instant::now() + Duration::from_secs(5)));
    }
}
