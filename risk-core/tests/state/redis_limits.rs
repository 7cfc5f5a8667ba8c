//! The Redis store's bounds and privacy against a real server: pending-label records
//! capped (the oldest dropped, counted; a label for a dropped one is `UnknownTxn`), label
//! calls reusing their connection (`INFO stats` total_connections_received), and key
//! names and values pseudonymised with a key (no raw card, device, merchant or
//! transaction id in `SCAN` output or any stored value) with the same features, and
//! a server that lost the layouts decisions send by id is sent them again.
//!
//! Each test runs a `redis-server` of its own (counts and key listings of a shared
//! server would see the other tests).

use super::redis::{defs, free_port, prefix, start_redis, KillOnDrop};
use super::*;
use risk_core::pseudo::Pseudonymiser;
use risk_core::state::{FeatureDef, RedisConfig, StateEngine, StateError};
use std::time::Duration;

fn own_server() -> (KillOnDrop, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_redis(port, dir.path());
    (server, dir, format!("redis://127.0.0.1:{port}/"))
}

fn engine(r: RedisConfig) -> (StateEngine, Arc<FeatureSchema>) {
    engine_with(r, defs())
}

fn engine_with(r: RedisConfig, features: Vec<FeatureDef>) -> (StateEngine, Arc<FeatureSchema>) {
    let cfg = StateConfig {
        features,
        redis: Some(r),
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let e = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    (e, s)
}

fn admin(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .unwrap()
        .get_connection()
        .unwrap()
}

fn keys(con: &mut ::redis::Connection, pattern: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)
            .unwrap();
        out.extend(batch);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

#[test]
fn pending_label_records_are_capped_oldest_dropped_and_counted() {
    let (_server, _dir, url) = own_server();
    let (red, s) = engine(RedisConfig {
        url: url.clone(),
        timeout: Duration::from_secs(2),
        prefix: prefix("cap"),
        max_pending: 256,
        ..RedisConfig::default()
    });
    let n = 1_500u64;
    for (i, e) in stream(5, n as usize, 40, 8).iter().enumerate() {
        let mut t = e.txn(&s);
        assert_eq!(red.apply(&mut t).status, StateStatus::Fresh, "event {i}");
    }
    assert!(red.flush(Duration::from_secs(30)));
    let mut con = admin(&url);
    let records = keys(&mut con, "risk-test-cap-*:p:*").len() as u64;
    assert!(records <= 256, "{records} records kept past the cap of 256");
    assert!(records > 0);
    let st = red.stats();
    assert_eq!(st.pending_dropped, n - records, "{st:?}");
    assert_eq!(st.store_errors, 0, "{st:?}");
    // The first transactions were dropped (each shard keeps its newest): UnknownTxn.
    let dropped = (1..=n)
        .filter(|&id| {
            matches!(
                red.report_label(TxnId(id), true, T0 + 400 * DAY),
                Err(StateError::UnknownTxn(_))
            )
        })
        .count() as u64;
    assert_eq!(dropped, n - records);
    assert!(red.report_label(TxnId(n), true, T0 + 400 * DAY).is_ok());
}

fn total_connections(con: &mut ::redis::Connection) -> u64 {
    let info: String = ::redis::cmd("INFO").arg("stats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO stats has total_connections_received")
}

#[test]
fn report_label_reuses_its_connection() {
    let (_server, _dir, url) = own_server();
    let (red, s) = engine(RedisConfig {
        url: url.clone(),
        timeout: Duration::from_secs(2),
        prefix: prefix("reuse"),
        ..RedisConfig::default()
    });
    for id in 1..=40 {
        let mut t = super::redis::txn(&s, id);
        assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    }
    assert!(red.flush(Duration::from_secs(30)));
    let mut con = admin(&url);
    let before = total_connections(&mut con);
    for id in 1..=40 {
        red.report_label(TxnId(id), id % 2 == 0, T0 + DAY).unwrap();
    }
    let after = total_connections(&mut con);
    assert_eq!(
        after - before,
        1,
        "40 labels opened {} connections",
        after - before
    );
    assert_eq!(red.stats().label_connects, 1);
}

/// The raw identifiers of a stream, as a Redis key or value would spell them.
fn raw_ids(txns: &[Transaction]) -> Vec<String> {
    let mut v: Vec<String> = txns
        .iter()
        .flat_map(|t| [t.entity.0, t.device.0, t.merchant, t.id.0])
        .filter(|&x| x != 0)
        .flat_map(|x| [format!("{x:x}"), x.to_string()])
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn with_a_key_no_raw_identifier_reaches_redis_and_features_are_unchanged() {
    let (_server, _dir, url) = own_server();
    let p = Pseudonymiser::new("privacy.key", b"a test key of thirty-two bytes!!").unwrap();
    let r = |name: &str, p: Option<Pseudonymiser>| RedisConfig {
        url: url.clone(),
        timeout: Duration::from_secs(2),
        prefix: prefix(name),
        pseudonymiser: p,
        ..RedisConfig::default()
    };
    // Distinct counts stay exact here: past the exact limit the sketch would see other
    // (keyed) hashes and give another estimate of the same count.
    let mut d = defs();
    for f in &mut d {
        f.exact_limit = 4_096;
    }
    let (plain, s) = engine_with(r("pseudo-off", None), d.clone());
    let (keyed, _) = engine_with(r("pseudo-on", Some(p)), d);
    // Identifiers long enough that finding one in a key or value is not chance.
    let evs: Vec<Ev> = stream(9, 400, 25, 6)
        .into_iter()
        .map(|mut e| {
            e.id += 0x7a11_0000_0000;
            e.card += 0xc0ff_ee00_0000;
            if e.device != 0 {
                e.device += 0xde71_ce00_0000;
            }
            e
        })
        .collect();
    let mut txns = Vec::new();
    for (i, e) in evs.iter().enumerate() {
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        let (oa, ob) = (plain.apply(&mut a), keyed.apply(&mut b));
        assert_eq!(ob.status, StateStatus::Fresh);
        let act = [Action::Approve, Action::Review, Action::Decline][i % 3];
        plain.record_outcome(&oa, act);
        keyed.record_outcome(&ob, act);
        assert!(plain.flush(Duration::from_secs(30)) && keyed.flush(Duration::from_secs(30)));
        for (f, (x, y)) in s
            .fields()
            .iter()
            .zip(a.features.values().iter().zip(b.features.values()))
        {
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "event {i}: {} unkeyed {x}, keyed {y}",
                f.name
            );
        }
        if i % 7 == 3 {
            let id = TxnId(e.id);
            assert_eq!(
                plain.report_label(id, true, e.ts + HOUR).unwrap(),
                keyed.report_label(id, true, e.ts + HOUR).unwrap()
            );
        }
        txns.push(a);
    }
    let raw = raw_ids(&txns);
    let mut con = admin(&url);
    let all = keys(&mut con, "risk-test-pseudo-on-*");
    assert!(all.len() > 100, "{} keys", all.len());
    // Without a key the raw ids are there (the check can fail).
    let unkeyed = keys(&mut con, "risk-test-pseudo-off-*");
    assert!(unkeyed
        .iter()
        .any(|k| raw.iter().any(|r| r.len() >= 10 && k.contains(r))));
    for k in &all {
        for r in raw.iter().filter(|r| r.len() >= 10) {
            assert!(!k.contains(r.as_str()), "key {k} holds raw id {r}");
        }
        // Values: pending records (hashes of text); state hashes are MessagePack rings.
        let t: String = ::redis::cmd("TYPE").arg(k).query(&mut con).unwrap();
        if t == "hash" {
            let h: Vec<Vec<u8>> = ::redis::cmd("HGETALL").arg(k).query(&mut con).unwrap();
            let text = String::from_utf8_lossy(&h.concat()).into_owned();
            for r in raw.iter().filter(|r| r.len() >= 10) {
                assert!(!text.contains(r.as_str()), "{k} holds raw id {r}");
            }
        }
    }
}

/// A key holding the format of an earlier version (a MessagePack hash) or a string of
/// the wrong layout is read as a new key, rewritten, and counted by reason; the
/// decision stays fresh and its features are those of a new key.
#[test]
fn an_old_format_or_corrupt_value_is_reset_and_counted() {
    let (_server, _dir, url) = own_server();
    let pre = prefix("reset");
    let (red, s) = engine(RedisConfig {
        url: url.clone(),
        timeout: Duration::from_secs(2),
        prefix: pre.clone(),
        ..RedisConfig::default()
    });
    let ev = |id: u64| super::redis::txn(&s, id);
    let mut t = ev(1);
    assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    let mut con = admin(&url);
    // The entity source is source 0 (its key: `<prefix>:<plan>:0:<card>`).
    let card = keys(&mut con, &format!("{pre}:*:0:*"));
    assert_eq!(card.len(), 1, "{card:?}");
    let _: () = ::redis::cmd("DEL").arg(&card[0]).query(&mut con).unwrap();
    let _: () = ::redis::cmd("HSET")
        .arg(&card[0])
        .arg("c")
        .arg(T0)
        .arg("g0")
        .arg(b"\x81\xa1h\x01".as_slice())
        .query(&mut con)
        .unwrap();
    let mut t = ev(2);
    assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    assert_eq!(t.features.by_name("c_count_1h"), Some(0.0), "a new key");
    assert_eq!(red.stats().store_reset_old_format, 1);
    let mut t = ev(3);
    red.apply(&mut t);
    assert_eq!(t.features.by_name("c_count_1h"), Some(1.0), "rewritten");
    // The key expires (after its longest window plus a day).
    let pttl: i64 = ::redis::cmd("PTTL").arg(&card[0]).query(&mut con).unwrap();
    assert!(pttl > 86_400_000, "{pttl}");
    for bad in [&b"RSK\x01short"[..], b"not ours at all", b""] {
        let _: () = ::redis::cmd("SET")
            .arg(&card[0])
            .arg(bad)
            .query(&mut con)
            .unwrap();
        let mut t = ev(4);
        assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
        assert_eq!(t.features.by_name("c_count_1h"), Some(0.0));
    }
    let st = red.stats();
    assert_eq!((st.store_reset_corrupt, st.degraded), (3, 0), "{st:?}");
}

/// Two sets of definitions that differ only in a window's filter (the same sources,
/// kinds and windows, so the same value layout) under the same configured prefix: each
/// keeps keys of its own (the prefix carries the definitions' fingerprint, which covers
/// fields and filters). Before, both read and wrote the same keys, each adding its own
/// events to the other's rings (a rolling deploy that changed a filter).
#[test]
fn definitions_that_differ_only_in_a_filter_never_share_keys() {
    use risk_core::state::{Agg, Filter, KeySource};
    let r = RedisConfig {
        url: super::redis::url(),
        prefix: prefix("defs"),
        timeout: Duration::from_secs(2),
        ..RedisConfig::default()
    };
    let below = |lt: f64| {
        vec![FeatureDef::new("n", KeySource::Entity, Agg::Count)
            .window(Duration::from_secs(3_600), 12)
            .filter(Filter::Range {
                field: "amount".into(),
                gt: None,
                ge: None,
                lt: Some(lt),
                le: None,
            })]
    };
    let (a, sa) = engine_with(r.clone(), below(1e9));
    let (b, sb) = engine_with(r, below(2e9));
    let ev = |i: u64| Ev {
        id: 900 + i,
        card: 77,
        merchant: 0,
        device: 1,
        ts: T0 + i as i64 * 60_000,
        amount: 10.0,
        channel: Channel::Pos,
        country: "US",
    };
    let n = |st: &StateEngine, s: &Arc<FeatureSchema>, i: u64| {
        let mut t = ev(i).txn(s);
        assert_eq!(st.apply(&mut t).status, StateStatus::Fresh);
        t.features.by_name("n")
    };
    for i in 0..5 {
        n(&a, &sa, i);
    }
    assert_eq!(
        n(&a, &sa, 5),
        Some(5.0),
        "the first definitions see their events"
    );
    assert_eq!(
        n(&b, &sb, 6),
        Some(0.0),
        "the second definitions' first event on the card: none of the first's"
    );
    assert_eq!(
        n(&a, &sa, 7),
        Some(6.0),
        "and the first's state is untouched"
    );
}

/// The script keeps each key source's layout between calls, and decisions send only its
/// id: a server whose library was loaded again (its held specs gone, the functions
/// still there) refuses the next call before writing anything, and the host sends it
/// again in full, once. Every feature stays equal to the in-process store's and no
/// decision degrades.
#[test]
fn a_server_that_lost_the_specs_is_sent_them_again() {
    let (_server, _dir, url) = own_server();
    let r = RedisConfig {
        url: url.clone(),
        timeout: Duration::from_secs(2),
        prefix: prefix("specs"),
        ..RedisConfig::default()
    };
    let (red, s) = engine(r);
    let mem = StateEngine::new(
        StateConfig {
            features: defs(),
            ..StateConfig::default()
        },
        Arc::clone(&s),
        clock(T0 + 400 * DAY),
    )
    .unwrap();
    let evs = stream(51, 300, 12, 3);
    let mut con = admin(&url);
    for (i, e) in evs.iter().enumerate() {
        if i == 100 || i == 200 {
            // The library restored over itself: a new Lua chunk, no spec held.
            let dump: Vec<u8> = ::redis::cmd("FUNCTION")
                .arg("DUMP")
                .query(&mut con)
                .unwrap();
            let _: () = ::redis::cmd("FUNCTION")
                .arg("RESTORE")
                .arg(dump)
                .arg("REPLACE")
                .query(&mut con)
                .unwrap();
        }
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        mem.apply(&mut a);
        assert_eq!(
            red.apply(&mut b).status,
            StateStatus::Fresh,
            "{:?}",
            red.stats()
        );
        super::redis::same_features(&s, &a, &b, i);
    }
    let st = red.stats();
    assert_eq!((st.store_specs_resent, st.degraded), (2, 0), "{st:?}");
}
