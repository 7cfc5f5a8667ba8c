//! One Redis connection shared by concurrent decisions, pipelined: callers hand their
//! command to an I/O thread through a bounded queue and wait for their own reply, at
//! most their deadline. The store keeps a few ([`super::lanes`]): a caller takes one
//! that no other caller waits on.
//!
//! Why a thread of our own: the `redis` crate's `MultiplexedConnection` needs an async
//! runtime (tokio), and the engine is runtime-free (DESIGN.md). The connection is a
//! [`Wire`] (its own socket, the crate's RESP parser; reads may poll before they block,
//! `read_spin_us`, and so may a caller waiting for its queued call's reply) and the
//! thread runs a simple loop: take every queued request, write them in one `write`,
//! read the reply of the oldest in flight, repeat. While one reply is read, new
//! requests gather in the queue and go out together next: with N callers a round trip
//! carries up to N decisions, so throughput is no longer round trips × threads
//! (measured in BENCHMARKS.md [18]). The queue is bounded (`MAX_IN_FLIGHT`): a full one
//! answers at once with an error (the decision degrades, counted), never blocks.
//!
//! A lone caller skips the thread: the connection and what is in flight on it sit
//! behind one lock, which the I/O thread takes to work and releases while it waits for
//! work; requests leave the queue only under that lock. A decision's call made while no
//! other caller waits, that finds that lock free, takes what is queued (rows, in order),
//! writes its call carrying the rows held, and reads every reply in flight up to its
//! own, on its own thread ([`Mux::direct`]): no row or call of this host can be
//! overtaken, and the two hand-offs of the queue (a wake of the I/O thread and one of
//! the caller) are saved (BENCHMARKS.md [18]). Otherwise it queues as above, and
//! concurrent calls are still written together; the lock is only tried, never waited
//! for, by a caller.
//!
//! Carried rows: a sequence row that holds a decision's own state features is known only
//! once that decision's call answered ([`super::seq`]). The caller queues it here
//! ([`Mux::defer`]) and the thread keeps it until the next decision's call it writes
//! ([`Carrier`]), which enters it before its own reads (`"u<c>"` in `state_main.lua`): every
//! decision is one script call. Rows are queued in the same channel as calls, so a row
//! is entered before every call this host queued after it. The thread holds at most
//! [`MAX_CARRY`] rows; when no call comes within the linger (`rows_linger_ms`), or on
//! [`Mux::flush`], each goes in a `"q"` call of its own. That linger bounds how late
//! another host sees the row (plus one round trip). A carried row whose call fails is
//! counted lost (`sequence_rows_carried` and `_alone` count rows as sent; `_lost`, those
//! whose call then failed); rows whose call met a server without the script (a restart)
//! go at once in an `EVAL` call of their own: calls already written behind that one read
//! without them. The thread is not joined when the store is dropped: it writes what it
//! holds once the queue closes; call `flush` before exit to know the rows landed.
//!
//! Deadlines: a caller waits on its reply for at most its timeout from the moment it
//! queued (so queueing counts against it); the thread's socket reads and writes carry
//! the same timeout, and a read or write that fails or times out fails every request in
//! flight and drops the connection (the replies on it can no longer be matched); the
//! next request connects again.

