//! Sequences on Redis. Each sequence of a key is a region of the key's value laid out
//! as the in-process record keeps it ([`SeqAt`], `record_seq.rs`): a 16-byte head (rows
//! held, the ring's first slot, the latest time that left) and `rows` rows of an 8-byte
//! event time and the stored values as f32.
//!
//! A decision reads its keys' regions in its one script call (`"u"` answers the key's
//! clock and each region as stored), then enters its own row and reads the tensor on
//! that copy with the in-process arithmetic ([`Rec::seq_step`]), so both stores give the
//! same tensors bit for bit.
//!
//! Entering the decision's own row: where neither the row's values nor the sequence's
//! filters read a state feature (`SeqPlan::early`: amounts, categorical ids, any schema
//! field, `dt`, `age`), the row travels in the decision's call and the script inserts it
//! at its place in time order, exactly as `seq_push` does, after reading the region:
//! one call per decision, as without sequences. A row that holds the decision's own
//! state features is known only once that call answered. On one server the row goes to
//! the shared connection's I/O thread, which carries it in this host's next decision's
//! call (the script enters it before that call's reads: still one call per decision) or,
//! when no call comes within `rows_linger_ms`, sends it in a `"q"` call of its own
//! ([`super::mux`]); this host's later calls queue behind it, so its next decision on the
//! key sees the row. On a cluster it goes through the background writer. What that
//! costs: another host's decision on the same key before the row is entered (at most
//! the linger plus a round trip after this decision) reads the sequence without it
//! (rows still land in time order). A row whose write fails or is shed is counted
//! (`StateStats::sequence_rows_lost`), never retried.

use super::super::mem::Applied;
use super::super::plan::Request;
use super::super::record::Rec;
use super::super::seq_plan::SeqPlans;
use super::mux::Row;
use super::region::{Region, SeqReply};
use super::script;
use super::RedisStore;
use crate::seq::Sequence;
use crate::txn::Transaction;

/// Appends a row's values as the record packs them: f32, little-endian, the last word
/// padded with zero (`r.row_bytes() - 8` bytes); zeros when `vals` is `None`.
fn row_values(r: &Region, vals: Option<&[f32]>, out: &mut Vec<u8>) {
    let end = out.len() + r.row_bytes() - 8;
    for v in vals.unwrap_or(&[]) {
        out.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    out.resize(end, 0);
}

impl RedisStore {
    /// Before the decision's call: the rows of `txn` that are known already (its early
    /// sequences'), entered by that call.
    pub fn early_rows(&self, seqs: &SeqPlans, txn: &Transaction, rep: &mut SeqReply) {
        let mut vals = [0f32; super::super::def::MAX_SEQUENCE_FIELDS];
        for (spec, out) in self.specs.iter().zip(rep.early.iter_mut()) {
            for r in &spec.regions {
                let p = &seqs.seqs[r.seq];
                let add = p.early && p.passes(txn);
                out.push(u8::from(add));
                let v = &mut vals[..r.at.stored];
                if add {
                    p.values(txn, v);
                }
                row_values(r, add.then_some(&*v), out);
            }
        }
    }

    /// Enters `txn`'s rows and reads its sequences (into `out`, one tensor per sequence)
    /// from the regions its read returned, then sends the rows to Redis (not waited for).
    pub fn sequences(
        &self,
        seqs: &SeqPlans,
        req: &Request,
        applied: &Applied,
        txn: &Transaction,
        out: &mut [Sequence],
        rep: &mut SeqReply,
    ) {
        let mut vals = [0f32; super::super::def::MAX_SEQUENCE_FIELDS];
        let mut rows: Vec<(usize, Vec<u8>)> = Vec::new();
        for (s, spec) in self.specs.iter().enumerate() {
            if spec.regions.is_empty() || !applied.present[s] {
                continue;
            }
            let (te, clock) = (applied.te[s], rep.clock[s]);
            let mut blob = Vec::with_capacity(512);
            spec.write(&mut blob, true);
            blob.extend_from_slice(&(te as f64).to_le_bytes());
            let mut any = false;
            let mut at = rep.start[s];
            for r in &spec.regions {
                let n = r.bytes() / 8;
                let mut rec = Rec {
                    w: &mut rep.words[at..at + n],
                    spill: None,
                };
                at += n;
                let p = &seqs.seqs[r.seq];
                let add = rec.seq_step(&r.at, p, te, clock, txn, &mut vals, &mut out[r.seq]);
                // An early row was entered by the decision's call already.
                let late = add && !p.early;
                blob.push(u8::from(late));
                row_values(r, late.then_some(&vals[..r.at.stored]), &mut blob);
                any |= late;
            }
            if any {
                rows.push((s, blob));
            }
        }
        if !rows.is_empty() {
            self.push_rows(req, rows, rep.eval);
        }
    }

    /// Enters `rows` (per source, its blob) by `"q"` calls or carried in the next call;
    /// not waited for.
    fn push_rows(&self, req: &Request, rows: Vec<(usize, Vec<u8>)>, eval: bool) {
        let cmd = |rows: &[(usize, &[u8])], eval: bool| {
            let mut c = self.script_cmd(eval);
            c.arg(rows.len());
            for (s, _) in rows {
                c.arg(self.key(*s, self.pkey(*s, req.keys[*s])));
            }
            c.arg("q")
                .arg(&script::common_blob(req.ts, 0, self.ttl_ms)[..]);
            for (_, b) in rows {
                c.arg(*b);
            }
            c
        };
        match &self.lanes {
            // Held by the I/O thread and carried in this host's next call.
            Some(m) => {
                for (s, blob) in rows {
                    let row = Row {
                        key: self.key(s, self.pkey(s, req.keys[s])).into_bytes(),
                        alone: cmd(&[(s, &blob)], eval).get_packed_command(),
                        blob,
                    };
                    // A full queue: counted lost by `defer`.
                    let _ = m.defer(row, req.keys[s]);
                }
            }
            // A cluster: one call per key (each in its own slot), in the background.
            None => self.offer(rows.iter().map(|(s, b)| cmd(&[(*s, b)], true)).collect()),
        }
    }
}
