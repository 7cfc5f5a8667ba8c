//! The Redis store against a real server: identical features to the in-process store on
//! the same stream (windows, filters, distinct past the exact limit, labels, outcomes),
//! and a server slowed (CLIENT PAUSE) or killed mid-run: every decision still answers,
//! features missing, flagged and counted.
//!
//! Needs `tools/servers.sh start redis` (`RISK_REDIS_URL`, default
//! redis://127.0.0.1:6390/); the kill test starts a `redis-server` of its own.

use super::*;
use risk_core::state::{Agg, Current, FeatureDef, KeySource, RedisConfig, StateEngine};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(super) fn url() -> String {
    std::env::var("RISK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".to_owned())
}

/// A prefix of this test run's own.
pub(super) fn prefix(name: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("risk-test-{name}-{}-{t}", std::process::id())
}

pub(super) fn defs() -> Vec<FeatureDef> {
    let h = |n: u64| Duration::from_secs(n * 3_600);
    let mut d = vec![
        FeatureDef::new("c_count_1h", KeySource::Entity, Agg::Count).window(h(1), 12),
        FeatureDef::new("c_inc_1h", KeySource::Entity, Agg::Count)
            .window(h(1), 12)
            .current(Current::Include),
        FeatureDef::new("c_sum_24h", KeySource::Entity, Agg::Sum).window(h(24), 24),
        FeatureDef::new("c_min_24h", KeySource::Entity, Agg::Min).window(h(24), 24),
        FeatureDef::new("c_max_24h", KeySource::Entity, Agg::Max).window(h(24), 24),
        FeatureDef::new("c_std_24h", KeySource::Entity, Agg::Stddev).window(h(24), 24),
        FeatureDef::new("c_ratio_7d", KeySource::Entity, Agg::Ratio).window(h(168), 7),
        // More buckets than one word of occupancy bits holds (169: six words in Redis).
        FeatureDef::new("c_sum_7d_hourly", KeySource::Entity, Agg::Sum).window(h(168), 168),
        // Every column over more buckets than a word of occupancy bits holds, and rings
        // of exactly 32 slots (the script's words: their top bit is the sign).
        FeatureDef::new("c_max_7d_hourly", KeySource::Entity, Agg::Max).window(h(168), 168),
        FeatureDef::new("c_std_31h", KeySource::Entity, Agg::Stddev).window(h(31), 31),
        FeatureDef::new("c_count_31h", KeySource::Entity, Agg::Count).window(h(31), 31),
        FeatureDef::new("c_gap", KeySource::Entity, Agg::SinceLast),
        FeatureDef::new("c_countries", KeySource::Entity, Agg::Distinct)
            .of("country")
            .window(h(24), 24)
            .current(Current::Include),
        FeatureDef::new("m_count_1h", KeySource::Merchant, Agg::Count).window(h(1), 6),
        FeatureDef::new("m_fraud_2d", KeySource::Merchant, Agg::FraudRate)
            .window(h(48), 4)
            .delay(h(24)),
        FeatureDef::new("d_count", KeySource::Device, Agg::Count).window(h(24), 24),
        FeatureDef::new("c_declines_24h", KeySource::Entity, Agg::Count)
            .window(h(24), 24)
            .outcome(&[Action::Decline]),
    ];
    // Far past the exact limit: the sketch, computed identically in the script.
    let mut m = FeatureDef::new("m_cards", KeySource::Merchant, Agg::Distinct)
        .of("card")
        .window(h(24), 24);
    m.exact_limit = 4;
    d.push(m);
    d
}

fn engines(
    name: &str,
    url: &str,
    timeout_ms: u64,
    retry_ms: u64,
    spin: Duration,
) -> (StateEngine, StateEngine, Arc<FeatureSchema>) {
    let mem = StateConfig {
        features: defs(),
        ..StateConfig::default()
    };
    let s = schema(&mem);
    let red = StateConfig {
        redis: Some(RedisConfig {
            url: url.to_owned(),
            timeout: Duration::from_millis(timeout_ms),
            prefix: prefix(name),
            retry: Duration::from_millis(retry_ms),
            read_spin: spin,
            ..RedisConfig::default()
        }),
        ..mem.clone()
    };
    let c = clock(T0 + 400 * DAY);
    let a = StateEngine::new(mem, Arc::clone(&s), c.clone()).unwrap();
    let b = StateEngine::new(red, Arc::clone(&s), c)
        .unwrap_or_else(|e| panic!("the Redis store at {url}: {e} (tools/servers.sh start redis)"));
    (a, b, s)
}

