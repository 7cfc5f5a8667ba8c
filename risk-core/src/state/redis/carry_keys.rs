//! Keys carried across a change of definitions on Redis, as a snapshot of other
//! definitions is restored in process ([`super::super::carry`]).
//!
//! Keys are named under the definitions' fingerprint, so a rolling deploy that adds a
//! feature used to start every card of the fleet empty under new keys: a month of
//! history gone from every window, the unchanged ones included. Now:
//! - every engine publishes its layout in the fleet's registry, the hash
//!   `<prefix>:defs` (field: its fingerprint; value: [`Published`], postcard): per key
//!   source its name, its index in key names, the check its values hold, and per
//!   window and sequence what must be equal for it to be carried ([`GroupDef`],
//!   [`SeqDef`]) with its byte spans in a value;
//! - at build, an engine picks the newest other definitions published there that
//!   define a window or sequence alike, and gives each key source's spec a carry
//!   section: that key's name prefix under them, their values' check, and the byte
//!   runs `(from, to, bytes)` to copy (the key's clock, each alike window's header
//!   block and ring, each alike sequence's region);
//! - the script, meeting a key that has no value, reads the other definitions' key of
//!   the same card (the same slot on a cluster: the card is the hash tag), and when it
//!   holds their layout, writes a fresh value with those runs copied in, then decides
//!   on it as on any key (reply status 3, counted in
//!   [`StateStats::store_keys_carried`](super::super::StateStats::store_keys_carried)).
//!
//! The old key is left as it is: hosts of the old definitions may still be serving, and
//! it expires by its TTL. Events an old host enters after a key was carried are not
//! in the new key (a rolling deploy's window). Labels of transactions decided under the
//! old definitions are not carried (they are remembered under the old prefix).

use super::super::carry::{Defs, GroupDef, SeqDef};
use super::super::plan::{Plan, MAX_GROUPS, MAX_SOURCES};
use super::super::redis_conn::Conn;
use super::super::seq_plan::{SeqPlans, MAX_SEQUENCES};
use super::script::KeySpec;
use redis::Value;
use serde::{Deserialize, Serialize};

/// The registry's entries kept at most: the oldest others are removed past it.
pub(super) const MAX_ENTRIES: usize = 16;

/// Bytes of a registry entry read at most (a hostile or broken one is ignored).
pub(super) const MAX_ENTRY_BYTES: usize = 1 << 20;

/// One definitions' layout, as published in the registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Published {
    /// Unix milliseconds when the first engine of these definitions published them.
    pub at_ms: i64,
    pub sources: Vec<PubSource>,
}

/// One key source of a [`Published`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct PubSource {
    /// The source by name (`Plan::source_texts`).
    pub key: String,
    /// Its index in key names.
    pub index: u32,
    /// The check its values hold.
    pub check: u32,
    /// Its windows, with their header block's and ring's byte spans.
    pub groups: Vec<(GroupDef, [(u32, u32); 2])>,
    /// Its sequences, with their region's byte span.
    pub seqs: Vec<(SeqDef, (u32, u32))>,
}

impl Published {
    /// The layout of `plan` and `seqs` on Redis (`specs`: its key sources' specs).
    pub fn of(plan: &Plan, seqs: &SeqPlans, specs: &[KeySpec], at_ms: i64) -> Self {
        let defs = Defs::of(plan, seqs);
        let sources = defs
            .sources
            .into_iter()
            .zip(specs)
            .enumerate()
            .map(|(s, (d, k))| PubSource {
                key: d.key,
                index: s as u32,
                check: k.check(),
                groups: d.groups.into_iter().zip(k.spans.iter().copied()).collect(),
                seqs: d
                    .seqs
                    .into_iter()
                    .zip(&k.regions)
                    .map(|(q, r)| (q, (r.off, r.bytes() as u32)))
                    .collect(),
            })
            .collect();
        Self { at_ms, sources }
    }

    /// A registry entry's value, when it is one within bounds.
    pub fn read(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > MAX_ENTRY_BYTES {
            return None;
        }
        let p: Self = postcard::from_bytes(bytes).ok()?;
        let fits = p.sources.len() <= MAX_SOURCES
            && p.sources
                .iter()
                .all(|s| s.groups.len() <= MAX_GROUPS && s.seqs.len() <= MAX_SEQUENCES);
        fits.then_some(p)
    }

