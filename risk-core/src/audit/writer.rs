//! The segment log's writer thread (group commit, durability, rotation, retention, write
//! errors) and the recovery of the last segment at open. See `log.rs` for the contract.

use super::chain::Chain;
use super::frame::{self, FrameError, FrameReader, SegmentName};
use super::options::{Durability, FeatureSelection, LogOptions, Recovery};
use super::pb::{self, audit_record::Body};
use super::record::{self, DecisionItem};
use super::AuditError;
use crate::clock::{Clock, Nanos};
use crate::decision::DeepVerdict;
use crate::schema::FeatureSchema;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use prost::Message;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

// Unboxed on purpose: a boxed decision would be one allocation on the deciding thread and
// one free on the writer's per record; the queue's slots are preallocated.
#[allow(clippy::large_enum_variant)]
pub(super) enum Msg {
    Decision(DecisionItem),
    /// The schema of the decisions that follow (sent once per new fingerprint).
    Schema(Arc<FeatureSchema>),
    Verdict(DeepVerdict),
    Alert(Box<crate::monitor::Alert>),
    /// Make everything before this durable, then answer.
    Flush(Sender<Result<u64, AuditError>>),
    /// Flush, answer, and stop the writer.
    Close(Sender<Result<u64, AuditError>>),
}

#[derive(Default)]
pub(super) struct Counters {
    pub accepted: AtomicU64,
    pub shed_full: AtomicU64,
    pub shed_closed: AtomicU64,
    pub written: AtomicU64,
    pub durable: AtomicU64,
    pub batches: AtomicU64,
    pub io_errors: AtomicU64,
    pub deleted: AtomicU64,
}

/// The slots `sel` records of `schema`, in schema order of the names given.
pub(crate) fn select_slots(sel: &FeatureSelection, schema: &FeatureSchema) -> Vec<u32> {
    match sel {
        FeatureSelection::All => (0..schema.len() as u32).collect(),
        FeatureSelection::None => Vec::new(),
        FeatureSelection::Named(names) => names
            .iter()
            .filter_map(|n| schema.slot(n).map(|s| s.0))
            .collect(),
    }
}

struct Active {
    file: File,
    name: SegmentName,
    len: u64,
    opened: Nanos,
}

type Reply = Sender<Result<u64, AuditError>>;

pub(crate) struct Writer {
    opts: LogOptions,
    clock: Arc<dyn Clock>,
    rx: Receiver<Msg>,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
    /// Set by `close`: a writer retrying a failing disk gives up then.
    pub(crate) closed: Arc<AtomicBool>,
    /// Retention keeps every record at or above this sequence number (a forwarder's
    /// undelivered records); `u64::MAX`: no pin.
    pub(crate) pin: Arc<AtomicU64>,
    segments: Vec<SegmentName>,
    active: Option<Active>,
    next_seq: u64,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    schemas_in_segment: Vec<u64>,
    /// Schemas announced by the log (the decisions carry only fingerprints).
    schemas: Vec<Arc<FeatureSchema>>,
    last_sync: Nanos,
    unsynced: bool,
    /// The hash chain's last link and key (records are linked as they are encoded).
    chain: Chain,
}

impl Writer {
    pub(crate) fn new(
        opts: LogOptions,
        clock: Arc<dyn Clock>,
        rx: Receiver<Msg>,
        counters: Arc<Counters>,
        last_error: Arc<Mutex<Option<String>>>,
        segments: Vec<SegmentName>,
        last_seq: u64,
    ) -> Self {
        let now = clock.now();
        Self {
            opts,
            clock,
            rx,
            counters,
            last_error,
            closed: Arc::new(AtomicBool::new(false)),
            pin: Arc::new(AtomicU64::new(u64::MAX)),
            segments,
            active: None,
            next_seq: last_seq + 1,
            buf: Vec::with_capacity(1 << 20),
            scratch: Vec::with_capacity(1024),
            schemas_in_segment: Vec::new(),
            schemas: Vec::new(),
            last_sync: now,
            unsynced: false,
            chain: Chain::new(None, [0; super::chain::LINK]),
        }
    }

    /// Continues the hash chain `chain` (its key and the last link on disk).
    pub(crate) fn with_chain(mut self, chain: Chain) -> Self {
        self.chain = chain;
        self
    }

