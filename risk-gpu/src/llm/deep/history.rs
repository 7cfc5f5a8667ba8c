//! Recent transactions per entity, rendered into the deep tier's prompt.
//!
//! Only transactions of a known entity are kept: a transaction without one
//! ([`EntityKey::NONE`]) has no history and enters none, so strangers never share a prompt.
//! Each entity's history is bounded in transactions and in bytes of prompt text (its free
//! text fields, as rendered, fenced, into the prompt): the oldest go first.

use super::super::prompt::fenced_len;
use risk_core::{EntityKey, Transaction};
use std::collections::{HashMap, VecDeque};

/// Recent transactions per entity, bounded in entities, per-entity length and bytes.
#[derive(Debug)]
pub(super) struct History {
    pub(super) per_entity: usize,
    /// Most bytes of free text (as fenced into the prompt) kept per entity.
    pub(super) per_entity_bytes: usize,
    pub(super) max_entities: usize,
    pub(super) map: HashMap<EntityKey, VecDeque<Transaction>>,
    pub(super) order: VecDeque<EntityKey>,
}

/// The prompt bytes a history entry can bring: a line's fixed part plus its free text.
pub(super) fn entry_bytes(t: &Transaction) -> usize {
    64 + t.text.iter().map(|(_, v)| fenced_len(v)).sum::<usize>()
}

impl History {
    pub(super) fn observe(&mut self, t: &Transaction) {
        if self.per_entity == 0 || t.entity == EntityKey::NONE {
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
        let mut bytes: usize = q.iter().map(entry_bytes).sum();
        while bytes > self.per_entity_bytes {
            match q.pop_back() {
                Some(old) => bytes -= entry_bytes(&old),
                None => break,
            }
        }
    }

    /// Newest first, strictly before `t` and not `t` itself; nothing without an entity.
    pub(super) fn recent(&self, t: &Transaction) -> Vec<Transaction> {
        if t.entity == EntityKey::NONE {
            return Vec::new();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use risk_core::FeatureSchema;

    fn history(per_entity: usize, bytes: usize) -> History {
        History {
            per_entity,
            per_entity_bytes: bytes,
            max_entities: 100,
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn txn(id: u64, entity: u64, text: &str) -> Transaction {
        let s = FeatureSchema::builder()
            .numeric_required("amount")
            .build()
            .unwrap();
        let mut b = Transaction::builder(&s)
            .id(id)
            .amount(5.0, "USD")
            .timestamp_ms(id as i64 * 60_000);
        if entity != 0 {
            b = b.entity(entity);
        }
        if !text.is_empty() {
            b = b.text("memo", text);
        }
        b.build().unwrap()
    }

    #[test]
    fn transactions_without_an_entity_have_no_history_and_enter_none() {
        let mut h = history(4, 4096);
        h.observe(&txn(1, 0, "stranger one"));
        h.observe(&txn(2, 0, "stranger two"));
        assert!(h.map.is_empty(), "nothing kept for entity 0");
        assert!(h.recent(&txn(3, 0, "")).is_empty());
        h.observe(&txn(4, 9, "mine"));
        assert!(h.recent(&txn(5, 0, "")).is_empty());
        assert_eq!(h.recent(&txn(5, 9, "")).len(), 1);
    }

    #[test]
    fn history_is_bounded_in_bytes_oldest_first() {
        let memo = "m".repeat(200);
        let each = entry_bytes(&txn(1, 7, &memo));
        assert_eq!(
            each,
            64 + crate::llm::prompt::MAX_FENCED_CHARS + 5,
            "capped text"
        );
        let mut h = history(100, 3 * each);
        for id in 1..=10 {
            h.observe(&txn(id, 7, &memo));
        }
        let ids: Vec<u64> = h.recent(&txn(11, 7, "")).iter().map(|t| t.id.0).collect();
        assert_eq!(ids, [10, 9, 8], "newest kept, oldest evicted");
        // A transaction larger than the bound on its own keeps nothing.
        let mut h = history(100, 100);
        h.observe(&txn(1, 7, &memo));
        assert!(h.recent(&txn(2, 7, "")).is_empty());
    }
}
