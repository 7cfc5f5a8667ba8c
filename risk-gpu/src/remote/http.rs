//! The tier's HTTP client: keep-alive pool, no redirects, TLS (rustls) with the configured
//! roots and client identity, the bearer token as a sensitive default header; and reading
//! a response body under a byte cap.

use super::attempt::AttemptError;
use super::config::KServeConfig;
use super::RemoteError;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use std::io::Read;
use std::path::Path;

/// The largest PEM file read (a CA bundle of a few hundred certificates fits).
const MAX_PEM_BYTES: u64 = 1 << 20;

fn config_err(field: &str, reason: String) -> RemoteError {
    RemoteError::Config {
        field: field.to_owned(),
        reason,
    }
}

/// Reads the PEM file of configuration field `field`, at most [`MAX_PEM_BYTES`].
fn read_pem(field: &str, path: &Path) -> Result<Vec<u8>, RemoteError> {
    let fail = |why: String| config_err(field, format!("{}: {why}", path.display()));
    let f = std::fs::File::open(path).map_err(|e| fail(e.kind().to_string()))?;
    let mut out = Vec::new();
    f.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| fail(e.kind().to_string()))?;
    if out.len() as u64 > MAX_PEM_BYTES {
        return Err(fail(format!("larger than {MAX_PEM_BYTES} bytes")));
    }
    if !out.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(fail("not a PEM file (no -----BEGIN line)".into()));
    }
    Ok(out)
}

/// The client every request of the tier goes through.
pub(crate) fn client(cfg: &KServeConfig) -> Result<reqwest::Client, RemoteError> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .http1_only()
        .no_proxy()
        // A 3xx is answered as an error naming its status: following one would re-send
        // the features (and the token) to wherever the Location points.
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .pool_max_idle_per_host(cfg.pool_idle)
        .pool_idle_timeout(cfg.pool_idle_timeout)
        .connect_timeout(cfg.load_timeout);
    if let Some(path) = &cfg.ca_file {
        let pem = read_pem("ca_file", path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| config_err("ca_file", format!("{}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(config_err(
                "ca_file",
                format!("{}: no certificate in it", path.display()),
            ));
        }
        // Only the configured CA: a certificate another root signed is refused.
        b = b.tls_built_in_root_certs(false);
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    if let (Some(cert), Some(key)) = (&cfg.client_cert, &cfg.client_key) {
        let mut pem = read_pem("client_cert", cert)?;
        pem.push(b'\n');
        pem.extend_from_slice(&read_pem("client_key", key)?);
        // The key's bytes never reach a message: the error names the files only.
        let id = reqwest::Identity::from_pem(&pem).map_err(|_| {
            config_err(
                "client_cert",
                format!(
                    "{} with client_key {}: not a PEM certificate and unencrypted private key",
                    cert.display(),
                    key.display()
                ),
            )
        })?;
        b = b.identity(id);
    }
    if let Some(token) = &cfg.bearer_token {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
            config_err(
                "bearer_token",
                format!(
                    "({}) holds characters an HTTP header cannot carry",
                    token.source()
                ),
            )
        })?;
        v.set_sensitive(true);
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, v);
        b = b.default_headers(h);
    }
    b.build()
        .map_err(|e| RemoteError::Runtime(super::attempt::chain(&e)))
}

/// Reads `resp`'s body, refusing one over `max` bytes: by its `Content-Length` before
/// reading, else as soon as the chunks read pass it.
pub(crate) async fn read_body(
    resp: &mut reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, AttemptError> {
    let expect = resp.content_length().unwrap_or(0);
    if expect > max as u64 {
        return Err(AttemptError::TooLarge(max));
    }
    let mut buf = Vec::with_capacity((expect as usize).max(256));
    while let Some(chunk) = resp.chunk().await.map_err(AttemptError::from_reqwest)? {
        if buf.len() + chunk.len() > max {
            return Err(AttemptError::TooLarge(max));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// The error of a non-2xx answer: a 3xx is never followed, and says so.
pub(crate) fn status_error(status: reqwest::StatusCode, body: &[u8]) -> AttemptError {
    let message = if status.is_redirection() {
        "redirect not followed (the tier never follows redirects)".to_owned()
    } else {
        super::v2::error_text(body)
    };
    AttemptError::Status {
        status: status.as_u16(),
        message,
    }
}