    /// Opens the last segment for appending, or creates the first one.
    pub(crate) fn start_segment(&mut self) -> Result<(), AuditError> {
        if let Some(last) = self.segments.last().cloned() {
            let file = OpenOptions::new()
                .append(true)
                .open(&last.path)
                .map_err(AuditError::io(&last.path))?;
            let len = file.metadata().map_err(AuditError::io(&last.path))?.len();
            if len < frame::HEADER {
                // Recovery removed records from a segment without a whole header.
                return Err(AuditError::Corrupt {
                    path: last.path,
                    offset: 0,
                    what: "segment shorter than its header".into(),
                });
            }
            self.active = Some(Active {
                file,
                name: last,
                len,
                opened: self.clock.now(),
            });
            self.retention();
            return Ok(());
        }
        self.new_segment()
    }

    fn new_segment(&mut self) -> Result<(), AuditError> {
        let name = SegmentName::new(&self.opts.dir, self.next_seq, self.clock.unix_ms());
        let mut file = crate::files::create_new(&name.path, self.opts.file_mode)
            .map_err(AuditError::io(&name.path))?;
        file.write_all(&frame::header())
            .and_then(|()| file.sync_data())
            .map_err(AuditError::io(&name.path))?;
        // The new name must survive a crash too.
        if let Ok(d) = File::open(&self.opts.dir) {
            let _ = d.sync_all();
        }
        self.segments.push(name.clone());
        self.active = Some(Active {
            file,
            name,
            len: frame::HEADER,
            opened: self.clock.now(),
        });
        self.schemas_in_segment.clear();
        Ok(())
    }

    fn rotate_if_due(&mut self) -> Result<(), AuditError> {
        let Some(a) = &self.active else {
            return self.new_segment();
        };
        let age = Duration::from_nanos(self.clock.now().saturating_sub(a.opened));
        let has_records = a.len > frame::HEADER;
        if has_records && (a.len >= self.opts.segment_bytes || age >= self.opts.segment_age) {
            self.sync()?;
            self.new_segment()?;
            self.retention();
        }
        Ok(())
    }

    /// Deletes closed segments past the retention age or beyond the byte bound, oldest
    /// first, never the active one nor one holding pinned (undelivered) records.
    fn retention(&mut self) {
        let now = self.clock.unix_ms();
        let pin = self.pin.load(Relaxed);
        let sizes: Vec<u64> = self
            .segments
            .iter()
            .map(|s| std::fs::metadata(&s.path).map_or(0, |m| m.len()))
            .collect();
        let mut total: u64 = sizes.iter().sum();
        let mut drop = 0;
        while drop + 1 < self.segments.len() {
            let next = &self.segments[drop + 1];
            if next.first_seq > pin {
                break;
            }
            let sealed_ms = next.created_ms;
            let old = self
                .opts
                .retention_age
                .is_some_and(|r| now.saturating_sub(sealed_ms) > r.as_millis() as i64);
            let big = self.opts.retention_bytes.is_some_and(|b| total > b);
            if !(old || big) {
                break;
            }
            if std::fs::remove_file(&self.segments[drop].path).is_err() {
                break;
            }
            total -= sizes[drop];
            self.counters.deleted.fetch_add(1, Relaxed);
            drop += 1;
        }
        self.segments.drain(..drop);
    }

    fn sync(&mut self) -> Result<(), AuditError> {
        if let Some(a) = &self.active {
            if self.unsynced || self.counters.durable.load(Relaxed) < self.next_seq - 1 {
                a.file.sync_data().map_err(AuditError::io(&a.name.path))?;
            }
        }
        self.unsynced = false;
        self.last_sync = self.clock.now();
        self.counters.durable.store(self.next_seq - 1, Relaxed);
        Ok(())
    }

    fn encode(&mut self, mut body: Body) {
        if let Some(p) = &self.opts.pseudonymiser {
            record::pseudonymise(&mut body, p);
        }
        let r = pb::AuditRecord {
            seq: self.next_seq,
            body: Some(body),
            chain: Vec::new(),
        };
        self.scratch.clear();
        // Encoding into a Vec cannot fail (it grows).
        let _ = r.encode(&mut self.scratch);
        self.chain.append(&mut self.scratch);
        frame::put(&mut self.buf, &self.scratch);
        self.next_seq += 1;
    }