use super::super::redis_conn::copy_error;
use super::carrier::carry;
pub(super) use super::carrier::{Carrier, Row};
use super::wire::{Dial, Wire};
use super::RedisCounters;
use crossbeam_channel::{bounded, Receiver, Select, Sender, TryRecvError, TrySendError};
use parking_lot::Mutex;
use redis::{Cmd, RedisError, RedisResult, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests queued or in flight on the shared connection at most.
pub(super) const MAX_IN_FLIGHT: usize = 1_024;

/// Rows the I/O thread holds for the next call at most (and carries in one call).
pub(super) const MAX_CARRY: usize = 64;

enum Body {
    Carrier(Carrier),
    Row(Row),
    /// Every held row in its own call, then a `PING` answered to the caller.
    Flush,
}

struct Req {
    body: Body,
    reply: Reply,
}

/// A request on the wire.
struct Flight {
    n: usize,
    reply: Reply,
    /// Rows it carries (a [`Carrier`]).
    carried: Vec<Row>,
}

/// Where a request's replies go.
enum Reply {
    /// To its caller, waiting.
    Wait(Sender<RedisResult<Vec<Value>>>),
    /// Nowhere: a failure or an error reply adds its weight (rows) here.
    Detached(Arc<AtomicU64>, u64),
}

impl Reply {
    fn deliver(self, r: RedisResult<Vec<Value>>) {
        match self {
            // A caller that gave up has dropped its receiver: nothing to do.
            Reply::Wait(s) => {
                let _ = s.send(r);
            }
            Reply::Detached(failed, weight) => {
                let ok = r.is_ok_and(|v| !v.iter().any(|x| matches!(x, Value::ServerError(_))));
                if !ok {
                    failed.fetch_add(weight, Relaxed);
                }
            }
        }
    }
}

/// The shared, pipelined connection (one Redis server; a cluster uses the crate's).
pub(super) struct Mux {
    tx: Sender<Req>,
    lost: Arc<AtomicU64>,
    /// The connection and what is in flight on it: the I/O thread works under this
    /// lock, and a lone caller that finds it free makes its call itself
    /// ([`Mux::direct`]).
    io: Arc<Mutex<Io>>,
    /// The queue's receiving end, read only under `io`'s lock (by the thread or a
    /// direct caller), so requests are taken in the order they were queued.
    rx: Receiver<Req>,
    /// Callers waiting for a reply now: a caller goes direct only alone. Concurrent
    /// callers queue, so the I/O thread writes them together (a caller making its call
    /// directly would make the others wait a round trip for the lock, one by one:
    /// two-thread throughput fell 10% when they did).
    active: AtomicUsize,
    /// How long a caller whose call was queued polls for its reply before it sleeps
    /// (the connection's `read_spin_us`).
    spin: Duration,
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
    /// Starts the I/O thread; it connects through `dial` on first use, every socket
    /// read and write bounded by `timeout`; a held row waits `linger` at most for a
    /// call to carry it. `eval`: `EVAL <script>`, for rows a server without the script
    /// refused.
    pub fn start(
        dial: Dial,
        timeout: Duration,
        linger: Duration,
        counters: Arc<RedisCounters>,
        eval: Cmd,
    ) -> std::io::Result<Self> {
        let spin = dial.spin();
        let (tx, rx) = bounded::<Req>(MAX_IN_FLIGHT);
        let lost = Arc::clone(&counters.seq_lost);
        let io = Arc::new(Mutex::new(Io {
            dial,
            timeout,
            linger,
            counters,
            eval,
            con: None,
            inflight: VecDeque::new(),
            out: Vec::with_capacity(64 * 1024),
            held: Vec::new(),
            held_since: Instant::now(),
            refused: None,
            ready: Vec::new(),
        }));
        let (io2, rx2) = (Arc::clone(&io), rx.clone());
        std::thread::Builder::new()
            .name("risk-state-redis-io".into())
            .spawn(move || run(&io2, &rx2))?;
        Ok(Self {
            tx,
            lost,
            io,
            rx,
            active: AtomicUsize::new(0),
            spin,
        })
    }

    /// Callers waiting for a reply on this connection now.
    pub fn waiting(&self) -> usize {
        self.active.load(SeqCst)
    }

    /// Counts a caller waiting on this connection until the guard drops (tests: a
    /// caller in the middle of its call).
    #[cfg(test)]
    pub fn hold(&self) -> impl Drop + '_ {
        self.active.fetch_add(1, SeqCst);
        Active(&self.active)
    }

    /// Sends a decision's call, with the rows held so far, and waits for its reply.
    pub fn call_carrier(&self, c: Carrier, deadline: Instant) -> Result<Vec<Value>, MuxError> {
        self.wait(Body::Carrier(c), deadline)
    }

    /// Sends every held row in a call of its own and waits until Redis ran them (or
    /// `deadline`).
    pub fn flush(&self, deadline: Instant) -> bool {
        self.wait(Body::Flush, deadline).is_ok()
    }

    fn wait(&self, body: Body, deadline: Instant) -> Result<Vec<Value>, MuxError> {
        let (reply, got) = bounded(1);
        let reply = Reply::Wait(reply);
        let alone = self.active.fetch_add(1, SeqCst) == 0;
        let _active = Active(&self.active);
        let req = Req { body, reply };
        let req = if alone { self.direct(req) } else { Some(req) };
        if let Some(req) = req {
            self.queue(req)?;
            // Queued: poll for the reply before sleeping, as the socket's reads do.
            if !self.spin.is_zero() {
                let until = deadline.min(Instant::now() + self.spin);
                loop {
                    match got.try_recv() {
                        Ok(Ok(v)) => return Ok(v),
                        Ok(Err(e)) => return Err(MuxError::Redis(e)),
                        Err(crossbeam_channel::TryRecvError::Disconnected) => {
                            return Err(MuxError::Busy)
                        }
                        Err(crossbeam_channel::TryRecvError::Empty) => {}
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    std::thread::yield_now();
                }
            }
        }
        match got.recv_deadline(deadline) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(MuxError::Redis(e)),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(MuxError::Timeout),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(MuxError::Busy),
        }
    }

    /// Hands a row to the I/O thread for the next call (not waited for). `Err`: the
    /// queue was full (the row is lost, counted).
    pub fn defer(&self, row: Row) -> Result<(), MuxError> {
        let reply = Reply::Detached(Arc::clone(&self.lost), 1);
        self.queue(Req {
            body: Body::Row(row),
            reply,
        })
        .inspect_err(|_| {
            self.lost.fetch_add(1, Relaxed);
        })
    }

    /// `r` to the I/O thread; `Busy`: the queue was full or the thread is gone.
    fn queue(&self, r: Req) -> Result<(), MuxError> {
        match self.tx.try_send(r) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => Err(MuxError::Busy),
        }
    }

    /// A decision's call made on the caller's thread: a lone caller that finds the
    /// connection's lock free (the I/O thread waiting for work) and the connection
    /// open takes what is queued (rows, and requests of callers that gave up: in their
    /// order, so no row or call of this host is overtaken), writes its call (carrying
    /// the rows held) and reads the replies in flight up to its own, delivering each. It
    /// saves the two thread hand-offs of the queue (to the I/O thread and back) on a
    /// lone caller's round trip. The reply goes to `r`'s channel as on the queue's
    /// path. `Some(r)`: not taken, `r` must be queued.
    fn direct(&self, r: Req) -> Option<Req> {
        if !matches!(r.body, Body::Carrier(_)) {
            return Some(r);
        }
        let Some(mut io) = self.io.try_lock() else {
            return Some(r);
        };
        if io.con.is_none() {
            return Some(r);
        }
        io.counters.direct.fetch_add(1, Relaxed);
        while let Ok(q) = self.rx.try_recv() {
            io.take(q);
        }
        io.take(r);
        while io.finish_out() && !io.inflight.is_empty() {
            // Carried rows that met a server without the script go again with its text,
            // written on the next turn and read before this loop ends.
            io.read_front();
        }
        Io::release(io);
        None
    }
}

