//! [`RuleScorer`]: the rule tier as a [`Scorer`], with atomic hot reload.
//!
//! The serving [`RuleSet`] sits behind an atomic pointer swap: a `decide` in flight keeps
//! the set it started with, the next one sees the new set, and no call ever sees a partly
//! built set. A file that fails to compile (or was compiled for another schema) never
//! replaces the serving set; the error is returned, counted and kept for inspection.

use crate::history::{History, HistoryError, RuleVersion};
use crate::ruleset::{Hits, LoadError, RuleSet};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use risk_core::{
    ConfigError, FeatureSchema, Latency, ReasonCode, Reasons, Score, ScoreError, Scorer,
    ScorerInfo, ScorerRegistry, Transaction,
};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

thread_local! {
    static HITS: RefCell<Hits> = RefCell::new(Hits::new());
}

/// Reload counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStats {
    /// Successful swaps.
    pub reloads: u64,
    /// Rejected files.
    pub failures: u64,
    /// The last rejection, rendered (file:line:col and excerpt).
    pub last_error: Option<String>,
}

/// The rule tier.
pub struct RuleScorer {
    current: ArcSwap<RuleSet>,
    schema: Arc<FeatureSchema>,
    path: Option<PathBuf>,
    reloads: AtomicU64,
    failures: AtomicU64,
    last_error: Mutex<Option<String>>,
    history: Option<History>,
}

impl std::fmt::Debug for RuleScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.current.load();
        f.debug_struct("RuleScorer")
            .field("file", &s.file())
            .field("version", &s.version())
            .field("rules", &s.rules().len())
            .finish()
    }
}

/// Why a swap was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The new file did not load or compile.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The new set was compiled against another schema.
    #[error("rule set compiled for schema {got:016x}, serving schema is {expected:016x}")]
    SchemaMismatch {
        /// Serving schema.
        expected: u64,
        /// The candidate's.
        got: u64,
    },
    /// The scorer was not created from a file.
    #[error("this rule scorer has no file to reload")]
    NoPath,
    /// The version history could not be read or has no such version.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The scorer keeps no version history.
    #[error("this rule scorer keeps no version history (rules.scorer.history_dir)")]
    NoHistory,
}

impl RuleScorer {
    /// Serves `set` (compiled against `schema`). Its native code is built in the
    /// background ([`RuleSet::native`]); until then the interpreter serves it.
    pub fn new(set: RuleSet, schema: Arc<FeatureSchema>) -> Self {
        let set = Arc::new(set);
        native_in_background(&set);
        Self {
            current: ArcSwap::new(set),
            schema,
            path: None,
            reloads: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_error: Mutex::new(None),
            history: None,
        }
    }

    /// Keeps every set this scorer serves from now on in `history` (the serving one
    /// first), so that [`rollback`](Self::rollback) can restore it.
    pub fn with_history(mut self, history: History) -> Result<Self, HistoryError> {
        history.record(&self.current.load(), now_ms())?;
        self.history = Some(history);
        Ok(self)
    }

    /// The versions recorded, oldest first (empty without a history).
    pub fn versions(&self) -> Vec<RuleVersion> {
        self.history
            .as_ref()
            .map(History::versions)
            .unwrap_or_default()
    }

    /// Serves a recorded version again, atomically: `to` is a `version` name (the
    /// newest with it), a 16-digit hex content hash, or `"previous"` (the one served
    /// before the current). Its text is recompiled against the serving schema; on any
    /// error the serving set is unchanged and the error returned (and kept in
    /// [`stats`](Self::stats)). The rule file on disk is not touched: a later
    /// [`reload`](Self::reload) serves the file again.
    pub fn rollback(&self, to: &str) -> Result<Arc<RuleSet>, ReloadError> {
        let r = (|| {
            let h = self.history.as_ref().ok_or(ReloadError::NoHistory)?;
            let (v, text) = h.find(to, self.current.load().version_id().hash())?;
            let set = RuleSet::compile(&text, &v.file, &self.schema).map_err(LoadError::from)?;
            Ok(set)
        })();
        match r {
            Ok(set) => self.swap(set),
            Err(e) => {
                self.failed(&e);
                Err(e)
            }
        }
    }

    /// Compiles and serves a rule file; [`reload`](Self::reload) re-reads it.
    pub fn from_file(
        path: impl AsRef<Path>,
        schema: Arc<FeatureSchema>,
    ) -> Result<Self, LoadError> {
        let set = RuleSet::from_file(path.as_ref(), &schema)?;
        let mut s = Self::new(set, schema);
        s.path = Some(path.as_ref().to_path_buf());
        Ok(s)
    }

    /// The set serving now.
    pub fn current(&self) -> Arc<RuleSet> {
        self.current.load_full()
    }

