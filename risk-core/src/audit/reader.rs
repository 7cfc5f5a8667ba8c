//! [`AuditReader`]: reads a segment log back, filtered by a [`Query`].
//!
//! Reading needs no writer: a log directory copied off a host reads the same. Records
//! are checked as they are read; a damaged frame is returned as an
//! [`AuditError::Corrupt`] item (never skipped silently) and reading goes on with the
//! next segment. The end of the last segment may be a write in progress: a frame cut
//! short there ends the iteration; anywhere else it is damage.
//!
//! Records are in the order the writer received them: a deep verdict can precede the
//! decision that escalated it (the deep tier may answer before the deciding thread has
//! recorded its decision); the ticket joins the two.
//!
//! Lookups scan: by time range, segments outside the range (by their creation times)
//! are skipped; by transaction, entity or rule every segment in range is read (about
//! 1-2 M records/s here; an index is future work).

use super::chain::ChainReport;
use super::frame::{self, FrameError, FrameReader, SegmentName};
use super::pb::{self, audit_record::Body};
use super::AuditError;
use prost::Message;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

/// Reads the log in a directory.
#[derive(Debug, Clone)]
pub struct AuditReader {
    dir: PathBuf,
    pseudonymiser: Option<crate::pseudo::Pseudonymiser>,
}

/// Which records to return. The default: every decision and verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Only this transaction.
    pub txn: Option<u64>,
    /// Only this entity.
    pub entity: Option<u64>,
    /// Decided at or after (unix ms).
    pub from_ms: Option<i64>,
    /// Decided before (unix ms).
    pub to_ms: Option<i64>,
    /// Only decisions on which this rule fired.
    pub rule: Option<String>,
    /// Only records from this sequence number on.
    pub from_seq: u64,
    /// Include decision records.
    pub decisions: bool,
    /// Include verdict records.
    pub verdicts: bool,
    /// Include schema (layout) records.
    pub schemas: bool,
    /// Include monitor alert records (off by default: decisions and verdicts are what a
    /// lookup usually wants).
    pub alerts: bool,
}

impl Default for Query {
    fn default() -> Self {
        Self {
            txn: None,
            entity: None,
            from_ms: None,
            to_ms: None,
            rule: None,
            from_seq: 0,
            decisions: true,
            verdicts: true,
            schemas: false,
            alerts: false,
        }
    }
}

impl Query {
    /// Only the kinds named: `"decision"`, `"verdict"`, `"schema"`, `"alert"` (the
    /// names the bindings' queries take); the error names a kind it does not know.
    pub fn only_kinds<'a>(
        &mut self,
        kinds: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), String> {
        self.decisions = false;
        self.verdicts = false;
        self.schemas = false;
        self.alerts = false;
        for k in kinds {
            match k {
                "decision" => self.decisions = true,
                "verdict" => self.verdicts = true,
                "schema" => self.schemas = true,
                "alert" => self.alerts = true,
                other => {
                    return Err(format!(
                        "{other:?} is not decision, verdict, schema or alert"
                    ))
                }
            }
        }
        Ok(())
    }

    /// Every record, schema records included (what a forwarder ships).
    pub fn everything() -> Self {
        Self {
            schemas: true,
            alerts: true,
            ..Self::default()
        }
    }

    /// Records of one transaction.
    pub fn txn(id: u64) -> Self {
        Self {
            txn: Some(id),
            ..Self::default()
        }
    }

    /// Records of one entity.
    pub fn entity(key: u64) -> Self {
        Self {
            entity: Some(key),
            ..Self::default()
        }
    }

    /// Decisions on which `rule` fired.
    pub fn rule(name: &str) -> Self {
        Self {
            rule: Some(name.to_owned()),
            verdicts: false,
            ..Self::default()
        }
    }

    /// Records decided in `[from_ms, to_ms)`.
    pub fn between(from_ms: i64, to_ms: i64) -> Self {
        Self {
            from_ms: Some(from_ms),
            to_ms: Some(to_ms),
            ..Self::default()
        }
    }

    fn matches(&self, r: &pb::AuditRecord) -> bool {
        if r.seq < self.from_seq {
            return false;
        }
        let time =
            |t: i64| self.from_ms.is_none_or(|f| t >= f) && self.to_ms.is_none_or(|to| t < to);
        match &r.body {
            Some(Body::Decision(d)) => {
                self.decisions
                    && self.txn.is_none_or(|t| t == d.txn_id)
                    && self.entity.is_none_or(|e| e == d.entity)
                    && time(d.decided_at_ms)
                    && self
                        .rule
                        .as_ref()
                        .is_none_or(|n| d.rules_fired.iter().any(|f| f == n))
            }
            Some(Body::Verdict(v)) => {
                self.verdicts
                    && self.rule.is_none()
                    && self.txn.is_none_or(|t| t == v.txn_id)
                    && self.entity.is_none_or(|e| e == v.entity)
                    && time(v.decided_at_ms)
            }
            Some(Body::Schema(_)) => self.schemas,
            Some(Body::Alert(a)) => {
                self.alerts
                    && self.txn.is_none()
                    && self.entity.is_none()
                    && self.rule.is_none()
                    && time(a.at_ms)
            }
            None => false,
        }
    }
}

