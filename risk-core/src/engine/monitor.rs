//! The engine side of the monitors: what `decide` records for a sampled decision, the
//! evaluation (`monitor_tick`), alert delivery, and the monitor thread.

use super::{Engine, Inner};
use crate::hash::splitmix_finalize;
use crate::monitor::{
    agrees, Alert, AlertKind, Baseline, Drift, MonitorConfig, MonitorReport, Sketches,
};
use crate::policy::Policy;
use crate::scorer::Score;
use crate::txn::Transaction;
use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Weak};

/// Fewest recent transactions a baseline is captured from when none was configured.
const MIN_REFERENCE: usize = 256;

/// Fewest deep verdicts in a window before deep health is judged.
const MIN_VERDICTS: u64 = 50;

pub(crate) struct MonitorCtl {
    pub cfg: MonitorConfig,
    agree: AtomicU64,
    compared: AtomicU64,
    drift_n: AtomicU64,
    sketches: ArcSwapOption<Sketches>,
    state: Mutex<State>,
    subscribers: Mutex<Vec<SyncSender<Alert>>>,
    /// `EngineBuilder::on_alert`: called for every alert on the thread that judged it.
    pub callback: Option<AlertCallback>,
    /// Labelled decisions this window: fraud stopped, fraud missed, legit declined,
    /// legit passed.
    labels: [AtomicU64; 4],
}

/// A callback receiving every monitor alert (on the monitor thread, or the thread that
/// called `monitor_tick`; keep it short).
pub type AlertCallback = Arc<dyn Fn(&Alert) + Send + Sync>;

#[derive(Default)]
struct State {
    report: MonitorReport,
    firing: BTreeSet<(String, String)>,
    gray_seen: (u64, u64),
}

impl MonitorCtl {
    pub(crate) fn new(cfg: MonitorConfig, callback: Option<AlertCallback>) -> Self {
        let sketches = cfg.baseline.as_ref().map(|b| Arc::new(Sketches::new(b)));
        let state = State {
            report: MonitorReport {
                baseline: sketches.is_some(),
                ..MonitorReport::default()
            },
            ..State::default()
        };
        Self {
            cfg,
            agree: AtomicU64::new(0),
            compared: AtomicU64::new(0),
            drift_n: AtomicU64::new(0),
            sketches: ArcSwapOption::new(sketches),
            state: Mutex::new(state),
            subscribers: Mutex::new(Vec::new()),
            callback,
            labels: Default::default(),
        }
    }

    /// A label for a decision that took `action`: `fraud` now, `prev` what an earlier
    /// label said (a retraction moves the decision to the other cell).
    pub(crate) fn observe_label(
        &self,
        action: crate::decision::Action,
        fraud: bool,
        prev: Option<bool>,
    ) {
        use crate::decision::Action;
        let cell = |fraud: bool| match (fraud, action) {
            (true, Action::Approve) => 1,
            (true, _) => 0,
            (false, Action::Decline) => 2,
            (false, _) => 3,
        };
        if prev == Some(fraud) {
            return;
        }
        if let Some(p) = prev {
            let c = &self.labels[cell(p)];
            let _ = c.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(1)));
        }
        self.labels[cell(fraud)].fetch_add(1, Relaxed);
    }

    /// Records one decision if it is in the sample (decide path: a hash, then relaxed adds).
    #[inline]
    pub(crate) fn observe(
        &self,
        txn: &Transaction,
        rules: Option<&Score>,
        model: Option<&Score>,
        p: &Policy,
        shift: f32,
    ) {
        if !splitmix_finalize(txn.id.0 ^ 0x3017).is_multiple_of(self.cfg.sample_every.max(1)) {
            return;
        }
        self.record(txn, rules, model, p, shift);
    }

    #[inline(never)]
    fn record(
        &self,
        txn: &Transaction,
        rules: Option<&Score>,
        model: Option<&Score>,
        p: &Policy,
        shift: f32,
    ) {
        if let (Some(r), Some(m)) = (rules, model) {
            let ra = r.directive.unwrap_or(p.threshold(r.probability, shift));
            let ma = p.threshold(m.probability, shift);
            let same = agrees(
                self.cfg.agreement,
                (r.probability, ra),
                (m.probability, ma),
                p.decline_at,
            );
            self.agree.fetch_add(u64::from(same), Relaxed);
            self.compared.fetch_add(1, Relaxed);
        }
        if let Some(sk) = &*self.sketches.load() {
            for (slot, _, s) in &sk.features {
                s.record(txn.features.get(*slot));
            }
            if let (Some(s), Some(m)) = (&sk.score, model) {
                s.record(m.probability);
            }
            self.drift_n.fetch_add(1, Relaxed);
        }
    }
}

