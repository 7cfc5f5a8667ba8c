//! The state script's wire format (`state.lua`): the binary blobs a call sends (each key
//! source's spec, each decision's input) and the one binary reply per key it returns.
//! Numbers travel as little-endian doubles (times, sums, the 52-bit hashes and counts
//! are exact in a double), so nothing is printed and parsed as text. A reply is checked
//! for its exact length before it is read: a malformed one is an error, never a panic.

use super::super::group::{Cols, GroupRead, Kind};
use super::super::mem::Applied;
use super::super::plan::{Plan, Request, MAX_GROUPS};
use super::super::seq_plan::SeqPlans;
use super::region::{Region, SeqReply};
use crate::decision::Action;

/// The state script's body (`state.lua` then `state_main.lua`, one Lua chunk: locals
/// of the first are seen by the second): its entry is `main(KEYS, ARGV)`.
const BODY: &str = concat!(include_str!("state.lua"), include_str!("state_main.lua"));

/// The script in the two forms a server runs: a function library (Redis 7 and later:
/// loaded once, its code compiled and its helpers bound once, called by `FCALL`), and a
/// plain script (`EVALSHA` / `EVAL`, where every call defines the script's functions
/// again: measured, a third of its time).
pub(super) struct Code {
    /// The plain script's text.
    pub eval: String,
    /// The plain script (its hash for `EVALSHA`).
    pub script: redis::Script,
    /// The library's text.
    pub library: String,
    /// The library's function: named after the script's hash, so that versions loaded by
    /// hosts of different releases live side by side.
    pub function: String,
}

impl Code {
    pub fn new() -> Self {
        let eval = format!("{BODY}return main(KEYS, ARGV)\n");
        let script = redis::Script::new(&eval);
        let function = format!("risk_state_{}", &script.get_hash()[..16]);
        let library =
            format!("#!lua name={function}\n{BODY}redis.register_function('{function}', main)\n");
        Self {
            eval,
            script,
            library,
            function,
        }
    }

    /// `SCRIPT LOAD <script>`.
    pub fn script_load_cmd(&self) -> redis::Cmd {
        let mut c = redis::cmd("SCRIPT");
        c.arg("LOAD").arg(&self.eval);
        c
    }

    /// `FUNCTION LOAD <library>`: not `REPLACE`, which would drop the specs the loaded
    /// library holds (every host's next call refused, `NOSPEC`, and sent again) each time
    /// a host of the same release starts; the library's name is its code's hash, so one
    /// already there is this code.
    pub fn function_load_cmd(&self) -> redis::Cmd {
        let mut c = redis::cmd("FUNCTION");
        c.arg("LOAD").arg(&self.library);
        c
    }

    /// `EVAL <script>`: the call for a server that lacks the script.
    pub fn eval_cmd(&self) -> redis::Cmd {
        let mut c = redis::cmd("EVAL");
        c.arg(&self.eval);
        c
    }
}

/// Group flags of an input blob.
const RUN: u8 = 1;
const ADD: u8 = 2;
const PASS: u8 = 4;

/// What a key's stored value was when the script met it (its reply's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Met {
    /// The current layout, or no value.
    Ok,
    /// A hash: the MessagePack format of earlier versions, reset.
    OldFormat,
    /// A string of the wrong layout, reset.
    Corrupt,
    /// No value: one was built from the key of other definitions
    /// ([`super::carry_keys`]).
    Carried,
}

/// Bytes of a group's fixed part of a key blob.
const GROUP_SPEC: usize = 38;

/// Source `s`'s layout as the script reads it (fixed for a plan, built once): the blob
/// head (`I4 check, I2 n, I4 K, I2 nq`), per group `B kind, B cols, d width, I4 B, I4 D,
/// I4 exact_limit, I4 L, I4 o, I4 W, I4 roff`, per sequence `I4 off, I4 rows, I4 rb`,
/// then `I4` bytes of the carry section and the section.
/// The header holds K doubles (the clock, the clock when the TTL was last set, then each
/// group's block from value `o`, 1-based, with `W` words of occupancy bits for its `L`
/// buckets); each ring starts at byte `roff`, then the sequences' regions, the distinct
/// regions last (a sketch's room is allocated only when used). `check` (FNV-1a of the
/// rest) is stored in each value's header: a value laid out for another spec reads as
/// malformed.
pub(super) struct KeySpec {
    head: [u8; 12],
    groups: Vec<[u8; GROUP_SPEC]>,
    seqs: Vec<[u8; 12]>,
    /// The sequences' regions, in the order of `SeqPlans::of_source[s]`.
    pub regions: Vec<Region>,
    /// Per group, in the plan's order for the source: its header block's and its
    /// ring's byte spans `(offset, bytes)` in a value (a distinct ring's room at most).
    pub spans: Vec<[(u32, u32); 2]>,
    /// The carry section ([`super::carry_keys`]): empty when no key is carried.
    carry: Vec<u8>,
    /// The spec's id: a 53-bit hash of its bytes, as a little-endian double.
    id: [u8; 8],
}

