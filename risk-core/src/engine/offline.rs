//! An engine for replaying history (a backtest) from a `risk.toml`: the same rules,
//! models, thresholds and entity-state features, with everything that serves or records
//! live traffic left out before anything opens: no audit log (opening one recovers its
//! tail and starts a writer, which a live engine may be doing on the same files), no
//! Kafka forwarder, no deep tier unless asked for (`keep_deep`: a backtest of the tiers
//! with the caller waiting for each verdict in event time), no monitor (its thread
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
    /// then built without its live-only parts, on `clock`. `keep_deep` keeps the `[deep]`
    /// tier (its verdicts then move the entities' next decisions through the feedback
    /// path, on the replay's clock).
    pub fn replay_builder_from_toml_str(
        text: &str,
        base_dir: &Path,
        origin: &Path,
        registry: &ScorerRegistry,
        clock: Arc<dyn Clock>,
        keep_deep: bool,
    ) -> Result<EngineBuilder, ConfigError> {
        let mut raw = RawFile::parse(text, origin)?;
        // Checked as a live engine would check them, then dropped.
        raw.audit_options(base_dir)?;
        raw.kafka_spec()?;
        raw.monitor_config()?;
        raw.audit = None;
        if !keep_deep {
            raw.deep = None;
        }
        raw.monitor = None;
        for table in std::iter::once(&mut raw.rules.scorer)
            .chain(raw.fast.as_mut().map(|f| &mut f.scorer))
            .chain(raw.deep.as_mut().map(|d| &mut d.scorer))
        {
            for k in LIVE_SCORER_KEYS {
                table.remove(k);
            }
        }
        let b = EngineBuilder::from_raw(&raw, base_dir, registry)?;
        Ok(if keep_deep {
            b.replay_keeping_deep(clock)
        } else {
            b.for_replay(clock)
        })
    }
}
