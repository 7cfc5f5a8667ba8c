//! One Redis connection shared by every concurrent decision, pipelined: callers hand
//! their packed command to an I/O thread through a bounded queue and wait for their own
//! reply, at most their deadline.
//!
//! Why a thread of our own: the `redis` crate's `MultiplexedConnection` needs an async
//! runtime (tokio), and the engine is runtime-free (DESIGN.md). The thread keeps the
//! crate's synchronous `Connection` (TLS, ACL, mTLS, RESP parsing unchanged) and runs a
//! simple loop: take every queued request, write them in one `write`, read the reply of
//! the oldest in flight, repeat. While one reply is read, new requests gather in the
//! queue and go out together next: with N callers a round trip carries up to N
//! decisions, so throughput is no longer round trips × threads (measured in
//! NOTES-redis-floor.md / BENCHMARKS.md). The queue is bounded (`MAX_IN_FLIGHT`): a full
//! one answers at once with an error (the decision degrades, counted), never blocks.
//!
//! Deadlines: a caller waits on its reply for at most its timeout from the moment it
//! queued (so queueing counts against it); the thread's socket reads and writes carry
//! the same timeout, and a read or write that fails or times out fails every request in
//! flight and drops the connection (the replies on it can no longer be matched); the
//! next request connects again.

