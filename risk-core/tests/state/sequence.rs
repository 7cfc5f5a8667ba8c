//! Sequences (`[[state.sequences]]`): every transaction's tensor equals one built from
//! the raw stream (the key's `N` latest events by event time, ties in arrival order), on
//! streams with out-of-order events; with the current transaction or without; through a
//! snapshot; through eviction; and from risk.toml.

use super::*;
use risk_core::state::{Agg, Current, FeatureDef, Filter, KeySource, SequenceDef, StateEngine};
use std::collections::HashMap;
use std::time::Duration;

pub(super) const LATE: i64 = 60_000;

/// The definitions under test: a card sequence with the current transaction (a state
/// feature, categorical ids, `dt` and `age` in its rows) and a merchant history without
/// it, filtered to small amounts.
pub(super) fn defs() -> (Vec<FeatureDef>, Vec<SequenceDef>) {
    let features = vec![FeatureDef::new("c_count_1h", KeySource::Entity, Agg::Count)
        .window(Duration::from_secs(3_600), 12)];
    let card = SequenceDef::new(
        "card",
        KeySource::Entity,
        6,
        &["amount", "dt", "age", "channel", "country", "c_count_1h"],
    );
    let mut merchant = SequenceDef::new("merchant", KeySource::Merchant, 4, &["dt", "amount"]);
    merchant.current = Current::Exclude;
    merchant.missing = -1.0;
    merchant.filters.push(Filter::Range {
        field: "amount".into(),
        gt: None,
        ge: None,
        lt: Some(5.0),
        le: None,
    });
    (features, vec![card, merchant])
}

fn engine(max_keys: usize) -> (StateEngine, Arc<FeatureSchema>) {
    let (features, sequences) = defs();
    let cfg = StateConfig {
        features,
        sequences,
        max_lateness: Duration::from_millis(LATE as u64),
        max_keys,
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    (st, s)
}

/// A tensor row from (event time, its predecessor's time, stored values).
type RowOf = dyn Fn(i64, i64, &[f32]) -> Vec<f32>;

/// One key's events as the reference keeps them: (effective time, arrival, row values).
#[derive(Default)]
struct Key {
    clock: i64,
    events: Vec<(i64, usize, Vec<f32>)>,
}

impl Key {
    /// Enters an event at `ts`: its effective time (late past the bound: the key's clock).
    fn time(&mut self, ts: i64) -> i64 {
        self.clock = self.clock.max(ts);
        if self.clock - ts <= LATE {
            ts
        } else {
            self.clock
        }
    }

    /// The tensor rows of the `n` latest events: `cols` picks each row's values from
    /// (time, its predecessor's time, stored values).
    fn rows(&self, n: usize, cols: &RowOf) -> Vec<Vec<f32>> {
        let mut ev: Vec<&(i64, usize, Vec<f32>)> = self.events.iter().collect();
        ev.sort_by_key(|e| (e.0, e.1));
        let from = ev.len().saturating_sub(n);
        (from..ev.len())
            .map(|i| {
                let t = ev[i].0;
                let before = if i > 0 { ev[i - 1].0 } else { t };
                cols(t, before, &ev[i].2)
            })
            .collect()
    }
}

fn secs(ms: i64) -> f32 {
    ms.max(0) as f32 / 1e3
}

/// Checks one transaction's sequence against the reference rows.
fn same(got: &risk_core::Sequence, want: &[Vec<f32>], at: usize) {
    assert_eq!(
        got.len(),
        want.len(),
        "event {at}: {} rows held",
        got.name()
    );
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            got.row(i),
            w.as_slice(),
            "event {at}: {} row {i}",
            got.name()
        );
    }
    for i in want.len()..got.rows() {
        assert!(got.row(i).iter().all(|&v| v == 0.0), "padding row {i}");
    }
}

