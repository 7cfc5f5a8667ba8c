//! [`KafkaForwarder`] (feature `kafka`): streams the local log to a Kafka topic.
//!
//! The log is the source of truth; the forwarder tails it from its cursor (the highest
//! sequence number below which every record was acknowledged by the broker, kept in
//! `kafka-<topic>.cursor` beside the segments) and produces each record through
//! librdkafka (rdkafka's bundled build): idempotent producer, `acks=all`, key = the
//! transaction id in decimal (schema records: `schema-<fingerprint hex>`), headers
//! `risk-seq` and `risk-kind`, value = the `risk.audit.v1.AuditRecord` bytes.
//!
//! Delivery is **at least once**. A record counts as delivered when its delivery report
//! arrives. When a report says a record failed (broker down past `message_timeout`,
//! topic missing), the forwarder waits for the reports in flight, rewinds to its cursor
//! and sends again from there, after a backoff; a restart resends from the persisted
//! cursor. So a consumer can see a record twice (never zero times): de-duplicate on
//! `risk-seq` (or the key plus the record kind). Retention never deletes a segment
//! holding records at or above the cursor.
//!
//! The link can be TLS (`SSL`, mutual TLS with a client certificate) and SASL
//! (`SASL_SSL` with SCRAM-SHA-512): see [`KafkaSecurity`]. A broker that refuses the
//! link (wrong CA, expired certificate, wrong password) is not an error at start: records
//! wait in the log and [`KafkaStats::failure`] (and [`KafkaForwarder::wait_failure`]) says
//! what failed, at which broker, never with a secret. The cursor file is private (0600).

mod client;

pub use client::{KafkaFailure, KafkaFailureKind};

use super::frame::{self, FrameError, FrameReader, SegmentName};
use super::kafka_security::{KafkaSecurity, PropertyNames};
use super::log::SegmentLog;
use super::pb::{self, audit_record::Body};
use super::AuditError;
use crate::files::{self, FileMode};
use client::Ctx;
use parking_lot::{Condvar, Mutex};
use prost::Message as _;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of a [`KafkaForwarder`] (`[audit.kafka]`). `Debug` redacts secrets and shows
/// the free properties' names only.
#[derive(Clone)]
pub struct KafkaOptions {
    /// `bootstrap.servers` (`brokers`).
    pub brokers: String,
    /// Topic (`topic`); it must exist (topics are not auto-created).
    pub topic: String,
    /// Records sent but not yet reported, at most (`max_in_flight`, default 10000).
    pub max_in_flight: usize,
    /// librdkafka's `message.timeout.ms` (`message_timeout_ms`, default 30 s): how long
    /// it retries one record before reporting it failed (then the forwarder rewinds).
    pub message_timeout: Duration,
    /// TLS and SASL (`security_protocol`, `sasl_*`, `ssl_*`); default `PLAINTEXT`.
    pub security: KafkaSecurity,
    /// Further librdkafka properties (`[audit.kafka.properties]`), each checked by
    /// [`check_kafka_property`](crate::audit::check_kafka_property) at start.
    pub properties: Vec<(String, String)>,
}

impl std::fmt::Debug for KafkaOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaOptions")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("max_in_flight", &self.max_in_flight)
            .field("message_timeout", &self.message_timeout)
            .field("security", &self.security)
            .field("properties", &PropertyNames(&self.properties))
            .finish()
    }
}

impl KafkaOptions {
    /// Defaults for `brokers` and `topic`.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            topic: topic.into(),
            max_in_flight: 10_000,
            message_timeout: Duration::from_secs(30),
            security: KafkaSecurity::default(),
            properties: Vec::new(),
        }
    }
}

