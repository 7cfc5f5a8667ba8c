//! A loopback HTTP/1.1 proxy that injects faults between a tier and its model server:
//! delays (fixed, or a heavy tail on a share of requests), dropped connections, error
//! statuses, malformed, truncated or wrongly shaped responses, and being killed. For
//! testing what a deployment does when its model server misbehaves; the integration
//! tests and the remote benchmark drive a real MLServer through it.
//!
//! Hand-written on std sockets (one thread per connection): it must produce broken HTTP
//! on purpose, which a well-behaved HTTP library will not.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// What the proxy does to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Forward it and its response unchanged.
    Pass,
    /// Forward after sleeping this long.
    Delay(Duration),
    /// Forward; a `share` of requests (a seeded pseudo-random draw) sleep `delay` first.
    Tail {
        /// Fraction of requests delayed, in [0, 1].
        share: f64,
        /// Their extra latency.
        delay: Duration,
    },
    /// Close the connection without answering.
    Drop,
    /// Answer this HTTP status with a protocol error body, without forwarding.
    Status(u16),
    /// Answer 200 with a body that is not JSON.
    Malformed,
    /// Forward, then send the response's head and half its body and close.
    Truncated,
    /// Forward, then change the first output's row count in the response.
    WrongShape,
}

#[derive(Debug)]
struct Control {
    next: VecDeque<Fault>,
    default: Fault,
    rng: u64,
}

#[derive(Debug)]
struct Inner {
    upstream: SocketAddr,
    control: Mutex<Control>,
    requests: AtomicU64,
    killed: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

/// A fault-injecting proxy on `127.0.0.1`, forwarding to one upstream server.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    inner: Arc<Inner>,
}

impl FaultProxy {
    /// Listens on an ephemeral loopback port, forwarding to `upstream` (e.g.
    /// `127.0.0.1:8085`), passing everything until told otherwise.
    pub fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            upstream,
            control: Mutex::new(Control {
                next: VecDeque::new(),
                default: Fault::Pass,
                rng: 0x9E37_79B9_7F4A_7C15,
            }),
            requests: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let i2 = inner.clone();
        thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || accept(listener, i2))?;
        Ok(Self { addr, inner })
    }

    /// `http://127.0.0.1:PORT`, for a tier's `endpoints`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fault applied to every request from now on (after any queued by
    /// [`next`](Self::next)).
    pub fn set(&self, f: Fault) {
        self.inner.control.lock().default = f;
    }

    /// Applies `f` to the next `n` requests, then the default again.
    pub fn next(&self, n: usize, f: Fault) {
        let mut c = self.inner.control.lock();
        c.next.extend(std::iter::repeat_n(f, n));
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Stops listening and resets every open connection, as a killed server would:
    /// connecting is refused from then on.
    pub fn kill(&self) {
        if self.inner.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the accept loop so it drops the listener.
        let _ = TcpStream::connect(self.addr);
        for c in self.inner.conns.lock().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.kill();
    }
}

fn accept(listener: TcpListener, inner: Arc<Inner>) {
    for conn in listener.incoming() {
        if inner.killed.load(Ordering::SeqCst) {
            break;
        }
        let Ok(conn) = conn else { continue };
        let _ = conn.set_nodelay(true);
        if let Ok(c) = conn.try_clone() {
            inner.conns.lock().push(c);
        }
        let i2 = inner.clone();
        let _ = thread::Builder::new()
            .name("fault-proxy-conn".into())
            .spawn(move || {
                let _ = serve(conn, &i2);
            });
    }
}

/// Reads one HTTP/1.1 message (head and a Content-Length body). `None` at a clean EOF.
fn read_message(r: &mut BufReader<TcpStream>) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut head = Vec::new();
    loop {
        let n = r.read_until(b'\n', &mut head)?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
        if head.len() > 64 << 10 {
            return Err(io::Error::other("head over 64 KiB"));
        }
    }
    let text = String::from_utf8_lossy(&head);
    let len = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    if len > 64 << 20 {
        return Err(io::Error::other("body over 64 MiB"));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Some((head, body)))
}

/// `head` with its Content-Length set to `len`.
fn with_length(head: &[u8], len: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::new();
    for l in text.split("\r\n") {
        if l.is_empty() {
            continue;
        }
        match l.split_once(':') {
            Some((k, _)) if k.trim().eq_ignore_ascii_case("content-length") => {
                out.push_str(&format!("content-length: {len}\r\n"));
            }
            _ => {
                out.push_str(l);
                out.push_str("\r\n");
            }
        }
    }
    out.push_str("\r\n");
    out.into_bytes()
}

fn fault(inner: &Inner) -> Fault {
    let mut c = inner.control.lock();
    let f = c.next.pop_front().unwrap_or(c.default);
    if let Fault::Tail { share, delay } = f {
        // xorshift64*: deterministic, so runs are comparable.
        c.rng ^= c.rng >> 12;
        c.rng ^= c.rng << 25;
        c.rng ^= c.rng >> 27;
        let u = (c.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        return if u < share {
            Fault::Delay(delay)
        } else {
            Fault::Pass
        };
    }
    f
}

fn serve(client: TcpStream, inner: &Inner) -> io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    let mut upstream: Option<(TcpStream, BufReader<TcpStream>)> = None;
    while let Some((head, body)) = read_message(&mut reader)? {
        inner.requests.fetch_add(1, Ordering::Relaxed);
        let f = fault(inner);
        let canned = |status: u16, body: &[u8]| {
            let mut m = format!(
                "HTTP/1.1 {status} Injected\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            m.extend_from_slice(body);
            m
        };
        match f {
            Fault::Drop => {
                let _ = client.shutdown(Shutdown::Both);
                return Ok(());
            }
            Fault::Status(s) => {
                client.write_all(&canned(s, br#"{"error":"injected by FaultProxy"}"#))?;
                continue;
            }
            Fault::Malformed => {
                client.write_all(&canned(200, br#"{"model_name":"x","outputs":[{"name":"#))?;
                continue;
            }
            Fault::Delay(d) => thread::sleep(d),
            _ => {}
        }
        if inner.killed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if upstream.is_none() {
            let s = TcpStream::connect(inner.upstream)?;
            s.set_nodelay(true)?;
            let r = BufReader::new(s.try_clone()?);
            upstream = Some((s, r));
        }
        let (up, up_reader) = upstream.as_mut().expect("connected above");
        up.write_all(&head)?;
        up.write_all(&body)?;
        let Some((rhead, rbody)) = read_message(up_reader)? else {
            return Ok(());
        };
        match f {
            Fault::Truncated => {
                client.write_all(&rhead)?;
                client.write_all(&rbody[..rbody.len() / 2])?;
                client.flush()?;
                let _ = client.shutdown(Shutdown::Both);
                return Ok(());
            }
            Fault::WrongShape => {
                let mut v: serde_json::Value =
                    serde_json::from_slice(&rbody).map_err(io::Error::other)?;
                if let Some(n) = v["outputs"][0]["shape"][0].as_i64() {
                    v["outputs"][0]["shape"][0] = (n + 1).into();
                }
                let b = serde_json::to_vec(&v).map_err(io::Error::other)?;
                client.write_all(&with_length(&rhead, b.len()))?;
                client.write_all(&b)?;
            }
            _ => {
                client.write_all(&rhead)?;
                client.write_all(&rbody)?;
            }
        }
    }
    Ok(())
}