/// Lowers the count of callers waiting when a call ends, however it ends.
struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// The I/O thread: takes queued requests under the lock, writes them in one write,
/// reads the replies of the oldest in flight, repeats; idle (nothing in flight), it
/// waits for work without the lock and without taking it from the queue (a lone caller
/// may then take it and go direct). Held rows wait `linger` for a call, then go alone.
/// It ends when the store is dropped.
fn run(io: &Mutex<Io>, rx: &Receiver<Req>) {
    let mut wait = io.lock().next_wait();
    loop {
        let (idle, until) = wait;
        let mut lingered = false;
        if idle {
            let mut sel = Select::new();
            sel.recv(rx);
            lingered = match until {
                Some(t) => sel.ready_deadline(t).is_err(),
                None => {
                    sel.ready();
                    false
                }
            };
        }
        let mut g = io.lock();
        let mut took = false;
        loop {
            match rx.try_recv() {
                Ok(r) => {
                    g.take(r);
                    took = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    g.send_held();
                    g.finish_out();
                    return;
                }
            }
        }
        if lingered && !took {
            g.send_held();
        }
        if g.finish_out() {
            g.read_front();
        }
        // What to wait for next, decided under this same lock: the thread does not take
        // it again until work comes (a lone caller's next call finds it free).
        wait = g.next_wait();
        Io::release(g);
    }
}

