//! Stage 1 of a decision: entity state (velocity features, lists, labels).
//!
//! The state features are written into a per-thread copy of the caller's transaction
//! ([`Scratch`]: the caller's stays untouched; no allocation once the thread has decided
//! once), and every later stage, the audit record and the gray zone see that copy: what
//! the model scored is what was recorded. Outcome-filtered features are entered once the
//! decision is known (stage 6, `decide.rs`).

use super::{Engine, Inner};
use crate::state::{Lists, StateEngine, StateError, StateOutcome};
use crate::txn::{Transaction, TxnId};
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

thread_local! {
    /// The transaction copy the state stage fills (reused across decisions).
    static SCRATCH: Cell<Option<Transaction>> = const { Cell::new(None) };
}

/// The calling thread's reusable copy of a transaction, taken from the thread's slot and
/// put back when dropped. A decision inside a decision (a scorer that decides) finds the
/// slot empty and copies afresh, so neither sees the other's features.
pub(super) struct Scratch(Option<Transaction>);

impl Scratch {
    /// A copy of `txn` (no allocation once this thread has decided on this schema).
    #[inline]
    pub(super) fn of(txn: &Transaction) -> Self {
        let mut slot = SCRATCH.with(Cell::take);
        match slot.as_mut() {
            Some(t) if Arc::ptr_eq(t.features.schema(), txn.features.schema()) => t.copy_from(txn),
            _ => slot = Some(txn.clone()),
        }
        Scratch(slot)
    }
}

impl Deref for Scratch {
    type Target = Transaction;
    fn deref(&self) -> &Transaction {
        self.0.as_ref().expect("set by Scratch::of until dropped")
    }
}

impl DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut Transaction {
        self.0.as_mut().expect("set by Scratch::of until dropped")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // `try_with`: a thread being torn down has no slot left to return it to.
        let _ = SCRATCH.try_with(|c| c.set(self.0.take()));
    }
}

impl Inner {
    /// The transactions of a batch with their state features (rows that fail `check`
    /// are left as they are and fail again, alone).
    pub(super) fn fill_state_batch(
        &self,
        st: &StateEngine,
        txns: &[Transaction],
    ) -> (Vec<Transaction>, Vec<Option<StateOutcome>>) {
        let now_ms = self.clock.unix_ms();
        let mut rows = Vec::with_capacity(txns.len());
        let mut outcomes = Vec::with_capacity(txns.len());
        for t in txns {
            let mut c = t.clone();
            let out = if self.check(t).is_ok() {
                Some(st.fill(&mut c, now_ms))
            } else {
                None
            };
            rows.push(c);
            outcomes.push(out);
        }
        (rows, outcomes)
    }
}

impl Engine {
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
