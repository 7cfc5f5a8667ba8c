//! One Redis server or a Redis Cluster, behind the same calls: a pipeline of commands and
//! a single query. Every script touches one key (its `KEYS[1]`, or keys of one hash tag),
//! so each command of a decision's pipeline is routed to the node that owns its key's
//! slot; nothing is cross-slot. Timeouts bound every socket read and write (single node)
//! or every connection and response (cluster).
//!
//! [`Access`] is how the client gets in: TLS (`rediss://`, rustls, an optional CA file
//! trusted alone, an optional client certificate) and the ACL user and password. Every
//! message it makes names the server without credentials ([`redact_url`]) and the
//! configuration key at fault, never the password.

use super::def::RedisConfig;
use crate::error::ConfigError;
use crate::secret::{redact_url, Secret};
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisResult, Value};
use std::path::Path;
use std::time::Duration;

/// A client for `cfg` (`cluster` nodes when given, else `url`).
#[derive(Clone)]
pub(crate) enum Client {
    One(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// A connection of a [`Client`].
pub(crate) enum Conn {
    One(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

/// How the client gets in: certificates (read and checked once) and credentials, plus
/// the strings no message may show (passwords from the keys and from the URLs).
#[derive(Clone)]
pub(crate) struct Access {
    certs: Option<redis::TlsCertificates>,
    username: Option<String>,
    password: Option<Secret>,
    hidden: Vec<String>,
}

fn scheme_tls(url: &str) -> bool {
    url.trim_start()
        .to_ascii_lowercase()
        .starts_with("rediss://")
}

/// Installs the process-wide rustls crypto provider (ring) that redis's TLS needs; a
/// provider some other part of the process installed first is kept.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn read_pem(key: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| {
        ConfigError::invalid(key, format!("cannot read {}: {}", path.display(), e.kind()))
    })
}

impl Access {
    /// Reads and checks `cfg`'s TLS files and credentials; errors name the key at fault.
    pub fn from_config(cfg: &RedisConfig) -> Result<Self, ConfigError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (url_key, urls): (&str, Vec<&str>) = if cfg.cluster.is_empty() {
            ("state.redis.url", vec![cfg.url.as_str()])
        } else {
            (
                "state.redis.cluster",
                cfg.cluster.iter().map(String::as_str).collect(),
            )
        };
        let tls = scheme_tls(urls[0]);
        if urls.iter().any(|u| scheme_tls(u) != tls) {
            return Err(ConfigError::invalid(
                url_key,
                "every node must be rediss:// (TLS) or none",
            ));
        }
        let mut hidden = Vec::new();
        for u in &urls {
            // A password in a URL works, is never printed, and is better given as a key.
            if let Ok(ci) = u.into_connection_info() {
                if let Some(p) = ci.redis_settings().password() {
                    tracing::warn!(
                        target: "risk::state",
                        key = url_key,
                        "a password is written in the Redis URL; give it as state.redis.password = \"env:NAME\" or \"file:PATH\""
                    );
                    hidden.push(p.to_owned());
                }
            }
        }
        if let Some(p) = &cfg.password {
            hidden.push(p.expose().to_owned());
        }
        let any_file =
            cfg.tls_ca_file.is_some() || cfg.tls_cert_file.is_some() || cfg.tls_key_file.is_some();
        if any_file && !tls {
            let key = if cfg.tls_ca_file.is_some() {
                "state.redis.tls_ca_file"
            } else {
                "state.redis.tls_cert_file"
            };
            return Err(ConfigError::invalid(
                key,
                format!(
                    "TLS files need a rediss:// URL ({url_key} is {})",
                    redact_url(urls[0])
                ),
            ));
        }
        let root_cert = match &cfg.tls_ca_file {
            None => None,
            Some(p) => {
                let k = "state.redis.tls_ca_file";
                let pem = read_pem(k, p)?;
                let n = CertificateDer::pem_slice_iter(&pem)
                    .map(|c| c.map(drop))
                    .collect::<Result<Vec<()>, _>>()
                    .map_err(|e| {
                        ConfigError::invalid(
                            k,
                            format!("{}: not PEM certificates: {e:?}", p.display()),
                        )
                    })?
                    .len();
                if n == 0 {
                    return Err(ConfigError::invalid(
                        k,
                        format!("{}: holds no PEM certificate", p.display()),
                    ));
                }
                Some(pem)
            }
        };
        let client_tls = match (&cfg.tls_cert_file, &cfg.tls_key_file) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError::invalid(
                    "state.redis.tls_key_file",
                    "state.redis.tls_cert_file needs its private key",
                ))
            }
            (None, Some(_)) => {
                return Err(ConfigError::invalid(
                    "state.redis.tls_cert_file",
                    "state.redis.tls_key_file needs its certificate",
                ))
            }
            (Some(c), Some(k)) => {
                let ck = "state.redis.tls_cert_file";
                let cert = read_pem(ck, c)?;
                let n = CertificateDer::pem_slice_iter(&cert)
                    .map(|c| c.map(drop))
                    .collect::<Result<Vec<()>, _>>()
                    .map_err(|e| {
                        ConfigError::invalid(
                            ck,
                            format!("{}: not PEM certificates: {e:?}", c.display()),
                        )
                    })?
                    .len();
                if n == 0 {
                    return Err(ConfigError::invalid(
                        ck,
                        format!("{}: holds no PEM certificate", c.display()),
                    ));
                }
                let kk = "state.redis.tls_key_file";
                let key = read_pem(kk, k)?;
                // The error's text is the PEM parser's kind, never the key's bytes.
                PrivateKeyDer::from_pem_slice(&key).map_err(|_| {
                    ConfigError::invalid(kk, format!("{}: holds no PEM private key", k.display()))
                })?;
                Some(redis::ClientTlsConfig {
                    client_cert: cert,
                    client_key: key,
                })
            }
        };
        if tls {
            install_crypto_provider();
        }
        Ok(Self {
            certs: (client_tls.is_some() || root_cert.is_some()).then_some(
                redis::TlsCertificates {
                    client_tls,
                    root_cert,
                },
            ),
            username: cfg.username.clone(),
            password: cfg.password.clone(),
            hidden,
        })
    }

    /// The rustls client settings of these certificates, for the decide path's own
    /// sockets (`redis::wire`): the CA file's certificates trusted alone, else the
    /// system's roots (as the crate's connections); the client certificate when given.
    pub fn rustls(&self) -> RedisResult<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |what: &'static str| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, what))
        };
        let mut roots = rustls::RootCertStore::empty();
        match self.certs.as_ref().and_then(|c| c.root_cert.as_ref()) {
            Some(pem) => {
                for c in CertificateDer::pem_slice_iter(pem) {
                    let c = c.map_err(|_| bad("the CA file holds no PEM certificate"))?;
                    roots
                        .add(c)
                        .map_err(|_| bad("a certificate of the CA file is refused"))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                if found.certs.is_empty() {
                    return Err(bad("no system root certificate could be read"));
                }
                // A system certificate rustls cannot parse is skipped; the others
                // still check the server.
                roots.add_parsable_certificates(found.certs);
            }
        }
        let b = rustls::ClientConfig::builder().with_root_certificates(roots);
        match self.certs.as_ref().and_then(|c| c.client_tls.as_ref()) {
            None => Ok(b.with_no_client_auth()),
            Some(t) => {
                let chain = CertificateDer::pem_slice_iter(&t.client_cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| bad("the client certificate file is not PEM"))?;
                // The error names the file's kind of fault, never the key's bytes.
                let key = PrivateKeyDer::from_pem_slice(&t.client_key)
                    .map_err(|_| bad("the client key file holds no PEM private key"))?;
                b.with_client_auth_cert(chain, key)
                    .map_err(|_| bad("the client certificate and key do not go together"))
            }
        }
    }

    /// `msg` with every secret this access knows replaced by `[redacted]`.
    pub fn scrub(&self, msg: &str) -> String {
        let mut m = msg.to_owned();
        for h in self.hidden.iter().filter(|h| !h.is_empty()) {
            m = m.replace(h.as_str(), "[redacted]");
        }
        m
    }

    /// A failure to connect or authenticate as a configuration error: the key at fault
    /// (password, CA, client certificate, else the URL), the server without
    /// credentials, the library's reason scrubbed of secrets.
    pub fn config_error(&self, cfg: &RedisConfig, e: &redis::RedisError) -> ConfigError {
        let text = self.scrub(&e.to_string());
        let lower = text.to_ascii_lowercase();
        let key = if e.kind() == redis::ErrorKind::AuthenticationFailed
            || lower.contains("wrongpass")
            || lower.contains("noauth")
            || lower.contains("invalid username-password")
        {
            "state.redis.password"
        } else if lower.contains("unknownissuer")
            || lower.contains("invalid peer certificate")
            || lower.contains("badsignature")
        {
            "state.redis.tls_ca_file"
        } else if lower.contains("certificaterequired")
            || lower.contains("certificateexpired")
            || lower.contains("badcertificate")
            || lower.contains("unknownca")
            || lower.contains("certificate required")
            || lower.contains("expired")
        {
            "state.redis.tls_cert_file"
        } else if cfg.cluster.is_empty() {
            "state.redis.url"
        } else {
            "state.redis.cluster"
        };
        let who = match (&self.username, key) {
            (Some(u), "state.redis.password") => format!(" as ACL user {u:?}"),
            _ => String::new(),
        };
        ConfigError::invalid(key, format!("{}{who}: {text}", cfg.server()))
    }
}

