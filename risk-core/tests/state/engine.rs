//! The engine computes its own features from `risk.toml`: schema fields added, filled
//! before the rules and the fast tier, entered after the decision (outcome features).

use risk_core::*;
use std::path::Path;
use std::sync::Arc;

const TOML: &str = r#"
[schema]
fields = [
  { name = "amount", kind = "numeric", required = true },
  { name = "channel", kind = "categorical", vocab = ["pos", "ecom", "atm", "moto", "app"] },
]

[rules.scorer]
kind = "echo"
field = "card_count_1h"

[thresholds]
approve_below = 0.3
decline_at = 0.7

[state]
max_keys = 10000

[[state.features]]
name = "card_count_1h"
key = "card"
agg = "count"
window = "1h"
buckets = 12

[[state.features]]
name = "card_declines_24h"
key = "card"
agg = "count"
window = "24h"
buckets = 24
outcome = ["decline"]

[[state.features]]
name = "card_online_sum_24h"
key = "card"
agg = "sum"
of = "amount"
window = "1d"
buckets = 24
current = "include"
filter = { channel = ["ecom", "app"] }

[state.lists.blocked_devices]
key = "device"
"#;

/// Answers `field / 10` (so a count of 5 scores 0.5).
struct Echo(Slot);
impl Scorer for Echo {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("echo", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let v = t.features.get(self.0);
        Ok(Score::new((v / 10.0).clamp(0.0, 1.0)))
    }
}

fn engine() -> Engine {
    let mut reg = ScorerRegistry::default();
    reg.register("echo", |spec| {
        let f = spec.str("field")?;
        Ok(Arc::new(Echo(spec.schema.slot(f).unwrap())))
    });
    let e = Engine::from_toml_str(TOML, Path::new("."), Path::new("risk.toml"), &reg).unwrap();
    e
}

