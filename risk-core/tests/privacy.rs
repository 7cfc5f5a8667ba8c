//! `[privacy]` in risk.toml: secret references resolved with errors that name the key and
//! never the value; the inline warning names the key only; the audit trail private,
//! pseudonymised and chained; health says whether identifiers are pseudonymised.

use crate::health::Capture;
use risk_core::audit::{AuditReader, Query};
use risk_core::*;
use std::path::Path;

const BASE: &str = r#"
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]

[rules.scorer]
kind = "constant"
probability = 0.1
"#;

/// A value that must never appear in any message, Debug or file.
const SECRET: &str = "S3cr3t-Pseudonym-Key-Never-Printed-42";

fn load(text: &str, dir: &Path) -> Result<Engine, ConfigError> {
    Engine::from_toml_str(
        text,
        dir,
        &dir.join("risk.toml"),
        &ScorerRegistry::default(),
    )
}

#[test]
fn secret_references_fail_by_key_and_source_never_by_value() {
    let dir = tempfile::tempdir().unwrap();
    let e = load(
        &format!("{BASE}\n[privacy]\nkey = \"env:RISK_TEST_PRIVACY_KEY_UNSET\"\n"),
        dir.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("privacy.key") && e.contains("RISK_TEST_PRIVACY_KEY_UNSET"),
        "{e}"
    );
    let e = load(
        &format!("{BASE}\n[privacy]\nkey = \"file:/nonexistent/risk-key\"\n"),
        dir.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("privacy.key") && e.contains("/nonexistent/risk-key"),
        "{e}"
    );
    // Too short: refused, the value never echoed.
    let e = load(
        &format!("{BASE}\n[privacy]\nkey = \"short-S3cr3t\"\n"),
        dir.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("at least 16 bytes"), "{e}");
    assert!(!e.contains("short-S3cr3t"), "{e}");
}

#[test]
fn an_inline_key_works_with_a_warning_that_names_the_key_not_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{BASE}\n[audit]\ndir = \"audit\"\n\n[privacy]\nkey = \"{SECRET}\"\n");
    let cap = Capture::default();
    let e = tracing::subscriber::with_default(cap.clone(), || load(&text, dir.path())).unwrap();
    let events = cap.0.lock().clone();
    assert!(
        events
            .iter()
            .any(|l| l.contains("WARN") && l.contains("privacy.key") && l.contains("inline")),
        "{events:?}"
    );
    assert!(events.iter().all(|l| !l.contains(SECRET)), "{events:?}");
    assert!(e.health().pseudonymised);
    assert!(!format!("{e:?}").contains(SECRET));
    let t = Transaction::builder(e.schema())
        .id(9)
        .entity(424242)
        .amount(10.0, "EUR")
        .build()
        .unwrap();
    e.decide(&t).unwrap();
    let log = e.audit_log().unwrap().clone();
    log.flush(std::time::Duration::from_secs(30)).unwrap();
    // On disk: no raw entity, no secret, a keyed chain; found again with the key.
    let raw = AuditReader::new(dir.path().join("audit"));
    let d: Vec<_> = raw.all().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(d.len(), 1);
    assert_ne!(d[0].decision().unwrap().entity, 424242);
    assert_eq!(
        log.reader().query(Query::entity(424242)).unwrap().count(),
        1
    );
    assert!(log.reader().verify_chain().unwrap().keyed);
    for f in std::fs::read_dir(dir.path().join("audit")).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
    }
}

#[test]
fn without_a_key_health_says_not_pseudonymised_and_the_build_warns() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{BASE}\n[audit]\ndir = \"audit\"\n");
    let cap = Capture::default();
    let e = tracing::subscriber::with_default(cap.clone(), || load(&text, dir.path())).unwrap();
    assert!(!e.health().pseudonymised);
    assert!(
        cap.any(&["WARN", "risk::privacy", "not pseudonymised"]),
        "{:?}",
        cap.0.lock()
    );
    assert!(e.health().to_json().contains("\"pseudonymised\":false"));
}

#[cfg(unix)]
#[test]
fn a_group_file_mode_is_honoured() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{BASE}\n[audit]\ndir = \"audit\"\n\n[privacy]\nfile_mode = \"group\"\n");
    let e = load(&text, dir.path()).unwrap();
    drop(e);
    let m = std::fs::metadata(dir.path().join("audit"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(m, 0o750);
    let bad = format!("{BASE}\n[privacy]\nfile_mode = \"world\"\n");
    let e = load(&bad, dir.path()).unwrap_err().to_string();
    assert!(e.contains("file_mode") || e.contains("world"), "{e}");
}