/// Counters of a [`KafkaForwarder`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaStats {
    /// Every record up to this sequence number is acknowledged by the broker.
    pub delivered_seq: u64,
    /// Produce calls (resends included).
    pub sent: u64,
    /// Positive delivery reports.
    pub delivered: u64,
    /// Failed delivery reports.
    pub failed: u64,
    /// Rewinds to the cursor after a failure.
    pub rewinds: u64,
    /// The last delivery or client error, rendered (secrets scrubbed).
    pub last_error: Option<String>,
    /// The last delivery or client failure, typed (secrets scrubbed).
    pub failure: Option<KafkaFailure>,
    /// Client errors and failed delivery reports seen.
    pub failures: u64,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// How long the stopping worker waits for reports in flight, milliseconds.
    stop_wait_ms: AtomicU64,
    sent: AtomicU64,
    delivered: AtomicU64,
    failed: AtomicU64,
    rewinds: AtomicU64,
    /// Sequence numbers sent, not yet reported.
    in_flight: Mutex<Flight>,
    changed: Condvar,
    last_error: Mutex<Option<String>>,
    failure: Mutex<Option<KafkaFailure>>,
    failures: AtomicU64,
}

#[derive(Default)]
struct Flight {
    pending: BTreeSet<u64>,
    /// Highest sequence number sent (in this pass).
    sent_to: u64,
    /// Everything up to here is acknowledged.
    cursor: u64,
    /// A failure was reported: rewind once the flight drains.
    failed: bool,
}

impl Flight {
    fn advance(&mut self) {
        self.cursor = match self.pending.first() {
            Some(&p) => self.cursor.max(p - 1),
            None => self.cursor.max(self.sent_to),
        };
    }
}

/// Streams a [`SegmentLog`] to Kafka, at least once (see the module docs).
pub struct KafkaForwarder {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    topic: String,
}

impl std::fmt::Debug for KafkaForwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaForwarder")
            .field("topic", &self.topic)
            .field("stats", &self.stats())
            .finish()
    }
}

fn cursor_path(dir: &std::path::Path, topic: &str) -> PathBuf {
    dir.join(format!("kafka-{topic}.cursor"))
}

/// Writes the cursor (0600, atomically: a crash leaves the old or the new value).
fn save_cursor(path: &std::path::Path, seq: u64) {
    if let Err(e) = files::write_atomic(path, format!("{seq}\n").as_bytes(), FileMode::Private) {
        tracing::warn!(target: "risk::audit::kafka", "cannot save the kafka cursor: {e}");
    }
}

