//! risk.toml: same options as the builder, errors naming the key.

use risk_core::*;
use std::path::Path;
use std::time::Duration;

const FULL: &str = r#"
[schema]
fields = [
  { name = "amount", kind = "numeric", required = true },
  { name = "country", kind = "categorical", vocab = ["US", "GB"] },
  { name = "velocity_1h", kind = "numeric" },
]

[rules.scorer]
kind = "constant"
probability = 0.1

[fast]
deadline_ms = 7.5
[fast.scorer]
kind = "constant"
probability = 0.6

[thresholds]
approve_below = 0.2
decline_at = 0.8
hard_rule_override = false
static_action = "decline"

[gray]
band = [0.4, 0.65]
queue_capacity = 128

[deep]
budget_ms = 250
max_batch = 4
max_wait_ms = 1
workers = 2
global_prior = 0.3
subscriber_capacity = 16
[deep.scorer]
kind = "constant"
probability = 0.9

[pool]
fast_workers = 3
spin_us = 0
deadline_spin_us = 750
async_workers = 1

[circuit]
window_ms = 2000
min_calls = 5
failure_rate = 0.25
open_ms = 1000
half_open_probes = 1

[feedback]
gain = 1.0
centre = 0.2
max_shift = 0.1
ttl_ms = 3600000
max_entities = 1000
max_future_ms = 60000
"#;

fn load(text: &str) -> Result<Engine, ConfigError> {
    Engine::from_toml_str(
        text,
        Path::new("."),
        Path::new("risk.toml"),
        &ScorerRegistry::default(),
    )
}

#[test]
fn every_option_maps_onto_the_config() {
    let e = load(FULL).unwrap();
    let c = e.config();
    assert_eq!(c.fast_deadline, Duration::from_micros(7500));
    assert_eq!(
        c.policy,
        Policy {
            approve_below: 0.2,
            decline_at: 0.8,
            hard_rule_override: false,
            static_action: Action::Decline
        }
    );
    assert_eq!((c.gray_band, c.gray_queue_capacity), ((0.4, 0.65), 128));
    assert_eq!(
        c.deep,
        DeepConfig {
            budget: Duration::from_millis(250),
            max_batch: 4,
            max_wait: Duration::from_millis(1),
            workers: 2,
            global_prior: 0.3,
            subscriber_capacity: 16
        }
    );
    assert_eq!(
        c.pool,
        PoolConfig {
            fast_workers: 3,
            spin: Duration::ZERO,
            deadline_spin: Duration::from_micros(750),
            async_workers: 1,
            async_queue_capacity: 1024,
        }
    );
    assert_eq!(
        c.circuit,
        CircuitConfig {
            window: Duration::from_secs(2),
            min_calls: 5,
            failure_rate: 0.25,
            open_for: Duration::from_secs(1),
            half_open_probes: 1
        }
    );
    assert_eq!(
        c.feedback,
        FeedbackConfig {
            gain: 1.0,
            centre: 0.2,
            max_shift: 0.1,
            ttl: Duration::from_secs(3600),
            max_entities: 1000,
            max_future: Some(Duration::from_secs(60)),
        }
    );
    // A verdict at the centre shifts nothing; above it tightens, capped at max_shift.
    assert_eq!(c.feedback.shift(0.2), 0.0);
    assert!((c.feedback.shift(0.25) - 0.05).abs() < 1e-6);
    assert_eq!(c.feedback.shift(0.9), 0.1);
    assert_eq!(c.feedback.shift(0.0), -0.1);
    assert_eq!(e.schema().len(), 3);
    let t = Transaction::builder(e.schema())
        .amount(10.0, "USD")
        .country("GB")
        .build()
        .unwrap();
    let d = e.decide(&t).unwrap();
    assert_eq!(
        (d.tier, d.action, d.score),
        (Tier::Fast, Action::Review, 0.6)
    );
    assert!(matches!(d.escalation, Escalation::Enqueued(_)));
    e.shutdown(Shutdown::Drain {
        timeout: Duration::from_secs(5),
    });
}

