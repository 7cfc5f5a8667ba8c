//! Entity state's cost: the state stage alone (read + update of 10 velocity features over
//! card and merchant keys, in-process) per raw transaction; `decide` with the engine
//! computing them against the same engine without state (the baseline measured again
//! last); and two-thread throughput on vs off.
//!
//! Rows are raw synthetic transactions (`synth::generate_raw`): the state is warmed with
//! 80,000 of them (4,000 cards, ~16,000 terminals, a month), then the timed loop cycles over
//! 4,096 of them (a transaction is in cache when it is decided, as in a service), moving
//! their times a month forward on each pass so windows fill and expire as in live traffic.
//! The engines and the state run on a manual clock far ahead of the data (the future bound
//! never clamps the moved times; its wall-clock read costs a read lock, slightly more than
//! the system clock).

use criterion::{black_box, Criterion, Throughput};
use risk_benches::Trivial;
use risk_core::state::{Agg, FeatureDef, KeySource, SeqField, StateConfig, StateEngine};
use risk_core::synth::{generate_raw, schema, state_config, SynthConfig};
use risk_core::{Engine, Latency, ManualClock, Transaction};
use std::sync::Arc;
use std::time::Duration;

/// The synthetic set's 8 features plus a card mean and a card max over 24 h: 10.
pub fn ten_features() -> StateConfig {
    let mut c = state_config();
    let day = Duration::from_secs(86_400);
    c.features
        .push(FeatureDef::new("hour", KeySource::Entity, Agg::Avg).window(day, 24));
    c.features
        .push(FeatureDef::new("card_age_days", KeySource::Entity, Agg::Max).window(day, 24));
    c
}

pub(crate) fn warmup() -> Vec<Transaction> {
    generate_raw(&SynthConfig::new(5, 80_000))
        .into_iter()
        .map(|r| r.txn)
        .collect()
}

/// The timed rows: 4,096 from the warm-up's last days, a month after it.
fn rows() -> Vec<Transaction> {
    let w = warmup();
    let span = w.last().unwrap().timestamp_ms - w[0].timestamp_ms + 86_400_000;
    w[w.len() - 4_096..]
        .iter()
        .cloned()
        .map(|mut t| {
            t.timestamp_ms += span;
            t
        })
        .collect()
}

pub(crate) fn far_clock() -> Arc<ManualClock> {
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(i64::MAX / 4);
    clock
}

/// Cycles over `rows`, moving their times a data set's span forward on each pass.
struct Cycle {
    rows: Vec<Transaction>,
    i: usize,
    span: i64,
}

impl Cycle {
    fn new(rows: Vec<Transaction>) -> Self {
        let span = rows.last().unwrap().timestamp_ms - rows[0].timestamp_ms + 86_400_000;
        Self { rows, i: 0, span }
    }
    #[inline]
    fn next(&mut self) -> &mut Transaction {
        self.i += 1;
        if self.i == self.rows.len() {
            self.i = 0;
            for r in &mut self.rows {
                r.timestamp_ms += self.span;
            }
        }
        &mut self.rows[self.i]
    }
}

/// An engine with trivial rules and model, with `state` (or none), on a far clock.
pub fn engine_with(state: Option<StateConfig>) -> Engine {
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let b = Engine::builder(s.clone())
        .clock(far_clock())
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::new(Trivial::new(slot, Latency::Bounded)));
    match state {
        Some(cfg) => b.state(cfg),
        None => b,
    }
    .build()
    .unwrap()
}

fn engine(state: bool) -> Engine {
    let e = engine_with(state.then(ten_features));
    for t in warmup() {
        e.decide(&t).unwrap();
    }
    e
}

/// The state stage alone, and `decide` with vs without it.
pub fn decide(c: &mut Criterion) {
    let mut g = c.benchmark_group("state");
    let st = StateEngine::new(ten_features(), schema(), far_clock()).unwrap();
    for mut t in warmup() {
        st.apply(&mut t);
    }
    let mut cy = Cycle::new(rows());
    g.bench_function("read_update_10_features", |b| {
        b.iter(|| black_box(st.apply(black_box(cy.next()))))
    });
    let off = engine(false);
    let on = engine(true);
    for (name, e) in [
        ("decide_state_off", &off),
        ("decide_state_on", &on),
        ("decide_state_off_again", &off),
    ] {
        let mut cy = Cycle::new(rows());
        g.bench_function(name, |b| {
            b.iter(|| black_box(e.decide(black_box(cy.next())).unwrap()))
        });
    }
    g.finish();
    for m in st.memory() {
        println!(
            "state memory: {} keys of {} at {} bytes each",
            m.keys, m.source, m.bytes_per_key
        );
    }
}

