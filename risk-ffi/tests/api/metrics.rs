//! `risk_engine_metrics_json` emits exactly the key paths its header documentation lists
//! (it left out several `MetricsSnapshot` fields).

use crate::*;
use risk_ffi::risk_result::*;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::path::Path;

/// The header's comment on `risk_engine_metrics_json`, up to its `# Safety` section.
fn documentation() -> String {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/risk.h"))
            .unwrap();
    let lines: Vec<&str> = header.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("risk_result risk_engine_metrics_json("))
        .expect("risk_engine_metrics_json is declared");
    let mut doc: Vec<&str> = lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.starts_with("//"))
        .map(|l| l.trim_start_matches('/'))
        .collect();
    doc.reverse();
    let doc = doc.join("\n");
    doc.split("# Safety").next().unwrap().to_owned()
}

/// The dotted key paths the documentation describes: a key in backticks (lowercase words;
/// a type name is not a key), `{...}` after a key lists its members, and `each {...}`
/// after a list gives every key of that list the same members.
fn documented_paths(doc: &str) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    let mut parents: Vec<Vec<String>> = vec![vec![String::new()]];
    let mut level: Vec<Vec<String>> = vec![Vec::new()];
    let (mut last_key, mut last_closed, mut each) = (Vec::new(), Vec::new(), false);
    let mut rest = doc;
    while let Some(c) = rest.chars().next() {
        if c == '`' {
            let end = rest[1..].find('`').expect("backticks pair up") + 1;
            let word = &rest[1..end];
            rest = &rest[end + 1..];
            if !word
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                continue;
            }
            last_key = parents
                .last()
                .unwrap()
                .iter()
                .map(|p| {
                    if p.is_empty() {
                        word.to_owned()
                    } else {
                        format!("{p}.{word}")
                    }
                })
                .collect();
            paths.extend(last_key.iter().cloned());
            level.last_mut().unwrap().extend(last_key.iter().cloned());
            continue;
        }
        if c == '{' {
            parents.push(if each {
                last_closed.clone()
            } else {
                last_key.clone()
            });
            level.push(Vec::new());
            each = false;
        } else if c == '}' {
            parents.pop();
            last_closed = level.pop().unwrap();
        } else if rest.starts_with("each ") {
            each = true;
        }
        rest = &rest[c.len_utf8()..];
    }
    paths
}

/// The dotted path of every key of every object in `v`.
fn emitted_paths(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let serde_json::Value::Object(o) = v {
        for (k, x) in o {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            emitted_paths(x, &path, out);
            out.insert(path);
        }
    }
}