impl Engine {
    /// A channel receiving every monitor alert from now on (edge-triggered: firing, then
    /// resolved). A slow reader misses alerts rather than slowing the monitors. Without
    /// monitors (`[monitor]`) it never receives anything.
    pub fn alerts(&self) -> Receiver<Alert> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1024);
        if let Some(m) = &self.inner.monitor {
            m.subscribers.lock().push(tx);
        }
        rx
    }

    /// Judges every monitor whose window has enough samples now and returns the alerts
    /// it raised (the monitor thread does this every `monitor.interval`).
    pub fn monitor_tick(&self) -> Vec<Alert> {
        self.inner.monitor_tick()
    }

    /// The latest value of every monitor (`None` without monitors).
    pub fn monitor_report(&self) -> Option<MonitorReport> {
        self.inner
            .monitor
            .as_ref()
            .map(|m| m.state.lock().report.clone())
    }
}

impl Inner {
    pub(super) fn monitor_tick(&self) -> Vec<Alert> {
        let Some(mc) = &self.monitor else {
            return Vec::new();
        };
        let cfg = &mc.cfg;
        let mut st = mc.state.lock();
        let mut alerts = Vec::new();
        let now = self.clock.unix_ms();
        let mut edge = |st: &mut State,
                        kind: AlertKind,
                        subject: &str,
                        bad: bool,
                        value: f64,
                        threshold: f64,
                        detail: String| {
            let key = (kind.as_str().to_owned(), subject.to_owned());
            let was = st.firing.contains(&key);
            if bad != was {
                if bad {
                    st.firing.insert(key);
                } else {
                    st.firing.remove(&key);
                }
                alerts.push(Alert {
                    kind,
                    subject: subject.to_owned(),
                    value,
                    threshold,
                    firing: bad,
                    at_ms: now,
                    detail,
                });
            }
        };
        if mc.sketches.load().is_none() {
            self.capture_baseline(mc, &mut st);
        }
        let mut judged = false;
        if mc.compared.load(Relaxed) >= cfg.min_samples {
            let (a, n) = (mc.agree.swap(0, Relaxed), mc.compared.swap(0, Relaxed));
            let v = a as f64 / n.max(1) as f64;
            st.report.agreement = Some((v, n));
            let d = format!("{a} of {n} sampled decisions agree ({:?})", cfg.agreement);
            edge(
                &mut st,
                AlertKind::Agreement,
                "agreement",
                v < cfg.min_agreement,
                v,
                cfg.min_agreement,
                d,
            );
            judged = true;
        }
        if let Some(sk) = &*mc.sketches.load() {
            if mc.drift_n.load(Relaxed) >= cfg.min_samples {
                mc.drift_n.store(0, Relaxed);
                let mut drift = Vec::new();
                let score = sk.score.iter().map(|s| ("score", s, AlertKind::ScoreDrift));
                let feats = sk
                    .features
                    .iter()
                    .map(|(_, n, s)| (n.as_str(), s, AlertKind::FeatureDrift));
                for (name, s, kind) in feats.chain(score) {
                    let counts = s.take();
                    let n: u64 = counts.iter().sum();
                    let (ks, psi) = s.edges.compare(&counts);
                    let bad = n >= cfg.min_samples / 2 && (ks > cfg.max_ks || psi > cfg.max_psi);
                    let d = format!(
                        "KS {ks:.3} (max {:.3}), PSI {psi:.3} (max {:.3}) over {n} values",
                        cfg.max_ks, cfg.max_psi
                    );
                    edge(&mut st, kind, name, bad, ks, cfg.max_ks, d);
                    drift.push(Drift {
                        subject: name.to_owned(),
                        ks,
                        psi,
                        n,
                    });
                }
                st.report.drift = drift;
                judged = true;
            }
        }
        let g = self.metrics.gray_verdicts();
        let (total, fallbacks) = (g.0 - st.gray_seen.0.min(g.0), g.1 - st.gray_seen.1.min(g.1));
        if total >= MIN_VERDICTS {
            st.gray_seen = g;
            let share = fallbacks as f64 / total as f64;
            st.report.deep_fallback_share = Some(share);
            let d = format!("{fallbacks} of {total} deep verdicts were fallbacks");
            edge(
                &mut st,
                AlertKind::DeepHealth,
                "deep",
                share > cfg.max_deep_fallback_share,
                share,
                cfg.max_deep_fallback_share,
                d,
            );
            judged = true;
        }
        let labelled: u64 = mc.labels.iter().map(|c| c.load(Relaxed)).sum();
        if labelled >= cfg.min_labels.max(1) {
            let [a, b, c, d] = &mc.labels;
            let q = crate::monitor::LabelQuality {
                fraud_stopped: a.swap(0, Relaxed),
                fraud_missed: b.swap(0, Relaxed),
                legit_declined: c.swap(0, Relaxed),
                legit_passed: d.swap(0, Relaxed),
            };
            st.report.labels = Some(q);
            if let (Some(r), true) = (q.recall(), cfg.min_label_recall > 0.0) {
                let det = format!(
                    "{} of {} labelled frauds stopped (declined or reviewed)",
                    q.fraud_stopped,
                    q.fraud_stopped + q.fraud_missed
                );
                edge(
                    &mut st,
                    AlertKind::LabelRecall,
                    "labels",
                    r < cfg.min_label_recall,
                    r,
                    cfg.min_label_recall,
                    det,
                );
            }
            judged = true;
        }
        if judged {
            st.report.windows += 1;
        }
        st.report.firing = st.firing.iter().map(|(k, s)| format!("{k}:{s}")).collect();
        st.report.recent.extend(alerts.iter().cloned());
        let n = st.report.recent.len();
        if n > 32 {
            st.report.recent.drain(..n - 32);
        }
        drop(st);
        for a in &alerts {
            if a.firing {
                tracing::warn!(target: "risk::monitor", kind = ?a.kind, subject = %a.subject, value = a.value, threshold = a.threshold, detail = %a.detail, "monitor alert");
            } else {
                tracing::info!(target: "risk::monitor", kind = ?a.kind, subject = %a.subject, value = a.value, "monitor recovered");
            }
            if let Some(sink) = &self.audit {
                let _ = sink.offer(&crate::audit::AuditEvent::Alert(a));
            }
            if let Some(cb) = &mc.callback {
                // A panicking callback must not take the monitors down.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(a)));
            }
            mc.subscribers
                .lock()
                .retain(|s| !matches!(s.try_send(a.clone()), Err(TrySendError::Disconnected(_))));
        }
        alerts
    }

