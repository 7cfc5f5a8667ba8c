//! Lists shared through Redis (`[state.redis]`, `share_lists = true`): a change made on
//! one engine is seen by another on its next decision once its subscriber has applied it
//! (the tests wait on that engine's applied version, never on time); expiry at the same
//! wall time everywhere; a Redis killed or paused leaves the last known lists serving,
//! flagged on the decision and in `health()`, and a reconnect reloads them; bad entries
//! refused (typed), a malformed entry on Redis refused without replacing what serves;
//! pseudonymised entries reach Redis without their raw key.
//!
//! Needs `tools/servers.sh start redis` (`RISK_REDIS_URL`); the kill and pause tests start
//! a `redis-server` of their own. Every test uses a prefix of its own.

use super::redis::{free_port, prefix, start_redis, url};
use super::*;
use risk_core::state::{KeySource, ListDef, RedisConfig, StateEngine, StateError, StatePrivacy};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

const DEVICES: &str = "blocked_devices";

fn cfg(url: &str, prefix: &str, file: Option<&Path>) -> StateConfig {
    StateConfig {
        lists: vec![
            ListDef {
                name: DEVICES.into(),
                key: KeySource::Device,
                file: file.map(Path::to_path_buf),
            },
            ListDef {
                name: "vip_emails".into(),
                key: KeySource::Email,
                file: None,
            },
        ],
        redis: Some(RedisConfig {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            timeout: Duration::from_millis(500),
            lists_check: Duration::from_millis(100),
            ..RedisConfig::default()
        }),
        ..StateConfig::default()
    }
}

fn state(c: &StateConfig, clk: &Arc<ManualClock>, privacy: StatePrivacy) -> StateEngine {
    let s = schema(c);
    StateEngine::with_privacy(c.clone(), s, clk.clone(), privacy).unwrap_or_else(|e| {
        panic!("shared lists on Redis: {e} (tools/servers.sh start redis, RISK_REDIS_URL)")
    })
}

/// Device `d`'s membership of the blocked list as the decide path reads it, and whether
/// the lists were stale.
fn member(st: &StateEngine, device: u64) -> (Option<f32>, bool) {
    let mut t = Transaction::builder(st.schema())
        .id(1)
        .amount(5.0, "USD")
        .device(device)
        .build()
        .unwrap();
    let out = st.apply(&mut t);
    (
        t.features.by_name("list.blocked_devices.device"),
        out.lists_stale,
    )
}

fn version(l: &risk_core::state::Lists, list: &str) -> u64 {
    let s = l.sync_status().expect("the lists are shared");
    s.versions.iter().find(|(n, _)| n == list).unwrap().1
}

/// Waits (bounded) until `cond` holds: each check reads an engine's observable state.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::yield_now();
    }
}

/// Waits until `b` has applied `list` up to the version `a` has (a's own change).
fn synced(a: &risk_core::state::Lists, b: &risk_core::state::Lists, list: &str) {
    let v = version(a, list);
    wait_until(
        &format!("{list} at version {v} on the second engine"),
        || version(b, list) >= v,
    );
}

/// A minimal RESP client for looking at (and tampering with) the keys on Redis.
struct Resp(BufReader<std::net::TcpStream>);