#[test]
fn redis_and_in_process_give_identical_features() {
    // Generous timeout: this test is about equality, not deadlines.
    let (mem, red, s) = engines("same", &url(), 2_000, 0, Duration::ZERO);
    let evs = stream(21, 3_000, 30, 6);
    let (mut compared, mut sketched) = (0, 0);
    for (i, e) in evs.iter().enumerate() {
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        let oa = mem.apply(&mut a);
        let out = red.apply(&mut b);
        assert_eq!(out.status, StateStatus::Fresh, "{:?}", red.stats());
        // Outcomes (written by Redis's background writer: flushed before the next read).
        let act = [Action::Approve, Action::Review, Action::Decline][(e.id % 3) as usize];
        mem.record_outcome(&oa, act);
        red.record_outcome(&out, act);
        assert!(red.flush(Duration::from_secs(30)));
        same_features(&s, &a, &b, i);
        compared += 1;
        sketched += (b.features.by_name("m_cards").unwrap_or(0.0) > 4.0) as usize;
        // Labels for every 7th transaction, reported through both stores.
        if i % 7 == 3 {
            let id = TxnId(e.id);
            let at = e.ts + HOUR;
            assert_eq!(
                mem.report_label(id, true, at).unwrap(),
                red.report_label(id, true, at).unwrap()
            );
        }
    }
    assert_eq!(compared, evs.len());
    assert!(sketched > 100, "the HyperLogLog path ran {sketched} times");
    assert!(mem.stats().labels > 0 && mem.stats().labels == red.stats().labels);
    assert_eq!(red.stats().degraded, 0);
    // One caller, the connection idle between decisions: calls are made on the deciding
    // thread (the first connects through the I/O thread; a call that meets the thread
    // holding the lock for a moment queues instead).
    let direct = red.stats().store_calls_direct;
    assert!(
        direct > evs.len() as u64 / 2,
        "{direct} of {} calls made directly",
        evs.len()
    );
    // Reads that block at once (no `read_spin_us`): none polled, one at least a call.
    let st = red.stats();
    assert_eq!(st.store_reads_polled, 0);
    assert!(st.store_reads_blocked >= evs.len() as u64, "{st:?}");
}

/// With `read_spin_us`, the same features bit for bit, and the reads counted by how
/// they waited: polled ones appear (each read polls for up to 10 ms before it blocks;
/// loopback replies come well within it), and every read is counted one way or the
/// other.
#[test]
fn reads_that_poll_first_give_identical_features_and_are_counted() {
    let (mem, red, s) = engines("spin", &url(), 2_000, 0, Duration::from_millis(10));
    let evs = stream(22, 400, 20, 4);
    for (i, e) in evs.iter().enumerate() {
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        mem.apply(&mut a);
        assert_eq!(
            red.apply(&mut b).status,
            StateStatus::Fresh,
            "{:?}",
            red.stats()
        );
        same_features(&s, &a, &b, i);
    }
    let st = red.stats();
    assert!(st.store_reads_polled > 0, "{st:?}");
    assert!(
        st.store_reads_polled + st.store_reads_blocked >= evs.len() as u64,
        "{st:?}"
    );
}

/// An engine whose Redis reads poll first says so in its metrics: the polled reads
/// counted (`risk_state_store_reads_total{wait="polled"}`), none without a spin.
#[test]
fn the_metrics_count_the_redis_reads_by_how_they_waited() {
    let polled = |spin: Duration| {
        let cfg = StateConfig {
            features: defs(),
            redis: Some(RedisConfig {
                url: url(),
                timeout: Duration::from_secs(2),
                prefix: prefix("metrics-reads"),
                read_spin: spin,
                ..RedisConfig::default()
            }),
            ..StateConfig::default()
        };
        let s = schema(&cfg);
        let e = Engine::builder(Arc::clone(&s))
            .clock(clock(T0 + 400 * DAY))
            .rules(Arc::new(risk_core::ConstantScorer::new(0.1)))
            .state(cfg)
            .build()
            .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"));
        for id in 1..=50 {
            e.decide(&txn(&s, id)).unwrap();
        }
        let m = e.metrics_text();
        let count = |wait: &str| {
            let k = format!("risk_state_store_reads_total{{wait=\"{wait}\"}} ");
            m.lines()
                .find_map(|l| l.strip_prefix(k.as_str()))
                .unwrap_or_else(|| panic!("no {k} in {m}"))
                .trim()
                .parse::<f64>()
                .unwrap()
        };
        assert!(count("polled") + count("blocked") >= 50.0, "{m}");
        count("polled")
    };
    assert_eq!(polled(Duration::ZERO), 0.0);
    assert!(polled(Duration::from_millis(10)) > 0.0);
}

