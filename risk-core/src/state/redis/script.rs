//! The state script's wire format (`state.lua`): the binary blobs a call sends (each key
//! source's spec, each decision's input) and the one binary reply per key it returns.
//! Numbers travel as little-endian doubles (times, sums, the 52-bit hashes and counts
//! are exact in a double), so nothing is printed and parsed as text. A reply is checked
//! for its exact length before it is read: a malformed one is an error, never a panic.

use super::super::group::{Cols, GroupRead, Kind};
use super::super::mem::Applied;
use super::super::plan::{Plan, Request, MAX_GROUPS};
use crate::decision::Action;

/// The script's text.
pub(super) const SCRIPT: &str = include_str!("state.lua");

/// Group flags of an input blob.
const RUN: u8 = 1;
const ADD: u8 = 2;
const PASS: u8 = 4;

/// Doubles per group in a reply.
const PER_GROUP: usize = 10;

/// What a key's stored value was when the script met it (its reply's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Met {
    /// The current layout, or no value.
    Ok,
    /// A hash: the MessagePack format of earlier versions, reset.
    OldFormat,
    /// A string of the wrong layout, reset.
    Corrupt,
}

/// The spec blob of source `s`: `I2 n`, then per group `B kind, B cols, d width, I4 B,
/// I4 D, I4 exact_limit`. Fixed for a plan (built once).
pub(super) fn spec_blob(plan: &Plan, s: usize) -> Vec<u8> {
    let gs = &plan.by_source[s];
    let mut b = Vec::with_capacity(2 + 22 * gs.len());
    b.extend_from_slice(&(gs.len() as u16).to_le_bytes());
    for &g in gs {
        let sp = &plan.groups[g].spec;
        let kind: u8 = match sp.kind {
            Kind::Stats => 1,
            Kind::Last => 2,
            Kind::Distinct => 3,
            Kind::Label => 4,
        };
        let cols: u8 = match sp.cols {
            Cols::Count => 1,
            Cols::Sum => 2,
            Cols::Full => 3,
        };
        b.push(kind);
        b.push(cols);
        b.extend_from_slice(&(sp.width_ms as f64).to_le_bytes());
        let u32_ = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
        b.extend_from_slice(&u32_(sp.window_b).to_le_bytes());
        b.extend_from_slice(&u32_(sp.delay_b).to_le_bytes());
        let limit = u32::try_from(sp.exact_limit).unwrap_or(u32::MAX);
        b.extend_from_slice(&limit.to_le_bytes());
    }
    b
}

/// The input blob of source `s` for `req`: `d te`, then per group `B flags, d value,
/// d hash`. `outcome`: only the groups `action` enters, at the event's effective time
/// `te`; otherwise every group runs and adds unless it waits for an outcome. `hash`
/// maps a distinct value's hash as Redis sees it.
pub(super) fn input_blob(
    plan: &Plan,
    req: &Request,
    s: usize,
    outcome: Option<(Action, i64)>,
    hash: impl Fn(u64) -> u64,
    out: &mut Vec<u8>,
) {
    let gs = &plan.by_source[s];
    out.reserve(8 + 17 * gs.len());
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

/// Source `s`'s reply into the reads; what the script met at the key.
pub(super) fn parse_reply(
    plan: &Plan,
    s: usize,
    reply: &[u8],
    reads: &mut [GroupRead; MAX_GROUPS],
    a: &mut Applied,
) -> Result<Met, String> {
    let groups = &plan.by_source[s];
    let want = 8 * (3 + PER_GROUP * groups.len());
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
    } else {
        return Err(format!("status {status}"));
    };
    for (k, &g) in groups.iter().enumerate() {
        let f = |i: usize| f64_at(reply, 3 + PER_GROUP * k + i);
        reads[g] = GroupRead {
            n: count(f(0))?,
            sum: f(1),
            sumsq: f(2),
            min: f(3),
            max: f(4),
            last_ms: time(f(5)),
            distinct_before: count(f(6))?,
            distinct_after: count(f(7))?,
            txns: count(f(8))?,
            frauds: count(f(9))?,
        };
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
        let mut vals = vec![1_000.0, 1.0, 1.0];
        for _ in 0..n {
            vals.extend([
                3.0,
                0.0,
                0.0,
                f64::NAN,
                f64::NAN,
                f64::NEG_INFINITY,
                0.,
                0.,
                0.,
                0.,
            ]);
        }
        let mut reads = [GroupRead::default(); MAX_GROUPS];
        let mut a = Applied::new(0);
        let met = parse_reply(&p, 0, &reply(&vals), &mut reads, &mut a).unwrap();
        assert_eq!(
            (met, a.te[0], a.late, a.present[0]),
            (Met::OldFormat, 1_000, 1, true)
        );
        assert_eq!(reads[p.by_source[0][0]].n, 3.0);
        assert_eq!(reads[p.by_source[0][0]].last_ms, None);
        // Short, long, empty, a bad status, a negative count: errors, no panic.
        for bad in [
            reply(&vals[..vals.len() - 1]),
            [reply(&vals), vec![0]].concat(),
            Vec::new(),
        ] {
            assert!(parse_reply(&p, 0, &bad, &mut reads, &mut Applied::new(0)).is_err());
        }
        let mut v = vals.clone();
        v[2] = 7.0;
        assert!(parse_reply(&p, 0, &reply(&v), &mut reads, &mut Applied::new(0)).is_err());
        let mut v = vals.clone();
        v[3] = -1.0;
        assert!(parse_reply(&p, 0, &reply(&v), &mut reads, &mut Applied::new(0)).is_err());
        let mut v = vals;
        v[0] = f64::NAN;
        assert!(parse_reply(&p, 0, &reply(&v), &mut reads, &mut Applied::new(0)).is_err());
    }

    #[test]
    fn blobs_have_the_layout_the_script_reads() {
        let p = plan();
        let n = p.by_source[0].len();
        assert_eq!(spec_blob(&p, 0).len(), 2 + 22 * n);
        let req = Request {
            ts: 5,
            keys: [1; super::super::super::plan::MAX_SOURCES],
            inputs: [Default::default(); MAX_GROUPS],
        };
        let mut b = Vec::new();
        input_blob(&p, &req, 0, None, |h| h, &mut b);
        assert_eq!(b.len(), 8 + 17 * n);
        assert_eq!(b[8] & RUN, RUN);
    }
}