use super::super::redis_conn::{Client, Conn};
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use redis::{RedisError, RedisResult, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests queued or in flight on the shared connection at most.
pub(super) const MAX_IN_FLIGHT: usize = 1_024;

struct Req {
    packed: Vec<u8>,
    /// Replies this request expects (one per command it packed).
    n: usize,
    reply: Reply,
}

/// Where a request's replies go.
enum Reply {
    /// To its caller, waiting.
    Wait(Sender<RedisResult<Vec<Value>>>),
    /// Nowhere: a failure or an error reply is counted here.
    Detached(Arc<AtomicU64>),
}

impl Reply {
    fn deliver(self, r: RedisResult<Vec<Value>>) {
        match self {
            // A caller that gave up has dropped its receiver: nothing to do.
            Reply::Wait(s) => {
                let _ = s.send(r);
            }
            Reply::Detached(failed) => {
                let ok = r.is_ok_and(|v| !v.iter().any(|x| matches!(x, Value::ServerError(_))));
                if !ok {
                    failed.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

/// The shared, pipelined connection (one Redis server; a cluster uses [`Conn`]s).
pub(super) struct Mux {
    tx: Sender<Req>,
}

/// Why a pipelined call got no reply.
pub(super) enum MuxError {
    /// The deadline passed first.
    Timeout,
    /// The queue was full or the I/O thread is gone.
    Busy,
    /// Redis or the connection failed.
    Redis(RedisError),
}

impl Mux {
    /// Starts the I/O thread; it connects through `client` on first use, every socket
    /// read and write bounded by `timeout`.
    pub fn start(client: Client, timeout: Duration) -> std::io::Result<Self> {
        let (tx, rx) = bounded::<Req>(MAX_IN_FLIGHT);
        std::thread::Builder::new()
            .name("risk-state-redis-io".into())
            .spawn(move || io_loop(client, timeout, rx))?;
        Ok(Self { tx })
    }

    /// Sends `packed` (`n` commands) and waits for their `n` replies until `deadline`.
    pub fn call(
        &self,
        packed: Vec<u8>,
        n: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, MuxError> {
        let (reply, got) = bounded(1);
        let reply = Reply::Wait(reply);
        match self.tx.try_send(Req { packed, n, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                return Err(MuxError::Busy)
            }
        }
        match got.recv_deadline(deadline) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(MuxError::Redis(e)),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(MuxError::Timeout),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(MuxError::Busy),
        }
    }
}

impl Mux {
    /// Sends `packed` (`n` commands) without waiting for its replies: a failure or an
    /// error reply is counted in `failed`. Queued behind every earlier request, ahead of
    /// every later one. `Err`: the queue was full (nothing sent, nothing counted).
    pub fn send(&self, packed: Vec<u8>, n: usize, failed: &Arc<AtomicU64>) -> Result<(), MuxError> {
        let reply = Reply::Detached(Arc::clone(failed));
        self.tx
            .try_send(Req { packed, n, reply })
            .map_err(|_| MuxError::Busy)
    }
}

fn io_loop(client: Client, timeout: Duration, rx: Receiver<Req>) {
    let mut con: Option<redis::Connection> = None;
    let mut inflight: VecDeque<Req> = VecDeque::new();
    let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        // A failed connection attempt answers the rest of its round at once (no
        // attempt per queued request while Redis is down).
        let mut refused: Option<RedisError> = None;
        // Idle: wait for work (the thread ends when the store is dropped).
        if inflight.is_empty() {
            match rx.recv() {
                Ok(r) => queue(
                    &mut con,
                    &client,
                    timeout,
                    r,
                    &mut inflight,
                    &mut out,
                    &mut refused,
                ),
                Err(_) => return,
            }
        }
        while let Ok(r) = rx.try_recv() {
            queue(
                &mut con,
                &client,
                timeout,
                r,
                &mut inflight,
                &mut out,
                &mut refused,
            );
        }
        if !out.is_empty() {
            let sent = match con.as_mut() {
                Some(c) => c.send_packed_command(&out),
                None => Ok(()),
            };
            out.clear();
            if let Err(e) = sent {
                fail_all(&mut inflight, &e);
                con = None;
                continue;
            }
        }
        let Some(front) = inflight.front() else {
            continue;
        };
        let Some(c) = con.as_mut() else {
            // Unreachable: a request is only in flight on a connection.
            continue;
        };
        let mut replies = Vec::with_capacity(front.n);
        let mut failed = None;
        for _ in 0..front.n {
            match c.recv_response() {
                Ok(v) => replies.push(v),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            fail_all(&mut inflight, &e);
            con = None;
            continue;
        }
        if let Some(r) = inflight.pop_front() {
            r.reply.deliver(Ok(replies));
        }
    }
}

/// Puts `r` in flight (its bytes onto `out`), connecting first when needed; a request
/// that cannot connect is answered with the error at once.
#[allow(clippy::too_many_arguments)]
fn queue(
    con: &mut Option<redis::Connection>,
    client: &Client,
    timeout: Duration,
    r: Req,
    inflight: &mut VecDeque<Req>,
    out: &mut Vec<u8>,
    refused: &mut Option<RedisError>,
) {
    if let Some(e) = refused {
        r.reply.deliver(Err(copy_error(e)));
        return;
    }
    if con.is_none() {
        match client.connect(timeout) {
            Ok(Conn::One(c)) => *con = Some(c),
            Ok(Conn::Cluster(_)) => {
                let e = RedisError::from((
                    redis::ErrorKind::Client,
                    "a cluster has no shared connection",
                ));
                r.reply.deliver(Err(e));
                return;
            }
            Err(e) => {
                r.reply.deliver(Err(copy_error(&e)));
                *refused = Some(e);
                return;
            }
        }
    }
    out.extend_from_slice(&r.packed);
    inflight.push_back(r);
}

fn fail_all(inflight: &mut VecDeque<Req>, e: &RedisError) {
    for r in inflight.drain(..) {
        r.reply.deliver(Err(copy_error(e)));
    }
}

/// A copy of `e` for each waiting caller (kind and text kept; timeouts stay timeouts).
fn copy_error(e: &RedisError) -> RedisError {
    if e.is_timeout() {
        return RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            e.to_string(),
        ));
    }
    if e.is_io_error() || e.is_connection_dropped() {
        return RedisError::from(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            e.to_string(),
        ));
    }
    RedisError::from((e.kind(), "Redis failed", e.to_string()))
}
