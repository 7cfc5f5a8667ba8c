//! Lists: exact expiry on the clock, runtime changes journalled, files reloaded all or
//! nothing.

use super::*;
use risk_core::state::{KeySource, ListDef, StateEngine, StateError};
use std::time::Duration;

fn cfg(dir: &std::path::Path, file: Option<&std::path::Path>) -> StateConfig {
    StateConfig {
        lists: vec![
            ListDef {
                name: "blocked_devices".into(),
                key: KeySource::Device,
                file: file.map(|f| f.to_path_buf()),
            },
            ListDef {
                name: "vip_emails".into(),
                key: KeySource::Email,
                file: None,
            },
        ],
        dir: Some(dir.to_path_buf()),
        ..StateConfig::default()
    }
}

fn member(
    st: &StateEngine,
    s: &Arc<FeatureSchema>,
    device: u64,
    email: Option<&str>,
) -> (Option<f32>, Option<f32>) {
    let b = Transaction::builder(s)
        .id(1)
        .amount(5.0, "USD")
        .device(device);
    let b = match email {
        Some(e) => b.email(e),
        None => b,
    };
    let mut t = b.build().unwrap();
    st.apply(&mut t);
    (
        t.features.by_name("list.blocked_devices.device"),
        t.features.by_name("list.vip_emails.email"),
    )
}

#[test]
fn entries_expire_exactly_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path(), None);
    let s = schema(&c);
    let clk = clock(T0);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clk.clone()).unwrap();
    let l = st.lists();
    l.add("blocked_devices", "42", Some(T0 + 1_000)).unwrap();
    l.add("blocked_devices", "43", None).unwrap();
    l.add("vip_emails", " Alice@Example.COM ", None).unwrap();
    assert_eq!(
        member(&st, &s, 42, Some("alice@example.com")),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(
        member(&st, &s, 44, Some("bob@example.com")),
        (Some(0.0), Some(0.0))
    );
    assert_eq!(
        member(&st, &s, 0, None),
        (None, None),
        "no key: missing, not 0"
    );
    clk.advance(Duration::from_millis(999));
    assert_eq!(member(&st, &s, 42, None).0, Some(1.0), "1 ms before expiry");
    clk.advance(Duration::from_millis(1));
    assert_eq!(member(&st, &s, 42, None).0, Some(0.0), "at expiry");
    assert_eq!(l.len("blocked_devices").unwrap(), 1);
    assert!(l.remove("blocked_devices", "43").unwrap());
    l.add("blocked_devices", "50", None).unwrap();
    // Typed errors.
    assert!(matches!(
        l.add("nope", "1", None),
        Err(StateError::UnknownList(_))
    ));
    assert!(matches!(
        l.add("blocked_devices", "not-a-number", None),
        Err(StateError::BadEntry { .. })
    ));
    assert!(matches!(
        l.add("blocked_devices", "1,2", None),
        Err(StateError::BadEntry { .. })
    ));
    drop(st);
    // A restart replays the journal: acknowledged changes are there.
    let st = StateEngine::new(c, Arc::clone(&s), clk).unwrap();
    assert_eq!(
        member(&st, &s, 43, Some("ALICE@example.com")),
        (Some(0.0), Some(1.0))
    );
    assert_eq!(member(&st, &s, 50, None).0, Some(1.0));
    assert_eq!(st.stats().list_hits, 2);
}

#[test]
fn a_bad_list_file_is_refused_and_the_list_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blocked.txt");
    std::fs::write(&file, "# blocked devices\n7\n8,99999999999999\n").unwrap();
    let c = cfg(dir.path(), Some(&file));
    let s = schema(&c);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0)).unwrap();
    assert_eq!(member(&st, &s, 7, None).0, Some(1.0));
    assert_eq!(member(&st, &s, 8, None).0, Some(1.0));
    std::fs::write(&file, "7\nnine\n").unwrap();
    let e = st.lists().reload().unwrap_err();
    assert!(matches!(&e, StateError::BadListFile { line: 2, .. }), "{e}");
    assert!(e.to_string().contains("blocked.txt:2"), "{e}");
    assert_eq!(
        member(&st, &s, 8, None).0,
        Some(1.0),
        "the good list still serves"
    );
    std::fs::write(&file, "9\n").unwrap();
    st.lists().reload().unwrap();
    assert_eq!(member(&st, &s, 8, None).0, Some(0.0));
    assert_eq!(member(&st, &s, 9, None).0, Some(1.0));
    // A bad file at start refuses the engine (never serves half a list).
    std::fs::write(&file, "x\n").unwrap();
    let e = StateEngine::new(c, s, clock(T0)).unwrap_err().to_string();
    assert!(e.contains("blocked.txt:1"), "{e}");
}