impl Resp {
    fn new(url: &str) -> Self {
        let hp = url.trim_start_matches("redis://").trim_end_matches('/');
        Resp(BufReader::new(std::net::TcpStream::connect(hp).unwrap()))
    }
    fn cmd(&mut self, args: &[&str]) -> Vec<String> {
        let mut m = format!("*{}\r\n", args.len());
        for a in args {
            m.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.0.get_mut().write_all(m.as_bytes()).unwrap();
        let mut out = Vec::new();
        self.read(&mut out);
        out
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l.trim_end().to_owned()
    }
    fn read(&mut self, out: &mut Vec<String>) {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        match t {
            "*" => {
                for _ in 0..rest.parse::<i64>().unwrap().max(0) {
                    self.read(out);
                }
            }
            "$" if rest == "-1" => {}
            "$" => out.push(self.line()),
            "-" => panic!("redis error: {rest}"),
            _ => out.push(rest.to_owned()),
        }
    }
}

fn key(prefix: &str, list: &str, key: &str, part: &str) -> String {
    format!("{prefix}:list:{{{list}:{key}}}:{part}")
}

/// THE acceptance test: two engines sharing one Redis; a block added on A is seen by B's
/// next decision once B's subscriber applied it; removal and expiry likewise.
#[test]
fn a_list_change_on_one_engine_is_seen_by_the_next_decision_of_another() {
    let p = prefix("lists-share");
    let c = cfg(&url(), &p, None);
    let (ca, cb) = (clock(T0), clock(T0));
    let engine = |clk: &Arc<ManualClock>| {
        let s = schema(&c);
        let slot = s.slot("list.blocked_devices.device").unwrap();
        Engine::builder(s)
            .clock(clk.clone())
            .rules(Arc::new(Echo(slot)))
            .state(c.clone())
            .build()
            .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"))
    };
    let (a, b) = (engine(&ca), engine(&cb));
    let txn = |e: &Engine, device: u64| {
        Transaction::builder(e.schema())
            .id(device)
            .amount(5.0, "USD")
            .device(device)
            .build()
            .unwrap()
    };
    let (la, lb) = (a.lists().unwrap(), b.lists().unwrap());
    assert_eq!(b.decide(&txn(&b, 42)).unwrap().rule_score, 0.0);
    // Add on A: B's next decision (after its subscriber applied it) is blocked.
    la.add(DEVICES, "42", None).unwrap();
    la.add(DEVICES, "43", Some(T0 + 60_000)).unwrap();
    synced(la, lb, DEVICES);
    let d = b.decide(&txn(&b, 42)).unwrap();
    assert_eq!(d.rule_score, 1.0);
    assert!(!d.lists_stale);
    assert_eq!(b.decide(&txn(&b, 43)).unwrap().rule_score, 1.0);
    // Applied from its messages, or by a reload if the subscriber's start raced them.
    let st = b.state().unwrap().stats();
    assert!(st.list_changes + st.list_resyncs >= 2, "{st:?}");
    // Removal on B: A sees it.
    assert!(lb.remove(DEVICES, "42").unwrap());
    synced(lb, la, DEVICES);
    assert_eq!(a.decide(&txn(&a, 42)).unwrap().rule_score, 0.0);
    assert!(!lb.remove(DEVICES, "42").unwrap(), "already gone");
    // Expiry: the same wall time on both hosts.
    ca.set_unix_origin_ms(T0 + 59_999);
    cb.set_unix_origin_ms(T0 + 59_999);
    assert_eq!(a.decide(&txn(&a, 43)).unwrap().rule_score, 1.0);
    assert_eq!(b.decide(&txn(&b, 43)).unwrap().rule_score, 1.0);
    ca.set_unix_origin_ms(T0 + 60_000);
    cb.set_unix_origin_ms(T0 + 60_000);
    assert_eq!(a.decide(&txn(&a, 43)).unwrap().rule_score, 0.0);
    assert_eq!(b.decide(&txn(&b, 43)).unwrap().rule_score, 0.0);
    // A purge on A drops the expired entry on Redis and on B.
    assert_eq!(la.purge_expired(), 1);
    synced(la, lb, DEVICES);
    assert_eq!(lb.len(DEVICES).unwrap(), 0);
    assert!(a.health().reasons.is_empty(), "{:?}", a.health());
    assert!(!b.health().lists_stale);
}

/// Answers the list membership field (1 blocked, 0 not).
struct Echo(Slot);
impl Scorer for Echo {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("echo", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let v = t.features.get(self.0);
        Ok(Score::new(if v.is_nan() { 0.0 } else { v }))
    }
}

/// Seeds from a file, a list without a file, and every host's file as the base: a runtime
/// removal of a file entry survives another host's start.
#[test]
fn files_seed_the_shared_base_and_runtime_changes_stay_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("blocked.txt");
    std::fs::write(&f, "# seed\n100\n101,9999999999999\n102,1\n").unwrap();
    let p = prefix("lists-seed");
    let c = cfg(&url(), &p, Some(&f));
    let clk = clock(T0);
    let a = state(&c, &clk, StatePrivacy::default());
    assert_eq!(member(&a, 100).0, Some(1.0));
    assert_eq!(member(&a, 102).0, Some(0.0), "expired in the file");
    assert!(a.lists().remove(DEVICES, "100").unwrap());
    // A second host starting with the same file does not bring 100 back.
    let b = state(&c, &clk, StatePrivacy::default());
    assert_eq!(member(&b, 100).0, Some(0.0));
    assert_eq!(member(&b, 101).0, Some(1.0));
    // A changed file, reloaded on B, replaces the base everywhere (the removal of 100,
    // no longer in the file, is dropped with it).
    std::fs::write(&f, "103\n").unwrap();
    b.lists().reload().unwrap();
    synced(b.lists(), a.lists(), DEVICES);
    for st in [&a, &b] {
        assert_eq!(member(st, 101).0, Some(0.0));
        assert_eq!(member(st, 103).0, Some(1.0));
    }
    // A bad file is refused naming file:line; what serves is unchanged.
    std::fs::write(&f, "103\nnot-a-device\n").unwrap();
    let e = b.lists().reload().unwrap_err();
    assert!(matches!(e, StateError::BadListFile { line: 2, .. }), "{e}");
    assert_eq!(member(&b, 103).0, Some(1.0));
}