    /// Replaces the serving set atomically, if it was compiled for the same schema.
    pub fn swap(&self, set: RuleSet) -> Result<Arc<RuleSet>, ReloadError> {
        if set.schema_fingerprint() != self.schema.fingerprint() {
            let e = ReloadError::SchemaMismatch {
                expected: self.schema.fingerprint(),
                got: set.schema_fingerprint(),
            };
            self.failed(&e);
            return Err(e);
        }
        let set = Arc::new(set);
        native_in_background(&set);
        let old = self.current.swap(Arc::clone(&set));
        if let Some(h) = &self.history {
            // The new set serves even if it cannot be recorded (a full disk must not
            // stop a rule fix); the failure is counted and kept in stats().
            if let Err(e) = h.record(&set, now_ms()) {
                self.failed(&ReloadError::History(e));
            }
        }
        self.reloads.fetch_add(1, Ordering::Relaxed);
        Ok(old)
    }

    /// Re-reads the file this scorer was created from. On any error the serving set is
    /// unchanged and the error is returned (and kept in [`stats`](Self::stats)).
    pub fn reload(&self) -> Result<Arc<RuleSet>, ReloadError> {
        let path = self.path.as_ref().ok_or(ReloadError::NoPath)?;
        match RuleSet::from_file(path, &self.schema) {
            Ok(set) => self.swap(set),
            Err(e) => {
                let e = ReloadError::Load(e);
                self.failed(&e);
                Err(e)
            }
        }
    }

    fn failed(&self, e: &ReloadError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some(e.to_string());
    }

    /// Reload counters and the last error.
    pub fn stats(&self) -> ReloadStats {
        ReloadStats {
            reloads: self.reloads.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_error: self.last_error.lock().clone(),
        }
    }

    /// Polls the file every `interval` and reloads it when its modification time or size
    /// changes. Stops when the returned handle is dropped or the scorer is.
    pub fn watch(self: &Arc<Self>, interval: Duration) -> Watcher {
        let stop = Arc::new((Mutex::new(false), parking_lot::Condvar::new()));
        let (weak, stop2) = (Arc::downgrade(self), Arc::clone(&stop));
        let path = self.path.clone();
        let stamp = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.modified().ok(), m.len()))
        };
        let handle = std::thread::Builder::new()
            .name("risk-rules-watch".into())
            .spawn(move || {
                let Some(path) = path else { return };
                let mut last = stamp(&path);
                loop {
                    {
                        let mut stopped = stop2.0.lock();
                        if !*stopped {
                            stop2.1.wait_for(&mut stopped, interval);
                        }
                        if *stopped {
                            return;
                        }
                    }
                    let Some(me) = weak.upgrade() else { return };
                    let now = stamp(&path);
                    if now != last {
                        last = now;
                        // Errors are counted and kept in stats(); the serving set stays.
                        let _ = me.reload();
                    }
                }
            })
            .ok();
        Watcher { stop, handle }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Builds `set`'s native code on a short-lived thread, so that a swap never waits for
/// code generation (several times the compile time: BENCHMARKS.md). A set dropped first
/// is not compiled; where no thread can be started the interpreter keeps serving.
fn native_in_background(set: &Arc<RuleSet>) {
    if !cfg!(feature = "jit") {
        return;
    }
    let weak = Arc::downgrade(set);
    let _ = std::thread::Builder::new()
        .name("risk-rules-jit".into())
        .spawn(move || {
            if let Some(s) = weak.upgrade() {
                // A failure leaves the interpreter serving; the reason is kept in the set.
                let _ = s.native();
            }
        });
}

/// Handle of a [`RuleScorer::watch`] thread; dropping it stops the thread.
#[derive(Debug)]
pub struct Watcher {
    stop: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Lets the thread run until the scorer is dropped.
    pub fn detach(mut self) {
        self.handle.take();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            *self.stop.0.lock() = true;
            self.stop.1.notify_all();
            let _ = h.join();
        }
    }
}

impl Scorer for RuleScorer {
    fn info(&self) -> ScorerInfo {
        let s = self.current.load();
        ScorerInfo::new(format!("rules:{}", s.file()), s.version(), Latency::Bounded)
            .with_content_hash(s.version_id().hash())
    }

    fn schema_fingerprint(&self) -> Option<u64> {
        Some(self.schema.fingerprint())
    }

