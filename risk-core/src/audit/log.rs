//! [`SegmentLog`]: the embedded audit sink, an append-only segmented log on local disk.
//!
//! The deciding thread only copies the decision and the selected feature values into a
//! bounded queue ([`OnFull`] says what a full queue does). One writer thread takes up to
//! `max_batch` records at a time, assigns each the next sequence number, encodes them
//! (Protobuf, CRC-32C per frame, format in `frame.rs`) and writes the batch with one
//! `write` call: group commit. Durability ([`Durability`]) decides when it `fdatasync`s:
//!
//! | mode | a record is durable | lost by a crash of the process | lost by power loss / OS crash |
//! |---|---|---|---|
//! | `Batch` (default) | after its batch's fsync | records still queued or in the batch being written | the same |
//! | `Interval(t)` | at the next fsync, at most `t` after it was written | queued / being written | also up to `t` of written records |
//! | `None` | when the OS writes it back | queued / being written | whatever the OS had not written back |
//!
//! A record handed to the OS survives a crash of the process in every mode (the page
//! cache belongs to the kernel). [`SegmentLog::flush`] waits until every record accepted
//! before it is durable, in any mode; [`LogStats::durable_seq`] is the acknowledgement.
//!
//! A write error (disk full, I/O error) truncates the segment back to its last good
//! frame and retries the same batch with backoff: nothing accepted is dropped by the
//! writer, the queue fills, and offers shed with a count until the disk recovers.
//! Segments rotate by size and age; retention deletes whole closed segments by age and
//! by total bytes. Opening a log recovers its last segment: a torn tail is truncated and
//! reported ([`Recovery`]); a damaged frame that is not a torn tail stops the open with
//! [`AuditError::Corrupt`] unless [`LogOptions::truncate_corrupt_tail`] allows cutting it.

use super::frame;
use super::options::{FeatureSelection, LogOptions, LogStats, OnFull, Recovery};
use super::record::{DecisionItem, Values};
use super::writer::{recover, select_slots, Counters, Msg, Writer};
use super::{AuditError, AuditEvent, AuditSink, Offer};
use crate::clock::{Clock, SystemClock};
use crate::schema::FeatureSchema;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The local segment log (see the module docs).
pub struct SegmentLog {
    dir: PathBuf,
    tx: Sender<Msg>,
    closed: Arc<AtomicBool>,
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pin: Arc<AtomicU64>,
    on_full: OnFull,
    features: FeatureSelection,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
    recovery: Recovery,
    /// The `[privacy] key`'s pseudonymiser, for [`reader`](Self::reader).
    pseudonymiser: Option<crate::pseudo::Pseudonymiser>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Selected slots per schema fingerprint (computed once per schema).
    slots: Mutex<Option<(u64, Arc<[u32]>)>>,
    /// Fingerprint of the last schema sent to the writer (0: none yet).
    last_schema: AtomicU64,
    /// Serialises schema announcements.
    announcing: Mutex<()>,
}

impl std::fmt::Debug for SegmentLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentLog")
            .field("dir", &self.dir)
            .field("stats", &self.stats())
            .finish()
    }
}

impl SegmentLog {
    /// Opens (or creates) the log in `opts.dir` on the system clock, recovering its
    /// last segment, and starts the writer.
    pub fn open(opts: LogOptions) -> Result<Self, AuditError> {
        Self::open_with_clock(opts, Arc::new(SystemClock::new()))
    }