/// Drives `evs` (from `from`) through `st`, checking both sequences of every
/// transaction; `cards` / `merchants` carry the reference across calls.
fn drive(
    st: &StateEngine,
    s: &Arc<FeatureSchema>,
    evs: &[Ev],
    cards: &mut HashMap<u64, Key>,
    merchants: &mut HashMap<u32, Key>,
) -> usize {
    let mut checked = 0;
    for (i, e) in evs.iter().enumerate() {
        let mut t = e.txn(s);
        st.apply(&mut t);
        let f = |n: &str| t.features.by_name(n).unwrap();
        let card_vals = vec![e.amount as f32, f("channel"), f("country"), f("c_count_1h")];
        let k = cards.entry(e.card).or_default();
        let te = k.time(e.ts);
        k.events.push((te, i, card_vals));
        let clock = k.clock;
        let card = k.rows(6, &move |t, b, v| {
            vec![v[0], secs(t - b), secs(clock - t), v[1], v[2], v[3]]
        });
        same(t.sequences.get("card").unwrap(), &card, i);
        let m = t.sequences.get("merchant").unwrap();
        if e.merchant == 0 {
            assert!(m.is_empty(), "event {i}: no merchant, no rows");
        } else {
            let k = merchants.entry(e.merchant).or_default();
            let te = k.time(e.ts);
            let want = k.rows(4, &|t, b, v| vec![secs(t - b), v[0]]);
            same(m, &want, i);
            if (e.amount as f32) < 5.0 {
                k.events.push((te, i, vec![e.amount as f32]));
            }
        }
        checked += 1;
    }
    checked
}

#[test]
fn sequences_equal_the_raw_stream_out_of_order() {
    let (st, s) = engine(1_000_000);
    let evs = stream(11, 6_000, 25, 12);
    let late = evs.windows(2).filter(|w| w[1].ts < w[0].ts).count();
    assert!(late > 150, "the stream has out-of-order events ({late})");
    let n = drive(&st, &s, &evs, &mut HashMap::new(), &mut HashMap::new());
    assert_eq!(n, evs.len());
}

#[test]
fn a_snapshot_keeps_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let evs = stream(12, 4_000, 20, 10);
    let (a, s) = engine(1_000_000);
    let (mut cards, mut merchants) = (HashMap::new(), HashMap::new());
    drive(&a, &s, &evs[..2_000], &mut cards, &mut merchants);
    a.snapshot(&path).unwrap();
    let (features, sequences) = defs();
    let cfg = StateConfig {
        features,
        sequences,
        max_lateness: Duration::from_millis(LATE as u64),
        snapshot: Some(path.clone()),
        ..StateConfig::default()
    };
    let b = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    // The restored engine continues exactly where the first one stopped.
    drive(&b, &s, &evs[2_000..], &mut cards, &mut merchants);
}

/// A snapshot of other sequences (the card's made longer): the windows and the
/// merchant's sequence are restored, the card's sequence starts empty (its rows hold
/// the transaction being decided only), as on a key never seen.
#[test]
fn a_snapshot_of_other_sequences_restores_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.snap");
    let (a, s) = engine(1_000_000);
    let evs = stream(13, 300, 5, 3);
    drive(
        &a,
        &s,
        &evs[..200],
        &mut HashMap::new(),
        &mut HashMap::new(),
    );
    a.snapshot(&path).unwrap();
    let (features, mut sequences) = defs();
    sequences[0].length = 7;
    let cfg = StateConfig {
        features,
        sequences,
        max_lateness: Duration::from_millis(LATE as u64),
        snapshot: Some(path),
        ..StateConfig::default()
    };
    let b = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + 400 * DAY)).unwrap();
    let mut seen = std::collections::HashSet::new();
    let (mut merchants_kept, mut cards_fresh) = (0, 0);
    for e in &evs[200..] {
        let (mut ta, mut tb) = (e.txn(&s), e.txn(&s));
        a.apply(&mut ta);
        b.apply(&mut tb);
        let f = |t: &Transaction| t.features.by_name("c_count_1h").map(f32::to_bits);
        assert_eq!(f(&ta), f(&tb), "the window is carried");
        let (ma, mb) = (ta.sequences.get("merchant"), tb.sequences.get("merchant"));
        assert_eq!(ma, mb, "the merchant's sequence is carried");
        merchants_kept += !ma.unwrap().is_empty() as usize;
        if seen.insert(e.card) {
            assert_eq!(
                tb.sequences.get("card").unwrap().len(),
                1,
                "only this transaction"
            );
            cards_fresh += (ta.sequences.get("card").unwrap().len() > 1) as usize;
        }
    }
    assert!(
        merchants_kept > 10 && cards_fresh == 5,
        "{merchants_kept} {cards_fresh}"
    );
}