/// Two threads deciding as fast as they can, state on vs off.
pub fn throughput(c: &mut Criterion) {
    let txns = rows();
    let mut g = c.benchmark_group("state_throughput");
    g.throughput(Throughput::Elements(20_000));
    g.sample_size(10);
    for (name, on) in [
        ("two_threads_state_off", false),
        ("two_threads_state_on", true),
    ] {
        let e = engine(on);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| risk_benches::two_threads(&e, &txns, 10_000))
                    .sum()
            })
        });
    }
    g.finish();
}

/// The Redis store on loopback (`tools/servers.sh start redis`, `RISK_REDIS_URL`): one
/// decision's round trip (10 features, card and terminal keys: one script call over both
/// keys) with p50 / p99 over 20,000 calls against the server's own time per decision
/// (`INFO commandstats`: script microseconds / decisions), and two-thread decisions/s
/// with the Redis store (one shared pipelined connection); each with and without the
/// card's sequence of 32 transactions x 9 values (`synth::sequence_def`: its region read
/// in the same call, its row, which holds state features, carried in this host's next
/// call), alternated twice. Two capabilities against themselves switched off, in the
/// same run: reads that poll for 200 us before they block (`read_spin_us`, against 0)
/// and two connections (against `connections = 1`, two threads).
/// The store before [18] (two MessagePack scripts per decision, a connection per thread)
/// is not kept as a peer: its figures are BENCHMARKS.md [11] (256 us of server time, p50
/// 378 us, 3.6 k/s).
pub fn redis(c: &mut Criterion) {
    use risk_core::state::RedisConfig;
    let url = std::env::var("RISK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    // 0: no sequence; 1: the card's 32 x 9 with state features in each row (known after
    // the call: `txn_count_1h`, and `hour`, which this set redefines as a card average;
    // the next call carries the row); 2: the same without them, 32 x 7 (the row rides
    // its own decision's call).
    // 3: no sequence; the card's declines over 24 h (an outcome feature: each decision's
    // outcome is entered after it, by the background writer).
    // `spin`: how long each read polls before it blocks (`read_spin_us`); `lanes`:
    // connections.
    let cfg_with = |seq: usize, spin: Duration, lanes: usize| {
        let mut c = ten_features();
        if seq == 3 {
            let day = Duration::from_secs(86_400);
            c.features.push(
                FeatureDef::new("high_risk_country", KeySource::Entity, Agg::Count)
                    .window(day, 24)
                    .outcome(&[risk_core::Action::Decline]),
            );
        } else if seq > 0 {
            let mut d = risk_core::synth::sequence_def();
            if seq == 2 {
                d.name = "card_seq_raw".into();
                let state = |n: &str| c.features.iter().any(|f| f.name == n);
                d.fields
                    .retain(|f| !matches!(f, SeqField::Field(n) if state(n)));
            }
            c.sequences.push(d);
        }
        c.redis = Some(RedisConfig {
            url: url.clone(),
            timeout: Duration::from_millis(50),
            prefix: format!("risk-bench-{}", std::process::id()),
            read_spin: spin,
            connections: lanes,
            ..RedisConfig::default()
        });
        c
    };
    let cfg = |seq: usize| cfg_with(seq, Duration::ZERO, 2);
    let spin = Duration::from_micros(200);
    let names = [
        "10_features",
        "10_features_card_seq_32x9",
        "10_features_card_seq_32x7_raw",
        "10_features_spin_200us",
        "10_features_and_declines_24h",
    ];
    let engines: Vec<StateEngine> = [0, 1, 2, 4, 3]
        .iter()
        .map(|&seq| {
            let c = if seq == 4 {
                cfg_with(0, spin, 2)
            } else {
                cfg(seq)
            };
            let st = StateEngine::new(c, schema(), far_clock())
                .unwrap_or_else(|e| panic!("Redis at {url}: {e} (tools/servers.sh start redis)"));
            for mut t in warmup().into_iter().take(20_000) {
                let o = st.apply(&mut t);
                st.record_outcome(&o, risk_core::Action::Decline);
            }
            assert!(st.flush(Duration::from_secs(60)));
            st
        })
        .collect();
    let mut cy = Cycle::new(rows());
    for round in 1..=2 {
        for (st, name) in engines.iter().zip(names) {
            let before = evalsha_usec(&url);
            // Every decision's outcome entered as a decline (only the outcome feature's
            // engine writes anything for it); the writes are waited for before the
            // server's counters are read again.
            let mut lat: Vec<u64> = (0..20_000)
                .map(|_| {
                    let t = std::time::Instant::now();
                    let o = black_box(st.apply(cy.next()));
                    let ns = t.elapsed().as_nanos() as u64;
                    st.record_outcome(&o, risk_core::Action::Decline);
                    ns
                })
                .collect();
            assert!(st.flush(Duration::from_secs(60)));
            let after = evalsha_usec(&url);
            lat.sort_unstable();
            let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1e3;
            let (calls, usec) = (after.0 - before.0, after.1 - before.1);
            let stats = st.stats();
            println!(
                "round {round} redis {name} (2 keys): p50 {:.1} us  p99 {:.1} us  max {:.1} us; server time per decision {:.1} us ({} script calls); degraded {}, sequence rows lost {}, carried {}, alone {}; calls on the caller's thread {}; socket reads polled {}, blocked {}",
                q(0.5),
                q(0.99),
                q(1.0),
                usec as f64 / 20_000.0,
                calls,
                stats.degraded,
                stats.sequence_rows_lost,
                stats.sequence_rows_carried,
                stats.sequence_rows_alone,
                stats.store_calls_direct,
                stats.store_reads_polled,
                stats.store_reads_blocked
            );
        }
    }
    let mut g = c.benchmark_group("state_redis");
    for (st, name) in engines.iter().zip(names).take(4) {
        g.bench_function(format!("read_update_{name}_redis"), |b| {
            b.iter(|| black_box(st.apply(black_box(cy.next()))))
        });
    }
    g.finish();
    let s = schema();
    let slot = s.slot("amount").unwrap();
    let engine = |seq: usize, spin: Duration, lanes: usize| {
        Engine::builder(s.clone())
            .clock(far_clock())
            .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
            .fast(Arc::new(Trivial::new(slot, Latency::Bounded)))
            .state(cfg_with(seq, spin, lanes))
            .build()
            .unwrap()
    };
    let txns = rows();
    let mut g = c.benchmark_group("state_redis_throughput");
    g.throughput(Throughput::Elements(4_000));
    g.sample_size(10);
    // Each capability against itself switched off, in this run: one connection
    // (`connections = 1`) and reads that block at once (`read_spin_us = 0`).
    for (seq, spin, lanes, name) in [
        (0, Duration::ZERO, 2, "two_threads_state_redis"),
        (
            0,
            Duration::ZERO,
            1,
            "two_threads_state_redis_one_connection",
        ),
        (0, spin, 2, "two_threads_state_redis_spin_200us"),
        (1, Duration::ZERO, 2, "two_threads_state_redis_card_seq"),
        (
            1,
            Duration::ZERO,
            8,
            "two_threads_state_redis_card_seq_8_connections",
        ),
        (1, spin, 2, "two_threads_state_redis_card_seq_spin_200us"),
        (2, Duration::ZERO, 2, "two_threads_state_redis_card_seq_raw"),
    ] {
        let e = engine(seq, spin, lanes);
        // The server's time per decision under this load (its calls batched by the
        // shared connection), next to the single caller's figures printed above.
        let before = evalsha_usec(&url);
        let stats0 = e.state().map(|s| s.stats()).unwrap_or_default();
        let mut decisions = 0u64;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                decisions += iters * 4_000;
                (0..iters)
                    .map(|_| risk_benches::two_threads(&e, &txns, 2_000))
                    .sum()
            })
        });
        let after = evalsha_usec(&url);
        if decisions > 0 {
            let st = e.state().map(|s| s.stats()).unwrap_or_default();
            let st0 = stats0;
            let st = risk_core::state::StateStats {
                store_calls_direct: st.store_calls_direct - st0.store_calls_direct,
                sequence_rows_carried: st.sequence_rows_carried - st0.sequence_rows_carried,
                sequence_rows_alone: st.sequence_rows_alone - st0.sequence_rows_alone,
                store_reads_polled: st.store_reads_polled - st0.store_reads_polled,
                store_reads_blocked: st.store_reads_blocked - st0.store_reads_blocked,
                ..st
            };
            println!(
                "redis {name}: server time per decision under two threads {:.1} us ({} script calls, {decisions} decisions); calls on the caller's thread {}, sequence rows carried {}, alone {}; socket reads polled {}, blocked {}",
                (after.1 - before.1) as f64 / decisions as f64,
                after.0 - before.0,
                st.store_calls_direct,
                st.sequence_rows_carried,
                st.sequence_rows_alone,
                st.store_reads_polled,
                st.store_reads_blocked
            );
        }
    }
    g.finish();
}