fn metrics_json(e: *const risk_engine) -> serde_json::Value {
    let mut len = 0;
    // SAFETY: a NULL buffer asks for the size; `len` is writable.
    let r = unsafe { risk_engine_metrics_json(e, std::ptr::null_mut(), 0, &mut len) };
    assert_eq!(r, RISK_ERR_BUFFER_TOO_SMALL);
    let mut buf = vec![0u8; len + 1];
    // SAFETY: `buf` has `len + 1` writable bytes; `len` is writable.
    let r = unsafe { risk_engine_metrics_json(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    serde_json::from_slice(&buf[..len]).unwrap()
}

#[test]
fn metrics_json_has_every_documented_key_and_no_other() {
    let documented = documented_paths(&documentation());
    assert!(
        documented.contains("latency.deep.p999_ns"),
        "{documented:?}"
    );
    assert!(documented.contains("gray.late_discarded"), "{documented:?}");
    let e = engine(&minimal(), Path::new(".")).unwrap();
    assert_eq!(
        decide_json(e, r#"{"amount": 10, "currency": "USD"}"#).0,
        RISK_OK
    );
    let m = metrics_json(e);
    let mut emitted = BTreeSet::new();
    emitted_paths(&m, "", &mut emitted);
    let missing: Vec<_> = documented.difference(&emitted).collect();
    let undocumented: Vec<_> = emitted.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "documented, not emitted: {missing:?}\n{m}"
    );
    assert!(
        undocumented.is_empty(),
        "emitted, not documented: {undocumented:?}\n{m}"
    );
    // Spot checks of shape and values.
    assert_eq!(m["decisions"], 1);
    assert_eq!(m["by_tier"]["rules"], 1);
    assert_eq!(m["latency"]["total"]["count"], 1);
    assert!(
        m["latency"]["total"]["mean_ns"].as_f64().unwrap() > 0.0,
        "{m}"
    );
    for circuit in ["fast_circuit", "deep_circuit"] {
        let s = m[circuit].as_str().unwrap();
        assert!(
            ["closed", "open", "half_open", "absent"].contains(&s),
            "{circuit}: {s}"
        );
    }
    free_engine(e);
}

#[test]
fn metrics_text_is_the_openmetrics_exposition() {
    let e = engine(&minimal(), Path::new(".")).unwrap();
    for _ in 0..3 {
        assert_eq!(
            decide_json(e, r#"{"amount": 10, "currency": "USD"}"#).0,
            RISK_OK
        );
    }
    let mut len = 0;
    // SAFETY: a NULL buffer asks for the size; `len` is writable.
    let r = unsafe { risk_engine_metrics_text(e, std::ptr::null_mut(), 0, &mut len) };
    assert_eq!(r, RISK_ERR_BUFFER_TOO_SMALL);
    let mut buf = vec![0u8; len + 1];
    // SAFETY: `buf` has `len + 1` writable bytes; `len` is writable.
    let r = unsafe { risk_engine_metrics_text(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    assert_eq!(r, RISK_OK, "{}", last_error());
    let text = std::str::from_utf8(&buf[..len]).unwrap();
    assert!(
        text.contains("risk_decisions_by_tier_total{tier=\"rules\"} 3"),
        "{text}"
    );
    assert!(text.contains("# TYPE risk_decide_latency_seconds histogram"));
    assert!(text.trim_end().ends_with("# EOF"));
    free_engine(e);
    // SAFETY: a freed handle is refused, not dereferenced.
    let r = unsafe { risk_engine_metrics_text(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    assert_eq!(r, RISK_ERR_HANDLE);
}

#[test]
fn health_json_and_the_kill_switch() {
    let toml = format!(
        "{}[fast.scorer]\nkind = \"constant\"\nprobability = 0.05\n",
        minimal()
    );
    let e = engine(&toml, Path::new(".")).unwrap();
    let health = || {
        let mut buf = vec![0u8; 4096];
        let mut len = 0;
        // SAFETY: `buf` has its length in writable bytes; `len` is writable.
        let r = unsafe { risk_engine_health_json(e, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
        assert_eq!(r, RISK_OK, "{}", last_error());
        serde_json::from_slice::<serde_json::Value>(&buf[..len]).unwrap()
    };
    assert_eq!(health()["status"], "ready");
    let fast = CString::new("fast").unwrap();
    // SAFETY: live handle, NUL-terminated tier.
    assert_eq!(
        unsafe { risk_engine_force_open(e, fast.as_ptr(), true) },
        RISK_OK
    );
    let (r, d) = decide_json(e, r#"{"amount": 10, "currency": "USD"}"#);
    assert_eq!(r, RISK_OK);
    assert_eq!(
        d.tier, 0,
        "the rules decide while the fast tier is switched off"
    );
    let h = health();
    assert_eq!(
        (h["status"].as_str(), h["fast"]["state"].as_str()),
        (Some("degraded"), Some("forced_open"))
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_force_open(e, fast.as_ptr(), false) },
        RISK_OK
    );
    assert_eq!(health()["status"], "ready");
    let rules = CString::new("rules").unwrap();
    // SAFETY: as above.
    assert_eq!(
        unsafe { risk_engine_force_open(e, rules.as_ptr(), true) },
        RISK_ERR_INVALID
    );
    free_engine(e);
}