impl Client {
    /// A client for `cfg` through `access`, whose calls are bounded by `timeout`.
    pub fn open(
        cfg: &RedisConfig,
        access: &Access,
        timeout: Duration,
    ) -> Result<Self, ConfigError> {
        if cfg.cluster.is_empty() {
            return Self::node(&cfg.url, "state.redis.url", access).map(Client::One);
        }
        let mut b = redis::cluster::ClusterClient::builder(cfg.cluster.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout);
        if let Some(u) = &access.username {
            b = b.username(u);
        }
        if let Some(p) = &access.password {
            b = b.password(p.expose());
        }
        if let Some(c) = &access.certs {
            b = b.certs(c.clone());
        }
        b.build().map(Client::Cluster).map_err(|e| {
            ConfigError::invalid(
                "state.redis.cluster",
                format!("{}: {}", cfg.server(), access.scrub(&e.to_string())),
            )
        })
    }

    /// A client of the one server at `url` through `access` (errors name `key`).
    fn node(url: &str, key: &str, access: &Access) -> Result<redis::Client, ConfigError> {
        let bad = |e: redis::RedisError| {
            ConfigError::invalid(
                key,
                format!("{}: {}", redact_url(url), access.scrub(&e.to_string())),
            )
        };
        let mut ci = url.into_connection_info().map_err(bad)?;
        let mut rs = ci.redis_settings().clone();
        if let Some(u) = &access.username {
            rs = rs.set_username(u);
        }
        if let Some(p) = &access.password {
            rs = rs.set_password(p.expose());
        }
        ci = ci.set_redis_settings(rs);
        match &access.certs {
            Some(c) => redis::Client::build_with_tls(ci, c.clone()),
            None => redis::Client::open(ci),
        }
        .map_err(bad)
    }

