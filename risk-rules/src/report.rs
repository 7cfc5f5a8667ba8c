//! The rule tier's report as JSON: what serves, its static checks' warnings, the version
//! history and the reload counters. The C ABI (`risk_engine_rules_json`) and the Python
//! package (`Engine.rules_report`) return this one document.

use crate::scorer::RuleScorer;
use serde_json::{json, Value};

impl RuleScorer {
    /// The report: `file`, `version`, `hash` (16 hex digits), `backend`, `rules` (how
    /// many), `shadow` ([{`id`, `hits`}]: shadow rules' hits since the set was loaded),
    /// `warnings` (`file:line:col: warning: ...`), `versions` (the recorded history,
    /// oldest first: `seq`, `version`, `hash`, `file`, `loaded_at_ms`) and `stats`
    /// {`reloads`, `failures`, `last_error`}.
    pub fn report_json(&self) -> String {
        let set = self.current();
        let st = self.stats();
        let shadow: Vec<Value> = set
            .shadow_hits()
            .into_iter()
            .map(|(id, hits)| json!({ "id": id, "hits": hits }))
            .collect();
        let versions: Vec<Value> = self
            .versions()
            .into_iter()
            .map(|v| {
                json!({
                    "seq": v.seq,
                    "version": v.version,
                    "hash": format!("{:016x}", v.hash),
                    "file": v.file,
                    "loaded_at_ms": v.loaded_at_ms,
                })
            })
            .collect();
        json!({
            "file": set.file(),
            "version": set.version(),
            "hash": format!("{:016x}", set.version_id().hash()),
            "backend": set.backend(),
            "rules": set.rules().len(),
            "shadow": shadow,
            "warnings": set.warnings().iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            "versions": versions,
            "stats": {
                "reloads": st.reloads,
                "failures": st.failures,
                "last_error": st.last_error,
            },
        })
        .to_string()
    }
}
