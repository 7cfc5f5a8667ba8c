//! The quickstart's default run: the tiers on the realistic preset
//! (`risk_core::synth::realistic`: 120 days, 0.3% fraud of which a third only history
//! reveals, legitimate look-alikes, labels arriving days to months late, drift).
//!
//! One engine configuration, `examples/risk_realistic.toml` (written with its two models
//! by `tools/train_realistic.py` from seed 7's first 60 days), replayed in event time
//! over seed 42 (other cards) with every label fed when it arrived
//! ([`risk_core::EventReplay`]):
//! - **rules**: the rule tier's score alone;
//! - **fast**: rules + the fast XGBoost on the velocity features entity state computes;
//! - **tiered**: the same, with the deep tier on: the gray band goes to the history model
//!   (velocity + history features: links to confirmed fraud through a device, e-mail or
//!   merchant, cards per device, the card's own hours and amounts), the replay waits for
//!   each verdict, which shifts the entity's next decisions through the feedback path
//!   (its centre, gain, bound and ttl fit on validation days by the tool);
//! - **fast+history**: the history model as the fast tier, for reference (what the deep
//!   tier's model would do on every row).
//!
//! Judged on day 67 on (a 7-day gap after the training period) at an equal alert budget
//! (each system alerting on 1% of test traffic), with 95% intervals from a cluster
//! bootstrap over cards (Poisson(1) weights per card), as `examples/evaluate.py` does.

use risk_core::synth::{generate_raw, Labeled, SynthConfig};
use risk_core::{
    Decision, Engine, EventReplay, EventReplayStats, FeatureSchema, FieldKind, ReplayLabel,
    ScorerRegistry, Shutdown, Transaction,
};
use risk_examples::tiers::{self, dense_ids};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows replayed by default: about 1,300 frauds of which ~600 in the test period.
pub const DEFAULT_ROWS: usize = 1_000_000;
const SEED: u64 = 42;
const DAY_MS: i64 = 86_400_000;
/// First day judged: the tool trains on days 0-60; a 7-day gap.
const TEST_FROM_DAY: i64 = 67;
/// Share of test traffic each system alerts on.
const BUDGET: f64 = 0.01;
/// An alert costs a review; a missed fraud costs its amount.
const REVIEW_COST: f64 = 5.0;
const BOOTSTRAP: usize = 200;
/// The fast tier's gray zone for the in-band comparison: below its top 0.3% of test
/// traffic, within its top 3%.
const BAND: (f64, f64) = (0.003, 0.03);

/// What the report keeps of a decision.
#[derive(Clone, Copy)]
struct Kept {
    score: f32,
    rule: f32,
    shift: f32,
    action: risk_core::Action,
    escalated: bool,
}

impl From<&Decision> for Kept {
    fn from(d: &Decision) -> Self {
        Self {
            score: d.score,
            rule: d.rule_score,
            shift: d.threshold_shift,
            action: d.action,
            escalated: matches!(d.escalation, risk_core::Escalation::Enqueued(_)),
        }
    }
}