/// Every feature of event `i` equal bit for bit in process (`a`) and on Redis (`b`);
/// missing in both counts as equal.
pub(super) fn same_features(s: &FeatureSchema, a: &Transaction, b: &Transaction, i: usize) {
    let (x, y) = (a.features.values(), b.features.values());
    for (f, (p, q)) in s.fields().iter().zip(x.iter().zip(y)) {
        assert!(
            p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
            "event {i}: {} in process {p}, Redis {q}",
            f.name
        );
    }
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(super) fn start_redis(port: u16, dir: &std::path::Path) -> KillOnDrop {
    start_redis_with(port, dir, &[])
}

pub(super) fn start_redis_with(port: u16, dir: &std::path::Path, extra: &[&str]) -> KillOnDrop {
    let c = KillOnDrop(
        Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (apt-get install -y redis-server)"),
    );
    // Ready when it answers PING (an event, not a delay; bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let mut buf = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok()
                && s.read_exact(&mut buf).is_ok()
                && &buf == b"+PONG\r\n"
            {
                return c;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "redis-server on {port} never answered"
        );
        std::thread::yield_now();
    }
}

/// Stops a test's own server however the test ends.
pub(super) struct KillOnDrop(pub(super) Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Transaction `id` of card 5 at merchant 3, a second apart (shared with `redis_limits`).
pub(super) fn txn(s: &Arc<FeatureSchema>, id: u64) -> Transaction {
    Ev {
        id,
        card: 5,
        merchant: 3,
        device: 9,
        ts: T0 + id as i64 * 1_000,
        amount: 12.0,
        channel: Channel::Ecom,
        country: "GB",
    }
    .txn(s)
}

#[test]
fn a_redis_killed_mid_run_degrades_every_decision_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = start_redis(port, dir.path());
    let url = format!("redis://127.0.0.1:{port}/");
    let (_, red, s) = engines("kill", &url, 200, 0, Duration::ZERO);
    let mut t = txn(&s, 1);
    assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    let mut t = txn(&s, 2);
    red.apply(&mut t);
    assert_eq!(t.features.by_name("c_count_1h"), Some(1.0));
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    // Down: answered, features missing, flagged.
    for id in 3..6 {
        let mut t = txn(&s, id);
        let out = red.apply(&mut t);
        assert!(
            matches!(out.status, StateStatus::Degraded(_)),
            "{:?}",
            out.status
        );
        assert_eq!(t.features.by_name("c_count_1h"), None, "missing, not 0");
    }
    let st = red.stats();
    assert_eq!(st.degraded, 3);
    assert!(st.store_errors + st.store_timeouts >= 1, "{st:?}");
    // Back on the same port (an empty server: the state it had is gone): fresh again.
    let _server = start_redis(port, dir.path());
    let mut t = txn(&s, 6);
    assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    assert_eq!(t.features.by_name("c_count_1h"), Some(0.0));
}

/// A Redis paused (CLIENT PAUSE: every command waits) answers nothing within the
/// timeout: the decision gets its features missing in time; while it is down, Redis is
/// skipped (no wait at all) until the retry time.
#[test]
fn a_slow_redis_is_cut_off_by_its_timeout_then_skipped() {
    slow_redis_cut_off(Duration::ZERO);
}

/// The same with reads that poll for 1 ms before they block: the timeout still holds.
#[test]
fn a_slow_redis_is_cut_off_by_its_timeout_when_reads_poll_first() {
    slow_redis_cut_off(Duration::from_millis(1));
}

