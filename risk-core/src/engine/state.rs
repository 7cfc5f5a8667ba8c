//! Stage 1 of a decision: entity state (velocity features, lists, labels).
//!
//! The state features are written into a per-thread copy of the caller's transaction
//! (the caller's stays untouched; no allocation once the thread has decided once), and
//! every later stage, the audit record and the gray zone see that copy: what the model
//! scored is what was recorded. Outcome-filtered features are entered once the
//! decision is known.

use super::Engine;
use crate::decision::Decision;
use crate::error::DecideError;
use crate::state::{Lists, StateEngine, StateError};
use crate::txn::{Transaction, TxnId};
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// The transaction copy the state stage fills (reused across decisions).
    static SCRATCH: RefCell<Option<Transaction>> = const { RefCell::new(None) };
}

impl Engine {
    /// Runs `f` on `txn` with its state features computed (the transaction has passed
    /// `check`), then enters the outcome.
    #[inline]
    pub(crate) fn with_state(
        &self,
        st: &StateEngine,
        txn: &Transaction,
        f: impl FnOnce(&Transaction) -> Result<Decision, DecideError>,
    ) -> Result<Decision, DecideError> {
        let now_ms = self.inner.clock.unix_ms();
        let run = |t: &mut Transaction| {
            let out = st.fill(t, now_ms);
            let mut d = f(t);
            if let Ok(d) = &mut d {
                d.state = out.status;
                st.record_outcome(&out, d.action);
                if self.inner.monitor.is_some() {
                    st.note_action(d.txn, d.action);
                }
            }
            d
        };
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut slot) => {
                match slot.as_mut() {
                    Some(t) if Arc::ptr_eq(t.features.schema(), txn.features.schema()) => {
                        t.copy_from(txn)
                    }
                    _ => *slot = Some(txn.clone()),
                }
                run(slot.as_mut().expect("set above"))
            }
            // Re-entered (a scorer deciding inside a decision): a copy of its own.
            Err(_) => run(&mut txn.clone()),
        })
    }

    /// The transactions of a batch with their state features (rows that fail `check`
    /// are left as they are and fail again, alone).
    pub(crate) fn with_state_batch(
        &self,
        st: &StateEngine,
        txns: &[Transaction],
    ) -> (Vec<Transaction>, Vec<Option<crate::state::StateOutcome>>) {
        let now_ms = self.inner.clock.unix_ms();
        let mut rows = Vec::with_capacity(txns.len());
        let mut tickets = Vec::with_capacity(txns.len());
        for t in txns {
            let mut c = t.clone();
            let tk = if self.inner.check(t).is_ok() {
                Some(st.fill(&mut c, now_ms))
            } else {
                None
            };
            rows.push(c);
            tickets.push(tk);
        }
        (rows, tickets)
    }

    /// The engine's entity state (`[state]`), if configured.
    pub fn state(&self) -> Option<&Arc<StateEngine>> {
        self.inner.state.as_ref()
    }

    /// The block / allow lists of `[state.lists]` (`None` without `[state]`).
    pub fn lists(&self) -> Option<&Lists> {
        self.inner.state.as_deref().map(StateEngine::lists)
    }

    /// Reports a transaction's label (a chargeback or a confirmed fraud, `fraud =
    /// true`; `false` clears an earlier `true`), known at `at_ms`: feeds the label
    /// features (`fraud_count`, `fraud_rate`). Returns how many label windows it reached.
    pub fn report_label(&self, txn: TxnId, fraud: bool, at_ms: i64) -> Result<usize, StateError> {
        let Some(st) = &self.inner.state else {
            return Err(StateError::NoState);
        };
        let l = st.report_label_full(txn, fraud, at_ms)?;
        if let (Some(mc), Some(action)) = (&self.inner.monitor, l.action) {
            mc.observe_label(action, fraud, l.prev);
        }
        Ok(l.reached)
    }
}