    /// [`open`](Self::open) with the clock that names segments and judges their age.
    pub fn open_with_clock(opts: LogOptions, clock: Arc<dyn Clock>) -> Result<Self, AuditError> {
        opts.validate()?;
        crate::files::create_dir(&opts.dir, opts.file_mode)?;
        let segments = frame::list(&opts.dir).map_err(AuditError::io(&opts.dir))?;
        let recovery = recover(&segments, opts.truncate_corrupt_tail)?;
        let chain = super::chain::Chain::new(
            opts.pseudonymiser
                .as_ref()
                .map(|p| p.subkey(super::chain::KEY_PURPOSE)),
            super::chain::last_link(&segments)?,
        );
        let (tx, rx) = bounded(opts.queue_capacity);
        let counters = Arc::new(Counters::default());
        counters.written.store(recovery.last_seq, Relaxed);
        counters.durable.store(recovery.last_seq, Relaxed);
        let last_error = Arc::new(Mutex::new(None));
        let mut w = Writer::new(
            opts.clone(),
            clock,
            rx,
            Arc::clone(&counters),
            Arc::clone(&last_error),
            segments,
            recovery.last_seq,
        )
        .with_chain(chain);
        w.start_segment()?;
        let (closed, pin) = (Arc::clone(&w.closed), Arc::clone(&w.pin));
        let writer = std::thread::Builder::new()
            .name("risk-audit".into())
            .spawn(move || w.run())
            .map_err(AuditError::io(&opts.dir))?;
        Ok(Self {
            dir: opts.dir,
            tx,
            closed,
            pin,
            on_full: opts.on_full,
            features: opts.features,
            counters,
            last_error,
            recovery,
            pseudonymiser: opts.pseudonymiser,
            writer: Mutex::new(Some(writer)),
            slots: Mutex::new(None),
            last_schema: AtomicU64::new(0),
            announcing: Mutex::new(()),
        })
    }

    /// The log's directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// A reader over the log as it is on disk now (and as it grows), with the log's
    /// pseudonymiser (entity lookups and the keyed chain).
    pub fn reader(&self) -> super::AuditReader {
        let r = super::AuditReader::new(self.dir.clone());
        match &self.pseudonymiser {
            Some(p) => r.with_pseudonymiser(p.clone()),
            None => r,
        }
    }

    /// Whether entity keys in this log's records are pseudonymised (`[privacy] key` set).
    pub fn pseudonymised(&self) -> bool {
        self.pseudonymiser.is_some()
    }

    /// Counters.
    pub fn stats(&self) -> LogStats {
        let c = &*self.counters;
        LogStats {
            accepted: c.accepted.load(Relaxed),
            shed_full: c.shed_full.load(Relaxed),
            shed_closed: c.shed_closed.load(Relaxed),
            written_seq: c.written.load(Relaxed),
            durable_seq: c.durable.load(Relaxed),
            batches: c.batches.load(Relaxed),
            io_errors: c.io_errors.load(Relaxed),
            last_error: self.last_error.lock().clone(),
            segments_deleted: c.deleted.load(Relaxed),
            recovery: self.recovery.clone(),
        }
    }

    /// Waits until every record accepted before this call is durable (fsynced, whatever
    /// the [`Durability`](super::Durability)) and returns the durable sequence number. Blocks: not for the
    /// decide path.
    pub fn flush(&self, timeout: Duration) -> Result<u64, AuditError> {
        if self.closed.load(Relaxed) {
            return Err(AuditError::Closed);
        }
        self.control(Msg::Flush, timeout)
    }

    fn control(
        &self,
        msg: fn(Sender<Result<u64, AuditError>>) -> Msg,
        timeout: Duration,
    ) -> Result<u64, AuditError> {
        let (tx, rx) = bounded(1);
        self.tx.send_timeout(msg(tx), timeout).map_err(|e| {
            if e.is_disconnected() {
                AuditError::Closed
            } else {
                AuditError::Timeout {
                    pending: self.pending(),
                }
            }
        })?;
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(AuditError::Timeout {
                pending: self.pending(),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(AuditError::Closed),
        }
    }

    fn pending(&self) -> u64 {
        let c = &*self.counters;
        (c.accepted.load(Relaxed) + self.recovery.last_seq).saturating_sub(c.durable.load(Relaxed))
    }

    /// Stops accepting, writes and fsyncs what was accepted, and stops the writer
    /// (waiting at most `timeout` for it). Idempotent.
    pub fn close(&self, timeout: Duration) -> Result<u64, AuditError> {
        if self.closed.swap(true, Relaxed) {
            return Ok(self.counters.durable.load(Relaxed));
        }
        let r = self.control(Msg::Close, timeout.max(Duration::from_millis(1)));
        if let Some(h) = self.writer.lock().take() {
            // Joined only when the writer answered: a writer stuck on a failing disk is
            // left to finish on its own rather than hang the caller.
            if r.is_ok() {
                let _ = h.join();
            }
        }
        r
    }

    /// Refuses a feature selection that names a field `schema` lacks (the engine
    /// builder calls this).
    pub fn check_schema(&self, schema: &Arc<FeatureSchema>) -> Result<(), AuditError> {
        if let FeatureSelection::Named(names) = &self.features {
            if let Some(n) = names.iter().find(|n| schema.slot(n).is_none()) {
                return Err(AuditError::Invalid {
                    key: "features",
                    message: format!("{n:?} is not a field of the schema"),
                });
            }
        }
        let _g = self.announcing.lock();
        if self.last_schema.load(Relaxed) != schema.fingerprint() {
            self.tx
                .send_timeout(Msg::Schema(Arc::clone(schema)), Duration::from_secs(10))
                .map_err(|_| AuditError::Closed)?;
            self.last_schema.store(schema.fingerprint(), Relaxed);
        }
        Ok(())
    }

    /// Retention keeps every record from `seq` on (a forwarder's first undelivered
    /// record); `u64::MAX` releases the pin.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn pin_from(&self, seq: u64) {
        self.pin.store(seq, Relaxed);
    }

