//! An MLServer of the test's own, killed (SIGKILL) while an engine decides through it.

use super::*;
use risk_core::{ConstantScorer, Engine, Tier};
use risk_gpu::remote::BreakerConfig;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A private MLServer on free ports, serving the model directory servers.sh prepared.
struct Server {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Server {
    fn start() -> Self {
        let venv = std::env::var_os("RISK_MLSERVER_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target/mlserver-venv"));
        let bin = venv.join("bin/mlserver");
        assert!(
            bin.exists(),
            "{} missing: run tools/fetch_test_deps.sh",
            bin.display()
        );
        let repo = std::env::var_os("RISK_MLSERVER_REPO")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target/servers/mlserver/repo"));
        let model = repo.join(MODEL);
        assert!(
            model.join("model-settings.json").exists(),
            "{} missing: run tools/servers.sh start mlserver",
            model.display()
        );
        let dir = std::env::temp_dir().join(format!("risk-mlserver-kill-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(MODEL)).unwrap();
        for f in ["model.json", "model-settings.json"] {
            std::fs::copy(model.join(f), dir.join(MODEL).join(f)).unwrap();
        }
        let ports: Vec<u16> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect::<Vec<_>>()
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        std::fs::write(
            dir.join("settings.json"),
            format!(
                r#"{{"host": "127.0.0.1", "http_port": {}, "grpc_port": {}, "metrics_port": {}, "parallel_workers": 0}}"#,
                ports[0], ports[1], ports[2]
            ),
        )
        .unwrap();
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(&bin)
            .arg("start")
            .arg(".")
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        // Ready when uvicorn says it serves HTTP on our port (the model loads before).
        let want = format!("Uvicorn running on http://127.0.0.1:{}", ports[0]);
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = Vec::new();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains(&want) => break,
                Some(Ok(l)) => log.push(l),
                _ => panic!("MLServer exited before serving:\n{}", log.join("\n")),
            }
        }
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child,
            url: format!("http://127.0.0.1:{}", ports[0]),
            dir,
        }
    }

    /// SIGKILL to its whole process group.
    fn kill(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_server_killed_mid_run_leaves_every_decision_answered() {
    let mut server = Server::start();
    let mut c = cfg(&[server.url.clone()]);
    c.breaker = BreakerConfig {
        failures: 3,
        open_for: Duration::from_secs(3600),
    };
    let remote = load(&c);
    let engine = Arc::new(
        Engine::builder(schema())
            .rules(Arc::new(ConstantScorer::new(0.2)))
            .fast(remote.clone())
            .fast_deadline(Duration::from_secs(30))
            .build()
            .unwrap(),
    );
    let all = txns(&reference(), 400);
    let (tx, rx) = mpsc::channel();
    let e2 = engine.clone();
    let worker = std::thread::spawn(move || {
        for t in &all {
            let d = e2.decide(t).unwrap();
            tx.send((d.tier, d.fallback)).unwrap();
        }
    });
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen.push(rx.recv().unwrap());
    }
    server.kill();
    seen.extend(rx.iter());
    worker.join().unwrap();
    assert_eq!(seen.len(), 400, "every decision answered");
    assert!(seen[..100]
        .iter()
        .all(|&(t, f)| t == Tier::Fast && f.is_none()));
    // After the kill: connection refused, retried once, the breaker opens; the rules decide.
    assert!(
        seen[300..]
            .iter()
            .all(|&(t, f)| t == Tier::Rules && f.is_some()),
        "{:?}",
        &seen[300..310]
    );
    let s = remote.stats();
    assert_eq!(s.calls, s.ok + s.failed);
    assert!(s.failures.transport >= 1, "{s:?}");
    assert!(s.no_endpoint >= 1, "{s:?}");
    assert_eq!(remote.endpoints()[0].opens, 1);
}