#[test]
fn an_evicted_key_starts_a_fresh_sequence() {
    // 4 keys per source for 25 cards: keys are evicted all the time. Every sequence
    // is the newest part of the key's reference (never another key's rows), and
    // holds the current transaction.
    let (st, s) = engine(4);
    let evs = stream(14, 3_000, 25, 12);
    let mut cards: HashMap<u64, Key> = HashMap::new();
    let mut fresh = 0;
    for (i, e) in evs.iter().enumerate() {
        let mut t = e.txn(&s);
        st.apply(&mut t);
        let k = cards.entry(e.card).or_default();
        let te = k.time(e.ts);
        k.events.push((te, i, vec![e.amount as f32]));
        let want = k.rows(6, &|_, _, v| vec![v[0]]);
        let got = t.sequences.get("card").unwrap();
        assert!(
            got.len() <= want.len(),
            "event {i}: {} rows, {} events of the key",
            got.len(),
            want.len()
        );
        if got.is_empty() {
            // Not admitted (every way of its index set busy): no state, no rows.
            assert!(
                t.features.by_name("c_count_1h").is_none_or(f32::is_nan),
                "event {i}"
            );
            continue;
        }
        if got.len() < want.len() {
            fresh += 1;
        }
        // Rows are in time order and the current transaction is among them.
        let amounts: Vec<f32> = (0..got.len()).map(|r| got.row(r)[0]).collect();
        assert!(amounts.contains(&(e.amount as f32)), "event {i}");
        let mut times: Vec<f32> = (0..got.len()).map(|r| got.row(r)[2]).collect();
        times.dedup();
        assert!(
            times.windows(2).all(|w| w[0] >= w[1]),
            "ages fall: {times:?}"
        );
    }
    assert!(
        fresh > 100,
        "keys were evicted and came back fresh ({fresh})"
    );
}

#[test]
fn bad_sequences_are_refused_by_name() {
    let s = |def: SequenceDef| {
        let cfg = StateConfig {
            sequences: vec![def],
            ..StateConfig::default()
        };
        let sch = schema(&cfg);
        StateEngine::new(cfg, sch, clock(T0))
            .unwrap_err()
            .to_string()
    };
    let e = s(SequenceDef::new("card", KeySource::Entity, 0, &["amount"]));
    assert!(e.contains("state.sequences[0] (card).length"), "{e}");
    let e = s(SequenceDef::new(
        "card",
        KeySource::Entity,
        257,
        &["amount"],
    ));
    assert!(e.contains("length"), "{e}");
    let e = s(SequenceDef::new("card", KeySource::Entity, 8, &["no_such"]));
    assert!(e.contains("fields") && e.contains("no_such"), "{e}");
    let e = s(SequenceDef::new("card", KeySource::Entity, 8, &[]));
    assert!(e.contains("fields"), "{e}");
    let e = s(SequenceDef::new("Card!", KeySource::Entity, 8, &["dt"]));
    assert!(e.contains("a-z"), "{e}");
}

/// Answers the card sequence's rows held / 10 and checks its last row is the
/// transaction's amount (so a tier sees the sequence state filled in stage 1).
struct SeqLen;
impl Scorer for SeqLen {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("seqlen", "1", Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        let q = t
            .sequences
            .get("card_seq")
            .ok_or_else(|| ScoreError::Failed("no sequence".into()))?;
        if q.row(q.len() - 1)[0] != t.amount as f32 {
            return Err(ScoreError::Failed(
                "the last row is not this transaction".into(),
            ));
        }
        Ok(Score::new(q.len() as f32 / 10.0))
    }
}

const SEQ_TOML: &str = r#"
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[[state.sequences]]
name = "card_seq"
key = "card"
length = 3
fields = ["amount", "dt"]
missing = -1
[rules.scorer]
kind = "seqlen"
[thresholds]
approve_below = 0.25
decline_at = 0.9
"#;

