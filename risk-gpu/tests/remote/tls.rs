//! The remote tier over HTTPS against the real MLServer behind `tools/servers.sh`'s
//! mutual-TLS proxy (`RISK_MLSERVER_TLS_URL`, default `https://127.0.0.1:8443`;
//! certificates from `RISK_TLS_DIR`, default `<repo>/target/servers/tls`), and what the
//! client refuses: a wrong CA, a missing client certificate, credentials in a URL,
//! redirects, oversized bodies; a bearer token that never prints.

use super::canned::{self, Answer};
use super::*;
use risk_core::secret::Secret;
use risk_gpu::remote::RemoteError;
use std::path::{Path, PathBuf};

pub fn tls_url() -> String {
    std::env::var("RISK_MLSERVER_TLS_URL").unwrap_or_else(|_| "https://127.0.0.1:8443".to_owned())
}

pub fn tls_dir() -> PathBuf {
    std::env::var_os("RISK_TLS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/servers/tls"),
        PathBuf::from,
    )
}

/// The HTTPS endpoint with the test CA and the client identity it requires.
pub fn tls_cfg() -> KServeConfig {
    let d = tls_dir();
    assert!(
        d.join("ca.pem").is_file(),
        "{}: no ca.pem (tools/servers.sh start mlserver makes it; RISK_TLS_DIR)",
        d.display()
    );
    let mut c = cfg(&[tls_url()]);
    c.ca_file = Some(d.join("ca.pem"));
    c.client_cert = Some(d.join("client.pem"));
    c.client_key = Some(d.join("client.key"));
    c
}

fn refused(c: &KServeConfig) -> RemoteError {
    RemoteScorer::load(c, &schema()).expect_err("load must fail")
}

#[test]
fn mutual_tls_scores_through_the_real_server() {
    let s = RemoteScorer::load(&tls_cfg(), &schema()).unwrap_or_else(|e| {
        panic!("{e} (is the TLS proxy running? tools/servers.sh start mlserver; RISK_MLSERVER_TLS_URL)")
    });
    s.warmup().unwrap();
    let native = native();
    for t in txns(&reference(), 20) {
        let p = s.score(&t).unwrap().probability;
        assert!((p - want(&native, &t)).abs() <= 1e-6, "{p}");
    }
    assert_eq!(s.endpoints()[0].url, tls_url().trim_end_matches('/'));
    assert_eq!(s.stats().failures.transport, 0);
}

#[test]
fn a_server_signed_by_another_ca_is_refused_naming_it() {
    let mut c = tls_cfg();
    c.ca_file = Some(tls_dir().join("other-ca.pem"));
    let e = refused(&c);
    let m = e.to_string();
    assert!(matches!(e, RemoteError::Unavailable(_)), "{m}");
    assert!(m.contains(tls_url().trim_end_matches('/')), "{m}");
    assert!(m.to_lowercase().contains("certificate"), "{m}");
}

#[test]
fn a_missing_or_foreign_client_certificate_is_refused() {
    let mut c = tls_cfg();
    c.client_cert = None;
    c.client_key = None;
    let e = refused(&c);
    assert!(matches!(e, RemoteError::Unavailable(_)), "{e}");
    assert!(
        e.to_string().contains(tls_url().trim_end_matches('/')),
        "{e}"
    );
    // A client certificate another CA signed.
    let mut c = tls_cfg();
    c.client_cert = Some(tls_dir().join("stranger.pem"));
    c.client_key = Some(tls_dir().join("stranger.key"));
    let e = refused(&c);
    assert!(matches!(e, RemoteError::Unavailable(_)), "{e}");
}

#[test]
fn tls_files_that_cannot_be_used_name_their_key() {
    let mut c = tls_cfg();
    c.ca_file = Some(tls_dir().join("missing.pem"));
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Config { field, .. } if field == "ca_file"),
        "{e}"
    );
    let mut c = tls_cfg();
    c.client_key = None;
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Config { field, .. } if field == "client_key"),
        "{e}"
    );
    // A key that is not the certificate's kind of file: names both files, prints neither.
    let mut c = tls_cfg();
    c.client_key = Some(tls_dir().join("ca.pem"));
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Config { field, .. } if field == "client_cert"),
        "{e}"
    );
    assert!(!e.to_string().contains("BEGIN"), "{e}");
}

#[test]
fn credentials_in_a_url_are_refused_without_printing_them() {
    let pw = "hunter2-url-secret-7f3a";
    let c = cfg(&[format!("https://risk:{pw}@127.0.0.1:8443")]);
    let e = refused(&c);
    let m = e.to_string();
    assert!(
        matches!(&e, RemoteError::Config { field, .. } if field == "endpoints"),
        "{m}"
    );
    assert!(m.contains("bearer_token"), "{m}");
    assert!(!m.contains(pw), "{m}");
    assert!(!format!("{e:?}").contains(pw));
}

const TOKEN: &str = "tok-9c1e-distinctive-bearer-secret";

#[test]
fn the_bearer_token_is_sent_and_never_printed() {
    // A server that checks the token: 401 to anything else.
    let srv = canned::start(|_, _| Answer::json(401, r#"{"error":"unauthorized"}"#));
    let mut c = cfg(std::slice::from_ref(&srv.url));
    c.bearer_token = Some(Secret::from_value(TOKEN));
    let e = refused(&c);
    for text in [e.to_string(), format!("{e:?}"), format!("{c:?}")] {
        assert!(!text.contains(TOKEN), "{text}");
    }
    assert!(e.to_string().contains("HTTP 401"), "{e}");
    let reqs = srv.requests.lock().unwrap();
    assert!(
        reqs[0].to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            TOKEN.to_ascii_lowercase()
        )),
        "{reqs:?}"
    );
    drop(reqs);
    // Through the real server over TLS (MLServer ignores the header): scored, and the
    // scorer's and config's Debug hold no token.
    let mut c = tls_cfg();
    c.bearer_token = Some(Secret::from_value(TOKEN));
    let s = load(&c);
    s.score(&txns(&reference(), 1)[0]).unwrap();
    assert!(!format!("{c:?} {s:?} {:?}", s.endpoints()).contains(TOKEN));
    // Not over plain http to a host other than loopback.
    let mut c = cfg(&["http://10.255.255.1:8080".to_owned()]);
    c.bearer_token = Some(Secret::from_value(TOKEN));
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Config { field, .. } if field == "bearer_token"),
        "{e}"
    );
    assert!(!e.to_string().contains(TOKEN));
}

