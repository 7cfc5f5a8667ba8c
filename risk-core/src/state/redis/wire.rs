//! The decide path's own socket to one Redis server ([`super::mux`]'s connections):
//! plain TCP, TLS (rustls, the same certificates as the crate's connections) or a Unix
//! socket; `AUTH` / `HELLO` and `SELECT` as the `redis` crate sends them; replies parsed
//! by the crate's own RESP parser ([`redis::Parser`]), so they are the same [`Value`]s.
//!
//! Why not the crate's synchronous `Connection`: it hides its socket, so a read can only
//! block in the kernel. On the VMs these hosts run on, a thread that sleeps for a reply
//! ~30 µs away is woken ~50 µs later than one that polls (loopback `PING`, p50: 70–78 µs
//! blocking against 21–28 µs polling; BENCHMARKS.md [18]). With `read_spin_us` set, a
//! read first polls its socket without blocking (yielding the CPU between polls) for at
//! most that long, then blocks as before. A payments host that can spend a core's
//! fraction on its round trips buys back most of the wake-up; 0 (the default) never
//! polls.

use super::super::redis_conn::Access;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest read spin accepted (`state.redis.read_spin_us`): past a few round trips a
/// spin only burns the core.
pub(super) const MAX_SPIN: Duration = Duration::from_millis(10);

/// How to open a [`Wire`]: the server's address and credentials (the client's URL with
/// the access keys), the TLS settings (built once) and the read spin.
#[derive(Clone)]
pub(super) struct Dial {
    info: ConnectionInfo,
    tls: Option<Arc<rustls::ClientConfig>>,
    spin: Duration,
}

impl Dial {
    /// A dial for `client`'s server through `access` (its TLS settings built now, for a
    /// `rediss://` server), each read polling for up to `spin` first.
    pub fn of(client: &redis::Client, access: &Access, spin: Duration) -> RedisResult<Self> {
        let info = client.get_connection_info().clone();
        let tls = match info.addr() {
            ConnectionAddr::TcpTls { .. } => Some(Arc::new(access.rustls()?)),
            _ => None,
        };
        Ok(Self { info, tls, spin })
    }

    /// How long a read polls before it blocks.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// Connects, every read and write bounded by `timeout`, and logs in.
    pub fn open(&self, timeout: Duration) -> RedisResult<Wire> {
        let stream = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => Stream::Tcp(tcp(host, *port, timeout)?),
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => {
                if *insecure {
                    return Err(client_error(
                        "TLS without checking the server's name is not supported",
                    ));
                }
                let Some(cfg) = &self.tls else {
                    return Err(client_error("a rediss:// server needs TLS settings"));
                };
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|_| client_error("the server's host is not a TLS server name"))?;
                let con = rustls::ClientConnection::new(Arc::clone(cfg), name)
                    .map_err(|e| RedisError::from(io::Error::other(e)))?;
                let mut s = rustls::StreamOwned::new(con, tcp(host, *port, timeout)?);
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock)?;
                }
                Stream::Tls(Box::new(s))
            }
            ConnectionAddr::Unix(path) => {
                let s = UnixStream::connect(path)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                Stream::Unix(s)
            }
            _ => {
                return Err(client_error(
                    "an address kind this connection does not know",
                ))
            }
        };
        let mut w = Wire {
            stream,
            parser: redis::Parser::new(),
            spin: self.spin,
            reads: Arc::default(),
        };
        w.log_in(self.info.redis_settings())?;
        Ok(w)
    }
}

/// A TCP connection to `host:port` (each address it resolves to, in turn), `TCP_NODELAY`,
/// reads and writes bounded by `timeout`.
fn tcp(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host resolves to no address");
    for a in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn client_error(msg: &'static str) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, msg))
}

enum Stream {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    Unix(UnixStream),
}

impl Stream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Tls(s) => s.sock.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }

    /// Polls for up to `spin` (yielding between polls): `Some(n)` bytes read, `None`
    /// when nothing came in time.
    fn read_spinning(&mut self, buf: &mut [u8], spin: Duration) -> io::Result<Option<usize>> {
        self.set_nonblocking(true)?;
        let start = Instant::now();
        let got = loop {
            match self.read(buf) {
                Ok(n) => break Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if start.elapsed() >= spin {
                        break Ok(None);
                    }
                    std::thread::yield_now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.set_nonblocking(false)?;
        got
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// The stream as the parser reads it: each read polls first when a spin is set; a
/// blocking read that times out is a timeout (not "would block").
struct Reader<'a> {
    stream: &'a mut Stream,
    spin: Duration,
    reads: &'a Reads,
}

/// Socket reads that returned bytes (or timed out), by how they waited; shared, so a
/// test's other thread can wait for a read to give up polling.
#[derive(Debug, Default)]
pub(super) struct Reads {
    /// While polling (the spin).
    pub polled: AtomicU64,
    /// Blocked in the kernel (no spin, or the spin ran out): counted as the read
    /// begins to block.
    pub blocked: AtomicU64,
}

/// A count of [`Reads`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadCount {
    pub polled: u64,
    pub blocked: u64,
}

impl Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.spin.is_zero() {
            if let Some(n) = self.stream.read_spinning(buf, self.spin)? {
                self.reads.polled.fetch_add(1, Relaxed);
                return Ok(n);
            }
        }
        self.reads.blocked.fetch_add(1, Relaxed);
        self.stream.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => io::Error::new(io::ErrorKind::TimedOut, e),
            _ => e,
        })
    }
}

