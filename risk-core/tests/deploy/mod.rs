//! Model lifecycle: versioned slots, the gate, shadow, sticky canary, guards, rollback,
//! the model directory, calibration in the path.

mod calibrate;
mod canary;
mod directory;
mod gate;
mod guards;
mod load;

use parking_lot::Mutex;
use risk_core::clock::ManualClock;
use risk_core::deploy::{DeployConfig, DeployEvent, EventKind, Gate, RolloutPlan};
use risk_core::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

/// What a test model does beyond its formula.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// `p = min(1, amount / 1000 * scale + offset)`.
    Normal,
    /// Adds `0.45` to every score (declines several times more).
    Biased,
    /// Answers NaN.
    Nan,
    /// Errors.
    Error,
    /// Advances the test clock by this much during each call (a model that blows its
    /// deadline, deterministically).
    Slow(Duration),
    /// Really sleeps this long (for the gate's real-time latency check).
    Sleep(Duration),
}

/// A model whose score is a function of the amount, with injectable faults.
pub struct Model {
    pub name: &'static str,
    pub version: String,
    pub scale: f32,
    pub offset: f32,
    pub mode: Mutex<Mode>,
    pub calls: AtomicU64,
    pub latency: Latency,
    pub clock: Option<Arc<ManualClock>>,
    pub schema_fp: Option<u64>,
    pub warmup_fails: bool,
}

impl Model {
    pub fn new(version: &str, scale: f32, offset: f32) -> Arc<Self> {
        Arc::new(Self {
            name: "amount-model",
            version: version.into(),
            scale,
            offset,
            mode: Mutex::new(Mode::Normal),
            calls: AtomicU64::new(0),
            latency: Latency::Bounded,
            clock: None,
            schema_fp: None,
            warmup_fails: false,
        })
    }

    pub fn with(f: impl FnOnce(&mut Model)) -> Arc<Self> {
        let mut m = Arc::try_unwrap(Self::new("x", 0.8, 0.0)).ok().unwrap();
        f(&mut m);
        Arc::new(m)
    }

    pub fn set(&self, m: Mode) {
        *self.mode.lock() = m;
    }
}

impl Scorer for Model {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new(self.name, &self.version, self.latency)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let base = ((t.amount as f32) / 1000.0 * self.scale + self.offset).clamp(0.0, 1.0);
        match *self.mode.lock() {
            Mode::Normal => Ok(Score::new(base)),
            Mode::Biased => Ok(Score::new((base + 0.45).min(1.0))),
            Mode::Nan => Ok(Score::new(f32::NAN)),
            Mode::Error => Err(ScoreError::Failed("injected".into())),
            Mode::Slow(d) => {
                if let Some(c) = &self.clock {
                    c.advance(d);
                }
                Ok(Score::new(base))
            }
            Mode::Sleep(d) => {
                std::thread::sleep(d);
                Ok(Score::new(base))
            }
        }
    }
    fn warmup(&self) -> Result<(), ScoreError> {
        if self.warmup_fails {
            return Err(ScoreError::Failed("warm-up injected failure".into()));
        }
        Ok(())
    }
    fn schema_fingerprint(&self) -> Option<u64> {
        self.schema_fp
    }
}

/// Rules whose score follows the amount too (so the rules and the model mostly agree).
pub struct AmountRules(pub f32);

impl Scorer for AmountRules {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("amount-rules", format!("{}", self.0), Latency::Bounded)
    }
    fn score(&self, t: &Transaction) -> Result<Score, ScoreError> {
        Ok(Score::new(
            ((t.amount as f32) / 1000.0 * self.0).clamp(0.0, 1.0),
        ))
    }
}

pub fn schema() -> Arc<FeatureSchema> {
    FeatureSchema::builder()
        .numeric_required("amount")
        .build()
        .unwrap()
}

/// Transaction `id` of entity `id % entities`, amount spread over [0, 1000).
pub fn txn(schema: &Arc<FeatureSchema>, id: u64, entities: u64) -> Transaction {
    let amount = (id.wrapping_mul(7919) % 1000) as f64;
    Transaction::builder(schema)
        .id(id)
        .entity(1 + id % entities)
        .amount(amount, "USD")
        .numeric("amount", amount as f32)
        .build()
        .unwrap()
}

/// An engine on a manual clock: amount rules, fast model `fast`, no background
/// supervisor ticks (the tests call `deploy_tick`), every decision kept for the gate.
pub fn engine(fast: Arc<dyn Scorer>, clock: &Arc<ManualClock>) -> Engine {
    Engine::builder(schema())
        .rules(Arc::new(AmountRules(0.8)))
        .fast(fast)
        .clock(Arc::clone(clock) as Arc<dyn Clock>)
        .circuit(CircuitConfig {
            min_calls: 1_000_000,
            ..Default::default()
        })
        .deploy_config(quiet())
        .build()
        .unwrap()
}

/// Deploy settings for deterministic tests: the supervisor never wakes on its own.
pub fn quiet() -> DeployConfig {
    DeployConfig {
        check_interval: Duration::from_secs(3600),
        check_every: 0,
        sample_every: 1,
        ..DeployConfig::default()
    }
}

/// Decides on `n` transactions from `*next` on; returns them.
pub fn run(e: &Engine, next: &mut u64, n: u64, entities: u64) -> Vec<Decision> {
    let s = e.schema().clone();
    (0..n)
        .map(|_| {
            *next += 1;
            e.decide(&txn(&s, *next, entities)).unwrap()
        })
        .collect()
}

/// A gate-and-promote plan with a small recent sample.
pub fn immediate() -> RolloutPlan {
    RolloutPlan {
        gate: Gate {
            sample: 256,
            ..Gate::default()
        },
        by: "test".into(),
        ..RolloutPlan::immediate()
    }
}

/// The next event of `kind` (others are skipped); fails the test after 30 s.
pub fn next_event(rx: &Receiver<DeployEvent>, kind: EventKind) -> DeployEvent {
    loop {
        let e = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no {kind:?} event"));
        if e.kind == kind {
            return e;
        }
    }
}