    /// A reference window from recent traffic, scored by the serving fast model.
    fn capture_baseline(&self, mc: &MonitorCtl, st: &mut State) {
        let recent = self.deploy.recent.snapshot(usize::MAX);
        if recent.len() < MIN_REFERENCE.min(self.deploy.cfg.sample_capacity.max(1)) {
            return;
        }
        let r = self.routing.load();
        let scores: Option<Vec<f32>> = r.fast.as_ref().map(|f| {
            recent
                .iter()
                .filter_map(|t| super::tier::guarded_score(&*f.serving.body.scorer, t).ok())
                .map(|s| f.serving.body.calibrated(s).probability)
                .collect()
        });
        let b = Baseline::fit(&self.schema, &recent, scores.as_deref(), mc.cfg.bins);
        mc.sketches.store(Some(Arc::new(Sketches::new(&b))));
        mc.drift_n.store(0, Relaxed);
        st.report.baseline = true;
        tracing::info!(target: "risk::monitor", transactions = recent.len(), "drift baseline captured from recent traffic");
    }

    /// Starts the monitor thread (when an interval is set).
    pub(super) fn start_monitor(me: &Arc<Inner>) -> std::io::Result<()> {
        let Some(mc) = &me.monitor else { return Ok(()) };
        if mc.cfg.interval.is_zero() {
            return Ok(());
        }
        let interval = mc.cfg.interval;
        let weak: Weak<Inner> = Arc::downgrade(me);
        std::thread::Builder::new()
            .name("risk-monitor".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                let Some(inner) = weak.upgrade() else { return };
                if inner.shut.load(Relaxed) {
                    return;
                }
                inner.monitor_tick();
            })?;
        Ok(())
    }
}