/// The I/O thread's state.
struct Io {
    dial: Dial,
    timeout: Duration,
    linger: Duration,
    counters: Arc<RedisCounters>,
    /// `EVAL <script>`.
    eval: Cmd,
    con: Option<Wire>,
    inflight: VecDeque<Flight>,
    out: Vec<u8>,
    /// Rows waiting for the next call, oldest first.
    held: Vec<Row>,
    /// When the oldest held row came (it goes alone `linger` after).
    held_since: Instant,
    /// A failed connection attempt answers the rest of its round at once (no attempt
    /// per queued request while Redis is down).
    refused: Option<RedisError>,
    /// Replies read, delivered once the lock is released ([`Io::release`]): a caller
    /// woken by its reply finds the connection free for its next call.
    ready: Vec<(Reply, Vec<Value>)>,
}

impl Io {
    /// Whether the thread waits for work (nothing in flight) and until when (the
    /// oldest held row's linger); a new round forgets the last connection refusal.
    fn next_wait(&mut self) -> (bool, Option<Instant>) {
        self.refused = None;
        let until = self.held_since.checked_add(self.linger);
        (
            self.inflight.is_empty(),
            until.filter(|_| !self.held.is_empty()),
        )
    }

    /// Releases the lock, then delivers the replies read under it.
    fn release(mut g: parking_lot::MutexGuard<'_, Io>) {
        let ready = std::mem::take(&mut g.ready);
        drop(g);
        for (reply, v) in ready {
            reply.deliver(Ok(v));
        }
    }

    /// Writes what was queued; `false`: the write failed (everything in flight failed).
    fn finish_out(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let sent = match self.con.as_mut() {
            Some(c) => c.send(&self.out),
            None => Ok(()),
        };
        self.out.clear();
        if let Err(e) = sent {
            self.fail_all(&e);
            self.con = None;
            return false;
        }
        true
    }

    /// Reads the replies of the oldest request in flight and delivers them.
    fn read_front(&mut self) {
        let Some(front) = self.inflight.front() else {
            return;
        };
        let Some(c) = self.con.as_mut() else {
            // Unreachable: a request is only in flight on a connection.
            return;
        };
        let mut replies = Vec::with_capacity(front.n);
        for _ in 0..front.n {
            let got = c.recv();
            let r = c.take_reads();
            self.counters.reads_polled.fetch_add(r.polled, Relaxed);
            self.counters.reads_blocked.fetch_add(r.blocked, Relaxed);
            match got {
                Ok(v) => replies.push(v),
                Err(e) => {
                    self.fail_all(&e);
                    self.con = None;
                    return;
                }
            }
        }
        let Some(f) = self.inflight.pop_front() else {
            return;
        };
        if !f.carried.is_empty() {
            match replies.first() {
                // Nothing ran (the server lost the script, or the specs sent by id):
                // the rows go at once, with the script's text. Calls already written
                // behind this one read without them (the window of a server restart).
                Some(v) if super::missing(v) || super::lacks_spec(v) => {
                    let n = f.carried.len() as u64;
                    self.counters.seq_carried.fetch_sub(n, Relaxed);
                    self.counters.seq_alone.fetch_add(n, Relaxed);
                    self.eval_rows(&f.carried);
                }
                Some(Value::ServerError(_)) | None => {
                    self.lost(f.carried.len());
                }
                Some(_) => {}
            }
        }
        self.ready.push((f.reply, replies));
    }

