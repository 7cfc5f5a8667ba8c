//! Where a key's sequences live in its Redis value ([`Region`]) and what one decision's
//! call returned of them ([`SeqReply`]); `seq.rs` enters and reads them.

use super::super::layout::SeqAt;
use super::super::plan::MAX_SOURCES;
use super::super::record::Rec;
use super::super::seq_plan::SeqPlans;

/// Where one sequence of a key lives in the key's value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    /// Its index in `SeqPlans::seqs`.
    pub seq: usize,
    /// Byte offset of its head in the value.
    pub off: u32,
    /// Its layout in a copy of the region's words (at word 0).
    pub at: SeqAt,
}

impl Region {
    /// Source `s`'s sequences laid out from byte `roff` on (moved past them).
    pub fn of_source(seqs: &SeqPlans, s: usize, roff: &mut u32) -> Vec<Region> {
        let of = seqs.of_source.get(s).map_or(&[][..], Vec::as_slice);
        of.iter()
            .map(|&i| {
                let p = &seqs.seqs[i];
                let stored = p.stored.len();
                let at = SeqAt {
                    at: 0,
                    rows: p.rows,
                    stride: 1 + stored.div_ceil(2),
                    stored,
                };
                let r = Region {
                    seq: i,
                    off: *roff,
                    at,
                };
                *roff = roff.saturating_add(u32::try_from(r.bytes()).unwrap_or(u32::MAX));
                r
            })
            .collect()
    }

    /// Bytes of the region.
    pub fn bytes(&self) -> usize {
        8 * SeqAt::words(self.at.rows, self.at.stored)
    }

    /// Bytes of one row (its time and values).
    pub fn row_bytes(&self) -> usize {
        8 * self.at.stride
    }

    /// The region as the script's spec gives it: `I4 off, I4 rows, I4 rb`.
    pub fn spec(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        let u = |x: usize| u32::try_from(x).unwrap_or(u32::MAX).to_le_bytes();
        b[..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&u(self.at.rows));
        b[8..].copy_from_slice(&u(self.row_bytes()));
        b
    }
}

/// One decision's sequence regions as the script returned them, per key source.
#[derive(Debug, Default)]
pub(crate) struct SeqReply {
    pub clock: [i64; MAX_SOURCES],
    /// Where each source's regions start in `words`.
    pub start: [usize; MAX_SOURCES],
    pub words: Vec<u64>,
    /// The decision's call needed the script's text (the server had lost it).
    pub eval: bool,
    /// Per source, the rows its decision call enters (sequences whose rows are known
    /// before the store answers): per sequence `B add` and the row's value bytes.
    pub early: [Vec<u8>; MAX_SOURCES],
}

impl SeqReply {
    /// Keeps source `s`'s regions (`bytes`, exactly the regions' sizes) and its key's
    /// clock. A region out of its bounds (not written by this layout) reads as empty:
    /// the script resets it on its next row.
    pub fn take(
        &mut self,
        s: usize,
        clock: i64,
        regions: &[Region],
        bytes: &[u8],
    ) -> Result<(), String> {
        if bytes.len() != regions.iter().map(Region::bytes).sum::<usize>() {
            return Err(format!("{} bytes of sequence regions", bytes.len()));
        }
        self.clock[s] = clock;
        self.start[s] = self.words.len();
        self.words.extend(bytes.chunks_exact(8).map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        }));
        let mut at = self.start[s];
        for r in regions {
            let n = r.bytes() / 8;
            let w = &mut self.words[at..at + n];
            if !(Rec { w, spill: None }).seq_valid(&r.at) {
                self.words[at..at + n].fill(0);
            }
            at += n;
        }
        Ok(())
    }
}