/// One open connection: write commands' bytes, read replies in order.
pub(super) struct Wire {
    stream: Stream,
    parser: redis::Parser,
    spin: Duration,
    reads: Arc<Reads>,
}

impl Wire {
    /// Writes `bytes` (packed commands) whole.
    pub fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()?;
        Ok(())
    }

    /// The next reply (a server's error reply is a [`Value::ServerError`], as the
    /// crate's `recv_response` gives it).
    pub fn recv(&mut self) -> RedisResult<Value> {
        let r = Reader {
            stream: &mut self.stream,
            spin: self.spin,
            reads: &self.reads,
        };
        self.parser.parse_value(r)
    }

    /// The socket reads made so far, by how they waited.
    #[cfg(test)]
    pub fn reads(&self) -> ReadCount {
        ReadCount {
            polled: self.reads.polled.load(Relaxed),
            blocked: self.reads.blocked.load(Relaxed),
        }
    }

    /// The counts themselves, as another thread sees them change.
    #[cfg(test)]
    pub fn reads_shared(&self) -> Arc<Reads> {
        Arc::clone(&self.reads)
    }

    /// The socket reads made since the last call, by how they waited.
    pub fn take_reads(&mut self) -> ReadCount {
        ReadCount {
            polled: self.reads.polled.swap(0, Relaxed),
            blocked: self.reads.blocked.swap(0, Relaxed),
        }
    }

    /// `HELLO 3` (with `AUTH`) for RESP3, else `AUTH` when a password is set; then
    /// `SELECT` for a database other than 0. An error reply fails the login.
    fn log_in(&mut self, rs: &redis::RedisConnectionInfo) -> RedisResult<()> {
        let mut cmds = Vec::new();
        if rs.protocol().supports_resp3() {
            let mut c = redis::cmd("HELLO");
            c.arg(3);
            if let Some(p) = rs.password() {
                c.arg("AUTH").arg(rs.username().unwrap_or("default")).arg(p);
            }
            cmds.push(c);
        } else if let Some(p) = rs.password() {
            let mut c = redis::cmd("AUTH");
            if let Some(u) = rs.username() {
                c.arg(u);
            }
            cmds.push(c.arg(p).clone());
        }
        if rs.db() != 0 {
            cmds.push(redis::cmd("SELECT").arg(rs.db()).clone());
        }
        for c in cmds {
            self.send(&c.get_packed_command())?;
            self.recv()?.extract_error()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use crate::state::def::RedisConfig;
    use crate::state::redis_conn::Client;
    use std::path::PathBuf;

    fn env(k: &str, d: &str) -> String {
        std::env::var(k).unwrap_or_else(|_| d.to_owned())
    }

    fn repo() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// The plain server of `tools/servers.sh start redis` (`RISK_REDIS_URL`).
    fn plain() -> RedisConfig {
        RedisConfig {
            url: env("RISK_REDIS_URL", "redis://127.0.0.1:6390/"),
            ..RedisConfig::default()
        }
    }

    /// Its TLS port (`RISK_REDIS_TLS_URL`): the test CA alone, a client certificate,
    /// the ACL user `risk`.
    fn tls() -> RedisConfig {
        let dir = std::env::var_os("RISK_TLS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target/servers/tls"));
        let pw = std::env::var_os("RISK_REDIS_PASSWORD_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target/servers/redis/acl.password"));
        let spec = format!("file:{}", pw.display());
        RedisConfig {
            url: env("RISK_REDIS_TLS_URL", "rediss://127.0.0.1:6391/"),
            username: Some("risk".into()),
            password: Some(
                Secret::resolve("state.redis.password", &spec)
                    .unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)")),
            ),
            tls_ca_file: Some(dir.join("ca.pem")),
            tls_cert_file: Some(dir.join("client.pem")),
            tls_key_file: Some(dir.join("client.key")),
            ..RedisConfig::default()
        }
    }

    fn open(cfg: &RedisConfig, spin: Duration) -> (Wire, Client) {
        let access = Access::from_config(cfg).unwrap();
        let t = Duration::from_secs(5);
        let client = Client::open(cfg, &access, t).unwrap();
        let Client::One(one) = &client else {
            unreachable!("one server")
        };
        let w = Dial::of(one, &access, spin)
            .unwrap()
            .open(t)
            .unwrap_or_else(|e| panic!("{}: {e} (tools/servers.sh start redis)", cfg.server()));
        (w, client)
    }

    fn call(w: &mut Wire, c: &redis::Cmd) -> Value {
        w.send(&c.get_packed_command()).unwrap();
        w.recv().unwrap()
    }

    #[test]
    fn a_read_that_outlasts_its_spin_blocks_until_the_reply() {
        let (mut w, client) = open(&plain(), Duration::from_micros(200));
        let key = format!("risk-test-wire-{}", std::process::id());
        let reads = w.reads_shared();
        let mut c = client.connect(Duration::from_secs(5)).unwrap();
        c.query::<Value>(redis::cmd("DEL").arg(&key)).unwrap();
        w.send(&redis::cmd("BLPOP").arg(&key).arg(30).get_packed_command())
            .unwrap();
        let k = key.clone();
        let pusher = std::thread::spawn(move || {
            // The push comes once the read has given up polling and blocks (an event,
            // not a delay); the reply cannot come before it.
            while reads.blocked.load(Relaxed) == 0 {
                std::thread::yield_now();
            }
            c.query::<Value>(redis::cmd("LPUSH").arg(&k).arg("v"))
                .unwrap();
        });
        let v = w.recv().unwrap();
        pusher.join().unwrap();
        let want = [key.into_bytes(), b"v".to_vec()].map(Value::BulkString);
        assert_eq!(v, Value::Array(want.to_vec()));
        assert!(w.reads().blocked >= 1, "{:?}", w.reads());
    }

    #[test]
    fn without_a_spin_no_read_polls() {
        let (mut w, _) = open(&plain(), Duration::ZERO);
        for _ in 0..100 {
            assert_eq!(
                call(&mut w, &redis::cmd("PING")),
                Value::SimpleString("PONG".into())
            );
        }
        assert_eq!(w.reads().polled, 0);
        assert!(w.reads().blocked >= 100);
    }

    /// Replies pipelined in one write, and one far larger than a read (many TLS
    /// records), come back whole and in order with the socket switched in and out of
    /// non-blocking mode around each read; over TLS with the client certificate and the
    /// ACL user, and in plain TCP.
    #[test]
    fn with_a_spin_pipelined_and_large_replies_arrive_whole_in_order() {
        for cfg in [plain(), tls()] {
            let (mut w, _) = open(&cfg, Duration::from_millis(1));
            let key = format!("risk-test-wire-big-{}", std::process::id());
            let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
            let mut out = Vec::new();
            redis::cmd("SET")
                .arg(&key)
                .arg(&big[..])
                .arg("EX")
                .arg(60)
                .write_packed_command(&mut out);
            for i in 0..500 {
                redis::cmd("ECHO").arg(i).write_packed_command(&mut out);
            }
            redis::cmd("GET").arg(&key).write_packed_command(&mut out);
            w.send(&out).unwrap();
            assert_eq!(w.recv().unwrap(), Value::Okay, "{}", cfg.server());
            for i in 0..500 {
                assert_eq!(
                    w.recv().unwrap(),
                    Value::BulkString(i.to_string().into_bytes())
                );
            }
            assert_eq!(w.recv().unwrap(), Value::BulkString(big));
            assert!(w.reads().polled > 0, "{:?}", w.reads());
        }
    }

    #[test]
    fn the_urls_database_is_selected() {
        let mut cfg = plain();
        cfg.url = format!("{}/9", cfg.url.trim_end_matches('/'));
        let (mut w, client) = open(&cfg, Duration::ZERO);
        let key = format!("risk-test-wire-db-{}", std::process::id());
        call(
            &mut w,
            redis::cmd("SET").arg(&key).arg("nine").arg("EX").arg(60),
        );
        let Client::One(one) = client else {
            unreachable!()
        };
        let mut c = one.get_connection().unwrap();
        let got: Option<String> = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
        assert_eq!(got.as_deref(), Some("nine"));
        let zero = Client::open(
            &plain(),
            &Access::from_config(&plain()).unwrap(),
            Duration::from_secs(5),
        )
        .unwrap();
        let mut z = zero.connect(Duration::from_secs(5)).unwrap();
        let none: Option<String> = z.query(redis::cmd("GET").arg(&key)).unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn a_wrong_password_fails_the_login_without_showing_it() {
        let mut cfg = tls();
        cfg.password =
            Some(Secret::resolve("state.redis.password", "not-the-password-xyz").unwrap());
        let access = Access::from_config(&cfg).unwrap();
        let client = Client::open(&cfg, &access, Duration::from_secs(5)).unwrap();
        let Client::One(one) = &client else {
            unreachable!()
        };
        let Err(e) = Dial::of(one, &access, Duration::ZERO)
            .unwrap()
            .open(Duration::from_secs(5))
        else {
            panic!("logged in with a wrong password")
        };
        let text = format!("{e} {e:?}");
        assert!(text.to_ascii_uppercase().contains("WRONGPASS"), "{text}");
        assert!(!text.contains("not-the-password-xyz"), "{text}");
    }
}