/// Source `s`'s [`KeySpec`].
pub(super) fn key_spec(plan: &Plan, seqs: &SeqPlans, s: usize) -> KeySpec {
    let gs = &plan.by_source[s];
    let u32_ = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
    // Header values: the clock, the TTL's clock, then the blocks.
    let mut o = 3u32;
    let mut at = Vec::with_capacity(gs.len());
    for &g in gs {
        let sp = &plan.groups[g].spec;
        let l = u32::try_from(sp.ring_len()).unwrap_or(u32::MAX);
        let w = l.div_ceil(32);
        let block = match (sp.kind, sp.cols.stored()) {
            (Kind::Stats, Cols::Count) => 4 + w,
            (Kind::Stats, Cols::Sum) => 6 + w,
            (Kind::Stats, _) => 7 + w,
            (Kind::Last, _) => 1,
            (Kind::Distinct, _) => 4 + w,
            (Kind::Label, _) => 1 + w,
        };
        at.push((l, o, w, block));
        o = o.saturating_add(block);
    }
    let k = o - 1;
    let mut roffs = vec![0u32; gs.len()];
    let mut sizes = vec![0u32; gs.len()];
    let mut roff = k.saturating_mul(8).saturating_add(8);
    let mut regions = Vec::new();
    for distinct in [false, true] {
        if distinct {
            // The sequences before the distinct regions (whose room is allocated late).
            regions = Region::of_source(seqs, s, &mut roff);
        }
        for (j, &g) in gs.iter().enumerate() {
            let sp = &plan.groups[g].spec;
            if (sp.kind == Kind::Distinct) != distinct {
                continue;
            }
            let l = at[j].0;
            let size = match (sp.kind, sp.cols.stored()) {
                (Kind::Stats, Cols::Count) => l.saturating_mul(4),
                (Kind::Stats, Cols::Sum) => l.saturating_mul(12),
                (Kind::Stats, _) => l.saturating_mul(28),
                (Kind::Last, _) => 0,
                (Kind::Distinct, _) => u32_(sp.exact_limit as i64)
                    .saturating_mul(16)
                    .max(l.saturating_mul(128)),
                (Kind::Label, _) => l.saturating_mul(8),
            };
            roffs[j] = roff;
            sizes[j] = size;
            roff = roff.saturating_add(size);
        }
    }
    let mut groups = Vec::with_capacity(gs.len());
    let mut spans = Vec::with_capacity(gs.len());
    for (j, &g) in gs.iter().enumerate() {
        let sp = &plan.groups[g].spec;
        let mut r = [0u8; GROUP_SPEC];
        r[0] = match sp.kind {
            Kind::Stats => 1,
            Kind::Last => 2,
            Kind::Distinct => 3,
            Kind::Label => 4,
        };
        r[1] = match sp.cols.stored() {
            Cols::Count => 1,
            Cols::Sum => 2,
            Cols::MinMax | Cols::Full => 3,
        };
        r[2..10].copy_from_slice(&(sp.width_ms as f64).to_le_bytes());
        let (l, o, w, block) = at[j];
        // Header value `o` (1-based) lies at byte 8 o: after the magic and the check.
        spans.push([
            (o.saturating_mul(8), block.saturating_mul(8)),
            (roffs[j], sizes[j]),
        ]);
        let limit = u32::try_from(sp.exact_limit).unwrap_or(u32::MAX);
        let ints = [
            u32_(sp.window_b),
            u32_(sp.delay_b),
            limit,
            l,
            o,
            w,
            roffs[j],
        ];
        for (x, v) in ints.iter().enumerate() {
            r[10 + 4 * x..14 + 4 * x].copy_from_slice(&v.to_le_bytes());
        }
        groups.push(r);
    }
    let n = u16::try_from(gs.len()).unwrap_or(u16::MAX);
    let nq = u16::try_from(regions.len()).unwrap_or(u16::MAX);
    let seq_specs: Vec<[u8; 12]> = regions.iter().map(Region::spec).collect();
    // Without sequences the check is what it was before them (values stay readable).
    let with_seqs = (nq > 0).then(|| nq.to_le_bytes());
    let check = groups
        .iter()
        .flatten()
        .chain(&n.to_le_bytes())
        .chain(with_seqs.iter().flatten())
        .chain(seq_specs.iter().flatten())
        .fold(0x811c_9dc5u32, |h, &x| {
            (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
        });
    let mut head = [0u8; 12];
    head[..4].copy_from_slice(&check.to_le_bytes());
    head[4..6].copy_from_slice(&n.to_le_bytes());
    head[6..10].copy_from_slice(&k.to_le_bytes());
    head[10..].copy_from_slice(&nq.to_le_bytes());
    KeySpec {
        head,
        groups,
        seqs: seq_specs,
        regions,
        spans,
        carry: Vec::new(),
        id: [0; 8],
    }
    .sealed()
}

impl KeySpec {
    /// The spec as every blob starts: its id, then with `full` its bytes (the carry
    /// section last, after its length); without, the script uses the spec it holds by
    /// that id, or refuses the call (`NOSPEC`) before writing anything.
    pub fn write(&self, out: &mut Vec<u8>, full: bool) {
        out.extend_from_slice(&self.id);
        out.push(u8::from(full));
        if full {
            self.write_bytes(out);
        }
    }

    fn write_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        self.groups.iter().for_each(|r| out.extend_from_slice(r));
        self.seqs.iter().for_each(|r| out.extend_from_slice(r));
        let n = u32::try_from(self.carry.len()).unwrap_or(0);
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&self.carry[..n as usize]);
    }

    /// The spec with its id computed: FNV-1a (64 bits) of its bytes, cut to 53 bits
    /// (exact in the double the script reads it as).
    fn sealed(mut self) -> Self {
        self.seal();
        self
    }

    fn seal(&mut self) {
        let mut b = Vec::new();
        self.write_bytes(&mut b);
        let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
            (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        self.id = ((h & ((1 << 53) - 1)) as f64).to_le_bytes();
    }

    /// Gives the spec the carry section `c` (its id computed again).
    pub fn set_carry(&mut self, c: Vec<u8>) {
        self.carry = c;
        self.seal();
    }

    /// Bytes of a blob's spec when sent in full.
    fn len(&self) -> usize {
        9 + 12 + GROUP_SPEC * self.groups.len() + 12 * self.seqs.len() + 4 + self.carry.len()
    }

    /// The check a value of this layout holds.
    pub fn check(&self) -> u32 {
        u32::from_le_bytes([self.head[0], self.head[1], self.head[2], self.head[3]])
    }
}