    /// `rows` in one `"q"` call with the script's text, written now (detached).
    fn eval_rows(&mut self, rows: &[Row]) {
        let mut c = self.eval.clone();
        c.arg(rows.len());
        for r in rows {
            c.arg(&r.key[..]);
        }
        // `"q"` reads no common values (each row's blob holds its time).
        c.arg("q").arg(&[0u8; 24][..]);
        for r in rows {
            c.arg(&r.blob[..]);
        }
        // Written with the next round, ahead of every request taken after this reply.
        c.write_packed_command(&mut self.out);
        let failed = Arc::clone(&self.counters.seq_lost);
        self.push(1, Reply::Detached(failed, rows.len() as u64), Vec::new());
    }

    fn lost(&self, n: usize) {
        self.counters.seq_lost.fetch_add(n as u64, Relaxed);
    }

    /// Puts `r` in flight (its bytes onto `out`), or holds its row.
    fn take(&mut self, r: Req) {
        match r.body {
            Body::Row(row) => {
                if self.held.is_empty() {
                    self.held_since = Instant::now();
                }
                self.held.push(row);
                if self.held.len() > MAX_CARRY {
                    self.send_held();
                }
            }
            Body::Carrier(c) => {
                if self.connect() {
                    let carried = std::mem::take(&mut self.held);
                    carry(&c, &carried).write_packed_command(&mut self.out);
                    self.counters
                        .seq_carried
                        .fetch_add(carried.len() as u64, Relaxed);
                    self.push(1, r.reply, carried);
                } else {
                    self.reply_refused(r.reply);
                }
            }
            Body::Flush => {
                if self.held.is_empty() && self.inflight.is_empty() {
                    // Nothing to wait for (and no connection needed).
                    r.reply.deliver(Ok(Vec::new()));
                    return;
                }
                self.send_held();
                if self.connect() {
                    redis::cmd("PING").write_packed_command(&mut self.out);
                    self.push(1, r.reply, Vec::new());
                } else {
                    self.reply_refused(r.reply);
                }
            }
        }
    }

    fn push(&mut self, n: usize, reply: Reply, carried: Vec<Row>) {
        self.inflight.push_back(Flight { n, reply, carried });
    }

    /// Every held row in a `"q"` call of its own (detached: a failure is counted lost).
    fn send_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        if !self.connect() {
            self.lost(held.len());
            return;
        }
        self.counters
            .seq_alone
            .fetch_add(held.len() as u64, Relaxed);
        for row in held {
            self.out.extend_from_slice(&row.alone);
            let failed = Arc::clone(&self.counters.seq_lost);
            self.push(1, Reply::Detached(failed, 1), Vec::new());
        }
    }

    /// Connects when needed; `false`: it could not (the caller is answered by
    /// [`Io::reply_refused`]).
    fn connect(&mut self) -> bool {
        if self.con.is_some() {
            return true;
        }
        if self.refused.is_some() {
            return false;
        }
        match self.dial.open(self.timeout) {
            Ok(c) => {
                self.con = Some(c);
                true
            }
            Err(e) => {
                self.refused = Some(e);
                false
            }
        }
    }

    fn reply_refused(&self, reply: Reply) {
        let e = match &self.refused {
            Some(e) => copy_error(e),
            None => RedisError::from((redis::ErrorKind::Client, "not connected")),
        };
        reply.deliver(Err(e));
    }

    fn fail_all(&mut self, e: &RedisError) {
        for f in std::mem::take(&mut self.inflight) {
            self.lost(f.carried.len());
            f.reply.deliver(Err(copy_error(e)));
        }
    }
}
