//! The remote tier's figures (BENCHMARKS.md [14]) against a real MLServer:
//!
//! 1. **Overhead over the floor**: per-request latency of `RemoteScorer::score_within`
//!    against the floor of a minimal keep-alive HTTP/1.1 client on a std socket sending
//!    the same pre-encoded request (what the server plus loopback cost), interleaved
//!    request by request, each first in every other pair, so both see the same machine; MLServer's own mean request time
//!    (its Prometheus histogram) is printed beside them.
//! 2. **Decisions/s on 2 caller threads** with the remote fast tier, against the same
//!    engine with the native XGBoost fast tier.
//! 3. **Hedging against a heavy tail**: through `FaultProxy` delaying a share of requests
//!    (default 2% by 50 ms), p50/p99/p99.9 with hedging off and on, and the extra load
//!    (attempts per call).
//!
//! ```text
//! tools/servers.sh start mlserver
//! cargo run --release --example remote_bench -- [--url http://127.0.0.1:8085] [--n 4000]
//!     [--tail-n 10000] [--tail-share 0.02] [--tail-ms 50] [--decide-n 4000]
//! ```

use risk_core::synth::{generate, schema, SynthConfig};
use risk_core::{ConstantScorer, Engine, Scorer, Tier, Transaction};
use risk_gpu::remote::{Fault, FaultProxy, HedgeConfig, KServeConfig, RemoteScorer};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn summary(v: &mut [Duration]) -> (Duration, Duration, Duration) {
    v.sort();
    (pct(v, 0.5), pct(v, 0.99), pct(v, 0.999))
}

/// A minimal keep-alive HTTP/1.1 client: the floor a client library cannot beat.
struct Raw {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Self {
        let w = TcpStream::connect(addr).expect("connect");
        w.set_nodelay(true).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Self { w, r }
    }

