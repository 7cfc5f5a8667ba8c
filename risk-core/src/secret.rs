//! Secrets in configuration: passwords, tokens, key passphrases and the pseudonymisation key.
//!
//! A secret is written in risk.toml (or given to a builder) as one of:
//! - `env:NAME`: the value of the environment variable `NAME`, read once at load;
//! - `file:PATH`: the contents of the file at `PATH` (at most 64 KiB, one trailing newline
//!   dropped), the form a Kubernetes or Vault secret mount gives;
//! - anything else: the value inline. Accepted for tests and local runs, with a warning
//!   (`tracing` at WARN, naming the key, never the value) because the value then sits in a
//!   file next to the rules.
//!
//! [`Secret`] holds the value; its `Debug` and `Display` print `[redacted]` and where the
//! value came from, never the value. [`SecretError`] names the configuration key and the
//! variable or file, never the value. [`redact_url`] shows a URL without its credentials, for
//! messages that must name a server.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The largest secret file read (a PEM passphrase or a token is far smaller).
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Where a secret's value came from (printable: it names a variable or a file, not the value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// The environment variable of this name.
    Env(String),
    /// The file at this path.
    File(PathBuf),
    /// Written inline in the configuration (warned at load).
    Inline,
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(n) => write!(f, "env:{n}"),
            Self::File(p) => write!(f, "file:{}", p.display()),
            Self::Inline => f.write_str("inline"),
        }
    }
}

/// A secret that could not be read. Names the configuration key and the source, never a value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// `env:NAME` where `NAME` is not set (or not UTF-8).
    #[error("{key}: environment variable {var} is not set (or not UTF-8)")]
    EnvMissing {
        /// The configuration key, e.g. `audit.kafka.sasl_password`.
        key: String,
        /// The variable named after `env:`.
        var: String,
    },
    /// `file:PATH` that cannot be read, is too large or is not UTF-8.
    #[error("{key}: cannot read secret file {path}: {reason}")]
    File {
        /// The configuration key.
        key: String,
        /// The file named after `file:`.
        path: PathBuf,
        /// Why (an I/O error, "larger than 64 KiB", "not UTF-8").
        reason: String,
    },
    /// The value is empty (an empty variable or file, or `env:` with no name).
    #[error("{key}: the secret is empty ({source_label})")]
    Empty {
        /// The configuration key.
        key: String,
        /// `env:NAME`, `file:PATH` or `inline`.
        source_label: String,
    },
}

/// A secret value. `Debug` and `Display` never print it; [`Secret::expose`] is the one way out,
/// for the client library that sends it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: Box<str>,
    source: SecretSource,
}

impl Secret {
    /// Reads the secret that configuration key `key` gives as `spec` (`env:NAME`, `file:PATH`
    /// or an inline value, warned). `key` only labels errors and the warning.
    pub fn resolve(key: &str, spec: &str) -> Result<Self, SecretError> {
        let (value, source) = if let Some(var) = spec.strip_prefix("env:") {
            let var = var.trim();
            if var.is_empty() {
                return Err(SecretError::Empty {
                    key: key.into(),
                    source_label: "env:".into(),
                });
            }
            let v = std::env::var(var).map_err(|_| SecretError::EnvMissing {
                key: key.into(),
                var: var.into(),
            })?;
            (v, SecretSource::Env(var.into()))
        } else if let Some(path) = spec.strip_prefix("file:") {
            let path = PathBuf::from(path.trim());
            (read_file(key, &path)?, SecretSource::File(path))
        } else {
            tracing::warn!(
                key,
                "a secret is written inline in the configuration; use env:NAME or file:PATH"
            );
            (spec.to_owned(), SecretSource::Inline)
        };
        if value.is_empty() {
            return Err(SecretError::Empty {
                key: key.into(),
                source_label: source.to_string(),
            });
        }
        Ok(Self {
            value: value.into_boxed_str(),
            source,
        })
    }

    /// A secret given by the host program itself (a builder argument), not read from config.
    pub fn from_value(value: impl Into<String>) -> Self {
        Self {
            value: value.into().into_boxed_str(),
            source: SecretSource::Inline,
        }
    }

    /// The value, for the client library that sends it. Never format it into a message.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Where the value came from.
    pub fn source(&self) -> &SecretSource {
        &self.source
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret([redacted], {})", self.source)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

fn read_file(key: &str, path: &Path) -> Result<String, SecretError> {
    use std::io::Read;
    let fail = |reason: String| SecretError::File {
        key: key.into(),
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| fail(e.kind().to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.kind().to_string()))?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(fail("larger than 64 KiB".into()));
    }
    let mut s = String::from_utf8(bytes).map_err(|_| fail("not UTF-8".into()))?;
    if s.ends_with('\n') {
        s.pop();
        if s.ends_with('\r') {
            s.pop();
        }
    }
    Ok(s)
}

/// A secret as written in configuration, not yet read: deserialised from a string, resolved
/// with [`SecretSpec::resolve`] once the key's name is known. Its `Debug` hides inline values.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretSpec(String);

impl SecretSpec {
    /// A spec from its text (`env:NAME`, `file:PATH` or an inline value).
    pub fn new(spec: impl Into<String>) -> Self {
        Self(spec.into())
    }

