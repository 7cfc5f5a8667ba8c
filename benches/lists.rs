//! What lists shared through Redis (`[state.redis]`, `share_lists`) add to the state stage
//! and to `decide`, against the same lists kept per host (file + journal), same run.
//!
//! Two lists (devices, e-mails) of 10,000 entries each, seeded from the same files; the
//! rows hit about half of them. Shared lists are read from the local copy the subscriber
//! keeps (no network on the decide path), so the difference is the staleness flag.
//! Needs `tools/servers.sh start redis` (`RISK_REDIS_URL`); the run's keys are deleted at
//! the end (their own prefix).

use criterion::{black_box, Criterion};
use risk_benches::Trivial;
use risk_core::state::{KeySource, ListDef, RedisConfig, StateConfig, StateEngine};
use risk_core::{Engine, FeatureSchema, Latency, ManualClock, Transaction};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

const ENTRIES: u64 = 10_000;

fn config(dir: &Path, redis: Option<RedisConfig>) -> StateConfig {
    StateConfig {
        lists: vec![
            ListDef {
                name: "blocked_devices".into(),
                key: KeySource::Device,
                file: Some(dir.join("devices.txt")),
            },
            ListDef {
                name: "blocked_emails".into(),
                key: KeySource::Email,
                file: Some(dir.join("emails.txt")),
            },
        ],
        redis,
        ..StateConfig::default()
    }
}

fn write_files(dir: &Path) {
    let devices: String = (1..=ENTRIES).map(|d| format!("{d}\n")).collect();
    let emails: String = (1..=ENTRIES)
        .map(|d| format!("u{d}@example.com\n"))
        .collect();
    std::fs::write(dir.join("devices.txt"), devices).unwrap();
    std::fs::write(dir.join("emails.txt"), emails).unwrap();
}

fn schema(c: &StateConfig) -> Arc<FeatureSchema> {
    c.extend_schema(FeatureSchema::builder().numeric_required("amount"))
        .build()
        .unwrap()
}

/// 4,096 rows over twice as many devices and e-mails as the lists hold.
fn rows(s: &Arc<FeatureSchema>) -> Vec<Transaction> {
    (0..4_096u64)
        .map(|i| {
            let k = 1 + (i * 7_919) % (2 * ENTRIES);
            Transaction::builder(s)
                .id(i + 1)
                .amount(10.0 + (i % 100) as f64, "USD")
                .timestamp_ms(1_767_571_200_000 + i as i64 * 1_000)
                .device(k)
                .email(&format!("u{k}@example.com"))
                .build()
                .unwrap()
        })
        .collect()
}

fn clock() -> Arc<ManualClock> {
    let c = ManualClock::new();
    c.set_unix_origin_ms(1_767_571_200_000);
    c
}

fn engine(c: &StateConfig) -> Engine {
    let s = schema(c);
    let slot = s.slot("amount").unwrap();
    Engine::builder(s)
        .clock(clock())
        .rules(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .fast(Arc::new(Trivial::new(slot, Latency::Bounded)))
        .state(c.clone())
        .build()
        .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"))
}

/// Deletes the run's keys (never a FLUSH: other runs share the server).
fn cleanup(url: &str, prefix: &str) {
    let hp = url.trim_start_matches("redis://").trim_end_matches('/');
    let Ok(mut s) = std::net::TcpStream::connect(hp) else {
        return;
    };
    for list in ["blocked_devices:device", "blocked_emails:email"] {
        for part in ["base", "chg", "ver", "mark", "digest"] {
            let k = format!("{prefix}:list:{{{list}}}:{part}");
            let m = format!("*2\r\n$3\r\nDEL\r\n${}\r\n{k}\r\n", k.len());
            let _ = s.write_all(m.as_bytes());
            let mut buf = [0u8; 4];
            let _ = s.read_exact(&mut buf);
        }
    }
}

/// A change's way to another host: `add` on one engine (a script on Redis, applied
/// there) until a second engine's subscriber has applied it (its version), p50 / p99 over
/// 2,000 adds; printed (not a criterion figure: it is two threads and a server).
fn propagation(cfg: &StateConfig) {
    let a = StateEngine::new(cfg.clone(), schema(cfg), clock()).unwrap();
    let b = StateEngine::new(cfg.clone(), schema(cfg), clock()).unwrap();
    let version = |st: &StateEngine| st.lists().sync_status().unwrap().versions[0].1;
    let (mut add, mut seen) = (Vec::new(), Vec::new());
    for i in 0..2_000u64 {
        let t0 = std::time::Instant::now();
        a.lists()
            .add("blocked_devices", &(1_000_000 + i).to_string(), None)
            .unwrap();
        add.push(t0.elapsed().as_secs_f64() * 1e6);
        let v = version(&a);
        while version(&b) < v {
            std::hint::spin_loop();
        }
        seen.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let pct = |v: &mut Vec<f64>, q: usize| {
        v.sort_by(f64::total_cmp);
        v[v.len() * q / 100]
    };
    println!(
        "shared list change: add (script + local apply) p50 {:.0} us p99 {:.0} us; seen by a second engine p50 {:.0} us p99 {:.0} us",
        pct(&mut add, 50),
        pct(&mut add, 99),
        pct(&mut seen, 50),
        pct(&mut seen, 99)
    );
}

/// The state stage (list lookups only) and `decide`, lists per host vs shared.
pub fn shared(c: &mut Criterion) {
    let url = std::env::var("RISK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let prefix = format!("risk-bench-lists-{}", std::process::id());
    let dir = std::env::temp_dir().join(&prefix);
    std::fs::create_dir_all(&dir).unwrap();
    write_files(&dir);
    let redis = RedisConfig {
        url: url.clone(),
        prefix: prefix.clone(),
        ..RedisConfig::default()
    };
    let local = config(&dir, None);
    let shared = config(&dir, Some(redis));
    let mut g = c.benchmark_group("lists");
    let states = [
        ("state_stage_lists_file", &local),
        ("state_stage_lists_shared", &shared),
    ]
    .map(|(n, cfg)| {
        let st = StateEngine::new(cfg.clone(), schema(cfg), clock())
            .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"));
        (n, st)
    });
    for (name, st) in &states {
        let mut rs = rows(st.schema());
        let mut i = 0;
        g.bench_function(*name, |b| {
            b.iter(|| {
                i = (i + 1) % rs.len();
                black_box(st.apply(black_box(&mut rs[i])))
            })
        });
    }
    // Whatever a filter let run: the shared lists answer (members hit, nothing stale).
    let st = &states[1].1;
    for t in rows(st.schema()).iter_mut() {
        black_box(st.apply(t));
    }
    let hits = st.stats().list_hits;
    assert!(hits > 0 && !st.lists().stale());
    drop(states);
    propagation(&shared);
    let file = engine(&local);
    let sh = engine(&shared);
    for (name, e) in [
        ("decide_lists_file", &file),
        ("decide_lists_shared", &sh),
        ("decide_lists_file_again", &file),
    ] {
        let rs = rows(e.schema());
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % rs.len();
                black_box(e.decide(black_box(&rs[i])).unwrap())
            })
        });
    }
    g.finish();
    drop((file, sh));
    cleanup(&url, &prefix);
    let _ = std::fs::remove_dir_all(&dir);
}