/// One record read back.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// The record.
    pub record: pb::AuditRecord,
    /// The layout of its features (decision records), from the segment's schema record.
    pub layout: Option<Arc<pb::SchemaRecord>>,
    /// The record's encoded bytes (what a forwarder ships).
    pub bytes: Vec<u8>,
}

impl AuditEntry {
    /// Its sequence number.
    pub fn seq(&self) -> u64 {
        self.record.seq
    }

    /// The decision, if it is one.
    pub fn decision(&self) -> Option<&pb::DecisionRecord> {
        match &self.record.body {
            Some(Body::Decision(d)) => Some(d),
            _ => None,
        }
    }

    /// The verdict, if it is one.
    pub fn verdict(&self) -> Option<&pb::VerdictRecord> {
        match &self.record.body {
            Some(Body::Verdict(v)) => Some(v),
            _ => None,
        }
    }

    /// A decision's feature by name (`None`: not recorded or not a decision; NaN:
    /// missing).
    pub fn feature(&self, name: &str) -> Option<f32> {
        let d = self.decision()?;
        let l = self.layout.as_ref()?;
        let i = l.fields.iter().position(|f| f.name == name)?;
        d.features.get(i).copied()
    }

    /// The JSON view (enums and features by name).
    pub fn to_json(&self) -> serde_json::Value {
        super::record::to_json(&self.record, self.layout.as_deref())
    }
}

impl AuditReader {
    /// A reader of the log in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            pseudonymiser: None,
        }
    }

    /// The records matching `q`, in log order.
    pub fn query(&self, mut q: Query) -> Result<Entries, AuditError> {
        if let (Some(p), Some(e)) = (&self.pseudonymiser, q.entity) {
            q.entity = Some(p.u64(crate::pseudo::Domain::Entity, e));
        }
        let all = frame::list(&self.dir).map_err(AuditError::io(&self.dir))?;
        // Segment i holds records decided from about its creation until the next one's;
        // a minute of slack covers records queued across a rotation.
        const SLACK_MS: i64 = 60_000;
        let keep: Vec<SegmentName> = all
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                let next = all.get(i + 1);
                let ends_before = next.is_some_and(|nx| {
                    q.from_ms.is_some_and(|f| nx.created_ms + SLACK_MS < f)
                        || nx.first_seq <= q.from_seq
                });
                let starts_after = q.to_ms.is_some_and(|t| s.created_ms > t + SLACK_MS);
                !(ends_before || starts_after)
            })
            .map(|(_, s)| s.clone())
            .collect();
        let last = all.last().map(|s| s.path.clone());
        Ok(Entries {
            segments: keep.into_iter(),
            last,
            cur: None,
            layouts: HashMap::new(),
            buf: Vec::new(),
            q,
        })
    }

    /// Every decision and verdict.
    pub fn all(&self) -> Result<Entries, AuditError> {
        self.query(Query::default())
    }

    /// Reads every segment and checks every frame and the hash chain (with the key given
    /// to [`with_pseudonymiser`](Self::with_pseudonymiser), if any); the number of
    /// records, or the first damage or broken link found.
    pub fn verify(&self) -> Result<u64, AuditError> {
        let mut n = 0;
        for e in self.query(Query::everything())? {
            e?;
            n += 1;
        }
        self.verify_chain()?;
        Ok(n)
    }

    /// Checks the hash chain across every segment: sequence numbers dense and in order,
    /// segments named for their first record, every link recomputed (keyed when this reader
    /// has the `[privacy] key`). `Err(AuditError::Tampered)` names the first broken link.
    pub fn verify_chain(&self) -> Result<ChainReport, AuditError> {
        super::chain::verify(
            &self.dir,
            self.pseudonymiser
                .as_ref()
                .map(|p| p.subkey(super::chain::KEY_PURPOSE)),
        )
    }

    /// This reader with the `[privacy] key` the log was written with: entity queries
    /// ([`Query::entity`]) look up the pseudonym of the key they are given, and the chain
    /// is checked keyed.
    pub fn with_pseudonymiser(mut self, p: crate::pseudo::Pseudonymiser) -> Self {
        self.pseudonymiser = Some(p);
        self
    }
}