    /// Reads it, labelling errors with configuration key `key`.
    pub fn resolve(&self, key: &str) -> Result<Secret, SecretError> {
        Secret::resolve(key, &self.0)
    }
}

impl fmt::Debug for SecretSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.starts_with("env:") || self.0.starts_with("file:") {
            write!(f, "SecretSpec({})", self.0)
        } else {
            f.write_str("SecretSpec([redacted])")
        }
    }
}

/// `url` with any `user:password@` replaced by `[redacted]@`, and the values of query
/// parameters that look like credentials (`password`, `token`, `key`, `secret`, `auth`)
/// replaced by `[redacted]`: for messages that name a server.
pub fn redact_url(url: &str) -> String {
    let (head, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let mut out = String::with_capacity(url.len());
    out.push_str(head);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str("[redacted]@");
            out.push_str(&authority[at + 1..]);
        }
        None => out.push_str(authority),
    }
    match tail.find('?') {
        None => out.push_str(tail),
        Some(q) => {
            out.push_str(&tail[..=q]);
            let (query, frag) = match tail[q + 1..].find('#') {
                Some(h) => tail[q + 1..].split_at(h),
                None => (&tail[q + 1..], ""),
            };
            for (i, pair) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match pair.split_once('=') {
                    Some((k, _)) if is_credential_param(k) => {
                        out.push_str(k);
                        out.push_str("=[redacted]");
                    }
                    _ => out.push_str(pair),
                }
            }
            out.push_str(frag);
        }
    }
    out
}

fn is_credential_param(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    ["pass", "token", "key", "secret", "auth", "pwd"]
        .iter()
        .any(|w| k.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_print_the_value() {
        let s = Secret::from_value("hunter2-Very-Secret");
        assert_eq!(s.to_string(), "[redacted]");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert_eq!(s.expose(), "hunter2-Very-Secret");
        let spec = SecretSpec::new("hunter2-Very-Secret");
        assert_eq!(format!("{spec:?}"), "SecretSpec([redacted])");
        assert_eq!(
            format!("{:?}", SecretSpec::new("env:RISK_X")),
            "SecretSpec(env:RISK_X)"
        );
    }

    #[test]
    fn env_and_file_sources_and_their_errors_name_key_and_source() {
        std::env::set_var("RISK_SECRET_TEST_VAR", "s3cr3t-env");
        let s = Secret::resolve("redis.password", "env:RISK_SECRET_TEST_VAR").unwrap();
        assert_eq!(s.expose(), "s3cr3t-env");
        assert_eq!(
            s.source(),
            &SecretSource::Env("RISK_SECRET_TEST_VAR".into())
        );
        let e = Secret::resolve("redis.password", "env:RISK_SECRET_NOT_SET_ANYWHERE").unwrap_err();
        assert_eq!(
            e.to_string(),
            "redis.password: environment variable RISK_SECRET_NOT_SET_ANYWHERE is not set (or not UTF-8)"
        );

        let dir = std::env::temp_dir().join(format!("risk-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("pw");
        std::fs::write(&p, "from-file-value\r\n").unwrap();
        let s = Secret::resolve("k", &format!("file:{}", p.display())).unwrap();
        assert_eq!(s.expose(), "from-file-value");
        std::fs::write(&p, "").unwrap();
        let e = Secret::resolve("k", &format!("file:{}", p.display())).unwrap_err();
        assert!(matches!(e, SecretError::Empty { .. }), "{e}");
        std::fs::write(&p, vec![b'a'; 70_000]).unwrap();
        let e = Secret::resolve("k", &format!("file:{}", p.display())).unwrap_err();
        assert!(e.to_string().contains("larger than 64 KiB"), "{e}");
        let e = Secret::resolve("k", "file:/nonexistent/risk/pw").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("k: cannot read secret file /nonexistent/risk/pw"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_url("redis://risk:pw@127.0.0.1:6390/0"),
            "redis://[redacted]@127.0.0.1:6390/0"
        );
        assert_eq!(
            redact_url("https://u:p@a@h:8443/v2?token=abc&x=1#f"),
            "https://[redacted]@h:8443/v2?token=[redacted]&x=1#f"
        );
        assert_eq!(redact_url("http://h:1/p"), "http://h:1/p");
        assert_eq!(redact_url("h:1"), "h:1");
        assert_eq!(redact_url("rediss://:pw@h/"), "rediss://[redacted]@h/");
    }
}