#[test]
fn bad_entries_are_refused_with_typed_errors_and_a_malformed_entry_on_redis_never_serves() {
    let p = prefix("lists-bad");
    let c = cfg(&url(), &p, None);
    let clk = clock(T0);
    let (a, b) = (
        state(&c, &clk, StatePrivacy::default()),
        state(&c, &clk, StatePrivacy::default()),
    );
    let l = a.lists();
    for (list, v) in [
        (DEVICES, "4\n2"),
        (DEVICES, "abc"),
        (DEVICES, "4,2"),
        (DEVICES, ""),
        ("vip_emails", "a@b\u{7}"),
    ] {
        let e = l.add(list, v, None).unwrap_err();
        assert!(matches!(e, StateError::BadEntry { .. }), "{v:?}: {e}");
        assert_eq!(e.code(), 1605);
    }
    assert!(matches!(
        l.add("nope", "1", None).unwrap_err(),
        StateError::UnknownList(_)
    ));
    l.add(DEVICES, "42", None).unwrap();
    synced(l, b.lists(), DEVICES);
    // Someone writes garbage into the list on Redis: B refuses the reload, keeps serving
    // what it had, and says so.
    let mut r = Resp::new(&url());
    r.cmd(&["HSET", &key(&p, DEVICES, "device", "chg"), "zz", "1"]);
    r.cmd(&["INCR", &key(&p, DEVICES, "device", "ver")]);
    wait_until("B refuses the malformed list", || {
        b.lists().sync_status().unwrap().refused > 0
    });
    assert_eq!(member(&b, 42).0, Some(1.0));
    let st = b.lists().sync_status().unwrap();
    assert!(
        st.last_error
            .as_deref()
            .unwrap_or("")
            .contains("16-hex-digit"),
        "{st:?}"
    );
    // Repaired: B reloads it and is fresh again.
    r.cmd(&["HDEL", &key(&p, DEVICES, "device", "chg"), "zz"]);
    let v: u64 = r.cmd(&["INCR", &key(&p, DEVICES, "device", "ver")])[0]
        .parse()
        .unwrap();
    wait_until("B reloads the repaired list", || {
        version(b.lists(), DEVICES) == v && !b.lists().stale()
    });
    assert_eq!(member(&b, 42), (Some(1.0), false));
}

