//! A tiny loopback HTTP/1.1 server answering canned responses by method and path, one
//! request per connection (`Connection: close`), that records each request's head: for
//! what a real model server will not do (redirect, oversized bodies, check a token).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One canned answer.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Send `Content-Length` (else the body ends when the connection closes).
    pub length: bool,
}

impl Answer {
    pub fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
            length: true,
        }
    }
}

/// A running canned server; its thread ends with the test process.
pub struct Canned {
    pub url: String,
    /// Every request's head (request line and headers), in arrival order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

/// Metadata of an 18-feature `xgb-fraud`, as MLServer lists it.
pub fn metadata(method: &str, path: &str) -> Option<Answer> {
    match (method, path) {
        ("GET", "/v2/health/ready") | ("GET", "/v2/models/xgb-fraud/ready") => {
            Some(Answer::json(200, ""))
        }
        ("GET", "/v2") => Some(Answer::json(
            200,
            r#"{"name":"canned","version":"1","extensions":[]}"#,
        )),
        ("GET", "/v2/models/xgb-fraud") => Some(Answer::json(
            200,
            r#"{"name":"xgb-fraud","versions":["1"],"platform":"","inputs":[{"name":"input-0","datatype":"FP32","shape":[-1,18]}],"outputs":[{"name":"predict_proba","datatype":"FP32","shape":[-1,2]}]}"#,
        )),
        _ => None,
    }
}

fn serve_one(
    mut s: TcpStream,
    route: &(dyn Fn(&str, &str) -> Answer + Send + Sync),
    log: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    let mut parts = head.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    log.lock().unwrap().push(head);
    let a = route(&method, &path);
    let mut out = format!("HTTP/1.1 {} Canned\r\nConnection: close\r\n", a.status);
    for (k, v) in &a.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if a.length {
        out.push_str(&format!("Content-Length: {}\r\n", a.body.len()));
    }
    out.push_str("\r\n");
    s.write_all(out.as_bytes())?;
    // The client may hang up once it has seen enough: that is not an error here.
    let _ = s.write_all(&a.body);
    Ok(())
}

/// Starts a server on 127.0.0.1 (a free port) answering with `route`.
pub fn start(route: impl Fn(&str, &str) -> Answer + Send + Sync + 'static) -> Canned {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = requests.clone();
    let route = Arc::new(route);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (route, log) = (route.clone(), log.clone());
            std::thread::spawn(move || {
                let _ = serve_one(s, &*route, &log);
            });
        }
    });
    Canned { url, requests }
}
