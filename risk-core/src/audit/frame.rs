//! The on-disk format of the segment log.
//!
//! A log is a directory of segments named `seg-<first seq, 20 digits>-<created unix ms,
//! 16 digits>.log`. A segment starts with a 16-byte header (`RISKAUD1`, format version
//! `u32` LE, 4 reserved bytes) followed by frames:
//!
//! ```text
//! u32 LE  payload length (1 ..= MAX_RECORD)
//! u32 LE  CRC-32C (Castagnoli) of the payload
//! [u8]    payload: one protobuf `risk.audit.v1.AuditRecord`
//! ```
//!
//! A frame cut short by the end of the file is a *torn* frame (a write the process did
//! not finish); a complete frame whose checksum fails, a length out of range, or a
//! payload that does not decode is *corrupt*. Only the last segment may end torn.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Segment header magic.
pub(crate) const MAGIC: &[u8; 8] = b"RISKAUD1";
/// Format version in the header.
pub(crate) const FORMAT: u32 = 1;
/// Header length.
pub(crate) const HEADER: u64 = 16;
/// Frame header length (length + checksum).
pub(crate) const FRAME_HEADER: usize = 8;
/// The largest payload accepted (a length above it is corruption, not an allocation).
pub(crate) const MAX_RECORD: usize = 1 << 20;

/// The header bytes of a new segment.
pub(crate) fn header() -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    h
}

/// Appends one frame for `payload` to `out`.
pub(crate) fn put(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// A segment's identity, from its file name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SegmentName {
    /// Sequence number of its first record.
    pub first_seq: u64,
    /// When it was created, unix ms.
    pub created_ms: i64,
    /// Full path.
    pub path: PathBuf,
}

impl SegmentName {
    pub(crate) fn new(dir: &Path, first_seq: u64, created_ms: i64) -> Self {
        Self {
            first_seq,
            created_ms,
            path: dir.join(format!("seg-{first_seq:020}-{created_ms:016}.log")),
        }
    }

    fn parse(path: PathBuf) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let rest = name.strip_prefix("seg-")?.strip_suffix(".log")?;
        let (a, b) = rest.split_once('-')?;
        if a.len() != 20 || b.len() != 16 {
            return None;
        }
        Some(Self {
            first_seq: a.parse().ok()?,
            created_ms: b.parse().ok()?,
            path,
        })
    }
}

/// The segments of `dir`, oldest first (other files are ignored).
pub(crate) fn list(dir: &Path) -> io::Result<Vec<SegmentName>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        if let Some(s) = SegmentName::parse(e?.path()) {
            v.push(s);
        }
    }
    v.sort();
    Ok(v)
}

/// How reading a frame failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// The file ends inside the frame that starts at `offset`.
    Torn {
        /// Start of the torn frame.
        offset: u64,
    },
    /// The frame at `offset` is damaged.
    Corrupt {
        /// Start of the bad frame.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// The file could not be read.
    Io(String),
}

/// Reads frames from a segment after its header.
pub(crate) struct FrameReader<R> {
    r: R,
    offset: u64,
}