#[test]
fn risk_toml_maps_the_tls_keys_and_keeps_the_token_out_of_sight() {
    use risk_core::ScorerSpec;
    std::env::set_var("RISK_TEST_KSERVE_TOKEN", TOKEN);
    let d = tls_dir();
    let text = format!(
        "kind = \"kserve\"\nendpoints = [{:?}]\nmodel = \"{MODEL}\"\nca_file = {:?}\nclient_cert = \"client.pem\"\nclient_key = \"client.key\"\nbearer_token = \"env:RISK_TEST_KSERVE_TOKEN\"\nmax_response_kb = 64\n",
        tls_url(),
        d.join("ca.pem").display().to_string(),
    );
    let spec = |text: &str| ScorerSpec {
        key: "fast.scorer".into(),
        table: toml::from_str(text).unwrap(),
        schema: schema(),
        base_dir: d.clone(),
    };
    let c = risk_gpu::remote::config_from_spec(&spec(&text)).unwrap();
    assert_eq!(c.ca_file.as_deref(), Some(d.join("ca.pem").as_path()));
    assert_eq!(c.client_cert, Some(d.join("client.pem")));
    assert_eq!(c.client_key, Some(d.join("client.key")));
    assert_eq!(c.bearer_token.as_ref().unwrap().expose(), TOKEN);
    assert_eq!(c.max_response_bytes, 64 << 10);
    assert!(!format!("{c:?}").contains(TOKEN));
    let s = RemoteScorer::load(&c, &schema()).unwrap();
    s.score(&txns(&reference(), 1)[0]).unwrap();
    // An inline token is refused (the table is stored in meta.json), without echoing it.
    let inline = text.replace("env:RISK_TEST_KSERVE_TOKEN", TOKEN);
    let e = risk_gpu::remote::config_from_spec(&spec(&inline)).unwrap_err();
    assert!(e.to_string().contains("fast.scorer.bearer_token"), "{e}");
    assert!(!e.to_string().contains(TOKEN), "{e}");
    // A variable that is not set names the key and the variable.
    let unset = text.replace("RISK_TEST_KSERVE_TOKEN", "RISK_TEST_KSERVE_TOKEN_UNSET");
    let e = risk_gpu::remote::config_from_spec(&spec(&unset)).unwrap_err();
    assert!(
        e.to_string().contains("RISK_TEST_KSERVE_TOKEN_UNSET"),
        "{e}"
    );
}

#[test]
fn a_redirect_is_never_followed() {
    // Where a followed redirect would go: it must see no request.
    let elsewhere = canned::start(|_, _| Answer::json(200, "{}"));
    let to = format!("{}/v2/health/ready", elsewhere.url);
    let srv = canned::start(move |_, _| Answer {
        status: 307,
        headers: vec![("Location".into(), to.clone())],
        body: Vec::new(),
        length: true,
    });
    let e = refused(&cfg(std::slice::from_ref(&srv.url)));
    assert!(e.to_string().contains("HTTP 307"), "{e}");
    assert!(e.to_string().contains("redirect not followed"), "{e}");
    // At infer time (the body would be re-sent): the call fails, nothing reaches the target.
    let to = format!("{}/v2/models/xgb-fraud/infer", elsewhere.url);
    let srv = canned::start(move |m, p| {
        canned::metadata(m, p).unwrap_or_else(|| Answer {
            status: 307,
            headers: vec![("Location".into(), to.clone())],
            body: Vec::new(),
            length: true,
        })
    });
    let mut c = cfg(std::slice::from_ref(&srv.url));
    c.retry.max = 0;
    let s = RemoteScorer::load(&c, &schema()).unwrap();
    let e = s.warmup().unwrap_err();
    assert!(e.to_string().contains("HTTP 307"), "{e}");
    assert!(elsewhere.requests.lock().unwrap().is_empty());
}

#[test]
fn oversized_bodies_are_refused_at_load_and_at_infer() {
    let big = vec![b' '; 64 << 10];
    for length in [true, false] {
        let body = big.clone();
        let srv = canned::start(move |_, _| Answer {
            status: 200,
            headers: Vec::new(),
            body: body.clone(),
            length,
        });
        let mut c = cfg(std::slice::from_ref(&srv.url));
        c.max_response_bytes = 16 << 10;
        let e = refused(&c);
        assert!(
            e.to_string().contains("response body over 16384 bytes"),
            "{length}: {e}"
        );
    }
    let body = big.clone();
    let srv = canned::start(move |m, p| {
        canned::metadata(m, p).unwrap_or_else(|| Answer {
            status: 200,
            headers: Vec::new(),
            body: body.clone(),
            length: false,
        })
    });
    let mut c = cfg(std::slice::from_ref(&srv.url));
    c.max_response_bytes = 16 << 10;
    let s = RemoteScorer::load(&c, &schema()).unwrap();
    let e = s.warmup().unwrap_err();
    assert!(
        e.to_string().contains("response body over 16384 bytes"),
        "{e}"
    );
}