#[test]
fn a_file_on_disk_loads_and_a_missing_one_is_an_io_error() {
    let dir = std::env::temp_dir().join(format!("risk-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("risk.toml");
    std::fs::write(&p, FULL).unwrap();
    assert!(Engine::from_config(&p).is_ok());
    let err = Engine::from_config(dir.join("nope.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_values_name_their_key() {
    let cases = [
        ("deadline_ms = 7.5", "deadline_ms = 0", "fast.deadline_ms"),
        ("deadline_ms = 7.5", "deadline_ms = -3", "fast.deadline_ms"),
        ("band = [0.4, 0.65]", "band = [0.65, 0.4]", "gray.band"),
        ("band = [0.4, 0.65]", "band = [0.4]", "gray.band"),
        ("band = [0.4, 0.65]", "band = [0.4, 1.5]", "gray.band"),
        (
            "queue_capacity = 128",
            "queue_capacity = -1",
            "gray.queue_capacity",
        ),
        ("budget_ms = 250", "budget_ms = 0", "deep.budget_ms"),
        ("max_wait_ms = 1", "max_wait_ms = 300", "deep.max_wait_ms"),
        (
            "deadline_spin_us = 750",
            "deadline_spin_us = 20000",
            "pool.deadline_spin_us",
        ),
        (
            "deadline_spin_us = 750",
            "deadline_spin_us = -1",
            "pool.deadline_spin_us",
        ),
        (
            "failure_rate = 0.25",
            "failure_rate = 2.0",
            "circuit.failure_rate",
        ),
        (
            "static_action = \"decline\"",
            "static_action = \"block\"",
            "thresholds.static_action",
        ),
        ("decline_at = 0.8", "decline_at = 0.1", "thresholds"),
        ("centre = 0.2", "centre = 1.5", "feedback.centre"),
        (
            "kind = \"numeric\" }",
            "kind = \"number\" }",
            "schema.fields[2].kind",
        ),
        (
            "probability = 0.6",
            "probability = 1.6",
            "fast.scorer.probability",
        ),
    ];
    for (from, to, key) in cases {
        assert!(FULL.contains(from), "{from}");
        let text = FULL.replacen(from, to, 1);
        let err = load(&text).unwrap_err();
        assert_eq!(err.key(), Some(key), "{to}: {err}");
        assert!(err.to_string().contains(key), "{err}");
    }
}

#[test]
fn unknown_keys_kinds_and_duplicate_fields_are_errors() {
    let typo = FULL.replace("deadline_ms = 7.5", "dedline_ms = 7.5");
    let err = load(&typo).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }));
    assert!(err.to_string().contains("dedline_ms"), "{err}");

    let kind = FULL.replacen(
        "kind = \"constant\"\nprobability = 0.6",
        "kind = \"xgboost\"",
        1,
    );
    let err = load(&kind).unwrap_err();
    assert!(
        matches!(&err, ConfigError::UnknownKind { key, kind, .. } if key == "fast.scorer.kind" && kind == "xgboost"),
        "{err}"
    );

    let dup = FULL.replace("name = \"velocity_1h\"", "name = \"amount\"");
    let err = load(&dup).unwrap_err();
    assert!(
        matches!(err, ConfigError::Schema(SchemaError::DuplicateField(_))),
        "{err}"
    );

    let broken = "[schema\nfields = 3";
    assert!(matches!(load(broken), Err(ConfigError::Parse { .. })));
}

#[test]
fn registries_accept_new_kinds() {
    let mut reg = ScorerRegistry::default();
    reg.register("always-high", |_spec| {
        Ok(std::sync::Arc::new(ConstantScorer::new(0.99)))
    });
    let text = FULL.replacen(
        "kind = \"constant\"\nprobability = 0.6",
        "kind = \"always-high\"",
        1,
    );
    let e = Engine::from_toml_str(&text, Path::new("."), Path::new("x"), &reg).unwrap();
    let t = Transaction::builder(e.schema())
        .amount(10.0, "USD")
        .build()
        .unwrap();
    assert_eq!(e.decide(&t).unwrap().score, 0.99);
}

#[test]
fn fuzz_seed_configs_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/config");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let e = Engine::from_config(&p).unwrap_or_else(|err| panic!("{}: {err}", p.display()));
        e.shutdown(Shutdown::Abandon);
        n += 1;
    }
    assert!(n >= 2, "seed corpus missing in {}", dir.display());
}

/// Every crash the `config_toml` fuzzer ever found, replayed: a typed error or an engine,
/// never a panic (the folder exists and holds its README even while it has no crash).
#[test]
fn fuzz_regression_configs_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/config_toml");
    assert!(dir.join("README.md").exists(), "{} missing", dir.display());
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
            if let Ok(e) = Engine::from_toml_str(&text, &dir, &p, &ScorerRegistry::default()) {
                e.shutdown(Shutdown::Abandon);
            }
        }
    }
}

#[test]
fn a_schema_round_trips_through_its_toml() {
    let s = FeatureSchema::builder()
        .numeric_required("amount")
        .numeric("velocity")
        .categorical("country", &["US", "G\"B"])
        .build()
        .unwrap();
    let text = format!(
        "{}[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n",
        s.to_toml()
    );
    let e = load(&text).unwrap();
    assert_eq!(e.schema().fingerprint(), s.fingerprint());
}