    fn round_trip(&mut self, request: &[u8]) -> Vec<u8> {
        self.w.write_all(request).unwrap();
        let mut len = 0usize;
        let mut line = String::new();
        let mut status = String::new();
        loop {
            line.clear();
            self.r.read_line(&mut line).unwrap();
            if status.is_empty() {
                status = line.clone();
            }
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        body
    }
}

fn infer_request(host: &str, model: &str, row: &[f32], id: usize) -> Vec<u8> {
    let body = serde_json::json!({
        "id": id.to_string(),
        "inputs": [{"name": "input-0", "shape": [1, row.len()], "datatype": "FP32",
                    "data": row.iter().map(|v| if v.is_nan() { None } else { Some(*v) }).collect::<Vec<_>>()}],
        "outputs": [{"name": "predict_proba"}],
    })
    .to_string();
    let mut r = format!(
        "POST /v2/models/{model}/infer HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

/// MLServer's (count, sum seconds) of 200 infer requests, from its metrics port.
fn server_time(metrics: SocketAddr) -> Option<(f64, f64)> {
    let mut s = TcpStream::connect(metrics).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let get = |suffix: &str| -> Option<f64> {
        text.lines()
            .find(|l| {
                l.starts_with(&format!("rest_server_request_duration_seconds_{suffix}{{"))
                    && l.contains("infer")
                    && l.contains("status_code=\"200\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    Some((get("count")?, get("sum")?))
}

fn cfg(url: &str, hedge: Option<HedgeConfig>) -> KServeConfig {
    let mut c = KServeConfig::new(vec![url.to_owned()], "xgb-fraud");
    c.output = Some("predict_proba".into());
    c.hedge = hedge;
    c
}

fn load(c: &KServeConfig) -> Arc<RemoteScorer> {
    let s = RemoteScorer::load(c, &schema())
        .unwrap_or_else(|e| panic!("{e}: start it with tools/servers.sh start mlserver"));
    s.warmup().unwrap();
    Arc::new(s)
}

fn engine(fast: Arc<dyn Scorer>) -> Arc<Engine> {
    Arc::new(
        Engine::builder(schema())
            .rules(Arc::new(ConstantScorer::new(0.2)))
            .fast(fast)
            .fast_deadline(Duration::from_secs(5))
            .build()
            .unwrap(),
    )
}

fn throughput(e: &Arc<Engine>, rows: &Arc<Vec<Transaction>>, per_thread: usize) -> (f64, usize) {
    let start = Instant::now();
    let handles: Vec<_> = (0..2)
        .map(|k| {
            let (e, rows) = (e.clone(), rows.clone());
            std::thread::spawn(move || {
                let mut fast = 0;
                for i in 0..per_thread {
                    let d = e.decide(&rows[(i * 2 + k) % rows.len()]).unwrap();
                    fast += (d.tier == Tier::Fast) as usize;
                }
                fast
            })
        })
        .collect();
    let fast: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    (
        (2 * per_thread) as f64 / start.elapsed().as_secs_f64(),
        fast,
    )
}

fn main() {
    let url = arg("--url", "http://127.0.0.1:8085");
    let n: usize = arg("--n", "4000").parse().unwrap();
    let tail_n: usize = arg("--tail-n", "10000").parse().unwrap();
    let share: f64 = arg("--tail-share", "0.02").parse().unwrap();
    let tail_ms: u64 = arg("--tail-ms", "50").parse().unwrap();
    let decide_n: usize = arg("--decide-n", "4000").parse().unwrap();
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let addr = host.to_socket_addrs().unwrap().next().unwrap();
    let metrics = SocketAddr::new(addr.ip(), addr.port() + 2);
    let rows: Vec<Transaction> = generate(&SynthConfig::new(11, n.max(tail_n).max(1000)))
        .into_iter()
        .map(|r| r.txn)
        .collect();
    let rows = Arc::new(rows);
    let s = schema();
    let slots: Vec<_> = s
        .fields()
        .iter()
        .map(|f| s.slot(&f.name).unwrap())
        .collect();
    println!(
        "remote_bench: MLServer at {url}, {} varied synthetic rows",
        rows.len()
    );

    // ----- 1. overhead over the raw floor -----
    let remote = load(&cfg(&url, None));
    let mut raw = Raw::connect(addr);
    let requests: Vec<Vec<u8>> = rows[..n]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let row: Vec<f32> = slots.iter().map(|&sl| t.features.get(sl)).collect();
            infer_request(&host, "xgb-fraud", &row, i)
        })
        .collect();
    for r in requests.iter().take(200) {
        raw.round_trip(r);
        remote
            .score_within(&rows[0], Duration::from_secs(5))
            .unwrap();
    }
    let before = server_time(metrics);
    let (mut floor, mut ours) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // Alternating which goes first: the second of a pair meets the server still
    // finishing the first (MLServer logs and updates metrics after it responds).
    for (i, r) in requests.iter().enumerate() {
        for k in 0..2 {
            let t = Instant::now();
            if (i + k) % 2 == 0 {
                std::hint::black_box(raw.round_trip(r));
                floor.push(t.elapsed());
            } else {
                let s = remote.score_within(&rows[i], Duration::from_secs(5));
                std::hint::black_box(s.unwrap());
                ours.push(t.elapsed());
            }
        }
    }
    let after = server_time(metrics);
    let (f50, f99, _) = summary(&mut floor);
    let (o50, o99, _) = summary(&mut ours);
    println!("\n[1] one row per request, {n} requests each, interleaved");
    println!(
        "    raw keep-alive socket (server + loopback): p50 {:>7.0} µs  p99 {:>7.0} µs",
        us(f50),
        us(f99)
    );
    println!(
        "    RemoteScorer::score_within:                p50 {:>7.0} µs  p99 {:>7.0} µs",
        us(o50),
        us(o99)
    );
    println!(
        "    overhead:                                  p50 {:>+7.0} µs  p99 {:>+7.0} µs  ({:.3}x / {:.3}x)",
        us(o50) - us(f50),
        us(o99) - us(f99),
        us(o50) / us(f50),
        us(o99) / us(f99)
    );
    if let (Some((c0, s0)), Some((c1, s1))) = (before, after) {
        println!(
            "    MLServer's own mean per infer request (its histogram): {:.0} µs over {} requests",
            (s1 - s0) / (c1 - c0) * 1e6,
            c1 - c0
        );
    }

    // ----- 2. decisions/s, 2 caller threads -----
    let model = XgbModel::from_file(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/xgb_fraud.json"),
    )
    .unwrap();
    let native: Arc<dyn Scorer> = Arc::new(XgbScorer::new(Arc::new(model), &s, 0.3, 3).unwrap());
    let en = engine(native);
    let er = engine(remote.clone());
    throughput(&er, &rows, 200);
    let (rn, _) = throughput(&en, &rows, decide_n * 20);
    let (rr, fast) = throughput(&er, &rows, decide_n);
    println!("\n[2] decide on 2 caller threads");
    println!("    native XGBoost fast tier: {rn:>9.0} decisions/s");
    println!(
        "    remote (MLServer) tier:   {rr:>9.0} decisions/s  ({fast} of {} by the model)",
        2 * decide_n
    );

    // ----- 3. hedging against a heavy tail -----
    println!("\n[3] heavy tail through FaultProxy: {:.1}% of requests +{tail_ms} ms, {tail_n} calls each", share * 100.0);
    let p98 = HedgeConfig {
        percentile: 0.98,
        ..HedgeConfig::default()
    };
    for hedge in [None, Some(HedgeConfig::default()), Some(p98)] {
        let proxy = FaultProxy::start(addr).unwrap();
        let r = load(&cfg(&proxy.url(), hedge));
        for t in rows.iter().take(200) {
            r.score_within(t, Duration::from_secs(5)).unwrap();
        }
        proxy.set(Fault::Tail {
            share,
            delay: Duration::from_millis(tail_ms),
        });
        let s0 = r.stats();
        let mut lat = Vec::with_capacity(tail_n);
        for t in rows.iter().take(tail_n) {
            let t0 = Instant::now();
            r.score_within(t, Duration::from_secs(5)).unwrap();
            lat.push(t0.elapsed());
        }
        let s1 = r.stats();
        let (p50, p99, p999) = summary(&mut lat);
        let calls = (s1.calls - s0.calls) as f64;
        println!(
            "    hedging {:<26} p50 {:>7.0} µs  p99 {:>8.0} µs  p99.9 {:>8.0} µs  attempts/call {:.4}  hedges {} (won {})",
            match hedge {
                None => "off:".to_owned(),
                Some(h) => format!("at p{:.0}, <= {:.0}% extra:", h.percentile * 100.0, h.max_extra * 100.0),
            },
            us(p50),
            us(p99),
            us(p999),
            (s1.attempts - s0.attempts) as f64 / calls,
            s1.hedges - s0.hedges,
            s1.hedge_wins - s0.hedge_wins,
        );
    }
}