fn examples_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the comparison over `n` rows and prints it.
pub fn run(n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let rows = generate_raw(&SynthConfig::realistic(SEED, n));
    let first = rows.first().map_or(1, |r| r.txn.timestamp_ms);
    let test: Vec<bool> = rows
        .iter()
        .map(|r| r.txn.timestamp_ms - first >= TEST_FROM_DAY * DAY_MS)
        .collect();
    let frauds = rows.iter().filter(|r| r.is_fraud).count();
    let hidden = rows
        .iter()
        .filter(|r| r.is_fraud && r.scenario.history_only())
        .count();
    let labelled = rows.iter().filter(|r| r.label_time_ms.is_some()).count();
    println!(
        "data: realistic preset, {} rows over 120 days (seed {SEED}), {} frauds ({:.2}%), {:.0}% of them only history reveals, {:.0}% ever labelled; generated in {:.2?}",
        rows.len(),
        frauds,
        100.0 * frauds as f64 / rows.len().max(1) as f64,
        100.0 * hidden as f64 / frauds.max(1) as f64,
        100.0 * labelled as f64 / frauds.max(1) as f64,
        t.elapsed()
    );
    // Embedded; its relative paths (rules, models) resolve against examples/.
    let path = examples_dir().join("risk_realistic.toml");
    let text = include_str!("../risk_realistic.toml");
    println!(
        "engine: examples/risk_realistic.toml (embedded; tools/train_realistic.py trained its models on seed 7, days 0-60)"
    );
    let fast_model = "xgb_realistic_fast.json";
    let history_model = "xgb_realistic_history.json";
    if !text.contains(fast_model) || !text.contains(history_model) {
        return Err(format!(
            "{} does not name {fast_model} and {history_model}",
            path.display()
        )
        .into());
    }
    let (fast, _, fast_wall) = replay(text, &path, &rows, false)?;
    let (tiered, deep, tiered_wall) = replay(text, &path, &rows, true)?;
    let reference = text.replacen(
        &format!("models/{fast_model}"),
        &format!("models/{history_model}"),
        1,
    );
    let (history, _, _) = replay(&reference, &path, &rows, false)?;
    println!(
        "replayed in event time, labels fed when they arrived: fast {:.1?} ({:.0} decisions/s), tiered {:.1?} (each verdict awaited)",
        fast_wall,
        rows.len() as f64 / fast_wall.as_secs_f64(),
        tiered_wall
    );

    let pick = |f: &dyn Fn(usize) -> f32| -> Vec<f32> {
        (0..rows.len()).filter(|&i| test[i]).map(f).collect()
    };
    let systems: [(&str, Vec<f32>); 4] = [
        ("rules", pick(&|i| fast[i].rule)),
        ("fast", pick(&|i| fast[i].score)),
        ("tiered", pick(&|i| tiered[i].score + tiered[i].shift)),
        ("fast+history", pick(&|i| history[i].score)),
    ];
    let test_rows: Vec<&Labeled> = rows
        .iter()
        .zip(&test)
        .filter(|x| *x.1)
        .map(|x| x.0)
        .collect();
    let y: Vec<bool> = test_rows.iter().map(|r| r.is_fraud).collect();
    let amount: Vec<f64> = test_rows.iter().map(|r| r.txn.amount).collect();
    let cards = dense_ids(test_rows.iter().map(|r| r.txn.entity.0));
    println!(
        "\ntiers on the held-out period (day {TEST_FROM_DAY} on: {} rows, {} frauds), alerting on {:.0}% of traffic each; 95% intervals, {BOOTSTRAP} card-level bootstrap draws",
        y.len(),
        y.iter().filter(|&&f| f).count(),
        100.0 * BUDGET
    );
    let figures = tiers::bootstrap(
        &y,
        &amount,
        &cards,
        &systems,
        BOOTSTRAP,
        BUDGET,
        REVIEW_COST,
    );
    tiers::print_table(&figures);
    let band = tiers::in_band(&y, &cards, &systems[1].1, &systems[2].1, BAND, BOOTSTRAP);
    println!(
        "  in the fast tier's gray zone ({} rows, {} frauds): AUPRC fast {:.3}, tiered {:.3}, ratio {:.2} [{:.2}, {:.2}]",
        band.rows, band.frauds, band.fast, band.other, band.ratio.0, band.ratio.1, band.ratio.2
    );
    print_deep(&deep, &fast, &tiered, &test);
    Ok(())
}

