//! A snapshot written by other feature definitions (a feature added, removed or
//! changed) restores every window both define alike: the same key source (by name),
//! the same spec (kind, bucket width, buckets, label delay, distinct limit, columns,
//! exact bound), outcome filter, field and filters ([`Plan`]'s group meaning), and every
//! sequence of the same shape. Their words, distinct sets and exact windows' events are
//! carried into this layout; the windows these definitions add start empty, as on a key
//! never seen, and count from the restore on. Adding a feature no longer throws away
//! every card's history.
//!
//! A group whose columns widened (a sum joined a window that kept counts only) is not
//! alike: its sums were never kept, so it starts empty. Snapshots written before
//! `RSKSTATB` carry no definitions, so they restore only into the definitions that
//! wrote them.

use super::def::{MAX_SEQUENCE_FIELDS, MAX_SEQUENCE_LEN};
use super::distinct::Distinct;
use super::exact::EventLog;
use super::group::GroupSpec;
use super::layout::{Hot, Layout, SeqAt, CLOCK, KEY};
use super::mem::SnapKey;
use super::plan::Plan;
use super::plan::{MAX_BUCKETS, MAX_GROUPS, MAX_SOURCES};
use super::record::Spilled;
use super::seq_plan::{SeqPlans, MAX_SEQUENCES};
use serde::{Deserialize, Serialize};

/// The definitions a snapshot was written by, per key source (`RSKSTATB` on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Defs {
    pub sources: Vec<SourceDefs>,
}

/// One key source's definitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SourceDefs {
    /// The source by name (`Plan::source_texts`).
    pub key: String,
    /// Its groups, in layout order.
    pub groups: Vec<GroupDef>,
    /// Its sequences, in layout order.
    pub seqs: Vec<SeqDef>,
}

/// One group: what must be equal for its words to be carried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GroupDef {
    pub spec: GroupSpec,
    pub outcome: u8,
    pub meaning: String,
}

/// One sequence: its shape without the source's index, and its dimensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SeqDef {
    pub shape: String,
    pub rows: usize,
    pub stored: usize,
}

impl Defs {
    /// The definitions of `plan` and `seqs`.
    pub fn of(plan: &Plan, seqs: &SeqPlans) -> Self {
        let sources = (0..plan.sources.len())
            .map(|s| SourceDefs {
                key: plan.source_texts[s].clone(),
                groups: plan.by_source[s]
                    .iter()
                    .map(|&g| GroupDef {
                        spec: plan.groups[g].spec,
                        outcome: plan.groups[g].outcome,
                        meaning: plan.meanings[g].clone(),
                    })
                    .collect(),
                seqs: seqs
                    .of(s)
                    .map(|q| {
                        let shape = q.shape();
                        SeqDef {
                            // Without the source's index (its position in the plan).
                            shape: shape.split_once('|').map_or(shape.clone(), |x| x.1.into()),
                            rows: q.rows,
                            stored: q.stored.len(),
                        }
                    })
                    .collect(),
            })
            .collect();
        Self { sources }
    }

    /// Whether every size the definitions give is within a configuration's bounds.
    fn check(&self) -> Result<(), String> {
        let out = |what: &str| {
            Err(format!(
                "the snapshot's definitions are out of bounds: {what}"
            ))
        };
        if self.sources.len() > MAX_SOURCES {
            return out("key sources");
        }
        for s in &self.sources {
            if s.groups.len() > MAX_GROUPS || s.seqs.len() > MAX_SEQUENCES {
                return out("windows or sequences of a source");
            }
            for g in &s.groups {
                let sp = &g.spec;
                // A label delay is at most 400 days, of buckets of 1 ms at the least.
                let (buckets, delay) = (0..=MAX_BUCKETS as i64, 0..=400 * 86_400_000);
                if sp.width_ms <= 0
                    || !buckets.contains(&sp.window_b)
                    || !delay.contains(&sp.delay_b)
                {
                    return out("a window's buckets");
                }
            }
            for q in &s.seqs {
                if q.rows > MAX_SEQUENCE_LEN as usize || q.stored > MAX_SEQUENCE_FIELDS {
                    return out("a sequence's shape");
                }
            }
        }
        Ok(())
    }
}

/// How each source of a snapshot's definitions maps into this engine's.
#[derive(Debug)]
pub(crate) struct Carry {
    /// Per source of the file: its layout there.
    old: Vec<Layout>,
    /// Per source of the file: the source here with its name, if any.
    to: Vec<Option<usize>>,
    /// Per source of the file: per group, the group here it is carried into.
    groups: Vec<Vec<Option<usize>>>,
    /// Per source of the file: per sequence, the sequence here it is carried into.
    seqs: Vec<Vec<Option<usize>>>,
    /// Groups here that are carried, and all groups here.
    pub carried: usize,
    pub groups_here: usize,
}

