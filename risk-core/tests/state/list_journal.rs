//! List journals: entries that could forge a line are refused, the journal is compacted,
//! holds keys (pseudonyms with a key) and never an entry's text, and state files are private.

use super::*;
use risk_core::files::FileMode;
use risk_core::pseudo::Pseudonymiser;
use risk_core::state::{
    KeySource, ListDef, StateEngine, StateError, StatePrivacy, COMPACT_MIN_LINES,
};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

fn cfg(dir: &Path, file: Option<&Path>) -> StateConfig {
    StateConfig {
        lists: vec![
            ListDef {
                name: "blocked_devices".into(),
                key: KeySource::Device,
                file: None,
            },
            ListDef {
                name: "vip_emails".into(),
                key: KeySource::Email,
                file: file.map(|f| f.to_path_buf()),
            },
        ],
        dir: Some(dir.to_path_buf()),
        ..StateConfig::default()
    }
}

fn private(key: &[u8]) -> StatePrivacy {
    StatePrivacy {
        pseudonymiser: Some(Pseudonymiser::new("privacy.key", key).unwrap()),
        file_mode: FileMode::Private,
    }
}

/// The decide path's view: whether the transaction's device and e-mail are listed.
fn hits(st: &StateEngine, s: &Arc<FeatureSchema>, device: u64, email: &str) -> (f32, f32) {
    let mut t = Transaction::builder(s)
        .id(1)
        .amount(5.0, "USD")
        .device(device)
        .email(email)
        .build()
        .unwrap();
    st.apply(&mut t);
    (
        t.features.by_name("list.blocked_devices.device").unwrap(),
        t.features.by_name("list.vip_emails.email").unwrap(),
    )
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn entries_with_control_characters_are_refused_and_the_journal_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path(), None);
    let s = schema(&c);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0)).unwrap();
    let l = st.lists();
    l.add("vip_emails", "a@x.com", None).unwrap();
    let journal = dir.path().join("vip_emails.journal");
    let before = std::fs::read(&journal).unwrap();
    for bad in [
        "x\n+attacker@x.com",
        "x\nzzz",
        "a@x.com\r\n-a@x.com",
        "a\0b@x.com",
        "a\u{1b}[2Jb@x.com",
        "a@x.com\n",
    ] {
        let e = l.remove("vip_emails", bad).unwrap_err();
        assert!(
            matches!(&e, StateError::BadEntry { list, .. } if list == "vip_emails"),
            "{e}"
        );
        assert!(e.to_string().contains("control character"), "{e}");
        let e = l.add("vip_emails", bad, None).unwrap_err();
        assert!(matches!(&e, StateError::BadEntry { .. }), "{e}");
        assert!(matches!(
            l.contains("vip_emails", bad),
            Err(StateError::BadEntry { .. })
        ));
    }
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        before,
        "nothing journalled"
    );
    assert!(!l.contains("vip_emails", "attacker@x.com").unwrap());
    drop(st);
    // The next start reads the journal back.
    let st = StateEngine::new(c, Arc::clone(&s), clock(T0)).unwrap();
    assert!(st.lists().contains("vip_emails", "a@x.com").unwrap());
    assert!(!st.lists().contains("vip_emails", "attacker@x.com").unwrap());
}

#[test]
fn the_journal_is_compacted_when_due_and_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vip.txt");
    std::fs::write(&file, "f1@x.com\nf2@x.com\n").unwrap();
    let c = cfg(dir.path(), Some(&file));
    let s = schema(&c);
    let clk = clock(T0);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clk.clone()).unwrap();
    let l = st.lists();
    l.add("blocked_devices", "1", None).unwrap();
    for i in 0..(3 * COMPACT_MIN_LINES) {
        let v = format!("{}", 100 + i % 7);
        l.add("blocked_devices", &v, None).unwrap();
        l.remove("blocked_devices", &v).unwrap();
    }
    let lines = l.journal_lines("blocked_devices").unwrap();
    assert!(
        lines < 2 * 8 + COMPACT_MIN_LINES,
        "{lines} lines after {} changes",
        6 * COMPACT_MIN_LINES
    );
    let text = std::fs::read_to_string(dir.path().join("blocked_devices.journal")).unwrap();
    assert!(text.lines().count() <= 2 * 8 + COMPACT_MIN_LINES, "{text}");
    assert!(l.contains("blocked_devices", "1").unwrap());
    // Expired and removed entries leave the journal at the next start; a removed file
    // entry stays removed.
    l.add("vip_emails", "soon@x.com", Some(T0 + 1_000)).unwrap();
    l.add("vip_emails", "kept@x.com", None).unwrap();
    l.add("vip_emails", "gone@x.com", None).unwrap();
    l.remove("vip_emails", "gone@x.com").unwrap();
    l.remove("vip_emails", "f1@x.com").unwrap();
    assert_eq!(l.journal_lines("vip_emails").unwrap(), 5);
    drop(st);
    clk.advance(Duration::from_millis(1_000));
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clk.clone()).unwrap();
    let l = st.lists();
    assert_eq!(l.journal_lines("vip_emails").unwrap(), 2, "kept@ and -f1@");
    assert_eq!(l.journal_lines("blocked_devices").unwrap(), 1);
    assert!(l.contains("vip_emails", "kept@x.com").unwrap());
    assert!(!l.contains("vip_emails", "f1@x.com").unwrap());
    assert!(l.contains("vip_emails", "f2@x.com").unwrap());
    assert!(!l.contains("vip_emails", "soon@x.com").unwrap());
    assert!(!l.contains("vip_emails", "gone@x.com").unwrap());
    assert_eq!(l.len("vip_emails").unwrap(), 2);
    // Purging expired entries compacts the journal of the list that had some.
    l.add("vip_emails", "brief@x.com", Some(T0 + 2_000))
        .unwrap();
    assert_eq!(l.journal_lines("vip_emails").unwrap(), 3);
    clk.advance(Duration::from_millis(1_000));
    assert_eq!(l.purge_expired(), 1);
    assert_eq!(l.journal_lines("vip_emails").unwrap(), 2);
}