/// Script calls and their total microseconds from `INFO commandstats`: `FCALL` (the
/// function library), `EVALSHA` (servers that took no library) and `EVAL` (the script's
/// text sent) together.
pub(crate) fn evalsha_usec(url: &str) -> (u64, u64) {
    use std::io::{BufRead, BufReader, Write};
    let hostport = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(hostport).unwrap();
    s.write_all(b"INFO commandstats\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut header = String::new();
    r.read_line(&mut header).unwrap();
    let len: usize = header.trim_start_matches('$').trim().parse().unwrap();
    let mut body = vec![0u8; len + 2];
    std::io::Read::read_exact(&mut r, &mut body).unwrap();
    let text = String::from_utf8_lossy(&body);
    let stat = |name: &str| {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or("");
        let field = |k: &str| {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        (field("calls"), field("usec"))
    };
    let (a, b, c) = (
        stat("cmdstat_evalsha:"),
        stat("cmdstat_fcall:"),
        stat("cmdstat_eval:"),
    );
    (a.0 + b.0 + c.0, a.1 + b.1 + c.1)
}

/// The same state round trip (10 features, card and terminal keys, one pipeline) over
/// plain `redis://` (`RISK_REDIS_URL`, port 6390) and over TLS `rediss://`
/// (`RISK_REDIS_TLS_URL`, port 6391: the test CA trusted alone, a client certificate, ACL
/// user `risk` with the password from `RISK_REDIS_PASSWORD_FILE`), one server process, same
/// run; p50 / p99 over 20,000 calls of each, alternating in blocks of 1,000, printed as a
/// ratio. `tools/servers.sh start redis` first.
pub fn redis_tls(c: &mut Criterion) {
    use risk_core::secret::Secret;
    use risk_core::state::RedisConfig;
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let tls_dir = std::env::var_os("RISK_TLS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join("target/servers/tls"));
    let pw_file = std::env::var_os("RISK_REDIS_PASSWORD_FILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join("target/servers/redis/acl.password"));
    let plain = RedisConfig {
        url: env("RISK_REDIS_URL", "redis://127.0.0.1:6390/"),
        timeout: Duration::from_millis(50),
        prefix: format!("risk-bench-plain-{}", std::process::id()),
        ..RedisConfig::default()
    };
    let tls = RedisConfig {
        url: env("RISK_REDIS_TLS_URL", "rediss://127.0.0.1:6391/"),
        username: Some("risk".into()),
        password: Some(
            Secret::resolve(
                "state.redis.password",
                &format!("file:{}", pw_file.display()),
            )
            .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)")),
        ),
        tls_ca_file: Some(tls_dir.join("ca.pem")),
        tls_cert_file: Some(tls_dir.join("client.pem")),
        tls_key_file: Some(tls_dir.join("client.key")),
        prefix: format!("risk-bench-tls-{}", std::process::id()),
        ..plain.clone()
    };
    let open = |r: RedisConfig| {
        let mut c = ten_features();
        c.redis = Some(r);
        StateEngine::new(c, schema(), far_clock())
            .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"))
    };
    let (plain, tls) = (open(plain), open(tls));
    for mut t in warmup().into_iter().take(5_000) {
        let mut u = t.clone();
        plain.apply(&mut t);
        tls.apply(&mut u);
    }
    let (mut cp, mut ct) = (Cycle::new(rows()), Cycle::new(rows()));
    let (mut lp, mut lt) = (Vec::with_capacity(20_000), Vec::with_capacity(20_000));
    for _ in 0..20 {
        for (st, cy, lat) in [(&plain, &mut cp, &mut lp), (&tls, &mut ct, &mut lt)] {
            for _ in 0..1_000 {
                let t = std::time::Instant::now();
                black_box(st.apply(cy.next()));
                lat.push(t.elapsed().as_nanos() as u64);
            }
        }
    }
    let q = |lat: &mut Vec<u64>, p: f64| {
        lat.sort_unstable();
        lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1e3
    };
    let (p50, t50) = (q(&mut lp, 0.5), q(&mut lt, 0.5));
    let (p99, t99) = (q(&mut lp, 0.99), q(&mut lt, 0.99));
    println!(
        "redis state round trip, plain vs TLS (10 features, 2 scripts pipelined): p50 {p50:.1} us vs {t50:.1} us (x{:.2}), p99 {p99:.1} us vs {t99:.1} us (x{:.2}); degraded {} / {}",
        t50 / p50,
        t99 / p99,
        plain.stats().degraded,
        tls.stats().degraded
    );
    let mut g = c.benchmark_group("state_redis_tls");
    g.bench_function("read_update_10_features_plain", |b| {
        b.iter(|| black_box(plain.apply(black_box(cp.next()))))
    });
    g.bench_function("read_update_10_features_tls", |b| {
        b.iter(|| black_box(tls.apply(black_box(ct.next()))))
    });
    g.finish();
}