    /// The entry's value.
    pub fn bytes(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }
}

/// How source `s` of `mine` carries from `old`: the byte runs `(from, to, bytes)` of a
/// value, sorted by `to` (the key's clock first); `None` when nothing of it is alike.
pub(super) fn runs<'a>(
    mine: &PubSource,
    old: &'a Published,
) -> Option<(&'a PubSource, Vec<[u32; 3]>)> {
    let o = old.sources.iter().find(|o| o.key == mine.key)?;
    let mut r = vec![[8, 8, 8]];
    for (d, [hdr, ring]) in &mine.groups {
        if let Some((_, [ohdr, oring])) = o.groups.iter().find(|(od, _)| od == d) {
            // Alike windows lay out alike: the lengths are equal (the smaller, in any case).
            r.push([ohdr.0, hdr.0, hdr.1.min(ohdr.1)]);
            if ring.1 > 0 {
                r.push([oring.0, ring.0, ring.1.min(oring.1)]);
            }
        }
    }
    for (d, span) in &mine.seqs {
        if let Some((_, ospan)) = o.seqs.iter().find(|(od, _)| od == d) {
            r.push([ospan.0, span.0, span.1.min(ospan.1)]);
        }
    }
    if r.len() == 1 {
        return None;
    }
    // Sorted by where they go (the script writes the value front to back), and runs that
    // follow each other in both layouts merged: the script makes a string a run (~0.2 us
    // each, measured), and a deploy that adds a feature keeps most windows in order.
    r.sort_by_key(|x| x[1]);
    let mut merged: Vec<[u32; 3]> = Vec::with_capacity(r.len());
    for x in r {
        match merged.last_mut() {
            Some(m)
                if m[0].checked_add(m[2]) == Some(x[0]) && m[1].checked_add(m[2]) == Some(x[1]) =>
            {
                m[2] += x[2]
            }
            _ => merged.push(x),
        }
    }
    Some((o, merged))
}

/// The newest entry of `entries` (fingerprint, value) other than `me` that carries
/// anything into `mine`.
pub(super) fn pick(me: u64, mine: &Published, entries: &[(u64, Published)]) -> Option<u64> {
    entries
        .iter()
        .filter(|(fp, p)| *fp != me && mine.sources.iter().any(|s| runs(s, p).is_some()))
        .max_by_key(|(fp, p)| (p.at_ms, *fp))
        .map(|(fp, _)| *fp)
}

/// Source `mine`'s carry section from `old` (fingerprint `old_fp`) under `prefix`:
/// `I4 check, I2 plen, I2 olen, I2 nruns`, the old key names' prefix (`olen` bytes),
/// then `nruns` runs `I4 from, I4 to, I4 bytes`; `plen` is the length of this source's
/// key names before the card. Empty when nothing of it is carried.
pub(super) fn section(
    prefix: &str,
    fp: u64,
    mine: &PubSource,
    old_fp: u64,
    old: &Published,
) -> Vec<u8> {
    let Some((o, runs)) = runs(mine, old) else {
        return Vec::new();
    };
    let here = format!("{prefix}:{fp:016x}:{}:", mine.index);
    let there = format!("{prefix}:{old_fp:016x}:{}:", o.index);
    let (Ok(plen), Ok(olen), Ok(n)) = (
        u16::try_from(here.len()),
        u16::try_from(there.len()),
        u16::try_from(runs.len()),
    ) else {
        return Vec::new();
    };
    let mut b = Vec::with_capacity(10 + there.len() + 12 * runs.len());
    b.extend_from_slice(&o.check.to_le_bytes());
    b.extend_from_slice(&plen.to_le_bytes());
    b.extend_from_slice(&olen.to_le_bytes());
    b.extend_from_slice(&n.to_le_bytes());
    b.extend_from_slice(there.as_bytes());
    for r in runs {
        r.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    }
    b
}