#[test]
fn sequences_from_risk_toml_reach_the_tiers() {
    let mut reg = ScorerRegistry::default();
    reg.register("seqlen", |_| Ok(Arc::new(SeqLen)));
    let path = std::path::Path::new(".");
    let e = Engine::from_toml_str(SEQ_TOML, path, path.join("risk.toml").as_path(), &reg).unwrap();
    let t0 = 1_767_571_200_000;
    let probs: Vec<f32> = (0..5)
        .map(|i| {
            let t = Transaction::builder(e.schema())
                .id(i + 1)
                .entity(9)
                .timestamp_ms(t0 + i as i64 * 60_000)
                .amount(10.0 + i as f64, "USD")
                .build()
                .unwrap();
            e.decide(&t).unwrap().rule_score
        })
        .collect();
    // 1, 2, then 3 rows: the sequence's length bounds it.
    assert_eq!(probs, vec![0.1, 0.2, 0.3, 0.3, 0.3]);
    for (bad, key) in [
        ("length = 3", "length = 3\ncolour = \"red\""),
        ("length = 3", "length = 0"),
        ("\"dt\"]", "\"dt\", \"nope\"]"),
    ] {
        let text = SEQ_TOML.replace(bad, key);
        let err = Engine::from_toml_str(&text, path, path.join("risk.toml").as_path(), &reg)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("state.sequences") || err.contains("colour"),
            "{key}: {err}"
        );
    }
}

#[test]
fn a_callers_own_sequence_reaches_the_tiers() {
    // An engine with state but no sequences: its per-thread copy of the transaction
    // carries the caller's sequence through (`Transaction::copy_from`), every time.
    let mut reg = ScorerRegistry::default();
    reg.register("seqlen", |_| Ok(Arc::new(SeqLen)));
    let text = SEQ_TOML.replace(
        "[[state.sequences]]\nname = \"card_seq\"\nkey = \"card\"\nlength = 3\nfields = [\"amount\", \"dt\"]\nmissing = -1\n",
        "[[state.features]]\nname = \"n_1h\"\nkey = \"card\"\nagg = \"count\"\n",
    );
    assert_ne!(text, SEQ_TOML);
    let path = std::path::Path::new(".");
    let e = Engine::from_toml_str(&text, path, path.join("risk.toml").as_path(), &reg).unwrap();
    for len in [1usize, 4, 2] {
        let mut t = Transaction::builder(e.schema())
            .id(len as u64)
            .entity(9)
            .timestamp_ms(1_767_571_200_000 + len as i64)
            .amount(7.0, "USD")
            .build()
            .unwrap();
        let mut v = vec![0.0; 8];
        v[(len - 1) * 2] = 7.0;
        let q = risk_core::Sequence::new("card_seq", 4, 2, len, v).unwrap();
        t.sequences = risk_core::Sequences::new(vec![q]);
        assert_eq!(e.decide(&t).unwrap().rule_score, len as f32 / 10.0);
    }
}

/// A row holding a list feature holds this transaction's hit (the list is read before
/// the row is entered), on the row it enters and on the ones after.
#[test]
fn a_row_holds_the_transactions_own_list_hit() {
    list_hit_rows(None);
}

/// The list-hit rows of [`a_row_holds_the_transactions_own_list_hit`], in process or on
/// Redis (`redis`).
pub(super) fn list_hit_rows(redis: Option<risk_core::state::RedisConfig>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StateConfig {
        redis,
        sequences: vec![SequenceDef::new(
            "card",
            KeySource::Entity,
            4,
            &["amount", "list.blocked_devices.device"],
        )],
        lists: vec![risk_core::state::ListDef {
            name: "blocked_devices".into(),
            key: KeySource::Device,
            file: None,
        }],
        dir: Some(dir.path().to_path_buf()),
        ..StateConfig::default()
    };
    let s = schema(&cfg);
    let st = StateEngine::new(cfg, Arc::clone(&s), clock(T0 + DAY)).unwrap();
    st.lists().add("blocked_devices", "42", None).unwrap();
    let txn = |id: u64, device: u64| {
        Transaction::builder(&s)
            .id(id)
            .entity(7)
            .timestamp_ms(T0 + id as i64 * 1_000)
            .amount(id as f64, "USD")
            .device(device)
            .build()
            .unwrap()
    };
    let mut t = txn(1, 42);
    st.apply(&mut t);
    assert_eq!(t.features.by_name("list.blocked_devices.device"), Some(1.0));
    let q = t.sequences.get("card").unwrap();
    assert_eq!((q.len(), q.row(0)), (1, &[1.0, 1.0][..]));
    let mut t = txn(2, 43);
    st.apply(&mut t);
    let q = t.sequences.get("card").unwrap();
    assert_eq!(q.len(), 2);
    let rows: Vec<&[f32]> = (0..2).map(|r| q.row(r)).collect();
    assert!(rows.contains(&&[1.0, 1.0][..]), "{rows:?}");
    assert!(rows.contains(&&[2.0, 0.0][..]), "{rows:?}");
}
