//! The Redis store over TLS against the real server `tools/servers.sh start redis` runs:
//! `rediss://` with the test CA, a client certificate and the ACL user `risk` whose
//! password is read from a file (`file:`); each wrong piece (CA, expired or missing client
//! certificate, password) refused at build with a typed error naming the key and the
//! server, and never the password (not in the error's text, its `Debug`, nor the
//! configuration's `Debug`). A password written in the URL works and is never printed,
//! not even by a failing `report_label`.
//!
//! Needs `tools/servers.sh start redis`: `RISK_REDIS_TLS_URL` (default
//! rediss://127.0.0.1:6391/), `RISK_TLS_DIR` (default <repo>/target/servers/tls),
//! `RISK_REDIS_PASSWORD_FILE` (default <repo>/target/servers/redis/acl.password).

use super::redis::{defs, free_port, prefix, start_redis_with};
use super::*;
use risk_core::secret::Secret;
use risk_core::state::{RedisConfig, StateEngine};
use std::path::PathBuf;
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(super) fn tls_url() -> String {
    std::env::var("RISK_REDIS_TLS_URL").unwrap_or_else(|_| "rediss://127.0.0.1:6391/".to_owned())
}

pub(super) fn tls_dir() -> PathBuf {
    std::env::var_os("RISK_TLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/servers/tls"))
}

pub(super) fn password_file() -> PathBuf {
    std::env::var_os("RISK_REDIS_PASSWORD_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/servers/redis/acl.password"))
}

/// The password `tools/servers.sh` made (to check that no message shows it).
fn password() -> String {
    let p = password_file();
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (tools/servers.sh start redis)", p.display()))
        .trim_end()
        .to_owned()
}

/// Everything right: TLS with the CA alone trusted, the client certificate, user `risk`
/// with its password from `file:`.
pub(super) fn tls_config(name: &str) -> RedisConfig {
    let d = tls_dir();
    let spec = format!("file:{}", password_file().display());
    RedisConfig {
        url: tls_url(),
        username: Some("risk".into()),
        password: Some(Secret::resolve("state.redis.password", &spec).unwrap()),
        tls_ca_file: Some(d.join("ca.pem")),
        tls_cert_file: Some(d.join("client.pem")),
        tls_key_file: Some(d.join("client.key")),
        timeout: Duration::from_secs(2),
        prefix: prefix(name),
        retry: Duration::ZERO,
        ..RedisConfig::default()
    }
}

fn build(r: RedisConfig) -> (Result<StateEngine, ConfigError>, Arc<FeatureSchema>, String) {
    let cfg = StateConfig {
        features: defs(),
        redis: Some(r),
        ..StateConfig::default()
    };
    let debug = format!("{cfg:?}");
    let s = schema(&cfg);
    (
        StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)),
        s,
        debug,
    )
}

fn ev(id: u64, card: u64) -> Ev {
    Ev {
        id,
        card,
        merchant: 3,
        device: 9,
        ts: T0 + id as i64 * 1_000,
        amount: 12.0,
        channel: Channel::Ecom,
        country: "GB",
    }
}

#[test]
fn redis_over_tls_with_a_client_certificate_and_an_acl_user_keeps_state() {
    keeps_state_over_tls(tls_config("tls"));
}

/// The same with the decide path's reads polling the TLS socket before they block.
#[test]
fn redis_over_tls_keeps_state_when_reads_poll_first() {
    keeps_state_over_tls(RedisConfig {
        read_spin: Duration::from_micros(300),
        ..tls_config("tls-spin")
    });
}

fn keeps_state_over_tls(cfg: RedisConfig) {
    let (red, s, debug) = build(cfg);
    let red = red.unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"));
    assert!(!debug.contains(&password()), "{debug}");
    assert!(debug.contains("[redacted]"), "{debug}");
    for (i, want) in [(1, 0.0), (2, 1.0), (3, 2.0)] {
        let mut t = ev(i, 77).txn(&s);
        assert_eq!(
            red.apply(&mut t).status,
            StateStatus::Fresh,
            "{:?}",
            red.stats()
        );
        assert_eq!(t.features.by_name("c_count_1h"), Some(want));
    }
    assert!(red.flush(Duration::from_secs(30)));
    // A label through TLS as well (the remembered transaction is on the server).
    assert!(red.report_label(TxnId(2), true, T0 + HOUR).is_ok());
    assert_eq!(red.stats().degraded, 0);
}