    fn score(&self, txn: &Transaction) -> Result<Score, ScoreError> {
        let set = self.current.load();
        HITS.with(|h| {
            let mut h = h.borrow_mut();
            let v = set.evaluate(&txn.features, &mut h);
            let mut s = Score::new(v.score);
            s.directive = v.directive;
            s.version = Some(set.version_id());
            // Reasons: fired rules merged by reason code (weights add up), hard rules
            // first, then by weight; at most `Reasons::CAPACITY`, without allocating.
            let review = set.review_score();
            let mut top: [(ReasonCode, f32, bool); Reasons::CAPACITY] =
                [(ReasonCode::UNSET, 0.0, false); Reasons::CAPACITY];
            let mut n = 0;
            for &i in h.shadow() {
                s.shadow_fired.push(set.rules()[i as usize].name);
                set.count_shadow(i);
            }
            for &i in h.indices() {
                let r = &set.rules()[i as usize];
                s.fired.push(r.name);
                let w = r.contribution(review);
                if let Some(t) = top[..n].iter_mut().find(|t| t.0 == r.reason) {
                    t.1 += w;
                    t.2 |= r.hard;
                } else if n < top.len() {
                    top[n] = (r.reason, w, r.hard);
                    n += 1;
                } else if let Some(t) = top.iter_mut().min_by(|a, b| {
                    (a.2, a.1)
                        .partial_cmp(&(b.2, b.1))
                        .unwrap_or(std::cmp::Ordering::Equal)
                }) {
                    if (r.hard, w) > (t.2, t.1) {
                        *t = (r.reason, w, r.hard);
                    }
                }
            }
            top[..n].sort_by(|a, b| {
                (b.2, b.1)
                    .partial_cmp(&(a.2, a.1))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            for t in &top[..n] {
                s.reasons.push(t.0, t.1);
            }
            Ok(s)
        })
    }
}

/// Builds the `rules` scorer of a `risk.toml` table: `path = "x.rules"` (relative to the
/// config file), optional `watch_ms` to poll the file for changes, optional
/// `history_dir = "rules-history"` (relative to the config file) to keep every served
/// version for rollback, with `history_keep` versions (default 50). [`register`] uses it;
/// embedders that also need the [`RuleScorer`] itself (to call `reload`) register their
/// own factory around it.
pub fn scorer_from_spec(spec: &risk_core::ScorerSpec) -> Result<Arc<RuleScorer>, ConfigError> {
    let path = spec.path("path")?;
    let scorer = RuleScorer::from_file(&path, Arc::clone(&spec.schema)).map_err(|e| {
        ConfigError::Scorer {
            key: spec.key.clone(),
            message: e.to_string(),
        }
    })?;
    let scorer = if spec.table.contains_key("history_dir") {
        let keep = match spec.f64("history_keep")? {
            None => 50,
            Some(k) if k.fract() == 0.0 && (1.0..=crate::history::MAX_KEEP as f64).contains(&k) => {
                k as usize
            }
            Some(_) => {
                return Err(ConfigError::invalid(
                    format!("{}.history_keep", spec.key),
                    format!(
                        "must be a whole number from 1 to {}",
                        crate::history::MAX_KEEP
                    ),
                ))
            }
        };
        let key = format!("{}.history_dir", spec.key);
        History::open(spec.path("history_dir")?, keep)
            .and_then(|h| scorer.with_history(h))
            .map_err(|e| ConfigError::invalid(key, e.to_string()))?
    } else {
        scorer
    };
    let scorer = Arc::new(scorer);
    if let Some(ms) = spec.f64("watch_ms")? {
        if !(ms >= 10.0 && ms.is_finite()) {
            return Err(ConfigError::invalid(
                format!("{}.watch_ms", spec.key),
                "must be at least 10",
            ));
        }
        // Detached: the thread ends when the scorer is dropped.
        scorer.watch(Duration::from_secs_f64(ms / 1e3)).detach();
    }
    Ok(scorer)
}

/// Registers the `rules` scorer kind: `[rules.scorer] kind = "rules"`, `path = "x.rules"`
/// (relative to the config file), optional `watch_ms` to poll the file for changes.
pub fn register(registry: &mut ScorerRegistry) {
    registry.register("rules", |spec| {
        Ok(scorer_from_spec(spec)? as Arc<dyn Scorer>)
    });
}

/// The slot [`register_keeping`] fills with the rule tier it builds.
pub type RuleSlot = Arc<std::sync::Mutex<Option<Arc<RuleScorer>>>>;

/// The `ScorerSpec::key` of the rule tier's table (`[rules.scorer]`); the fast and deep
/// tiers' tables are `fast.scorer` and `deep.scorer` and may be of kind `rules` too.
pub const RULE_TIER_KEY: &str = "rules.scorer";

/// [`register`], also keeping in `slot` the [`RuleScorer`] built for the rule tier
/// ([`RULE_TIER_KEY`]; a fast or deep tier of kind `rules` is not the rule file), so an
/// embedder can `reload`, `rollback` and report it. The bindings (C ABI, Python) build
/// their engines with it.
pub fn register_keeping(registry: &mut ScorerRegistry, slot: &RuleSlot) {
    let slot = Arc::clone(slot);
    registry.register("rules", move |spec| {
        let s = scorer_from_spec(spec)?;
        if spec.key == RULE_TIER_KEY {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&s));
        }
        Ok(s as Arc<dyn Scorer>)
    });
}
