//! The audit trail's hash chain: every record carries a link to the one before it, across
//! segments, so an edited byte, a dropped or reordered record, or swapped segments are found
//! by [`verify`](super::AuditReader::verify_chain) and named by their first broken link.
//!
//! A record's link (`AuditRecord.chain`, field 15, 16 bytes) is the first 16 bytes of
//!
//! ```text
//! BLAKE3-keyed(chain key, previous link ‖ the record encoded without its link)   with [privacy] key
//! BLAKE3(previous link ‖ the record encoded without its link)                     without one
//! ```
//!
//! The record with `seq` 1 links from 16 zero bytes. The chain key is derived from the
//! `[privacy] key` secret (never stored). Keyed, a forger who can write the files but does
//! not hold the key cannot rewrite a record and its successors consistently; unkeyed, the
//! chain still finds damage and edits made without recomputing every later link. The
//! oldest record still on disk (older segments deleted by retention) is the chain's anchor:
//! its own link is taken as given. Records cut from the end of the newest segment leave no
//! broken link; the Kafka stream (which carries the links too) and `LogStats` are the
//! witnesses of the tail.
//!
//! The link is written as the last field of the encoded record (tag `0x7a`, length 16), so
//! the bytes it covers are exactly the bytes before it.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use prost::Message;

use super::frame::{self, FrameError, FrameReader, SegmentName};
use super::{pb, AuditError};

/// Bytes of a link.
pub(crate) const LINK: usize = 16;
/// The encoded field's prefix: field 15, wire type 2 (bytes), length 16.
const FIELD: [u8; 2] = [0x7a, LINK as u8];
/// What the MAC key is derived for (from the `[privacy] key`).
pub(crate) const KEY_PURPOSE: &str = "risk 2026-12 audit chain key";

/// The writer's side: the last link, and the key.
#[derive(Clone)]
pub(crate) struct Chain {
    key: Option<[u8; 32]>,
    last: [u8; LINK],
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("keyed", &self.key.is_some())
            .finish()
    }
}

fn link(key: Option<&[u8; 32]>, prev: &[u8; LINK], body: &[u8]) -> [u8; LINK] {
    let mut h = match key {
        Some(k) => blake3::Hasher::new_keyed(k),
        None => blake3::Hasher::new(),
    };
    h.update(prev);
    h.update(body);
    let out = h.finalize();
    let mut l = [0u8; LINK];
    l.copy_from_slice(&out.as_bytes()[..LINK]);
    l
}

/// The record's bytes before its link and the link, when it ends with one.
pub(crate) fn split(payload: &[u8]) -> Option<(&[u8], [u8; LINK])> {
    let n = payload.len().checked_sub(LINK + FIELD.len())?;
    if payload[n..n + 2] != FIELD {
        return None;
    }
    let mut l = [0u8; LINK];
    l.copy_from_slice(&payload[n + 2..]);
    Some((&payload[..n], l))
}

impl Chain {
    /// A chain continuing from `last` (zeros for a new log).
    pub(crate) fn new(key: Option<[u8; 32]>, last: [u8; LINK]) -> Self {
        Self { key, last }
    }

    /// Appends the link of the record encoded in `payload` (which has no link yet).
    pub(crate) fn append(&mut self, payload: &mut Vec<u8>) {
        let l = link(self.key.as_ref(), &self.last, payload);
        payload.extend_from_slice(&FIELD);
        payload.extend_from_slice(&l);
        self.last = l;
    }
}

/// The link of the newest record on disk (zeros when there is none, or when the newest
/// record was written before links existed), read after recovery.
pub(crate) fn last_link(segments: &[SegmentName]) -> Result<[u8; LINK], AuditError> {
    for s in segments.iter().rev() {
        let f = File::open(&s.path).map_err(AuditError::io(&s.path))?;
        let Some(mut r) = FrameReader::open(BufReader::new(f)).map_err(|e| damage(&s.path, e))?
        else {
            continue;
        };
        let mut buf = Vec::new();
        let mut last = None;
        loop {
            match r.next_into(&mut buf) {
                Ok(true) => last = Some(split(&buf).map(|(_, l)| l).unwrap_or([0; LINK])),
                Ok(false) | Err(FrameError::Torn { .. }) => break,
                Err(e) => return Err(damage(&s.path, e)),
            }
        }
        if let Some(l) = last {
            return Ok(l);
        }
    }
    Ok([0; LINK])
}

fn damage(path: &Path, e: FrameError) -> AuditError {
    let (offset, what) = match e {
        FrameError::Torn { offset } => (offset, "record cut short".to_string()),
        FrameError::Corrupt { offset, what } => (offset, what),
        FrameError::Io(what) => (0, what),
    };
    AuditError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    }
}