/// Builds with `r`, expects a refusal naming `key` and the TLS server, never the password.
fn refused(r: RedisConfig, key: &str) -> String {
    let pw = password();
    let (got, _, debug) = build(r);
    let e = got
        .err()
        .unwrap_or_else(|| panic!("built; expected a refusal at {key}"));
    let (text, dbg) = (e.to_string(), format!("{e:?}"));
    eprintln!("refused as expected: {text}");
    assert_eq!(e.key(), Some(key), "{text}");
    assert!(text.contains("127.0.0.1:6391"), "names the server: {text}");
    for shown in [&text, &dbg, &debug] {
        assert!(!shown.contains(&pw), "the password leaked: {shown}");
    }
    text
}

#[test]
fn a_server_certificate_from_another_ca_is_refused_naming_the_ca_file() {
    let mut r = tls_config("other-ca");
    r.tls_ca_file = Some(tls_dir().join("other-ca.pem"));
    refused(r, "state.redis.tls_ca_file");
}

#[test]
fn an_expired_client_certificate_is_refused_naming_the_cert_file() {
    let mut r = tls_config("expired");
    r.tls_cert_file = Some(tls_dir().join("expired.pem"));
    r.tls_key_file = Some(tls_dir().join("expired.key"));
    refused(r, "state.redis.tls_cert_file");
}

#[test]
fn a_missing_client_certificate_is_refused_naming_the_cert_file() {
    let mut r = tls_config("no-cert");
    r.tls_cert_file = None;
    r.tls_key_file = None;
    refused(r, "state.redis.tls_cert_file");
}

#[test]
fn a_client_certificate_from_another_ca_is_refused() {
    let mut r = tls_config("stranger");
    r.tls_cert_file = Some(tls_dir().join("stranger.pem"));
    r.tls_key_file = Some(tls_dir().join("stranger.key"));
    refused(r, "state.redis.tls_cert_file");
}

#[test]
fn a_wrong_password_is_refused_without_showing_either_password() {
    let wrong = "wrong-Pa55word-0f-the-test";
    let mut r = tls_config("wrong-pw");
    r.password = Some(Secret::from_value(wrong));
    let text = refused(r.clone(), "state.redis.password");
    assert!(text.contains("\"risk\""), "names the ACL user: {text}");
    let (got, _, debug) = build(r);
    let e = got.err().unwrap();
    for shown in [e.to_string(), format!("{e:?}"), debug] {
        assert!(!shown.contains(wrong), "the wrong password leaked: {shown}");
    }
}

#[test]
fn tls_files_are_checked_at_build_naming_the_key() {
    let d = tls_dir();
    // TLS files with a plain URL.
    let mut r = tls_config("plain-url");
    r.url = "redis://127.0.0.1:6390/".into();
    let e = build(r).0.err().unwrap();
    assert_eq!(e.key(), Some("state.redis.tls_ca_file"), "{e}");
    // A key that is not PEM, a CA file that is missing, a certificate without its key.
    let mut r = tls_config("bad-key");
    r.tls_key_file = Some(d.join("ca.pem"));
    assert_eq!(
        build(r).0.err().unwrap().key(),
        Some("state.redis.tls_key_file")
    );
    let mut r = tls_config("no-ca");
    r.tls_ca_file = Some(d.join("missing.pem"));
    assert_eq!(
        build(r).0.err().unwrap().key(),
        Some("state.redis.tls_ca_file")
    );
    let mut r = tls_config("half");
    r.tls_key_file = None;
    assert_eq!(
        build(r).0.err().unwrap().key(),
        Some("state.redis.tls_key_file")
    );
    // A cluster over TLS takes the same certificates, checked at build (the cluster
    // client connects lazily: an address nothing listens on builds, then fails to connect).
    let mut r = tls_config("cluster-tls");
    r.cluster = vec!["rediss://127.0.0.1:1".into(), "redis://127.0.0.1:2".into()];
    assert_eq!(build(r).0.err().unwrap().key(), Some("state.redis.cluster"));
}