    /// One-server clients for pub/sub (which a cluster client lacks): the server at
    /// `url`, or each cluster seed node (Redis Cluster relays a PUBLISH to every node).
    pub fn subscribers(
        cfg: &RedisConfig,
        access: &Access,
    ) -> Result<Vec<redis::Client>, ConfigError> {
        if cfg.cluster.is_empty() {
            return Ok(vec![Self::node(&cfg.url, "state.redis.url", access)?]);
        }
        cfg.cluster
            .iter()
            .map(|u| Self::node(u, "state.redis.cluster", access))
            .collect()
    }

    /// A new connection, every read and write bounded by `timeout`.
    pub fn connect(&self, timeout: Duration) -> RedisResult<Conn> {
        match self {
            Client::One(c) => {
                let con = c.get_connection_with_timeout(timeout)?;
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(Conn::One(con))
            }
            Client::Cluster(c) => Ok(Conn::Cluster(Box::new(c.get_connection()?))),
        }
    }
}

impl Conn {
    /// Runs `cmds` as one pipeline; their replies in order.
    pub fn pipeline(&mut self, cmds: &[Cmd]) -> RedisResult<Vec<Value>> {
        match self {
            Conn::One(con) => {
                let mut p = redis::pipe();
                for c in cmds {
                    p.add_command(c.clone());
                }
                p.query(con)
            }
            Conn::Cluster(con) => {
                let mut p = redis::cluster::cluster_pipe();
                for c in cmds {
                    p.add_command(c.clone());
                }
                p.query(con)
            }
        }
    }

