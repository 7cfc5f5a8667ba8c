//! Reasons computed once a decision is known to need them ([`Scorer::defers_reasons`]),
//! and on request ([`Engine::explain`]).

use super::tier::panicked;
use super::{Chosen, Engine, Inner};
use crate::action::Action;
use crate::error::DecideError;
use crate::reason::Reasons;
use crate::scorer::{Score, Scorer};
use crate::txn::Transaction;
use std::panic::{catch_unwind, AssertUnwindSafe};

impl Engine {
    /// The fast tier's reasons for `txn`, on request (a case-review tool, a dispute):
    /// the model version `txn` is routed to computes them whatever its decisions carry
    /// (a tree model's exact SHAP contributions). The features are used as given: with
    /// entity state configured, pass the transaction with the state features its
    /// decision saw. `Ok(None)` when no model serves this transaction or its
    /// explanation failed (a panic is caught and logged like a scorer's); `Err` for
    /// bad input or after shutdown, as [`decide`](Self::decide).
    pub fn explain(&self, txn: &Transaction) -> Result<Option<Reasons>, DecideError> {
        self.inner.check(txn)?;
        let routing = self.inner.routing.load();
        let ch = Chosen::pick(&routing, txn);
        Ok(ch.fast.and_then(|m| explain_guarded(&*m.body.scorer, txn)))
    }
}

impl Inner {
    /// The model's reasons for a review or decline decision of a scorer that defers
    /// them; `None` otherwise (an approval, no model score, reasons already given).
    #[inline]
    pub(super) fn deferred_reasons(
        &self,
        ch: &Chosen<'_>,
        txn: &Transaction,
        model: Option<&Score>,
        action: Action,
    ) -> Option<Reasons> {
        if action == Action::Approve {
            return None;
        }
        let (m, s) = (ch.fast?, model?);
        if !s.reasons.is_empty() || !m.body.scorer.defers_reasons() {
            return None;
        }
        explain_guarded(&*m.body.scorer, txn)
    }
}

/// [`Scorer::explain`] with its failures and panics turned into `None`.
#[cold]
fn explain_guarded(scorer: &dyn Scorer, txn: &Transaction) -> Option<Reasons> {
    let mut out = Reasons::new();
    match catch_unwind(AssertUnwindSafe(|| scorer.explain(txn, &mut out))) {
        Ok(Ok(())) => Some(out),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "a fast-tier explanation failed");
            None
        }
        Err(payload) => {
            panicked(&payload);
            None
        }
    }
}
