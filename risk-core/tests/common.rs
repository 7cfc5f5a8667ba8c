//! Scripted scorers and helpers.

use parking_lot::Mutex;
use risk_core::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

/// What a scripted scorer does on a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    /// Answer this probability.
    Value(f32),
    /// Return an error.
    Error,
    /// Panic.
    Panic,
    /// Report that the call started, then block until released (never, unless told).
    Block,
}

/// A scorer whose behaviour the test sets, which reports calls and can be released.
pub struct Scripted {
    pub act: Mutex<Act>,
    pub latency: Latency,
    pub calls: AtomicU64,
    started_tx: Mutex<Sender<()>>,
    pub started: Mutex<Receiver<()>>,
    release_tx: Mutex<Sender<()>>,
    release_rx: Mutex<Receiver<()>>,
    /// Per-entity probabilities overriding `act` when it is `Value`.
    pub by_entity: Mutex<Vec<(u64, f32)>>,
}

impl Scripted {
    pub fn new(act: Act, latency: Latency) -> Arc<Self> {
        let (stx, srx) = channel();
        let (rtx, rrx) = channel();
        Arc::new(Self {
            act: Mutex::new(act),
            latency,
            calls: AtomicU64::new(0),
            started_tx: Mutex::new(stx),
            started: Mutex::new(srx),
            release_tx: Mutex::new(rtx),
            release_rx: Mutex::new(rrx),
            by_entity: Mutex::new(Vec::new()),
        })
    }

    pub fn set(&self, a: Act) {
        *self.act.lock() = a;
    }

    /// Waits until a blocked call has started.
    pub fn wait_started(&self) {
        self.started
            .lock()
            .recv_timeout(Duration::from_secs(30))
            .expect("scorer call did not start");
    }

    /// Releases `n` blocked calls.
    pub fn release(&self, n: usize) {
        for _ in 0..n {
            let _ = self.release_tx.lock().send(());
        }
    }

    fn one(&self, txn: &Transaction) -> Result<Score, ScoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let act = *self.act.lock();
        match act {
            Act::Value(p) => {
                let p = self
                    .by_entity
                    .lock()
                    .iter()
                    .find(|(e, _)| *e == txn.entity.0)
                    .map_or(p, |x| x.1);
                Ok(Score::new(p))
            }
            Act::Error => Err(ScoreError::Failed("scripted failure".into())),
            Act::Panic => panic!("scripted panic"),
            Act::Block => {
                let _ = self.started_tx.lock().send(());
                let _ = self.release_rx.lock().recv();
                Ok(Score::new(0.01))
            }
        }
    }
}

impl Scorer for Scripted {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("scripted", "1", self.latency)
    }
    fn score(&self, txn: &Transaction) -> Result<Score, ScoreError> {
        self.one(txn)
    }
    fn score_batch(&self, txns: &[&Transaction], out: &mut Vec<Score>) -> Result<(), ScoreError> {
        out.clear();
        if *self.act.lock() == Act::Block {
            // One block per batch.
            self.one(txns[0])?;
        }
        for t in txns {
            out.push(self.one(t)?);
        }
        Ok(())
    }
}

/// A rule scorer: a probability plus an optional hard directive.
pub struct Rules {
    pub p: f32,
    pub directive: Option<Action>,
}

impl Scorer for Rules {
    fn info(&self) -> ScorerInfo {
        ScorerInfo::new("test-rules", "1", Latency::Bounded)
    }
    fn score(&self, _txn: &Transaction) -> Result<Score, ScoreError> {
        let mut s = Score::new(self.p);
        s.reasons.push(ReasonCode::intern("RULE_TEST"), self.p);
        s.directive = self.directive;
        Ok(s)
    }
}

pub fn rules(p: f32) -> Arc<dyn Scorer> {
    Arc::new(Rules { p, directive: None })
}

pub fn schema() -> Arc<FeatureSchema> {
    FeatureSchema::builder()
        .numeric_required("amount")
        .categorical("country", &["US", "GB", "NG"])
        .numeric("velocity_1h")
        .build()
        .unwrap()
}

pub fn txn(schema: &Arc<FeatureSchema>, id: u64, entity: u64) -> Transaction {
    Transaction::builder(schema)
        .id(id)
        .entity(entity)
        .timestamp_ms(1_767_571_200_000 + id as i64 * 1000)
        .amount(50.0, "USD")
        .country("US")
        .build()
        .unwrap()
}

/// A circuit that will not open during a test unless the test wants it to.
pub fn lenient_circuit() -> CircuitConfig {
    CircuitConfig {
        min_calls: 1_000_000,
        ..Default::default()
    }
}

/// Deep settings for deterministic tests: no batching wait.
pub fn deep_cfg(budget_ms: u64) -> DeepConfig {
    DeepConfig {
        budget: Duration::from_millis(budget_ms),
        max_batch: 8,
        max_wait: Duration::ZERO,
        workers: 1,
        global_prior: 0.5,
        subscriber_capacity: 100_000,
    }
}

/// SplitMix64's finaliser: a hash of `x` whose bits look uniform (draws from a
/// transaction id in simulations).
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