/// Source `s`'s key blob for `req`: the [`KeySpec`] (head, then each group's fixed
/// part; only its id without `full`), `d te`, then per group `B flags, d value, d hash`. `outcome`: only the groups
/// `action` enters, at the event's effective time `te`; otherwise every group runs and
/// adds unless it waits for an outcome. `hash` maps a distinct value's hash as Redis
/// sees it.
#[allow(clippy::too_many_arguments)]
pub(super) fn key_blob(
    spec: &KeySpec,
    plan: &Plan,
    req: &Request,
    s: usize,
    outcome: Option<(Action, i64)>,
    hash: impl Fn(u64) -> u64,
    full: bool,
    out: &mut Vec<u8>,
) {
    let gs = &plan.by_source[s];
    out.reserve(spec.len() + 8 + 17 * gs.len());
    spec.write(out, full);
    let te = outcome.map_or(req.ts, |(_, te)| te);
    out.extend_from_slice(&(te as f64).to_le_bytes());
    for &g in gs {
        let inp = &req.inputs[g];
        let (run, add) = match outcome {
            None => (true, plan.groups[g].outcome == 0),
            Some((a, _)) => {
                let p = plan.outcome_passes(g, a);
                (p, p)
            }
        };
        let flags = ((run as u8) * RUN) | ((add as u8) * ADD) | ((inp.pass as u8) * PASS);
        out.push(flags);
        out.extend_from_slice(&inp.value.to_le_bytes());
        out.extend_from_slice(&(hash(inp.hash) as f64).to_le_bytes());
    }
}

/// A key blob for a label: no group runs.
pub(super) fn label_key_blob(spec: &KeySpec) -> Vec<u8> {
    let mut out = Vec::with_capacity(spec.len() + 8 + 17 * spec.groups.len());
    spec.write(&mut out, true);
    out.extend_from_slice(&[0; 8]);
    out.resize(out.len() + 17 * spec.groups.len(), 0);
    out
}