#[test]
fn pseudonymised_entries_on_redis_hold_no_raw_key_and_another_key_is_refused() {
    let p = prefix("lists-pseudo");
    let c = cfg(&url(), &p, None);
    let clk = clock(T0);
    let privacy = |k: &[u8]| StatePrivacy {
        pseudonymiser: Some(risk_core::pseudo::Pseudonymiser::new("privacy.key", k).unwrap()),
        ..StatePrivacy::default()
    };
    let key_a = b"0123456789abcdef-list-key";
    let (a, b) = (
        state(&c, &clk, privacy(key_a)),
        state(&c, &clk, privacy(key_a)),
    );
    a.lists().add(DEVICES, "123456789", None).unwrap();
    a.lists()
        .add("vip_emails", "Alice@Example.com", None)
        .unwrap();
    synced(a.lists(), b.lists(), DEVICES);
    synced(a.lists(), b.lists(), "vip_emails");
    assert_eq!(member(&b, 123_456_789).0, Some(1.0));
    assert!(b
        .lists()
        .contains("vip_emails", "alice@example.com")
        .unwrap());
    let mut r = Resp::new(&url());
    let raw = [
        format!("{:016x}", 123_456_789u64),
        format!("{:016x}", risk_core::state::email_hash("alice@example.com")),
    ];
    let mut seen = Vec::new();
    for (list, k) in [(DEVICES, "device"), ("vip_emails", "email")] {
        seen.extend(r.cmd(&["HGETALL", &key(&p, list, k, "chg")]));
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    for s in &seen {
        assert!(!raw.contains(s), "a raw key on Redis: {s}");
        assert!(!s.to_lowercase().contains("alice") && !s.contains("123456789"));
    }
    // A host with another key would misread every entry: refused at build.
    let e = StateEngine::with_privacy(
        c.clone(),
        schema(&c),
        clk.clone(),
        privacy(b"another-key-0123456789"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("privacy"), "{e}");
    // And one without a key.
    assert!(
        StateEngine::with_privacy(c.clone(), schema(&c), clk, StatePrivacy::default()).is_err()
    );
}

/// Redis killed: the last known lists keep serving, decisions and health say stale,
/// changes fail (typed); Redis back (empty): every host reloads, files re-seed it.
#[test]
fn a_redis_killed_leaves_the_last_lists_serving_and_a_restart_resynchronises() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("blocked.txt");
    std::fs::write(&f, "100\n").unwrap();
    let port = free_port();
    let mut server = start_redis(port, dir.path());
    let u = format!("redis://127.0.0.1:{port}/");
    let c = cfg(&u, &prefix("lists-kill"), Some(&f));
    let clk = clock(T0);
    let engine = || {
        Engine::builder(schema(&c))
            .clock(clk.clone())
            .rules(Arc::new(ConstantScorer::new(0.1)))
            .state(c.clone())
            .build()
            .unwrap()
    };
    let (a, b) = (engine(), engine());
    let (la, lb) = (a.lists().unwrap(), b.lists().unwrap());
    la.add(DEVICES, "42", None).unwrap();
    synced(la, lb, DEVICES);
    let st = b.state().unwrap();
    assert_eq!(member(st, 42), (Some(1.0), false));
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    wait_until("B notices Redis is gone", || lb.stale());
    // The last known lists serve, flagged.
    assert_eq!(member(st, 42), (Some(1.0), true));
    assert_eq!(member(st, 100), (Some(1.0), true));
    let t = Transaction::builder(b.schema())
        .id(9)
        .amount(5.0, "USD")
        .device(42)
        .build()
        .unwrap();
    assert!(b.decide(&t).unwrap().lists_stale);
    let h = b.health();
    assert!(h.lists_stale && h.status == HealthStatus::Degraded, "{h:?}");
    assert!(st.stats().lists_stale >= 3 && st.stats().list_sync_errors >= 1);
    assert!(st.to_json().contains("\"lists_stale\":true"));
    let m = b.metrics_text();
    assert!(m.contains("risk_state_lists_stale 1"), "{m}");
    assert!(
        m.contains("risk_state_list_sync_total{event=\"error\"}"),
        "{m}"
    );
    let e = lb.add(DEVICES, "44", None).unwrap_err();
    assert!(matches!(e, StateError::ListStore { .. }), "{e}");
    assert_eq!(e.code(), 1611);
    assert_eq!(
        member(st, 44).0,
        Some(0.0),
        "a failed change changes nothing"
    );
    // Back, empty (no persistence): reloaded, the file re-seeded, runtime changes gone.
    let resyncs = st.stats().list_resyncs;
    let _server = start_redis(port, dir.path());
    wait_until("B reloads from the restarted Redis", || {
        !lb.stale() && st.stats().list_resyncs > resyncs
    });
    assert_eq!(member(st, 100), (Some(1.0), false));
    assert_eq!(member(st, 42), (Some(0.0), false));
    assert!(!b.health().lists_stale);
    wait_until("A reconnects too", || !la.stale());
    la.add(DEVICES, "45", None).unwrap();
    synced(la, lb, DEVICES);
    assert_eq!(member(st, 45).0, Some(1.0));
}

/// Redis paused (CLIENT PAUSE: nothing answers): stale within the check bound; resumed:
/// fresh again.
#[test]
fn a_redis_paused_makes_the_lists_stale_until_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = start_redis(port, dir.path());
    let u = format!("redis://127.0.0.1:{port}/");
    let c = cfg(&u, &prefix("lists-pause"), None);
    let clk = clock(T0);
    let b = state(&c, &clk, StatePrivacy::default());
    b.lists().add(DEVICES, "42", None).unwrap();
    // Paused for 2 s (it resumes by itself: an UNPAUSE would wait behind the pause).
    Resp::new(&u).cmd(&["CLIENT", "PAUSE", "2000", "ALL"]);
    wait_until("B notices Redis does not answer", || b.lists().stale());
    assert_eq!(member(&b, 42), (Some(1.0), true));
    wait_until("B is fresh again", || !b.lists().stale());
    assert_eq!(member(&b, 42), (Some(1.0), false));
}