#[test]
fn pseudonymised_journals_hold_no_entry_text_and_lookups_still_match() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vip.txt");
    std::fs::write(&file, "# operator's file, raw values\nbob@example.org\n").unwrap();
    let c = cfg(dir.path(), Some(&file));
    let s = schema(&c);
    let key = b"0123456789abcdef-list-key";
    let st = StateEngine::with_privacy(c.clone(), Arc::clone(&s), clock(T0), private(key)).unwrap();
    let l = st.lists();
    l.add("vip_emails", "Alice@Example.COM", None).unwrap();
    l.add("blocked_devices", "48879", None).unwrap(); // 0xbeef
    assert_eq!(hits(&st, &s, 48879, "alice@example.com"), (1.0, 1.0));
    assert_eq!(
        hits(&st, &s, 7, "bob@example.org"),
        (0.0, 1.0),
        "file hashed at load"
    );
    assert_eq!(hits(&st, &s, 8, "carol@example.com"), (0.0, 0.0));
    drop(st);
    for name in ["vip_emails.journal", "blocked_devices.journal"] {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let lower = text.to_lowercase();
        for raw in ["alice", "example", "48879", "000000000000beef", "bob"] {
            assert!(!lower.contains(raw), "{name} holds {raw:?}: {text}");
        }
        assert!(
            text.starts_with("# risk list journal v2; keys: pseudonyms "),
            "{text}"
        );
    }
    // The same key reads it back; another key or none is refused by name.
    let st = StateEngine::with_privacy(c.clone(), Arc::clone(&s), clock(T0), private(key)).unwrap();
    assert_eq!(hits(&st, &s, 48879, "ALICE@example.com"), (1.0, 1.0));
    assert!(st
        .lists()
        .contains("vip_emails", "alice@example.com")
        .unwrap());
    drop(st);
    let other = private(b"0123456789abcdef-other-key");
    let e = StateEngine::with_privacy(c.clone(), Arc::clone(&s), clock(T0), other)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pseudonyms of key id") && e.contains("journal:1"),
        "{e}"
    );
    let e = StateEngine::new(c, s, clock(T0)).unwrap_err().to_string();
    assert!(e.contains("no [privacy] key is configured"), "{e}");
}

#[test]
fn a_raw_journal_is_pseudonymised_when_a_key_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path(), None);
    let s = schema(&c);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0)).unwrap();
    st.lists()
        .add("vip_emails", "dave@example.com", None)
        .unwrap();
    drop(st);
    // A journal written before keys were journalled: entry text, read and rewritten.
    let j = dir.path().join("vip_emails.journal");
    let mut text = std::fs::read_to_string(&j).unwrap();
    text.push_str("+erin@example.com,9223372036854775807\n");
    std::fs::write(&j, text).unwrap();
    let key = b"0123456789abcdef-list-key";
    let st = StateEngine::with_privacy(c, Arc::clone(&s), clock(T0), private(key)).unwrap();
    assert_eq!(hits(&st, &s, 1, "dave@example.com").1, 1.0);
    assert_eq!(hits(&st, &s, 1, "erin@example.com").1, 1.0);
    let text = std::fs::read_to_string(&j).unwrap();
    assert!(
        !text.contains("erin") && text.contains("pseudonyms"),
        "{text}"
    );
}

#[test]
fn journals_and_snapshots_are_private_and_an_open_directory_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("state/lists");
    let c = StateConfig {
        snapshot: Some(base.path().join("snaps/state.snap")),
        ..cfg(&dir, None)
    };
    let s = schema(&c);
    let st = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0)).unwrap();
    st.lists().add("blocked_devices", "5", None).unwrap();
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(mode_of(&dir.join("blocked_devices.journal")), 0o600);
    let snap = base.path().join("snaps/state.snap");
    st.snapshot(&snap).unwrap();
    assert_eq!(mode_of(&snap), 0o600);
    assert_eq!(mode_of(&base.path().join("snaps")), 0o700);
    assert_eq!(
        std::fs::read_dir(base.path().join("snaps"))
            .unwrap()
            .count(),
        1
    );
    drop(st);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = StateEngine::new(c.clone(), Arc::clone(&s), clock(T0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("writable by others") && e.contains("state.lists"),
        "{e}"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let st = StateEngine::new(c, s, clock(T0)).unwrap();
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = st.snapshot(open.join("x.snap")).unwrap_err();
    assert!(matches!(e, StateError::Files(_)), "{e}");
}