    fn selected(&self, schema: &Arc<FeatureSchema>) -> Arc<[u32]> {
        let fp = schema.fingerprint();
        let mut g = self.slots.lock();
        if let Some((f, s)) = &*g {
            if *f == fp {
                return Arc::clone(s);
            }
        }
        let s: Arc<[u32]> = select_slots(&self.features, schema).into();
        *g = Some((fp, Arc::clone(&s)));
        s
    }

    /// Sends `schema` to the writer ahead of its first decision. The engine builder does
    /// it once (through [`check_schema`](Self::check_schema)); on the decide path (a
    /// transaction of another schema) it never waits: if the queue is full the decision
    /// is recorded without its layout this once (its features read back unnamed).
    #[cold]
    fn announce(&self, schema: &Arc<FeatureSchema>) {
        let _g = self.announcing.lock();
        let fp = schema.fingerprint();
        if self.last_schema.load(Relaxed) != fp
            && self.tx.try_send(Msg::Schema(Arc::clone(schema))).is_ok()
        {
            self.last_schema.store(fp, Relaxed);
        }
    }

    fn send(&self, m: Msg) -> Offer {
        if self.closed.load(Relaxed) {
            self.counters.shed_closed.fetch_add(1, Relaxed);
            return Offer::Shed;
        }
        let r = match self.on_full {
            OnFull::Drop => self
                .tx
                .try_send(m)
                .map_err(|e| matches!(e, TrySendError::Full(_))),
            OnFull::Backpressure { max_wait } => self
                .tx
                .send_timeout(m, max_wait)
                .map_err(|e| e.is_timeout()),
        };
        match r {
            Ok(()) => {
                self.counters.accepted.fetch_add(1, Relaxed);
                Offer::Accepted
            }
            Err(true) => {
                self.counters.shed_full.fetch_add(1, Relaxed);
                Offer::Shed
            }
            Err(false) => {
                self.counters.shed_closed.fetch_add(1, Relaxed);
                Offer::Shed
            }
        }
    }
}

impl AuditSink for SegmentLog {
    fn offer(&self, event: &AuditEvent<'_>) -> Offer {
        match *event {
            AuditEvent::Decision {
                decision,
                txn,
                policy,
            } => {
                let schema = txn.features.schema();
                let fp = schema.fingerprint();
                if self.last_schema.load(Relaxed) != fp {
                    self.announce(schema);
                }
                let values = txn.features.values();
                let features = match &self.features {
                    FeatureSelection::All => {
                        Values::from_iter(values.len(), values.iter().copied())
                    }
                    FeatureSelection::None => Values::Inline(0, [0.0; Values::INLINE]),
                    FeatureSelection::Named(_) => {
                        let sel = self.selected(schema);
                        Values::from_iter(sel.len(), sel.iter().map(|&i| values[i as usize]))
                    }
                };
                self.send(Msg::Decision(DecisionItem {
                    d: *decision,
                    event_time_ms: txn.timestamp_ms,
                    amount: txn.amount,
                    currency: txn.currency,
                    approve_below: policy.approve_below,
                    decline_at: policy.decline_at,
                    schema_fp: fp,
                    features,
                }))
            }
            AuditEvent::Verdict(v) => self.send(Msg::Verdict(*v)),
            AuditEvent::Alert(a) => self.send(Msg::Alert(Box::new((*a).clone()))),
        }
    }

    fn close(&self, timeout: Duration) {
        let _ = SegmentLog::close(self, timeout);
    }
}

impl Drop for SegmentLog {
    fn drop(&mut self) {
        let _ = self.close(Duration::from_secs(5));
    }
}
