//! [`Lists`] opened on Redis: the lists' files seed the shared base, then the client and
//! subscriber of [`redis`](super::redis) keep the local tables.

use super::journal;
use super::redis::Shared;
use super::sync::{ListSyncStatus, Seed};
use super::{List, Lists};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::schema::FeatureSchema;
use crate::state::def::{ListDef, RedisConfig};
use crate::state::plan::CKey;
use crate::state::{StateError, StatePrivacy};
use std::sync::Arc;

impl Lists {
    /// [`open`](Self::open) with the entries on Redis, shared by every host (the lists'
    /// files seed them; no journals).
    pub(crate) fn open_shared(
        defs: &[(ListDef, CKey)],
        schema: Arc<FeatureSchema>,
        clock: Arc<dyn Clock>,
        opts: StatePrivacy,
        cfg: &RedisConfig,
    ) -> Result<Self, ConfigError> {
        let bad = |e: StateError| ConfigError::invalid("state.lists", e.to_string());
        let mut me = Self::open(&[], schema, Arc::clone(&clock), None, opts).map_err(bad)?;
        me.lists = defs.iter().map(|(def, key)| List::new(def, *key)).collect();
        let seeds = (0..me.lists.len())
            .map(|i| me.seed(i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        let marker = journal::header(me.pseudo());
        let marker = marker.trim_end().rsplit("keys: ").next().unwrap_or("raw");
        me.shared = Some(Shared::open(
            cfg,
            Arc::clone(&me.lists),
            marker.to_owned(),
            seeds,
            clock,
        )?);
        Ok(me)
    }

    /// List `i`'s file as the base of a shared list (`None`: no file).
    pub(super) fn seed(&self, i: usize) -> Result<Option<Seed>, StateError> {
        let Some(f) = &self.lists[i].def.file else {
            return Ok(None);
        };
        let ops = self.parse_lines(i, f, &Self::read_file(f)?, false)?;
        Ok(Some(Seed::new(&ops)))
    }

    /// How the lists shared through Redis stand (`None`: the lists are this host's).
    pub fn sync_status(&self) -> Option<ListSyncStatus> {
        self.shared.as_ref().map(Shared::status)
    }
}
