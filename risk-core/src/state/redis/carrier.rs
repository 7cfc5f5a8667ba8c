//! A decision's script call in parts ([`Carrier`]) and the sequence rows a connection
//! holds for the next one ([`Row`]): [`carry`] puts them together, the rows' keys and
//! blobs ahead of the decision's, as `state_main.lua` reads a `"u<c>"` call.

use redis::Cmd;

/// A decision's `"u"` call in parts, so the I/O thread can add the rows it carries.
pub(super) struct Carrier {
    /// The script's call: `FCALL <name>`, `EVALSHA <sha>` or `EVAL <text>`.
    pub head: Cmd,
    /// The decision's keys.
    pub keys: Vec<Vec<u8>>,
    /// The blob common to every key (`ARGV[2]`).
    pub common: Vec<u8>,
    /// One blob per key.
    pub blobs: Vec<Vec<u8>>,
}

/// A sequence row waiting for the next call (its key's `"q"` blob).
pub(super) struct Row {
    pub key: Vec<u8>,
    pub blob: Vec<u8>,
    /// The same row as a `"q"` call of its own (when no call carries it).
    pub alone: Vec<u8>,
}

/// `c` with `rows` carried: their keys first (`"u<rows>"` tells the script how many),
/// then the decision's.
pub(super) fn carry(c: &Carrier, rows: &[Row]) -> Cmd {
    let mut cmd = c.head.clone();
    cmd.arg(rows.len() + c.keys.len());
    for r in rows {
        cmd.arg(&r.key[..]);
    }
    for k in &c.keys {
        cmd.arg(&k[..]);
    }
    if rows.is_empty() {
        cmd.arg("u");
    } else {
        cmd.arg(format!("u{}", rows.len()));
    }
    cmd.arg(&c.common[..]);
    for r in rows {
        cmd.arg(&r.blob[..]);
    }
    for b in &c.blobs {
        cmd.arg(&b[..]);
    }
    cmd
}