impl KafkaForwarder {
    /// Starts forwarding `log` from its persisted cursor. Errors: a bad option
    /// ([`AuditError::Kafka`] for a refused property or security key, naming it), or a
    /// client that cannot be created; an unreachable or refusing broker is not an error
    /// (records wait in the log and the stats say why).
    pub fn start(log: &Arc<SegmentLog>, opts: KafkaOptions) -> Result<Self, AuditError> {
        if opts.topic.is_empty() || opts.brokers.is_empty() || opts.max_in_flight == 0 {
            return Err(AuditError::Invalid {
                key: "kafka",
                message: "brokers and topic must be set and max_in_flight at least 1".into(),
            });
        }
        let dir = log.dir().to_path_buf();
        files::create_dir(&dir, FileMode::Private).map_err(|e| AuditError::Io {
            path: dir.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let cpath = cursor_path(&dir, &opts.topic);
        let cursor: u64 = std::fs::read_to_string(&cpath)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let shared = Arc::new(Shared::default());
        {
            let mut f = shared.in_flight.lock();
            f.cursor = cursor;
            f.sent_to = cursor;
        }
        let producer = client::producer(&opts, &shared)?;
        log.pin_from(cursor + 1);
        let mut w = Worker {
            shared: Arc::clone(&shared),
            producer,
            log: Arc::clone(log),
            opts: opts.clone(),
            dir,
            cpath,
            tail: Tail::default(),
            skip_to: cursor + 1,
            saved: cursor,
        };
        let thread = std::thread::Builder::new()
            .name("risk-audit-kafka".into())
            .spawn(move || w.run())
            .map_err(AuditError::io(log.dir()))?;
        Ok(Self {
            shared,
            thread: Some(thread),
            topic: opts.topic,
        })
    }

    /// Counters.
    pub fn stats(&self) -> KafkaStats {
        let s = &*self.shared;
        KafkaStats {
            delivered_seq: s.in_flight.lock().cursor,
            sent: s.sent.load(Relaxed),
            delivered: s.delivered.load(Relaxed),
            failed: s.failed.load(Relaxed),
            rewinds: s.rewinds.load(Relaxed),
            last_error: s.last_error.lock().clone(),
            failure: s.failure.lock().clone(),
            failures: s.failures.load(Relaxed),
        }
    }

    /// Waits until librdkafka reports a client error or a failed delivery (or `timeout`
    /// passes) and returns the last failure, if any: how a caller learns that a broker
    /// refuses the link (TLS, authentication) without polling.
    pub fn wait_failure(&self, timeout: Duration) -> Option<KafkaFailure> {
        let until = Instant::now() + timeout;
        let mut f = self.shared.in_flight.lock();
        loop {
            if let Some(x) = self.shared.failure.lock().clone() {
                return Some(x);
            }
            if self.shared.changed.wait_until(&mut f, until).timed_out() {
                return self.shared.failure.lock().clone();
            }
        }
    }

    /// Waits until every record up to `seq` is acknowledged; `Err(Timeout)` after
    /// `timeout` (records stay in the log and keep being sent).
    pub fn wait_delivered(&self, seq: u64, timeout: Duration) -> Result<(), AuditError> {
        let until = Instant::now() + timeout;
        let mut f = self.shared.in_flight.lock();
        while f.cursor < seq {
            if self.shared.changed.wait_until(&mut f, until).timed_out() && f.cursor < seq {
                return Err(AuditError::Timeout {
                    pending: seq - f.cursor,
                });
            }
        }
        Ok(())
    }

    /// Stops: waits up to `timeout` for reports in flight, saves the cursor.
    pub fn stop(mut self, timeout: Duration) {
        self.halt(timeout);
    }

    fn halt(&mut self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.shared.stop_wait_ms.store(ms, Relaxed);
        self.shared.stop.store(true, Relaxed);
        self.shared.changed.notify_all();
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl Drop for KafkaForwarder {
    fn drop(&mut self) {
        self.halt(Duration::from_secs(5));
    }
}

/// A read position in the log: segment and byte offset.
#[derive(Default)]
struct Tail {
    segment: Option<SegmentName>,
    offset: u64,
    next_seq: u64,
}

struct Worker {
    shared: Arc<Shared>,
    producer: BaseProducer<Ctx>,
    log: Arc<SegmentLog>,
    opts: KafkaOptions,
    dir: PathBuf,
    cpath: PathBuf,
    tail: Tail,
    /// Records below this are skipped while scanning to a seek position.
    skip_to: u64,
    saved: u64,
}

impl Worker {
    fn run(&mut self) {
        let mut backoff = Duration::from_millis(100);
        let mut last_save = Instant::now();
        let start = self.shared.in_flight.lock().cursor + 1;
        self.seek(start);
        while !self.shared.stop.load(Relaxed) {
            self.producer.poll(Duration::ZERO);
            let rewind = {
                let mut f = self.shared.in_flight.lock();
                if f.failed && f.pending.is_empty() {
                    f.failed = false;
                    f.sent_to = f.cursor;
                    Some(f.cursor)
                } else {
                    None
                }
            };
            if let Some(c) = rewind {
                self.shared.rewinds.fetch_add(1, Relaxed);
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                self.seek(c + 1);
            }
            let sent = self.pump();
            if sent > 0 {
                backoff = Duration::from_millis(100);
            }
            let cursor = self.shared.in_flight.lock().cursor;
            if cursor != self.saved && last_save.elapsed() >= Duration::from_millis(100) {
                save_cursor(&self.cpath, cursor);
                self.log.pin_from(cursor + 1);
                self.saved = cursor;
                last_save = Instant::now();
            }
            if sent == 0 {
                // Nothing new: let delivery reports arrive (this is the idle wait; it
                // bounds how long a new record waits before it is sent: ~500 wake-ups/s).
                self.producer.poll(Duration::from_millis(2));
            }
        }
        self.producer.poll(Duration::ZERO);
        let wait = Duration::from_millis(self.shared.stop_wait_ms.load(Relaxed));
        let _ = self.producer.flush(wait);
        let cursor = self.shared.in_flight.lock().cursor;
        save_cursor(&self.cpath, cursor);
        self.log.pin_from(u64::MAX);
    }

    /// Positions the tail at the record `seq` (the segment holding it, scanning to it).
    fn seek(&mut self, seq: u64) {
        let segs = frame::list(&self.dir).unwrap_or_default();
        let seg = segs
            .iter()
            .rev()
            .find(|s| s.first_seq <= seq)
            .or(segs.first());
        self.tail = Tail {
            segment: seg.cloned(),
            offset: frame::HEADER,
            next_seq: seg.map_or(seq, |s| s.first_seq),
        };
        self.skip_to = seq;
    }

    /// Sends what the log holds past the tail, up to the in-flight bound; returns how
    /// many were sent.
    fn pump(&mut self) -> usize {
        let written = self.log.stats().written_seq;
        let mut n = 0;
        loop {
            if self.shared.in_flight.lock().failed {
                return n;
            }
            let room = {
                let f = self.shared.in_flight.lock();
                self.opts.max_in_flight.saturating_sub(f.pending.len())
            };
            if room == 0 || self.tail.next_seq > written {
                return n;
            }
            let Some(seg) = self.tail.segment.clone() else {
                self.seek(self.skip_to);
                if self.tail.segment.is_none() {
                    return n;
                }
                continue;
            };
            let Ok(mut f) = File::open(&seg.path) else {
                return n;
            };
            if f.seek(SeekFrom::Start(self.tail.offset)).is_err() {
                return n;
            }
            let mut r = FrameReader::at(BufReader::new(f), self.tail.offset);
            let mut buf = Vec::new();
            let mut progressed = false;
            loop {
                match r.next_into(&mut buf) {
                    Ok(true) => {
                        self.tail.offset = r.offset();
                        let Ok(rec) = pb::AuditRecord::decode(buf.as_slice()) else {
                            *self.shared.last_error.lock() =
                                Some(format!("{}: undecodable record", seg.path.display()));
                            return n;
                        };
                        self.tail.next_seq = rec.seq + 1;
                        progressed = true;
                        if rec.seq < self.skip_to {
                            continue;
                        }
                        if !self.send(&rec, &buf) {
                            // Queue full or closed: re-read this record next time.
                            self.seek(rec.seq);
                            return n;
                        }
                        n += 1;
                        if n >= room {
                            return n;
                        }
                    }
                    Ok(false) | Err(FrameError::Torn { .. }) => break,
                    Err(e) => {
                        *self.shared.last_error.lock() =
                            Some(format!("{}: {e:?}", seg.path.display()));
                        return n;
                    }
                }
            }
            // End of this segment: move to the next one if there is one.
            let segs = frame::list(&self.dir).unwrap_or_default();
            match segs.iter().find(|s| s.first_seq > seg.first_seq) {
                Some(next) if self.tail.next_seq >= next.first_seq => {
                    self.tail.segment = Some(next.clone());
                    self.tail.offset = frame::HEADER;
                }
                _ => {
                    if !progressed {
                        return n;
                    }
                }
            }
        }
    }

    fn send(&mut self, rec: &pb::AuditRecord, bytes: &[u8]) -> bool {
        let (key, kind) = match &rec.body {
            Some(Body::Decision(d)) => (d.txn_id.to_string(), "decision"),
            Some(Body::Verdict(v)) => (v.txn_id.to_string(), "verdict"),
            Some(Body::Schema(s)) => (format!("schema-{:016x}", s.fingerprint), "schema"),
            Some(Body::Alert(a)) => (format!("alert-{}", a.subject), "alert"),
            None => (String::new(), "unknown"),
        };
        let seq = rec.seq.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "risk-seq",
                value: Some(&seq),
            })
            .insert(Header {
                key: "risk-kind",
                value: Some(kind),
            });
        {
            let mut f = self.shared.in_flight.lock();
            f.pending.insert(rec.seq);
            f.sent_to = f.sent_to.max(rec.seq);
        }
        let r = BaseRecord::with_opaque_to(&self.opts.topic, rec.seq as usize)
            .key(&key)
            .payload(bytes)
            .headers(headers);
        match self.producer.send(r) {
            Ok(()) => {
                self.shared.sent.fetch_add(1, Relaxed);
                true
            }
            Err((e, _)) => {
                let mut f = self.shared.in_flight.lock();
                f.pending.remove(&rec.seq);
                f.sent_to = rec.seq - 1;
                *self.shared.last_error.lock() = Some(e.to_string());
                drop(f);
                self.producer.poll(Duration::from_millis(10));
                false
            }
        }
    }
}