/// Reads `buf.len()` bytes unless the input ends first; returns how many were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> FrameReader<R> {
    /// Checks the header; `Ok(None)` for a file shorter than its header (a segment
    /// created just before a crash).
    pub(crate) fn open(mut r: R) -> Result<Option<Self>, FrameError> {
        let mut h = [0u8; HEADER as usize];
        let n = read_full(&mut r, &mut h).map_err(|e| FrameError::Io(e.to_string()))?;
        if n < h.len() {
            return if h[..n].iter().all(|&b| b == 0) || h[..n] == header()[..n] {
                Ok(None)
            } else {
                Err(FrameError::Corrupt {
                    offset: 0,
                    what: "not a segment header".into(),
                })
            };
        }
        if &h[..8] != MAGIC {
            return Err(FrameError::Corrupt {
                offset: 0,
                what: "not a segment header (bad magic)".into(),
            });
        }
        let v = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if v != FORMAT {
            return Err(FrameError::Corrupt {
                offset: 8,
                what: format!("segment format {v}, this build reads {FORMAT}"),
            });
        }
        Ok(Some(Self { r, offset: HEADER }))
    }

    /// A reader already positioned at `offset` (a frame boundary past the header).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn at(r: R, offset: u64) -> Self {
        Self { r, offset }
    }

    /// Byte offset of the next frame.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// The next frame's payload into `buf`; `Ok(false)` at a clean end of file.
    pub(crate) fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, FrameError> {
        let io = |e: io::Error| FrameError::Io(e.to_string());
        let start = self.offset;
        let mut h = [0u8; FRAME_HEADER];
        let n = read_full(&mut self.r, &mut h).map_err(io)?;
        if n == 0 {
            return Ok(false);
        }
        if n < FRAME_HEADER {
            return Err(FrameError::Torn { offset: start });
        }
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if len == 0 || len > MAX_RECORD {
            return Err(FrameError::Corrupt {
                offset: start,
                what: format!("frame length {len} outside 1..={MAX_RECORD}"),
            });
        }
        buf.clear();
        buf.resize(len, 0);
        let got = read_full(&mut self.r, buf).map_err(io)?;
        if got < len {
            return Err(FrameError::Torn { offset: start });
        }
        let actual = crc32c::crc32c(buf);
        if actual != crc {
            return Err(FrameError::Corrupt {
                offset: start,
                what: format!("checksum {actual:08x}, frame says {crc:08x}"),
            });
        }
        self.offset = start + (FRAME_HEADER + len) as u64;
        Ok(true)
    }
}

/// Whether every byte of `path` from `offset` on is zero (a tail the file system
/// extended but never wrote: torn, not corrupt).
pub(crate) fn zero_from(path: &Path, offset: u64) -> io::Result<bool> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = [0u8; 8192];
    loop {
        let n = read_full(&mut f, &mut buf)?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        if n < buf.len() {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(frames: &[&[u8]]) -> Vec<u8> {
        let mut v = header().to_vec();
        for f in frames {
            put(&mut v, f);
        }
        v
    }

    fn read_all(bytes: &[u8]) -> (Vec<Vec<u8>>, Option<FrameError>) {
        let mut r = FrameReader::open(bytes).unwrap().unwrap();
        let (mut out, mut buf) = (Vec::new(), Vec::new());
        loop {
            match r.next_into(&mut buf) {
                Ok(true) => out.push(buf.clone()),
                Ok(false) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[test]
    fn frames_round_trip() {
        let s = segment(&[b"one", b"two!", b"3"]);
        let (v, e) = read_all(&s);
        assert_eq!(v, vec![b"one".to_vec(), b"two!".to_vec(), b"3".to_vec()]);
        assert_eq!(e, None);
    }

    #[test]
    fn a_cut_frame_is_torn_at_its_start() {
        let s = segment(&[b"one", b"two!"]);
        let second = HEADER + 8 + 3;
        for cut in second as usize + 1..s.len() {
            let (v, e) = read_all(&s[..cut]);
            assert_eq!(v.len(), 1);
            assert_eq!(e, Some(FrameError::Torn { offset: second }), "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_bit_is_corruption() {
        let mut s = segment(&[b"one", b"two!"]);
        let last = s.len() - 1;
        s[last] ^= 0x10;
        let (v, e) = read_all(&s);
        assert_eq!(v.len(), 1);
        assert!(matches!(e, Some(FrameError::Corrupt { offset, .. }) if offset == HEADER + 11));
    }

    #[test]
    fn an_absurd_length_is_corruption_not_an_allocation() {
        let mut s = header().to_vec();
        s.extend_from_slice(&u32::MAX.to_le_bytes());
        s.extend_from_slice(&[0; 12]);
        let (_, e) = read_all(&s);
        assert!(matches!(e, Some(FrameError::Corrupt { .. })));
    }

    #[test]
    fn names_parse_and_sort() {
        let d = Path::new("/x");
        let a = SegmentName::new(d, 1, 5);
        let b = SegmentName::new(d, 20, 3);
        assert_eq!(SegmentName::parse(a.path.clone()), Some(a.clone()));
        assert!(a < b);
        assert_eq!(SegmentName::parse(PathBuf::from("/x/seg-1-2.log")), None);
    }
}