    /// One command.
    pub fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Conn::One(con) => cmd.query(con),
            Conn::Cluster(con) => cmd.query(con.as_mut()),
        }
    }
}

/// A copy of `e` for each waiting caller (kind and text kept; timeouts stay timeouts).
pub(crate) fn copy_error(e: &redis::RedisError) -> redis::RedisError {
    if e.is_timeout() {
        return redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            e.to_string(),
        ));
    }
    if e.is_io_error() || e.is_connection_dropped() {
        return redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            e.to_string(),
        ));
    }
    redis::RedisError::from((e.kind(), "Redis failed", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A throw-away CA and client certificate (tools/certs.sh) in a directory of its own.
    fn certs() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("tls");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tools/certs.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg(&d)
            .output()
            .expect("bash runs tools/certs.sh (needs openssl)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (dir, d)
    }

    fn cluster_cfg(d: &Path) -> RedisConfig {
        RedisConfig {
            cluster: vec![
                "rediss://127.0.0.1:7001".into(),
                "rediss://127.0.0.1:7002".into(),
            ],
            username: Some("risk".into()),
            password: Some(Secret::from_value("cluster-Pa55word")),
            tls_ca_file: Some(d.join("ca.pem")),
            tls_cert_file: Some(d.join("client.pem")),
            tls_key_file: Some(d.join("client.key")),
            ..RedisConfig::default()
        }
    }

    #[test]
    fn a_cluster_client_over_tls_builds_with_the_certificates_and_checks_them() {
        let (_keep, d) = certs();
        let cfg = cluster_cfg(&d);
        let access = Access::from_config(&cfg).unwrap();
        let c = Client::open(&cfg, &access, Duration::from_secs(1)).unwrap();
        assert!(matches!(c, Client::Cluster(_)));
        // A key file that is not a key, a CA file without certificates: refused by key.
        let mut bad = cluster_cfg(&d);
        bad.tls_key_file = Some(d.join("ca.pem"));
        let e = Access::from_config(&bad).err().unwrap();
        assert_eq!(e.key(), Some("state.redis.tls_key_file"), "{e}");
        let mut bad = cluster_cfg(&d);
        bad.tls_ca_file = Some(d.join("client.key"));
        let e = Access::from_config(&bad).err().unwrap();
        assert_eq!(e.key(), Some("state.redis.tls_ca_file"), "{e}");
        // Mixed schemes among the seed nodes.
        let mut bad = cluster_cfg(&d);
        bad.cluster[1] = "redis://127.0.0.1:7002".into();
        let e = Access::from_config(&bad).err().unwrap();
        assert_eq!(e.key(), Some("state.redis.cluster"), "{e}");
        assert!(!format!("{e} {e:?} {cfg:?}").contains("cluster-Pa55word"));
    }

    #[test]
    fn secrets_are_scrubbed_from_library_messages() {
        let cfg = RedisConfig {
            url: "redis://risk:In-Url-Pa55@127.0.0.1:1/".into(),
            password: Some(Secret::from_value("Key-Pa55word")),
            ..RedisConfig::default()
        };
        let a = Access::from_config(&cfg).unwrap();
        assert_eq!(
            a.scrub("x In-Url-Pa55 y Key-Pa55word"),
            "x [redacted] y [redacted]"
        );
        assert!(!format!("{cfg:?}").contains("Pa55"));
        assert_eq!(cfg.server(), "redis://[redacted]@127.0.0.1:1/");
    }
}