/// A password written in the URL works and is printed nowhere: not in the build error of
/// an unreachable server, the configuration's `Debug`, nor a failing `report_label`.
#[test]
fn a_password_in_the_url_never_appears_in_errors() {
    let secret = "Url-Pa55word-7e1f0c";
    // Unreachable: the build error names the server without credentials.
    let (got, _, debug) = build(RedisConfig {
        url: format!("redis://risk:{secret}@127.0.0.1:1/"),
        ..RedisConfig::default()
    });
    let e = got.err().unwrap();
    for shown in [e.to_string(), format!("{e:?}"), debug] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    // A server of the test's own with that user; killed: report_label fails, unprinted.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let acl = dir.path().join("users.acl");
    std::fs::write(
        &acl,
        format!("user default on nopass ~* &* +@all\nuser risk on >{secret} ~* &* +@all\n"),
    )
    .unwrap();
    let mut server = start_redis_with(port, dir.path(), &["--aclfile", acl.to_str().unwrap()]);
    let (red, s, _) = build(RedisConfig {
        url: format!("redis://risk:{secret}@127.0.0.1:{port}/"),
        timeout: Duration::from_secs(2),
        prefix: prefix("url-pw"),
        ..RedisConfig::default()
    });
    let red = red.unwrap();
    let mut t = ev(1, 5).txn(&s);
    assert_eq!(red.apply(&mut t).status, StateStatus::Fresh);
    assert!(red.flush(Duration::from_secs(30)));
    assert!(red.report_label(TxnId(1), true, T0 + HOUR).is_ok());
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let e = red.report_label(TxnId(1), false, T0 + HOUR).unwrap_err();
    for shown in [e.to_string(), format!("{e:?}")] {
        assert!(!shown.contains(secret), "{shown}");
        assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    }
}

/// The `[state.redis]` keys of risk.toml: TLS files, ACL user, password from `file:` or
/// `env:`; a variable that is not set is refused naming `state.redis.password`, and a
/// wrong password read from the environment is not in the error.
#[test]
fn risk_toml_configures_tls_and_the_acl_user() {
    use std::path::Path;
    let d = tls_dir();
    let toml = |password: &str| {
        format!(
            r#"
[schema]
fields = [{{ name = "amount", kind = "numeric", required = true }}]

[rules.scorer]
kind = "const"

[thresholds]
approve_below = 0.3
decline_at = 0.7

[state.redis]
url = "{url}"
username = "risk"
password = "{password}"
tls_ca_file = "{ca}"
tls_cert_file = "{cert}"
tls_key_file = "{key}"
max_pending = 100000
timeout_ms = 2000
prefix = "{prefix}"

[[state.features]]
name = "card_count_1h"
key = "card"
agg = "count"
window = "1h"
buckets = 12
"#,
            url = tls_url(),
            ca = d.join("ca.pem").display(),
            cert = d.join("client.pem").display(),
            key = d.join("client.key").display(),
            prefix = prefix("toml"),
        )
    };
    let mut reg = ScorerRegistry::default();
    reg.register("const", |_| Ok(Arc::new(ConstantScorer::new(0.1))));
    let build =
        |text: &str| Engine::from_toml_str(text, Path::new("."), Path::new("risk.toml"), &reg);
    let ok = toml(&format!("file:{}", password_file().display()));
    build(&ok).unwrap_or_else(|e| panic!("{e} (tools/servers.sh start redis)"));
    let e = build(&toml("env:RISK_TEST_REDIS_PASSWORD_NOT_SET")).unwrap_err();
    assert_eq!(e.key(), Some("state.redis.password"), "{e}");
    let wrong = "Env-Wr0ng-Pa55word";
    std::env::set_var("RISK_TEST_REDIS_WRONG_PASSWORD", wrong);
    let e = build(&toml("env:RISK_TEST_REDIS_WRONG_PASSWORD")).unwrap_err();
    assert_eq!(e.key(), Some("state.redis.password"), "{e}");
    for shown in [e.to_string(), format!("{e:?}")] {
        assert!(
            !shown.contains(wrong) && !shown.contains(&password()),
            "{shown}"
        );
    }
}