/// The iterator of [`AuditReader::query`].
pub struct Entries {
    segments: std::vec::IntoIter<SegmentName>,
    last: Option<PathBuf>,
    cur: Option<(PathBuf, FrameReader<BufReader<File>>)>,
    layouts: HashMap<u64, Arc<pb::SchemaRecord>>,
    buf: Vec<u8>,
    q: Query,
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entries").field("query", &self.q).finish()
    }
}

impl Iterator for Entries {
    type Item = Result<AuditEntry, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.cur.is_none() {
                let s = self.segments.next()?;
                let f = match File::open(&s.path) {
                    Ok(f) => f,
                    // Deleted by retention since the listing: nothing to report.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Some(Err(AuditError::io(&s.path)(e))),
                };
                match FrameReader::open(BufReader::with_capacity(1 << 16, f)) {
                    Ok(Some(r)) => self.cur = Some((s.path, r)),
                    Ok(None) => continue,
                    Err(e) => return Some(Err(damage(&s.path, e))),
                }
            }
            let (path, r) = self.cur.as_mut()?;
            let at = r.offset();
            match r.next_into(&mut self.buf) {
                Ok(true) => {}
                Ok(false) => {
                    self.cur = None;
                    continue;
                }
                Err(FrameError::Torn { .. }) if self.last.as_ref() == Some(path) => {
                    self.cur = None;
                    continue;
                }
                Err(e) => {
                    let p = path.clone();
                    self.cur = None;
                    return Some(Err(damage(&p, e)));
                }
            }
            let record = match pb::AuditRecord::decode(self.buf.as_slice()) {
                Ok(r) => r,
                Err(e) => {
                    let p = path.clone();
                    self.cur = None;
                    return Some(Err(AuditError::Corrupt {
                        path: p,
                        offset: at,
                        what: format!("record does not decode: {e}"),
                    }));
                }
            };
            if let Some(Body::Schema(s)) = &record.body {
                self.layouts.insert(s.fingerprint, Arc::new(s.clone()));
            }
            if !self.q.matches(&record) {
                continue;
            }
            let layout = match &record.body {
                Some(Body::Decision(d)) => d
                    .versions
                    .as_ref()
                    .and_then(|v| self.layouts.get(&v.schema).cloned()),
                _ => None,
            };
            return Some(Ok(AuditEntry {
                record,
                layout,
                bytes: self.buf.clone(),
            }));
        }
    }
}

fn damage(path: &std::path::Path, e: FrameError) -> AuditError {
    match e {
        FrameError::Torn { offset } => AuditError::Corrupt {
            path: path.to_path_buf(),
            offset,
            what: "record cut short inside a closed segment".into(),
        },
        FrameError::Corrupt { offset, what } => AuditError::Corrupt {
            path: path.to_path_buf(),
            offset,
            what,
        },
        FrameError::Io(what) => AuditError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            what,
        },
    }
}
