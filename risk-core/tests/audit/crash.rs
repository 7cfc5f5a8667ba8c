//! The segment log under a real crash (`kill -9` of a child process in mid-stream) and
//! a real write failure (a file-size limit: `EFBIG`, what a full disk looks like to
//! `write`). The child is this test binary, re-run on [`child_process`] with the
//! workload named in `RISK_AUDIT_CHILD`.

use crate::common::*;
use risk_core::audit::{AuditReader, Durability, LogOptions, Query, SegmentLog};
use risk_core::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const CHILD: &str = "RISK_AUDIT_CHILD";
const DIR: &str = "RISK_AUDIT_CHILD_DIR";

fn engine(log: Arc<SegmentLog>) -> Engine {
    Engine::builder(schema())
        .rules(rules(0.1))
        .fast(Arc::new(ConstantScorer::new(0.05)))
        .audit_log(log)
        .build()
        .unwrap()
}

/// Entry point of the child processes; as a plain test (no `RISK_AUDIT_CHILD`) it
/// returns at once.
#[test]
fn child_process() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let dir = std::env::var(DIR).expect("child dir");
    let mut o = LogOptions::new(&dir);
    o.durability = Durability::Batch;
    o.max_batch = 64;
    let log = Arc::new(SegmentLog::open(o).expect("child opens the log"));
    let start = log.stats().recovery.last_seq;
    println!(
        "recovered {start} truncated {}",
        log.stats().recovery.truncated_bytes
    );
    let e = engine(Arc::clone(&log));
    let s = e.schema().clone();
    match mode.as_str() {
        // Decide forever, printing each new durable sequence number (the acknowledgement).
        "crash" => {
            let mut acked = 0;
            for i in 0.. {
                e.decide(&txn(&s, start + i + 1, i % 100))
                    .expect("decide answers");
                let d = log.stats().durable_seq;
                if d > acked {
                    acked = d;
                    println!("durable {d}");
                }
            }
        }
        // Decide through a failing disk: every call answers; report the counters.
        "full" => {
            let n = 20_000;
            for i in 0..n {
                e.decide(&txn(&s, i + 1, i % 100)).expect("decide answers");
            }
            // On a loaded machine the writer may not have reached the limit yet when
            // the last decision returns. A flush cannot succeed past the limit, so each
            // one waits (on the writer's answer, at most 100 ms) until the writer has
            // failed a write; 600 of them bound the wait.
            for _ in 0..600 {
                if log.stats().io_errors > 0 {
                    break;
                }
                let _ = log.flush(Duration::from_millis(100));
            }
            let st = log.stats();
            println!(
                "stats offered {n} accepted {} shed {} io_errors {} durable {} error {:?}",
                st.accepted,
                st.shed_full,
                st.io_errors,
                st.durable_seq,
                st.last_error.unwrap_or_default()
            );
            // Close gives up on the failing disk after its wait; nothing hangs.
            let closed = log.close(Duration::from_millis(200));
            println!("closed {}", closed.is_ok());
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn child(mode: &str, dir: &Path, shell_prefix: Option<&str>) -> Command {
    let exe = std::env::current_exe().unwrap();
    let args = [
        "--exact",
        "audit::crash::child_process",
        "--nocapture",
        "--test-threads=1",
    ];
    let mut c = match shell_prefix {
        None => {
            let mut c = Command::new(&exe);
            c.args(args);
            c
        }
        Some(prefix) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("{prefix}; exec \"$0\" \"$@\""))
                .arg(&exe)
                .args(args);
            c
        }
    };
    c.env(CHILD, mode)
        .env(DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

#[test]
fn kill_9_mid_stream_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked_total = 0;
    for round in 0..3 {
        let mut p = child("crash", dir.path(), None).spawn().unwrap();
        let out = BufReader::new(p.stdout.take().unwrap());
        let mut acked = 0u64;
        let mut recovered = None;
        for line in out.lines() {
            let line = line.unwrap();
            // The harness prints its own text before the child's first line.
            if let Some((_, r)) = line.split_once("recovered ") {
                let n: u64 = r.split(' ').next().unwrap().parse().unwrap();
                recovered = Some(n);
            }
            if let Some(d) = line.strip_prefix("durable ") {
                acked = d.parse().unwrap();
                if acked >= acked_total + 3000 {
                    break;
                }
            }
        }
        p.kill().unwrap(); // SIGKILL
        p.wait().unwrap();
        // The restarted child found at least everything acknowledged before.
        assert!(recovered.unwrap() >= acked_total, "round {round}");
        acked_total = acked;
        // Everything acknowledged is there and reads clean; a torn tail was cut.
        let log = SegmentLog::open(LogOptions::new(dir.path())).unwrap();
        let rec = log.stats().recovery;
        assert!(rec.last_seq >= acked, "round {round}: {rec:?} < {acked}");
        assert!(!rec.corrupt);
        drop(log);
        let seqs: Vec<u64> = AuditReader::new(dir.path())
            .query(Query::everything())
            .unwrap()
            .map(|e| e.expect("clean record").seq())
            .collect();
        assert_eq!(seqs.len() as u64, *seqs.last().unwrap());
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
        assert!(seqs.len() as u64 >= acked);
    }
}

#[test]
fn a_full_disk_sheds_with_counts_and_decide_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    // 64 blocks of 512 bytes: the first segment fills after ~100 records; SIGXFSZ is
    // ignored so `write` fails with EFBIG instead of killing the process.
    let out = child("full", dir.path(), Some("trap '' XFSZ; ulimit -f 64"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("stats "))
        .unwrap_or_else(|| panic!("no stats in {text}"));
    let w: Vec<&str> = line.split(' ').collect();
    let num = |k: &str| -> u64 {
        let i = w.iter().position(|x| *x == k).unwrap();
        w[i + 1].parse().unwrap()
    };
    assert_eq!(num("accepted") + num("shed"), num("offered"));
    assert!(num("shed") > 0, "{line}");
    assert!(num("io_errors") > 0, "{line}");
    assert!(line.contains("File too large"), "{line}");
    assert!(text.contains("closed false"), "{text}");
    // What reached the disk is whole: the failed writes were cut back to a frame.
    let n = AuditReader::new(dir.path()).verify().expect("clean log");
    assert!(n > 10 && n < 20_000, "{n}");
    assert_eq!(n, num("durable"));
}