/// `(te, lateness, ttl)` as the script's common argument.
pub(super) fn common_blob(ts: i64, lateness_ms: i64, ttl_ms: i64) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&(ts as f64).to_le_bytes());
    b[8..16].copy_from_slice(&(lateness_ms as f64).to_le_bytes());
    b[16..].copy_from_slice(&(ttl_ms as f64).to_le_bytes());
    b
}

/// A label's argument: `(te, delta)`.
pub(super) fn label_blob(te: i64, delta: i32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(te as f64).to_le_bytes());
    b[8..].copy_from_slice(&f64::from(delta).to_le_bytes());
    b
}

fn f64_at(b: &[u8], i: usize) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[8 * i..8 * i + 8]);
    f64::from_le_bytes(a)
}

/// A time from the script: `None` for "no time" (-inf) or anything not finite.
fn time(x: f64) -> Option<i64> {
    x.is_finite().then_some(x as i64)
}

/// A count from the script: finite and not negative, else malformed.
fn count(x: f64) -> Result<f64, String> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!("count {x}"))
    }
}

/// The doubles a group's reply holds (`state.lua`): stats n, last (count column), n,
/// sum, last (count + sum) or n, sum, sumsq, min, max, last (every column); last: last;
/// distinct: before, after; label: txns, frauds.
fn reply_len(kind: Kind, cols: Cols) -> usize {
    match (kind, cols.stored()) {
        (Kind::Stats, Cols::Count) => 2,
        (Kind::Stats, Cols::Sum) => 3,
        (Kind::Stats, _) => 6,
        (Kind::Last, _) => 1,
        (Kind::Distinct, _) | (Kind::Label, _) => 2,
    }
}