/// Publishes `plan`'s layout in the registry `<prefix>:defs` (the first engine's time
/// kept), removes the oldest readable entries past [`MAX_ENTRIES`], and
/// gives each of `specs` its carry section from the newest other definitions that share
/// a window or sequence: their fingerprint, if any.
pub(super) fn from_registry(
    con: &mut Conn,
    prefix: &str,
    plan: &Plan,
    seqs: &SeqPlans,
    specs: &mut [KeySpec],
    fp: u64,
) -> redis::RedisResult<Option<u64>> {
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mine = Published::of(plan, seqs, specs, at_ms);
    let reg = format!("{prefix}:defs");
    let mut put = redis::cmd("HSETNX");
    put.arg(&reg).arg(format!("{fp:016x}")).arg(mine.bytes());
    con.query::<Value>(&put)?;
    let mut all = redis::cmd("HGETALL");
    all.arg(&reg);
    let entries: Vec<(String, Vec<u8>)> = con.query(&all)?;
    let mut read: Vec<(u64, Published)> = entries
        .iter()
        .filter_map(|(f, v)| Some((u64::from_str_radix(f, 16).ok()?, Published::read(v)?)))
        .collect();
    read.sort_by_key(|(f, p)| (std::cmp::Reverse(p.at_ms), *f));
    // The oldest readable entries past the bound removed (not this engine's). One this
    // version cannot read is left alone: it may be a later version's.
    let stale: Vec<String> = read
        .iter()
        .skip(MAX_ENTRIES)
        .filter(|e| e.0 != fp)
        .map(|e| format!("{:016x}", e.0))
        .collect();
    read.truncate(MAX_ENTRIES);
    if !stale.is_empty() {
        let mut del = redis::cmd("HDEL");
        del.arg(&reg).arg(stale);
        con.query::<Value>(&del)?;
    }
    let Some(old_fp) = pick(fp, &mine, &read) else {
        return Ok(None);
    };
    if let Some((_, old)) = read.iter().find(|e| e.0 == old_fp) {
        for (spec, src) in specs.iter_mut().zip(&mine.sources) {
            spec.set_carry(section(prefix, fp, src, old_fp, old));
        }
    }
    Ok(Some(old_fp))
}

#[cfg(test)]
mod tests {
    use super::super::script::key_spec;
    use super::*;
    use crate::schema::FeatureSchema;
    use crate::state::{Agg, FeatureDef, KeySource, StateConfig};
    use std::time::Duration;

    fn published(features: Vec<FeatureDef>, at_ms: i64) -> Published {
        let cfg = StateConfig {
            features,
            ..StateConfig::default()
        };
        let schema = cfg.extend_schema(FeatureSchema::builder()).build().unwrap();
        let plan = Plan::compile(&cfg, &schema).unwrap();
        let seqs = SeqPlans::default();
        let specs: Vec<KeySpec> = (0..plan.sources.len())
            .map(|s| key_spec(&plan, &seqs, s))
            .collect();
        Published::of(&plan, &seqs, &specs, at_ms)
    }

    fn n(name: &str, hours: u64, src: KeySource) -> FeatureDef {
        FeatureDef::new(name, src, Agg::Count).window(Duration::from_secs(hours * 3_600), 12)
    }

    #[test]
    fn alike_windows_are_run_from_their_old_place_to_their_new_one() {
        let old = published(
            vec![n("a", 1, KeySource::Entity), n("b", 2, KeySource::Entity)],
            1,
        );
        // Reordered, one added: b's block and ring move, a's too.
        let new = published(
            vec![
                n("c", 3, KeySource::Entity),
                n("b", 2, KeySource::Entity),
                n("a", 1, KeySource::Entity),
            ],
            2,
        );
        let (o, r) = runs(&new.sources[0], &old).unwrap();
        assert_eq!(o.key, new.sources[0].key);
        assert_eq!(r[0], [8, 8, 8], "the key's clock first");
        assert_eq!(r.len(), 1 + 2 * 2, "{r:?}");
        let g = |p: &Published, i: usize| p.sources[0].groups[i].1;
        // b: old group 1 to new group 1; a: old 0 to new 2; header, then ring.
        assert!(r.contains(&[g(&old, 1)[0].0, g(&new, 1)[0].0, g(&new, 1)[0].1]));
        assert!(r.contains(&[g(&old, 0)[1].0, g(&new, 2)[1].0, g(&new, 2)[1].1]));
        assert_ne!(g(&old, 0)[1].0, g(&new, 2)[1].0, "the ring moved");
        // Nothing alike: no runs; another source only: no runs for this one.
        let other = published(vec![n("z", 5, KeySource::Entity)], 3);
        assert!(runs(&other.sources[0], &old).is_none());
        let merchant = published(vec![n("a", 1, KeySource::Merchant)], 3);
        assert!(runs(&merchant.sources[0], &old).is_none());
    }

