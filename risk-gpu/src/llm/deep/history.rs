//! Recent transactions per entity, rendered into the deep tier's prompt.

use risk_core::{EntityKey, Transaction};
use std::collections::{HashMap, VecDeque};

/// Recent transactions per entity, bounded in entities and per-entity length.
#[derive(Debug)]
pub(super) struct History {
    pub(super) per_entity: usize,
    pub(super) max_entities: usize,
    pub(super) map: HashMap<EntityKey, VecDeque<Transaction>>,
    pub(super) order: VecDeque<EntityKey>,
}

impl History {
    pub(super) fn observe(&mut self, t: &Transaction) {
        if self.per_entity == 0 {
            return;
        }
        if !self.map.contains_key(&t.entity) {
            while self.map.len() >= self.max_entities.max(1) {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(t.entity);
        }
        let q = self.map.entry(t.entity).or_default();
        if q.iter().any(|h| h.id == t.id) {
            return;
        }
        q.push_front(t.clone());
        q.truncate(self.per_entity);
    }

    /// Newest first, strictly before `t` and not `t` itself.
    pub(super) fn recent(&self, t: &Transaction) -> Vec<Transaction> {
        self.map
            .get(&t.entity)
            .map(|q| {
                q.iter()
                    .filter(|h| h.id != t.id && h.timestamp_ms <= t.timestamp_ms)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}