    fn encode_msg(&mut self, m: Msg, replies: &mut Vec<(Reply, bool)>) {
        match m {
            Msg::Schema(s) => {
                if !self
                    .schemas
                    .iter()
                    .any(|k| k.fingerprint() == s.fingerprint())
                {
                    self.schemas.push(s);
                }
            }
            Msg::Decision(it) => {
                let fp = it.schema_fp;
                if !self.schemas_in_segment.contains(&fp) {
                    if let Some(s) = self.schemas.iter().find(|s| s.fingerprint() == fp) {
                        let slots = select_slots(&self.opts.features, s);
                        self.encode(Body::Schema(record::schema(s, &slots)));
                        self.schemas_in_segment.push(fp);
                    }
                }
                self.encode(Body::Decision(record::decision(&it)));
            }
            Msg::Verdict(v) => self.encode(Body::Verdict(record::verdict(&v))),
            Msg::Alert(a) => self.encode(Body::Alert(record::alert(&a))),
            Msg::Flush(r) => replies.push((r, false)),
            Msg::Close(r) => replies.push((r, true)),
        }
    }

    /// Writes `buf` to the active segment; on error truncates back and retries with
    /// backoff until it succeeds or the log is closed (then `false`).
    fn write_batch(&mut self) -> bool {
        let mut backoff = Duration::from_millis(10);
        loop {
            let r = match &mut self.active {
                None => Err(AuditError::Closed),
                Some(a) => match a.file.write_all(&self.buf) {
                    Ok(()) => {
                        a.len += self.buf.len() as u64;
                        Ok(())
                    }
                    Err(e) => {
                        // Cut any partial frame so the segment ends on a boundary.
                        let _ = a.file.set_len(a.len);
                        let _ = a.file.seek(SeekFrom::Start(a.len));
                        Err(AuditError::Io {
                            path: a.name.path.clone(),
                            source: e,
                        })
                    }
                },
            };
            match r {
                Ok(()) => return true,
                Err(e) => {
                    self.counters.io_errors.fetch_add(1, Relaxed);
                    *self.last_error.lock() = Some(e.to_string());
                    if self.closed.load(Relaxed) {
                        return false;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    if self.active.is_none() {
                        let _ = self.new_segment();
                    }
                }
            }
        }
    }

    fn after_write(&mut self) -> Result<(), AuditError> {
        match self.opts.durability {
            Durability::Batch => self.sync(),
            Durability::Interval(t) => {
                self.unsynced = true;
                if self.clock.now().saturating_sub(self.last_sync) >= t.as_nanos() as u64 {
                    self.sync()?;
                }
                Ok(())
            }
            Durability::None => {
                self.unsynced = true;
                Ok(())
            }
        }
    }

    pub(crate) fn run(mut self) {
        let mut batch: Vec<Msg> = Vec::with_capacity(self.opts.max_batch);
        let mut replies: Vec<(Reply, bool)> = Vec::new();
        loop {
            let wait = match self.opts.durability {
                Durability::Interval(t) if self.unsynced => t.min(Duration::from_secs(1)),
                _ => Duration::from_secs(1),
            };
            match self.rx.recv_timeout(wait) {
                Ok(m) => batch.push(m),
                Err(RecvTimeoutError::Timeout) => {
                    if self.unsynced && matches!(self.opts.durability, Durability::Interval(_)) {
                        if let Err(e) = self.sync() {
                            self.io_error(e);
                        }
                    }
                    if let Err(e) = self.rotate_if_due() {
                        self.io_error(e);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.sync();
                    return;
                }
            }
            while batch.len() < self.opts.max_batch {
                match self.rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            if let Err(e) = self.rotate_if_due() {
                self.io_error(e);
            }
            self.buf.clear();
            let first = self.next_seq;
            for m in batch.drain(..) {
                self.encode_msg(m, &mut replies);
            }
            let mut ok = true;
            if !self.buf.is_empty() {
                ok = self.write_batch();
                if ok {
                    self.counters.written.store(self.next_seq - 1, Relaxed);
                    self.counters.batches.fetch_add(1, Relaxed);
                    if let Err(e) = self.after_write() {
                        self.io_error(e);
                    }
                } else {
                    // Closed while the disk kept failing: these records are lost.
                    self.next_seq = first;
                }
            }
            let mut stop = false;
            if !replies.is_empty() {
                let r = if ok {
                    self.sync()
                } else {
                    Err(AuditError::Closed)
                };
                if let Err(e) = &r {
                    self.io_error(e);
                }
                for (tx, close) in replies.drain(..) {
                    let _ = tx.send(match &r {
                        Ok(()) => Ok(self.next_seq - 1),
                        Err(e) => Err(AuditError::Timeout {
                            pending: u64::from(matches!(e, AuditError::Closed)),
                        }),
                    });
                    stop |= close;
                }
            }
            if stop || !ok {
                return;
            }
        }
    }

    fn io_error(&self, e: impl std::borrow::Borrow<AuditError>) {
        let e = e.borrow();
        self.counters.io_errors.fetch_add(1, Relaxed);
        *self.last_error.lock() = Some(e.to_string());
    }
}

/// Checks the last segment and truncates a torn tail (or allowed damage).
pub(crate) fn recover(
    segments: &[SegmentName],
    allow_corrupt: bool,
) -> Result<Recovery, AuditError> {
    let Some(last) = segments.last() else {
        return Ok(Recovery::default());
    };
    let path = &last.path;
    let len = std::fs::metadata(path).map_err(AuditError::io(path))?.len();
    let f = File::open(path).map_err(AuditError::io(path))?;
    let corrupt = |offset, what: String| AuditError::Corrupt {
        path: path.clone(),
        offset,
        what,
    };
    let mut rec = Recovery {
        last_seq: last.first_seq.saturating_sub(1),
        ..Recovery::default()
    };
    let mut r = match FrameReader::open(std::io::BufReader::new(f)) {
        Ok(Some(r)) => r,
        Ok(None) => {
            // Created just before a crash: rewrite the header.
            let mut f = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .map_err(AuditError::io(path))?;
            f.write_all(&frame::header())
                .and_then(|()| f.sync_data())
                .map_err(AuditError::io(path))?;
            rec.segment = Some(path.clone());
            rec.truncated_bytes = len;
            return Ok(rec);
        }
        Err(FrameError::Corrupt { offset, what }) => return Err(corrupt(offset, what)),
        Err(FrameError::Torn { offset }) => return Err(corrupt(offset, "torn header".into())),
        Err(FrameError::Io(e)) => return Err(corrupt(0, e)),
    };
    let mut buf = Vec::new();
    let cut = loop {
        let at = r.offset();
        match r.next_into(&mut buf) {
            Ok(false) => break None,
            Ok(true) => match pb::AuditRecord::decode(buf.as_slice()) {
                Ok(x) if x.seq == rec.last_seq + 1 => rec.last_seq = x.seq,
                Ok(x) => {
                    break Some((
                        at,
                        false,
                        format!("sequence {} where {} was due", x.seq, rec.last_seq + 1),
                    ))
                }
                Err(e) => break Some((at, false, format!("record does not decode: {e}"))),
            },
            Err(FrameError::Torn { offset }) => break Some((offset, true, String::new())),
            Err(FrameError::Corrupt { offset, what }) => break Some((offset, false, what)),
            Err(FrameError::Io(e)) => return Err(corrupt(at, e)),
        }
    };
    if let Some((offset, torn, what)) = cut {
        let zeros = frame::zero_from(path, offset).map_err(AuditError::io(path))?;
        if !(torn || zeros || allow_corrupt) {
            return Err(corrupt(offset, what));
        }
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(AuditError::io(path))?;
        f.set_len(offset)
            .and_then(|()| f.sync_data())
            .map_err(AuditError::io(path))?;
        rec.segment = Some(path.clone());
        rec.truncated_bytes = len - offset;
        rec.corrupt = !(torn || zeros);
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_selection() {
        let s = FeatureSchema::builder()
            .numeric("a")
            .numeric("b")
            .numeric("c")
            .build()
            .unwrap();
        assert_eq!(select_slots(&FeatureSelection::All, &s), vec![0, 1, 2]);
        assert!(select_slots(&FeatureSelection::None, &s).is_empty());
        let named = FeatureSelection::Named(vec!["c".into(), "a".into()]);
        assert_eq!(select_slots(&named, &s), vec![2, 0]);
    }
}
