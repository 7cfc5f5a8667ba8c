//! Sequences on Redis against a real server: every tensor equals the in-process store's
//! bit for bit on an out-of-order stream (rings that wrap, late rows inserted at their
//! place, an odd number of stored values), and a row one host entered is in the
//! sequence another host reads.
//!
//! Needs `tools/servers.sh start redis` (`RISK_REDIS_URL`).

use super::redis::{prefix, same_features, url};
use super::sequence::{defs, LATE};
use super::*;
use risk_core::state::{RedisConfig, StateEngine};
use std::time::Duration;

fn config(redis: Option<RedisConfig>) -> StateConfig {
    let (features, sequences) = defs();
    StateConfig {
        features,
        sequences,
        max_lateness: Duration::from_millis(LATE as u64),
        redis,
        ..StateConfig::default()
    }
}

fn redis(prefix: &str) -> RedisConfig {
    RedisConfig {
        url: url(),
        // Generous: these tests are about equality, not deadlines.
        timeout: Duration::from_millis(2_000),
        prefix: prefix.to_owned(),
        retry: Duration::ZERO,
        ..RedisConfig::default()
    }
}

fn on_redis(prefix: &str, s: &Arc<FeatureSchema>) -> StateEngine {
    StateEngine::new(
        config(Some(redis(prefix))),
        Arc::clone(s),
        clock(T0 + 400 * DAY),
    )
    .unwrap_or_else(|e| {
        panic!(
            "the Redis store at {}: {e} (tools/servers.sh start redis)",
            url()
        )
    })
}

fn bits(q: &risk_core::Sequence) -> (usize, Vec<u32>) {
    let v = (0..q.rows()).flat_map(|r| q.row(r).to_vec());
    (q.len(), v.map(f32::to_bits).collect())
}

#[test]
fn redis_and_in_process_give_identical_sequences() {
    let mem_cfg = config(None);
    let s = schema(&mem_cfg);
    let mem = StateEngine::new(mem_cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let red = on_redis(&prefix("seq-same"), &s);
    let evs = stream(31, 3_000, 25, 12);
    let late = evs.windows(2).filter(|w| w[1].ts < w[0].ts).count();
    assert!(late > 50, "the stream has out-of-order events ({late})");
    let (mut full, mut merchant_rows) = (0, 0);
    for (i, e) in evs.iter().enumerate() {
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        mem.apply(&mut a);
        let out = red.apply(&mut b);
        assert_eq!(out.status, StateStatus::Fresh, "{:?}", red.stats());
        same_features(&s, &a, &b, i);
        for name in ["card", "merchant"] {
            let (x, y) = (a.sequences.get(name), b.sequences.get(name));
            let (x, y) = (
                x.unwrap(),
                y.unwrap_or_else(|| panic!("event {i}: no {name}")),
            );
            assert_eq!(bits(x), bits(y), "event {i}: {name} in process / Redis");
        }
        let card = b.sequences.get("card").unwrap();
        full += (card.len() == card.rows()) as usize;
        merchant_rows += b.sequences.get("merchant").unwrap().len();
    }
    assert!(full > 2_000, "the card rings wrapped ({full} full)");
    assert!(
        merchant_rows > 1_000,
        "the filtered merchant sequence held rows"
    );
    let st = red.stats();
    assert_eq!((st.degraded, st.sequence_rows_lost), (0, 0), "{st:?}");
}

#[test]
fn a_row_entered_on_one_host_is_read_on_another() {
    let s = schema(&config(None));
    let p = prefix("seq-hosts");
    let (a, b) = (on_redis(&p, &s), on_redis(&p, &s));
    let evs = stream(32, 40, 2, 1);
    let card = evs[0].card;
    let other = evs.iter().find(|e| e.card != card).expect("two cards");
    let mine: Vec<&Ev> = evs.iter().filter(|e| e.card == card).take(3).collect();
    assert_eq!(mine.len(), 3);
    let mut t = mine[0].txn(&s);
    a.apply(&mut t);
    // Host a's row is sent after its decision, not waited for; its next call on the
    // same connection is answered after it ran: then host b reads it.
    a.apply(&mut other.txn(&s));
    let mut t = mine[1].txn(&s);
    b.apply(&mut t);
    let q = t.sequences.get("card").unwrap();
    assert_eq!(q.len(), 2, "host b sees host a's row and its own");
    let mut amounts: Vec<f32> = (0..2).map(|r| q.row(r)[0]).collect();
    let mut want = vec![mine[0].amount as f32, mine[1].amount as f32];
    amounts.sort_by(f32::total_cmp);
    want.sort_by(f32::total_cmp);
    assert_eq!(amounts, want);
    assert_eq!(
        a.stats().sequence_rows_lost + b.stats().sequence_rows_lost,
        0
    );
}