#[test]
fn the_engine_computes_its_features_before_the_rules() {
    let e = engine();
    for f in [
        "card_count_1h",
        "card_declines_24h",
        "card_online_sum_24h",
        "list.blocked_devices.device",
    ] {
        assert!(e.schema().slot(f).is_some(), "{f} added to the schema");
    }
    let t0 = 1_767_571_200_000;
    let txn = |i: u64, ch: Channel| {
        Transaction::builder(e.schema())
            .id(i)
            .entity(9)
            .timestamp_ms(t0 + i as i64 * 60_000)
            .amount(10.0, "USD")
            .channel(ch)
            .device(77)
            .build()
            .unwrap()
    };
    let mut actions = Vec::new();
    for i in 1..=9 {
        let t = txn(
            i,
            if i % 2 == 0 {
                Channel::Ecom
            } else {
                Channel::Pos
            },
        );
        let d = e.decide(&t).unwrap();
        assert_eq!(d.rule_score, (i - 1) as f32 / 10.0, "count before txn {i}");
        // The caller's transaction is untouched.
        assert_eq!(t.features.by_name("card_count_1h"), None);
        actions.push(d.action);
    }
    assert_eq!(actions[0], Action::Approve);
    assert_eq!(actions[8], Action::Decline);
    // Outcome features: the declines so far (8th and 9th: counts 7 and 8 ≥ 0.7).
    let st = e.state().unwrap();
    let mut probe = txn(10, Channel::App);
    st.apply(&mut probe);
    assert_eq!(probe.features.by_name("card_declines_24h"), Some(2.0));
    assert_eq!(
        probe.features.by_name("card_online_sum_24h"),
        Some(50.0),
        "4 online + this one"
    );
    assert_eq!(
        probe.features.by_name("list.blocked_devices.device"),
        Some(0.0)
    );
    e.lists()
        .unwrap()
        .add("blocked_devices", "77", None)
        .unwrap();
    st.apply(&mut probe);
    assert_eq!(
        probe.features.by_name("list.blocked_devices.device"),
        Some(1.0)
    );
    // decide_batch computes them too, row by row in order.
    let rows: Vec<Transaction> = (20..23).map(|i| txn(i, Channel::Pos)).collect();
    let out = e.decide_batch(&rows);
    let got: Vec<f32> = out.iter().map(|d| d.as_ref().unwrap().rule_score).collect();
    assert_eq!(got, vec![1.0, 1.0, 1.0], "count ≥ 10 clamps");
    assert_eq!(st.stats().updates, 9 + 2 + 3);
    assert_eq!(out[0].as_ref().unwrap().state, StateStatus::Fresh);
    // Exported: events and keys per source.
    let text = e.metrics_text();
    for line in [
        "risk_state_events_total{event=\"updated\"} 14",
        "risk_state_events_total{event=\"list_hit\"} 4",
        "risk_state_keys{source=\"entity\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[test]
fn state_errors_name_the_key() {
    let bad = TOML.replace("agg = \"sum\"", "agg = \"median\"");
    let mut reg = ScorerRegistry::default();
    reg.register("echo", |_| Ok(Arc::new(ConstantScorer::new(0.1))));
    let e = Engine::from_toml_str(&bad, Path::new("."), Path::new("risk.toml"), &reg).unwrap_err();
    assert!(e.to_string().contains("state.features[2].agg"), "{e}");
    let bad = TOML.replace("window = \"1d\"", "window = \"soon\"");
    let e = Engine::from_toml_str(&bad, Path::new("."), Path::new("risk.toml"), &reg).unwrap_err();
    assert!(e.to_string().contains("state.features[2].window"), "{e}");
    let bad = TOML.replace("max_keys = 10000", "max_keys = 10000\nbogus = 1");
    assert!(Engine::from_toml_str(&bad, Path::new("."), Path::new("risk.toml"), &reg).is_err());
}

/// A replay engine (`EngineBuilder::for_replay`) starts from the configured snapshot but
/// never writes it, journals no list change and keeps its windows in process: a backtest
/// leaves the live engine's restart state as it was.
#[test]
fn a_replay_reads_the_snapshot_and_writes_no_shared_store() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("state.snap");
    let journals = dir.path().join("lists");
    let toml = format!(
        "{TOML}\n",
        TOML = TOML.replace(
            "[state]\nmax_keys = 10000\n",
            &format!("[state]\nmax_keys = 10000\nsnapshot = {snap:?}\ndir = {journals:?}\n")
        )
    );
    let mut reg = ScorerRegistry::default();
    reg.register("echo", |spec| {
        let f = spec.str("field")?;
        Ok(Arc::new(Echo(spec.schema.slot(f).unwrap())))
    });
    let t0 = 1_767_571_200_000;
    let txn = |e: &Engine, i: u64| {
        Transaction::builder(e.schema())
            .id(i)
            .entity(9)
            .timestamp_ms(t0 + i as i64 * 60_000)
            .amount(10.0, "USD")
            .build()
            .unwrap()
    };
    // The live engine: three transactions, snapshot written at shutdown.
    let at = |c: &ManualClock, i: u64| c.set(i * 60_000 * 1_000_000);
    let clock = ManualClock::new();
    clock.set_unix_origin_ms(t0);
    let live = Engine::builder_from_toml_str(&toml, dir.path(), Path::new("risk.toml"), &reg)
        .unwrap()
        .clock(clock.clone())
        .build()
        .unwrap();
    for i in 1..=3 {
        at(&clock, i);
        live.decide(&txn(&live, i)).unwrap();
    }
    live.shutdown(Shutdown::Abandon);
    drop(live);
    let before = std::fs::read(&snap).expect("the live engine wrote its snapshot");

    // The replay starts from it: the fourth transaction sees the three before it.
    let rclock = ManualClock::new();
    rclock.set_unix_origin_ms(t0);
    at(&rclock, 4);
    let replay = Engine::builder_from_toml_str(&toml, dir.path(), Path::new("risk.toml"), &reg)
        .unwrap()
        .for_replay(rclock.clone())
        .build()
        .unwrap();
    let d = replay.decide(&txn(&replay, 4)).unwrap();
    assert_eq!(
        d.rule_score, 0.3,
        "three transactions restored from the snapshot"
    );
    for i in 5..=8 {
        at(&rclock, i);
        replay.decide(&txn(&replay, i)).unwrap();
    }
    replay
        .lists()
        .unwrap()
        .add("blocked_devices", "77", None)
        .unwrap();
    replay.shutdown(Shutdown::Abandon);
    drop(replay);
    assert_eq!(
        std::fs::read(&snap).unwrap(),
        before,
        "the replay left the snapshot as the live engine wrote it"
    );
    assert!(
        !journals.join("blocked_devices.journal").exists(),
        "the replay's list change was not journalled"
    );
}