/// Source `s`'s reply into the reads (and its sequences' regions into `seq`); what the
/// script met at the key.
pub(super) fn parse_reply(
    plan: &Plan,
    key: &KeySpec,
    s: usize,
    reply: &[u8],
    reads: &mut [GroupRead; MAX_GROUPS],
    a: &mut Applied,
    seq: &mut SeqReply,
) -> Result<Met, String> {
    let groups = &plan.by_source[s];
    let spec = |g: usize| &plan.groups[g].spec;
    let doubles = groups
        .iter()
        .map(|&g| reply_len(spec(g).kind, spec(g).cols))
        .sum::<usize>()
        + 3
        + usize::from(!key.regions.is_empty());
    let want = 8 * doubles + key.regions.iter().map(Region::bytes).sum::<usize>();
    if reply.len() != want {
        return Err(format!(
            "{} bytes for {} groups (want {want})",
            reply.len(),
            groups.len()
        ));
    }
    let te = time(f64_at(reply, 0)).ok_or("no event time")?;
    let late = f64_at(reply, 1);
    let status = f64_at(reply, 2);
    let met = if status == 0.0 {
        Met::Ok
    } else if status == 1.0 {
        Met::OldFormat
    } else if status == 2.0 {
        Met::Corrupt
    } else if status == 3.0 {
        Met::Carried
    } else {
        return Err(format!("status {status}"));
    };
    let mut at = 3;
    for &g in groups {
        let f = |i: usize| f64_at(reply, at + i);
        // What a group does not read is what a fresh read holds (record.rs).
        let mut r = GroupRead {
            min: f64::NAN,
            max: f64::NAN,
            ..GroupRead::default()
        };
        match (spec(g).kind, spec(g).cols.stored()) {
            (Kind::Stats, cols) => {
                r.n = count(f(0))?;
                if cols >= Cols::Sum {
                    r.sum = f(1);
                }
                if cols == Cols::Full {
                    (r.sumsq, r.min, r.max) = (f(2), f(3), f(4));
                }
                r.last_ms = time(f(reply_len(Kind::Stats, cols) - 1));
            }
            (Kind::Last, _) => r.last_ms = time(f(0)),
            (Kind::Distinct, _) => {
                (r.distinct_before, r.distinct_after) = (count(f(0))?, count(f(1))?);
            }
            (Kind::Label, _) => (r.txns, r.frauds) = (count(f(0))?, count(f(1))?),
        }
        reads[g] = r;
        at += reply_len(spec(g).kind, spec(g).cols);
    }
    if !key.regions.is_empty() {
        let clock = time(f64_at(reply, doubles - 1)).ok_or("no clock")?;
        seq.take(s, clock, &key.regions, &reply[8 * doubles..])?;
    }
    a.present[s] = true;
    a.te[s] = te;
    if late == 1.0 {
        a.late += 1;
    }
    Ok(met)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FeatureSchema;
    use crate::state::{Agg, FeatureDef, KeySource, StateConfig};
    use std::time::Duration;

    fn plan() -> Plan {
        let cfg = StateConfig {
            features: vec![
                FeatureDef::new("n", KeySource::Entity, Agg::Count)
                    .window(Duration::from_secs(3_600), 12),
                FeatureDef::new("gap", KeySource::Entity, Agg::SinceLast),
            ],
            ..StateConfig::default()
        };
        let mut b = FeatureSchema::builder();
        b = cfg.extend_schema(b);
        Plan::compile(&cfg, &b.build().unwrap()).unwrap()
    }

    fn reply(vals: &[f64]) -> Vec<u8> {
        vals.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn a_reply_is_read_exactly_and_a_malformed_one_is_an_error() {
        let p = plan();
        let n = p.by_source[0].len();
        // A count group (n, last) and a last group (last).
        assert_eq!(n, 2);
        let vals = vec![1_000.0, 1.0, 1.0, 3.0, f64::NEG_INFINITY, 5.0];
        let mut reads = [GroupRead::default(); MAX_GROUPS];
        let mut a = Applied::new(0);
        let k = key_spec(&p, &SeqPlans::default(), 0);
        let mut q = SeqReply::default();
        let met = parse_reply(&p, &k, 0, &reply(&vals), &mut reads, &mut a, &mut q).unwrap();
        assert_eq!(
            (met, a.te[0], a.late, a.present[0]),
            (Met::OldFormat, 1_000, 1, true)
        );
        assert_eq!(reads[p.by_source[0][0]].n, 3.0);
        assert_eq!(reads[p.by_source[0][0]].last_ms, None);
        assert!(reads[p.by_source[0][0]].min.is_nan());
        assert_eq!(reads[p.by_source[0][1]].last_ms, Some(5));
        // Short, long, empty, a bad status, a negative count, no time: errors, no panic.
        let mut refused = |bytes: &[u8]| {
            parse_reply(&p, &k, 0, bytes, &mut reads, &mut Applied::new(0), &mut q).is_err()
        };
        assert!(refused(&reply(&vals[..vals.len() - 1])));
        assert!(refused(&[reply(&vals), vec![0]].concat()));
        assert!(refused(&[]));
        for (i, x) in [(2, 7.0), (3, -1.0), (0, f64::NAN)] {
            let mut v = vals.clone();
            v[i] = x;
            assert!(refused(&reply(&v)), "value {i} = {x}");
        }
    }

    #[test]
    fn blobs_have_the_layout_the_script_reads() {
        let p = plan();
        let n = p.by_source[0].len();
        let spec = key_spec(&p, &SeqPlans::default(), 0);
        assert_eq!(label_key_blob(&spec).len(), 33 + 55 * n);
        let req = Request {
            ts: 5,
            keys: [1; super::super::super::plan::MAX_SOURCES],
            inputs: std::iter::repeat_n(Default::default(), MAX_GROUPS).collect(),
        };
        let mut b = Vec::new();
        key_blob(&spec, &p, &req, 0, None, |h| h, true, &mut b);
        assert_eq!(b.len(), 33 + 55 * n);
        assert_eq!(
            (&b[..8], b[8]),
            (&spec.id[..], 1),
            "the id, then the spec in full"
        );
        // No carry section: its length 0, then the event.
        assert_eq!(b[21 + GROUP_SPEC * n..25 + GROUP_SPEC * n], [0; 4]);
        assert_eq!(b[33 + GROUP_SPEC * n] & RUN, RUN);
        // By id: the event right after the id and its flag.
        let mut short = Vec::new();
        key_blob(&spec, &p, &req, 0, None, |h| h, false, &mut short);
        assert_eq!(short.len(), b.len() - (16 + GROUP_SPEC * n));
        assert_eq!((&short[..8], short[8]), (&spec.id[..], 0));
        assert_eq!(short[9..], b[33 + GROUP_SPEC * n - 8..]);
        // The count group: L = 13 buckets, its block after the clock and the TTL's clock,
        // its ring after the header (2 groups: 4 + 1 and 1 values).
        let int = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let g0 = 9 + 12 + 10;
        assert_eq!((int(g0 + 12), int(g0 + 16), int(g0 + 20)), (13, 3, 1));
        assert_eq!(int(g0 + 24), 8 + 8 * (2 + 5 + 1));
    }
}