fn slow_redis_cut_off(spin: Duration) {
    // A server of its own: pausing the shared one would stall the other tests.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = start_redis(port, dir.path());
    let url = format!("redis://127.0.0.1:{port}/");
    let (_, red, s) = engines("slow", &url, 50, 60_000, spin);
    let mut t = txn(&s, 1);
    assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    let client = redis_admin(&url);
    let mut c = client;
    pause(&mut c, 3_000);
    let mut t = txn(&s, 2);
    let out = red.apply(&mut t);
    assert_eq!(out.status, StateStatus::Degraded(StateFault::Timeout));
    let mut t = txn(&s, 3);
    assert_eq!(
        red.apply(&mut t).status,
        StateStatus::Degraded(StateFault::Unavailable)
    );
    unpause(&mut c);
    let st = red.stats();
    assert_eq!(
        (st.store_timeouts, st.store_skipped, st.degraded),
        (1, 1, 2)
    );
}

fn redis_admin(url: &str) -> std::net::TcpStream {
    let hostport = url.trim_start_matches("redis://").trim_end_matches('/');
    std::net::TcpStream::connect(hostport).unwrap()
}

fn send(c: &mut std::net::TcpStream, cmd: &str) {
    use std::io::{Read, Write};
    let parts: Vec<&str> = cmd.split(' ').collect();
    let mut msg = format!("*{}\r\n", parts.len());
    for p in parts {
        msg.push_str(&format!("${}\r\n{p}\r\n", p.len()));
    }
    c.write_all(msg.as_bytes()).unwrap();
    let mut buf = [0u8; 5];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+OK\r\n", "{cmd}");
}

fn pause(c: &mut std::net::TcpStream, ms: u64) {
    send(c, &format!("CLIENT PAUSE {ms} ALL"));
}

fn unpause(c: &mut std::net::TcpStream) {
    send(c, "CLIENT UNPAUSE");
}

/// A three-node Redis Cluster of the test's own (`redis-cli --cluster create`), ready:
/// its nodes (killed on drop, with their directory) and addresses.
pub(super) fn own_cluster() -> (tempfile::TempDir, Vec<KillOnDrop>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes: Vec<KillOnDrop> = ports
        .iter()
        .map(|&p| {
            let d = dir.path().join(p.to_string());
            std::fs::create_dir_all(&d).unwrap();
            start_redis_with(
                p,
                &d,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ],
            )
        })
        .collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli is installed (apt-get install -y redis-server)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Ready when every node reports the cluster ok (an event; bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for &p in &ports {
        loop {
            let info = Command::new("redis-cli")
                .args(["-p", &p.to_string(), "cluster", "info"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "cluster on {p} never became ok"
            );
            std::thread::yield_now();
        }
    }
    (dir, nodes, addrs)
}

/// A three-node Redis Cluster of the test's own: the keys of one decision live on
/// different nodes; features and sequences equal the in-process store's.
#[test]
fn a_redis_cluster_gives_identical_features() {
    let (_dir, _nodes, addrs) = own_cluster();
    // With sequences: their rows go through the background writer on a cluster.
    let mem = StateConfig {
        features: defs(),
        sequences: super::sequence::defs().1,
        ..StateConfig::default()
    };
    let s = schema(&mem);
    let red = StateConfig {
        redis: Some(RedisConfig {
            cluster: addrs.iter().map(|a| format!("redis://{a}")).collect(),
            timeout: Duration::from_millis(2_000),
            prefix: prefix("cluster"),
            retry: Duration::ZERO,
            ..RedisConfig::default()
        }),
        ..mem.clone()
    };
    let c = clock(T0 + 400 * DAY);
    let mem = StateEngine::new(mem, Arc::clone(&s), c.clone()).unwrap();
    let red = StateEngine::new(red, Arc::clone(&s), c).unwrap();
    for (i, e) in stream(22, 600, 20, 5).iter().enumerate() {
        let (mut a, mut b) = (e.txn(&s), e.txn(&s));
        mem.apply(&mut a);
        assert_eq!(
            red.apply(&mut b).status,
            StateStatus::Fresh,
            "event {i}: {:?}",
            red.stats()
        );
        same_features(&s, &a, &b, i);
        for name in ["card", "merchant"] {
            let (x, y) = (a.sequences.get(name).unwrap(), b.sequences.get(name));
            let y = y.unwrap_or_else(|| panic!("event {i}: no {name} on the cluster"));
            assert_eq!(
                (x.len(), x.values()),
                (y.len(), y.values()),
                "event {i}: {name}"
            );
        }
        assert!(red.flush(Duration::from_secs(30)));
        if i % 9 == 4 {
            let id = TxnId(e.id);
            assert_eq!(
                mem.report_label(id, true, e.ts + HOUR).unwrap(),
                red.report_label(id, true, e.ts + HOUR).unwrap()
            );
        }
    }
}