/// `[state.redis] share_lists`, `lists_check_ms`, `rows_linger_ms`, `connections` and
/// `read_spin_us` from risk.toml; unknown keys and values out of range refused, naming the key.
#[test]
fn risk_toml_sets_shared_lists_and_refuses_unknown_keys() {
    let toml = |redis: &str| {
        format!(
            r#"
[schema]
fields = [{{ name = "amount", kind = "numeric", required = true }}]

[rules.scorer]
kind = "constant"
probability = 0.1

[state.lists.blocked_devices]
key = "device"

[state.redis]
url = "{}"
prefix = "{}"
{redis}
"#,
            url(),
            prefix("lists-toml")
        )
    };
    let load = |redis: &str| {
        Engine::from_toml_str(
            &toml(redis),
            Path::new("."),
            Path::new("risk.toml"),
            &ScorerRegistry::default(),
        )
    };
    let e = load("lists_check_ms = 250").unwrap();
    assert!(e.lists().unwrap().sync_status().is_some());
    assert_eq!(
        e.state()
            .unwrap()
            .config()
            .redis
            .as_ref()
            .unwrap()
            .lists_check,
        Duration::from_millis(250)
    );
    let e = load("share_lists = false").unwrap();
    assert!(e.lists().unwrap().sync_status().is_none());
    let err = load("lists_chek_ms = 5").err().unwrap();
    assert!(err.to_string().contains("lists_chek_ms"), "{err}");
    let err = load("lists_check_ms = -1").err().unwrap();
    assert_eq!(err.key(), Some("state.redis.lists_check_ms"), "{err}");
    let err = load("lists_check_ms = 0").err().unwrap();
    assert_eq!(err.key(), Some("state.redis.lists_check_ms"), "{err}");
    // The sequence rows' linger on the shared connection (not a lists key, same table).
    let e = load("rows_linger_ms = 2.5").unwrap();
    let r = e.state().unwrap().config().redis.clone().unwrap();
    assert_eq!(r.rows_linger, Duration::from_micros(2_500));
    let err = load("rows_linger_ms = -1").err().unwrap();
    assert_eq!(err.key(), Some("state.redis.rows_linger_ms"), "{err}");
    // The decide path's connections (default 2, 1..=64).
    let conns = |e: &Engine| {
        e.state()
            .unwrap()
            .config()
            .redis
            .clone()
            .unwrap()
            .connections
    };
    assert_eq!(conns(&load("").unwrap()), 2);
    assert_eq!(conns(&load("connections = 4").unwrap()), 4);
    for bad in ["connections = 0", "connections = 65", "connections = -1"] {
        let err = load(bad).err().unwrap();
        assert_eq!(err.key(), Some("state.redis.connections"), "{bad}: {err}");
    }
    // How long a read polls before it blocks (default 0, at most 10 ms).
    let spin = |e: &Engine| e.state().unwrap().config().redis.clone().unwrap().read_spin;
    assert_eq!(spin(&load("").unwrap()), Duration::ZERO);
    assert_eq!(
        spin(&load("read_spin_us = 150").unwrap()),
        Duration::from_micros(150)
    );
    assert_eq!(
        spin(&load("timeout_ms = 20\nread_spin_us = 8000").unwrap()),
        Duration::from_millis(8)
    );
    // Longer than the timeout (default 5 ms) is refused too.
    for bad in [
        "read_spin_us = -1",
        "read_spin_us = 10001",
        "read_spin_us = nan",
        "read_spin_us = 5001",
        "timeout_ms = 20\nread_spin_us = 10001",
    ] {
        let err = load(bad).err().unwrap();
        assert_eq!(err.key(), Some("state.redis.read_spin_us"), "{bad}: {err}");
    }
}

/// Over TLS with a client certificate and the ACL user (the connection settings of
/// `[state.redis]`): the subscriber and the changes use them too.
#[test]
fn shared_lists_work_over_tls_with_the_acl_user() {
    let mut c = cfg(&url(), "unused", None);
    let r = super::redis_tls::tls_config("lists-tls");
    c.redis = Some(RedisConfig {
        lists_check: Duration::from_millis(100),
        ..r
    });
    let clk = clock(T0);
    let (a, b) = (
        state(&c, &clk, StatePrivacy::default()),
        state(&c, &clk, StatePrivacy::default()),
    );
    a.lists().add(DEVICES, "42", None).unwrap();
    synced(a.lists(), b.lists(), DEVICES);
    assert_eq!(member(&b, 42), (Some(1.0), false));
}
