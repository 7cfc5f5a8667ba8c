//! An engine for replaying history (a backtest) from a `risk.toml`: the same rules,
//! models, thresholds and entity-state features, with everything that serves or records
//! live traffic left out before anything opens: no audit log (opening one recovers its
//! tail and starts a writer, which a live engine may be doing on the same files), no
//! Kafka forwarder, no deep tier (built and warmed for nothing), no monitor (its thread
//! judges on the wall clock), no rule history or file watcher on any tier (a replay would
//! record versions in the live history and reload mid-run). What [`EngineBuilder::for_replay`]
//! then does keeps entity state off every shared store.

use super::{Engine, EngineBuilder};
use crate::clock::Clock;
use crate::config::{RawFile, ScorerRegistry};
use crate::error::ConfigError;
use std::path::Path;
use std::sync::Arc;

/// Keys of a scorer table that write or watch files: left out of a replay.
const LIVE_SCORER_KEYS: [&str; 3] = ["history_dir", "history_keep", "watch_ms"];

impl Engine {
    /// The builder of a replay engine for `text` (see the module): the file is parsed and
    /// checked as for [`Engine::from_toml_str`] (a bad `[audit]` table is still refused),
    /// then built without its live-only parts, on `clock`.
    pub fn replay_builder_from_toml_str(
        text: &str,
        base_dir: &Path,
        origin: &Path,
        registry: &ScorerRegistry,
        clock: Arc<dyn Clock>,
    ) -> Result<EngineBuilder, ConfigError> {
        let mut raw = RawFile::parse(text, origin)?;
        // Checked as a live engine would check them, then dropped.
        raw.audit_options(base_dir)?;
        raw.kafka_spec()?;
        raw.monitor_config()?;
        raw.audit = None;
        raw.deep = None;
        raw.monitor = None;
        for table in
            std::iter::once(&mut raw.rules.scorer).chain(raw.fast.as_mut().map(|f| &mut f.scorer))
        {
            for k in LIVE_SCORER_KEYS {
                table.remove(k);
            }
        }
        Ok(EngineBuilder::from_raw(&raw, base_dir, registry)?.for_replay(clock))
    }
}
