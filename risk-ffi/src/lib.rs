//! # risk-ffi
//!
//! The C ABI of **risk** (issue [6]). Conventions (also in the README, "API conventions"):
//!
//! - Every function returns a [`risk_result`] (`RISK_OK` = 0) except `risk_version`,
//!   `risk_last_error`, `risk_fallback_name` and the `_free` functions. On failure, `risk_last_error()` returns
//!   a message for the calling thread (valid until that thread's next call); outputs are
//!   left untouched: there are no partial successes (a batch reports one code per item).
//! - Every function body runs inside a panic boundary: a Rust panic becomes
//!   `RISK_ERR_PANIC`, never an unwind into the caller.
//! - Pointers are checked for NULL (`RISK_ERR_NULL`); strings must be NUL-terminated UTF-8
//!   (`RISK_ERR_UTF8`); lengths are explicit and bounded.
//! - Handles are opaque, created by `_new` (or `risk_engine_subscribe`) and released by
//!   `_free`. A handle is an id, not an address (never dereference it): ids are never
//!   reused, and only live handles are registered, so a freed, never-created or wrong-type
//!   handle is refused with `RISK_ERR_HANDLE` and freeing twice is harmless.
//! - `_free` does not wait for calls in flight on that handle: they hold their own
//!   reference and finish (a decision not yet started on a freed engine gets
//!   `RISK_ERR_SHUT_DOWN`); calls made after `_free` returns get `RISK_ERR_HANDLE`.
//! - An engine handle may be shared by any number of threads; a subscription handle too:
//!   each verdict goes to one poller, and `timeout_ms` bounds every poller's wait.
//! - Caller-owned buffers: functions writing text take `(buf, cap, *len)`, always set `*len`
//!   to the full size, and return `RISK_ERR_BUFFER_TOO_SMALL` without writing when it does
//!   not fit (`cap` must hold the text plus a NUL).
#![deny(missing_docs)]
#![allow(non_camel_case_types)]

// cbindgen writes the header in the order it reads items, so this order is the header's.
// Result codes, the thread's last error, the panic boundary.
mod error;
// C strings, byte lengths and caller-owned output buffers.
mod args;
// `risk_decision` and its codes.
mod decision;
// `risk_txn` / `risk_feature` to `Transaction`.
mod txn;
// The registry of live handles.
mod handle;
// The body of every function writing text to `(buf, cap, *len)`.
mod export;
// The engine handle: new, decide, batch, reload, shutdown, free.
mod engine;
// `risk_engine_decide_json`.
mod json;
// `risk_engine_metrics_json`.
mod metrics;
// Deep-tier verdict subscriptions.
mod subscription;
// The audit trail: query a log directory, flush and stats of the engine's log.
mod audit;
// Model lifecycle: deploy, status, promote, rollback.
mod deploy;
// Health and the per-tier kill switch.
mod health;
// Monitors and drills.
mod observe;
// Rule versions, rollback, shadow hits, explain.
mod rules;
/// Entity state: labels, lists, snapshots.
mod state;

pub use args::RISK_MAX_INPUT;
pub use audit::{
    risk_audit_query_json, risk_audit_verify_json, risk_engine_audit_flush,
    risk_engine_audit_stats_json,
};
pub use decision::{
    risk_decision, risk_fallback_name, risk_reason, risk_reason_name, RISK_ACTION_APPROVE,
    RISK_ACTION_DECLINE, RISK_ACTION_REVIEW, RISK_CODE_UNKNOWN, RISK_ESCALATION_ENQUEUED,
    RISK_ESCALATION_NONE, RISK_ESCALATION_SHED, RISK_FALLBACK_ABSENT, RISK_FALLBACK_CIRCUIT_OPEN,
    RISK_FALLBACK_ERROR, RISK_FALLBACK_INVALID_SCORE, RISK_FALLBACK_NONE, RISK_FALLBACK_PANIC,
    RISK_FALLBACK_SATURATED, RISK_FALLBACK_TIMEOUT, RISK_MAX_REASONS, RISK_TIER_FAST,
    RISK_TIER_RULES, RISK_TIER_STATIC,
};
pub use deploy::{
    risk_engine_deploy, risk_engine_deploy_status_json, risk_engine_deploy_tick,
    risk_engine_promote, risk_engine_rollback,
};
pub use engine::{
    risk_engine, risk_engine_decide, risk_engine_decide_batch, risk_engine_free,
    risk_engine_new_from_path, risk_engine_new_from_toml, risk_engine_reload_rules,
    risk_engine_shutdown, RISK_MAX_BATCH,
};
pub use error::{risk_last_error, risk_result, risk_version};
pub use health::{risk_engine_force_open, risk_engine_health_json};
pub use json::risk_engine_decide_json;
pub use metrics::{risk_engine_metrics_json, risk_engine_metrics_text};
pub use observe::{
    risk_engine_drill, risk_engine_drill_report_json, risk_engine_monitor_json,
    risk_engine_monitor_tick,
};
pub use rules::{risk_engine_rules_explain, risk_engine_rules_json, risk_engine_rules_rollback};
pub use state::{
    risk_engine_list_add, risk_engine_list_contains, risk_engine_list_remove,
    risk_engine_lists_reload, risk_engine_report_label, risk_engine_state_json,
    risk_engine_state_snapshot,
};
pub use subscription::{
    risk_engine_subscribe, risk_subscription, risk_subscription_free, risk_subscription_poll,
    risk_verdict,
};
pub use txn::{risk_feature, risk_txn, RISK_MAX_FEATURES};
