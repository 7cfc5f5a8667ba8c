//! Records of earlier layouts carried into this one, for the snapshots of earlier
//! versions: the long rings' occupancy words inserted (`RSKSTAT5` / `RSKSTAT6` and
//! older), then the stats groups' last event times dropped (up to `RSKSTAT8`).

use super::layout::{GLayout, Layout, SeqAt, CLOCK, HOT_OCC, KEY};

impl Layout {
    /// A record of the layout before the long rings' occupancy words (snapshots of
    /// earlier versions) in this layout: those words inserted, every bucket marked as
    /// possibly holding events (those versions cleared a bucket's columns when it left,
    /// so an empty bucket folds as nothing).
    pub fn migrate_long_occ(&self, old: &[u64]) -> Option<Vec<u64>> {
        let (at, n) = self.long_occ;
        if old.len() + n != self.words || old.len() < at {
            return None;
        }
        let mut w = Vec::with_capacity(self.words);
        w.extend_from_slice(&old[..at]);
        w.resize(at + n, 0);
        w.extend_from_slice(&old[at..]);
        for g in &self.groups {
            if let GLayout::Count { occ, len, .. }
            | GLayout::Sum { occ, len, .. }
            | GLayout::Full { occ, len, .. }
            | GLayout::Label { occ, len, .. } = *g
            {
                if len > HOT_OCC {
                    for i in 0..len {
                        w[occ + i / 64] |= 1 << (i % 64);
                    }
                }
            }
        }
        Some(w)
    }

    /// The runs of words `(from, to, words)` that carry a record of `old` (the same
    /// definitions laid out with [`Hot::WithLast`](super::layout::Hot::WithLast)) into
    /// this layout ([`Hot::Lean`](super::layout::Hot::Lean)): every word but the stats
    /// groups' last event times. `None` when the two are not laid out from the same
    /// definitions (their groups do not pair up kind for kind): no record is carried
    /// rather than one with a group left empty.
    pub fn runs_from_with_last(&self, old: &Layout) -> Option<Vec<(usize, usize, usize)>> {
        if old.groups.len() != self.groups.len() || old.seqs.len() != self.seqs.len() {
            return None;
        }
        let mut v = vec![(KEY, KEY, 1), (CLOCK, CLOCK, 1)];
        for (o, n) in old.groups.iter().zip(&self.groups) {
            if std::mem::discriminant(o) != std::mem::discriminant(n) {
                return None;
            }
            // A stats group's hot words start with the last event time there: skipped.
            let last = matches!(
                o,
                GLayout::Count { .. } | GLayout::Sum { .. } | GLayout::Full { .. }
            ) as usize;
            let (or, nr) = (o.runs(), n.runs());
            if or.len() != nr.len() {
                return None;
            }
            for (k, ((f, fw), (t, tw))) in or.into_iter().zip(nr).enumerate() {
                if fw != tw {
                    return None;
                }
                let f = if k == 0 { f + last } else { f };
                v.push((f, t, tw));
            }
        }
        for (o, n) in old.seqs.iter().zip(&self.seqs) {
            v.push((o.at, n.at, SeqAt::words(o.rows, o.stored)));
        }
        Some(v)
    }

    /// A record of `old`'s layout (see [`runs_from_with_last`](Self::runs_from_with_last))
    /// in this one; `None` when it is not of `old`'s length or `old` pairs with no layout of it.
    pub fn migrate_stats_last(&self, old: &Layout, w: &[u64]) -> Option<Vec<u64>> {
        if w.len() != old.words {
            return None;
        }
        let mut out = vec![0; self.words];
        for (f, t, n) in self.runs_from_with_last(old)? {
            out[t..t + n].copy_from_slice(&w[f..f + n]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::group::{Cols, GroupSpec, Kind};
    use super::super::layout::Hot;
    use super::*;

    fn spec(kind: Kind, cols: Cols, window_b: i64, delay_b: i64) -> GroupSpec {
        GroupSpec {
            kind,
            width_ms: 60_000,
            window_b,
            delay_b,
            exact_limit: 4,
            cols,
            max_events: 0,
        }
    }

    /// Every word of a lean record comes from exactly one word of the earlier layout,
    /// and the words left behind are the stats groups' last event times, one a group.
    #[test]
    fn the_runs_cover_every_word_once_and_leave_the_last_times() {
        let specs = [
            spec(Kind::Stats, Cols::Count, 12, 0),
            spec(Kind::Stats, Cols::Sum, 24, 0),
            spec(Kind::Stats, Cols::Full, 130, 0),
            spec(Kind::Stats, Cols::MinMax, 24, 0),
            spec(Kind::Last, Cols::Count, 0, 0),
            spec(Kind::Distinct, Cols::Count, 24, 0),
            spec(Kind::Label, Cols::Count, 70, 24),
            spec(Kind::Stats, Cols::Count, 200, 0),
        ];
        let (old, new) = (
            Layout::of_specs_hot(&specs, Hot::WithLast),
            Layout::of_specs_hot(&specs, Hot::Lean),
        );
        assert_eq!(old.words - new.words, 5, "five stats groups");
        let (mut from, mut to) = (vec![0; old.words], vec![0; new.words]);
        for (f, t, n) in new.runs_from_with_last(&old).expect("the same definitions") {
            (f..f + n).for_each(|i| from[i] += 1);
            (t..t + n).for_each(|i| to[i] += 1);
        }
        assert!(to.iter().all(|&c| c == 1), "{to:?}");
        let left: Vec<usize> = (0..old.words).filter(|&i| from[i] == 0).collect();
        let lasts: Vec<usize> = old
            .groups
            .iter()
            .filter_map(|g| match *g {
                GLayout::Count { hot, .. }
                | GLayout::Sum { hot, .. }
                | GLayout::Full { hot, .. } => Some(hot),
                _ => None,
            })
            .collect();
        assert_eq!(left, lasts);
        assert!(from.iter().all(|&c| c <= 1));
    }
}