    #[test]
    fn runs_that_follow_each_other_in_both_layouts_are_merged() {
        let (a, b) = (n("a", 1, KeySource::Entity), n("b", 2, KeySource::Entity));
        let old = published(vec![a.clone(), b.clone()], 1);
        // A feature added last: both blocks and both rings keep their order.
        let new = published(vec![a, b, n("c", 3, KeySource::Entity)], 2);
        let (_, r) = runs(&new.sources[0], &old).unwrap();
        let g = |p: &Published, i: usize| p.sources[0].groups[i].1;
        let (h0, h1) = (g(&new, 0)[0], g(&new, 1)[0]);
        let (r0, r1) = (g(&new, 0)[1], g(&new, 1)[1]);
        assert_eq!(
            r,
            vec![
                [8, 8, 8],
                [g(&old, 0)[0].0, h0.0, h0.1 + h1.1],
                [g(&old, 0)[1].0, r0.0, r0.1 + r1.1],
            ],
            "the clock, both header blocks, both rings"
        );
        assert_ne!(g(&old, 0)[1].0, r0.0, "the rings moved (a longer header)");
    }

    #[test]
    fn the_newest_other_definitions_that_share_a_window_are_picked() {
        let mine = published(vec![n("a", 1, KeySource::Entity)], 10);
        let entries = vec![
            (1, published(vec![n("a", 1, KeySource::Entity)], 5)),
            (
                2,
                published(
                    vec![n("a", 1, KeySource::Entity), n("x", 9, KeySource::Entity)],
                    7,
                ),
            ),
            // Newer, but sharing nothing.
            (3, published(vec![n("y", 4, KeySource::Entity)], 9)),
            // Mine (the newest of all).
            (4, published(vec![n("a", 1, KeySource::Entity)], 10)),
        ];
        assert_eq!(pick(4, &mine, &entries), Some(2));
        assert_eq!(pick(4, &mine, &entries[2..]), None);
    }

    #[test]
    fn a_section_names_the_old_keys_and_its_runs() {
        let old = published(vec![n("a", 1, KeySource::Entity)], 1);
        let new = published(
            vec![n("b", 2, KeySource::Entity), n("a", 1, KeySource::Entity)],
            2,
        );
        let b = section("risk", 0xab, &new.sources[0], 0xcd, &old);
        assert_eq!(&b[..4], &old.sources[0].check.to_le_bytes());
        let plen = u16::from_le_bytes([b[4], b[5]]) as usize;
        let olen = u16::from_le_bytes([b[6], b[7]]) as usize;
        let nruns = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!(plen, "risk:00000000000000ab:0:".len());
        assert_eq!(&b[10..10 + olen], b"risk:00000000000000cd:0:");
        assert_eq!(nruns, 3);
        assert_eq!(b.len(), 10 + olen + 12 * nruns);
        let other = published(vec![n("z", 5, KeySource::Entity)], 3);
        assert!(section("risk", 1, &other.sources[0], 2, &old).is_empty());
    }

    #[test]
    fn registry_entries_out_of_bounds_are_ignored() {
        let p = published(vec![n("a", 1, KeySource::Entity)], 1);
        assert_eq!(Published::read(&p.bytes()), Some(p.clone()));
        assert_eq!(Published::read(b"not postcard at all"), None);
        assert_eq!(Published::read(&vec![0u8; MAX_ENTRY_BYTES + 1]), None);
        let mut big = p.clone();
        big.sources = vec![p.sources[0].clone(); MAX_SOURCES + 1];
        assert_eq!(Published::read(&big.bytes()), None);
    }
}