/// What [`AuditReader::verify_chain`](super::AuditReader::verify_chain) found in an intact log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainReport {
    /// Records read.
    pub records: u64,
    /// Segments read.
    pub segments: usize,
    /// The first record's sequence number (1 unless retention deleted older segments).
    pub first_seq: u64,
    /// The last record's sequence number.
    pub last_seq: u64,
    /// Whether the first linked record is `seq` 1, checked from zeros; otherwise the oldest
    /// record on disk is the anchor, taken as given.
    pub anchored_at_start: bool,
    /// Whether the links were checked with the chain key (`[privacy] key`).
    pub keyed: bool,
    /// Records written before links existed (older releases), all before the first link.
    pub unlinked: u64,
}

/// Walks every segment of `dir` in order and checks sequence numbers and links.
pub(crate) fn verify(dir: &Path, key: Option<[u8; 32]>) -> Result<ChainReport, AuditError> {
    let segments = frame::list(dir).map_err(AuditError::io(dir))?;
    let mut rep = ChainReport {
        keyed: key.is_some(),
        ..ChainReport::default()
    };
    let mut prev: Option<[u8; LINK]> = None;
    let mut next_seq: Option<u64> = None;
    let n = segments.len();
    let mut buf = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        let broken = |offset: u64, seq: u64, what: String| AuditError::Tampered {
            path: s.path.clone(),
            offset,
            seq,
            what,
        };
        let f = File::open(&s.path).map_err(AuditError::io(&s.path))?;
        rep.segments += 1;
        let Some(mut r) = FrameReader::open(BufReader::new(f)).map_err(|e| damage(&s.path, e))?
        else {
            continue;
        };
        let mut first_in_segment = true;
        loop {
            let at = r.offset();
            match r.next_into(&mut buf) {
                Ok(true) => {}
                Ok(false) => break,
                Err(FrameError::Torn { .. }) if i + 1 == n => break,
                Err(e) => return Err(damage(&s.path, e)),
            }
            let rec = pb::AuditRecord::decode(buf.as_slice()).map_err(|e| AuditError::Corrupt {
                path: s.path.clone(),
                offset: at,
                what: format!("record does not decode: {e}"),
            })?;
            if first_in_segment && rec.seq != s.first_seq {
                return Err(broken(
                    at,
                    rec.seq,
                    format!(
                        "segment named for record {} starts with record {} (segments renamed or swapped)",
                        s.first_seq, rec.seq
                    ),
                ));
            }
            first_in_segment = false;
            if let Some(due) = next_seq {
                if rec.seq != due {
                    return Err(broken(
                        at,
                        rec.seq,
                        format!(
                            "record {} where {due} was due (records dropped or reordered)",
                            rec.seq
                        ),
                    ));
                }
            } else {
                rep.first_seq = rec.seq;
            }
            next_seq = Some(rec.seq + 1);
            rep.last_seq = rec.seq;
            rep.records += 1;
            let Some((body, got)) = split(&buf) else {
                if prev.is_some() {
                    return Err(broken(
                        at,
                        rec.seq,
                        "record has no link after linked records".into(),
                    ));
                }
                rep.unlinked += 1;
                continue;
            };
            let from = match prev {
                Some(p) => Some(p),
                None if rec.seq == 1 => Some([0; LINK]),
                None => None,
            };
            if let Some(p) = from {
                if link(key.as_ref(), &p, body) != got {
                    return Err(broken(
                        at,
                        rec.seq,
                        "link does not match (the record or one before it was changed, or the chain key differs)"
                            .into(),
                    ));
                }
                if prev.is_none() {
                    rep.anchored_at_start = true;
                }
            }
            prev = Some(got);
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_is_the_last_field_and_decodes_as_chain() {
        let r = pb::AuditRecord {
            seq: 7,
            ..Default::default()
        };
        let mut bytes = r.encode_to_vec();
        let plain = bytes.clone();
        let mut c = Chain::new(Some([3; 32]), [0; LINK]);
        c.append(&mut bytes);
        let back = pb::AuditRecord::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.seq, 7);
        assert_eq!(back.chain.len(), LINK);
        let (body, l) = split(&bytes).unwrap();
        assert_eq!(body, plain.as_slice());
        assert_eq!(l.as_slice(), back.chain.as_slice());
        // prost writes fields in number order, chain (15) last: the same bytes.
        assert_eq!(back.encode_to_vec(), bytes);
        assert!(split(&plain).is_none());
    }
}