impl Carry {
    /// The mapping of `defs` into `plan`'s and `seqs`' definitions; an error when the
    /// file's definitions are out of the bounds a configuration has (they size the
    /// layouts computed here).
    pub fn new(defs: &Defs, plan: &Plan, seqs: &SeqPlans) -> Result<Self, String> {
        defs.check()?;
        let mine = Defs::of(plan, seqs);
        let mut c = Carry {
            old: Vec::new(),
            to: Vec::new(),
            groups: Vec::new(),
            seqs: Vec::new(),
            carried: 0,
            groups_here: plan.groups.len(),
        };
        for sd in &defs.sources {
            let specs: Vec<GroupSpec> = sd.groups.iter().map(|g| g.spec).collect();
            let dims: Vec<(usize, usize)> = sd.seqs.iter().map(|q| (q.rows, q.stored)).collect();
            c.old.push(Layout::of_parts(&specs, &dims, Hot::Lean));
            let to = plan.source_texts.iter().position(|t| *t == sd.key);
            c.to.push(to);
            let Some(s) = to else {
                c.groups.push(vec![None; sd.groups.len()]);
                c.seqs.push(vec![None; sd.seqs.len()]);
                continue;
            };
            let alike = |o: &GroupDef, &g: &usize| {
                let (m, g) = (&plan.meanings[g], &plan.groups[g]);
                g.spec == o.spec && g.outcome == o.outcome && *m == o.meaning
            };
            let gs: Vec<Option<usize>> = sd
                .groups
                .iter()
                .map(|o| plan.by_source[s].iter().position(|g| alike(o, g)))
                .collect();
            c.carried += gs.iter().flatten().count();
            c.groups.push(gs);
            let mine = &mine.sources[s].seqs;
            c.seqs.push(
                sd.seqs
                    .iter()
                    .map(|o| mine.iter().position(|q| q == o))
                    .collect(),
            );
        }
        Ok(c)
    }

    /// Whether anything at all is carried (a window or a sequence).
    pub fn any(&self) -> bool {
        self.carried > 0 || self.seqs.iter().flatten().any(Option::is_some)
    }

    /// `item` (a key of the file) in the layouts `here`: `None` when its source is not
    /// one of these definitions'; an error when it does not fit the file's layout.
    pub fn key(&self, item: SnapKey, here: &[&Layout]) -> Result<Option<SnapKey>, String> {
        let (so, w, spill) = item;
        let so = so as usize;
        let old = self
            .old
            .get(so)
            .ok_or_else(|| format!("key source {so} is not in the snapshot's definitions"))?;
        if w.len() != old.words {
            return Err(format!(
                "a record of {} words where the snapshot's definitions lay out {}",
                w.len(),
                old.words
            ));
        }
        let Some(sn) = self.to[so] else {
            return Ok(None);
        };
        let new = here[sn];
        let mut nw = vec![0u64; new.words];
        nw[KEY] = w[KEY];
        nw[CLOCK] = w[CLOCK];
        let mut distinct: Vec<Distinct> = Vec::new();
        let mut logs: Vec<EventLog> = Vec::new();
        for (oi, ni) in self.groups[so].iter().enumerate() {
            let Some(ni) = *ni else { continue };
            let (og, ng) = (&old.groups[oi], &new.groups[ni]);
            for ((oa, on), (na, nn)) in og.runs().into_iter().zip(ng.runs()) {
                // Alike groups lay out alike: `on == nn`.
                let n = on.min(nn);
                nw[na..na + n].copy_from_slice(&w[oa..oa + n]);
            }
            let Some(sp) = spill.as_ref() else { continue };
            if let (
                super::layout::GLayout::Distinct { spill: os, .. },
                super::layout::GLayout::Distinct { spill: ns, .. },
            ) = (*og, *ng)
            {
                if let Some(d) = sp.distinct.get(os) {
                    if distinct.len() <= ns {
                        distinct.resize(ns + 1, Distinct::Exact(Vec::new()));
                    }
                    distinct[ns] = d.clone();
                }
            }
            if let (Some(ol), Some(nl)) = (old.log_of[oi], new.log_of[ni]) {
                if let Some(l) = sp.logs.get(ol.li) {
                    if logs.len() < nl.n {
                        logs.resize_with(nl.n, EventLog::default);
                    }
                    logs[nl.li] = l.clone();
                }
            }
        }
        for (oi, ni) in self.seqs[so].iter().enumerate() {
            let Some(ni) = *ni else { continue };
            let (oq, nq) = (old.seqs[oi], new.seqs[ni]);
            let n = SeqAt::words(oq.rows, oq.stored);
            nw[nq.at..nq.at + n].copy_from_slice(&w[oq.at..oq.at + n]);
        }
        let spill = spill.map(|_| Spilled { distinct, logs });
        Ok(Some((sn as u8, nw, spill)))
    }
}