fn print_deep(deep: &EventReplayStats, fast: &[Kept], tiered: &[Kept], test: &[bool]) {
    let esc = tiered.iter().filter(|k| k.escalated).count();
    let shifted = (0..tiered.len())
        .filter(|&i| test[i] && tiered[i].shift != 0.0)
        .count();
    let changed = (0..tiered.len())
        .filter(|&i| test[i] && tiered[i].action != fast[i].action)
        .count();
    let d = deep.deep.unwrap_or_default();
    println!(
        "  deep tier: {} escalated ({:.2}% of rows), {} verdicts, {} lost, wall latency p50 {} us p99 {} us; test rows decided with a verdict's shift {}, actions changed against fast {}",
        esc,
        100.0 * esc as f64 / tiered.len().max(1) as f64,
        d.verdicts,
        d.lost,
        d.p50_us,
        d.p99_us,
        shifted,
        changed
    );
    println!(
        "  labels fed to entity state {} (after the end {}, refused {})",
        deep.labels_fed, deep.labels_after_end, deep.labels_refused
    );
}

type Replayed = (Vec<Kept>, EventReplayStats, Duration);

/// Replays `rows` through a replay engine built from `text` (the deep tier kept and every
/// verdict awaited with `deep`).
fn replay(
    text: &str,
    origin: &Path,
    rows: &[Labeled],
    deep: bool,
) -> Result<Replayed, Box<dyn std::error::Error>> {
    let first = rows.first().map_or(1, |r| r.txn.timestamp_ms);
    let clock = EventReplay::clock(first);
    let mut reg = ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    risk_rules::register(&mut reg);
    let engine = Engine::replay_builder_from_toml_str(
        text,
        examples_dir(),
        origin,
        &reg,
        clock.clone(),
        deep,
    )?
    .build()?;
    let labels = rows.iter().filter_map(|r| {
        r.label_time_ms.map(|known_ms| ReplayLabel {
            known_ms,
            txn: r.txn.id,
            fraud: true,
        })
    });
    let mut rep = EventReplay::new(&engine, clock, first, labels, deep);
    let onto = Rebase::new(
        rows.first().map(|r| r.txn.features.schema()),
        engine.schema(),
    )?;
    let mut txn = rows.first().map(|r| r.txn.clone()).ok_or("no rows")?;
    let mut out = Vec::with_capacity(rows.len());
    let t = Instant::now();
    for r in rows {
        onto.apply(&r.txn, &mut txn);
        out.push(Kept::from(&rep.decide_in_time(&txn)?));
    }
    let wall = t.elapsed();
    let stats = rep.finish();
    engine.shutdown(Shutdown::Abandon);
    Ok((out, stats, wall))
}

/// Moves a generated transaction onto the engine's schema (the generator's fields by
/// name, categoricals by their text; the engine's extra fields missing: entity state
/// fills them).
struct Rebase {
    schema: Arc<FeatureSchema>,
    /// `(engine slot, generator slot, generator id → engine id for categoricals)`.
    map: Vec<(usize, usize, Option<Vec<f32>>)>,
}

impl Rebase {
    fn new(
        from: Option<&Arc<FeatureSchema>>,
        to: &Arc<FeatureSchema>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let from = from.ok_or("no rows")?;
        let mut map = Vec::new();
        for (i, f) in from.fields().iter().enumerate() {
            let Some(slot) = to.slot(&f.name) else {
                return Err(format!(
                    "the engine's schema lacks the generator's field {:?}",
                    f.name
                )
                .into());
            };
            let ids = (f.kind == FieldKind::Categorical).then(|| {
                let dst = to.field(slot);
                (0..=f.vocab().len() as u32)
                    .map(|id| f.value_of(id).map_or(0.0, |v| dst.intern(v) as f32))
                    .collect()
            });
            map.push((slot.index(), i, ids));
        }
        Ok(Self {
            schema: to.clone(),
            map,
        })
    }

    fn apply(&self, src: &Transaction, dst: &mut Transaction) {
        dst.copy_from(src);
        let mut f = self.schema.features();
        let (v, s) = (f.values_mut(), src.features.values());
        for (to, from, ids) in &self.map {
            let x = s[*from];
            v[*to] = match ids {
                Some(ids) if !x.is_nan() => ids.get(x as usize).copied().unwrap_or(0.0),
                _ => x,
            };
        }
        dst.features = f;
    }
}
