//! Decisions to C: [`risk_decision`], its numbered codes, and the names of reason and
//! fallback codes.

use crate::error::fail;
use crate::error::risk_result::{self, *};
use crate::export::export;
use risk_core::{Action, Decision, Escalation, FallbackCause, ReasonCode, Tier};
use std::ffi::c_char;

/// Reasons carried by a decision.
pub const RISK_MAX_REASONS: usize = 8;

/// One reason code and its weight.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct risk_reason {
    /// Interned code (name via `risk_reason_name`).
    pub code: u32,
    /// Contribution.
    pub weight: f32,
}

/// `risk_decision::action`: approve.
pub const RISK_ACTION_APPROVE: u8 = 0;
/// `risk_decision::action`: send to manual review.
pub const RISK_ACTION_REVIEW: u8 = 1;
/// `risk_decision::action`: decline.
pub const RISK_ACTION_DECLINE: u8 = 2;
/// `risk_decision::tier`: the rule tier decided (fast tier absent, failed or late, or a hard rule).
pub const RISK_TIER_RULES: u8 = 0;
/// `risk_decision::tier`: the fast model decided.
pub const RISK_TIER_FAST: u8 = 1;
/// `risk_decision::tier`: the configured static action (even the rules failed).
pub const RISK_TIER_STATIC: u8 = 2;
/// `risk_decision::fallback`: none (the fast tier answered, or a hard rule decided).
pub const RISK_FALLBACK_NONE: u8 = 0;
/// Fallback: the fast tier missed its deadline.
pub const RISK_FALLBACK_TIMEOUT: u8 = 1;
/// Fallback: the fast tier returned an error.
pub const RISK_FALLBACK_ERROR: u8 = 2;
/// Fallback: the fast tier panicked (caught).
pub const RISK_FALLBACK_PANIC: u8 = 3;
/// Fallback: NaN or out-of-range score.
pub const RISK_FALLBACK_INVALID_SCORE: u8 = 4;
/// Fallback: the circuit breaker is open.
pub const RISK_FALLBACK_CIRCUIT_OPEN: u8 = 5;
/// Fallback: no fast tier configured.
pub const RISK_FALLBACK_ABSENT: u8 = 6;
/// Fallback: every fast-tier worker was busy.
pub const RISK_FALLBACK_SATURATED: u8 = 7;
/// A tier, fallback, source or failure this header version does not know (a newer
/// library): treat as "other".
pub const RISK_CODE_UNKNOWN: u8 = 255;
/// `risk_decision::escalation`: not sent to the deep tier.
pub const RISK_ESCALATION_NONE: u8 = 0;
/// `risk_decision::escalation`: queued to the deep tier (`ticket` set).
pub const RISK_ESCALATION_ENQUEUED: u8 = 1;
/// `risk_decision::escalation`: in the gray zone but shed (queue full, no deep tier, shutting down).
pub const RISK_ESCALATION_SHED: u8 = 2;

/// A decision, every field of `Decision`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct risk_decision {
    /// Transaction id.
    pub txn: u64,
    /// Entity.
    pub entity: u64,
    /// `RISK_ACTION_*`.
    pub action: u8,
    /// `RISK_TIER_*`.
    pub tier: u8,
    /// 0 none, else 1 timeout, 2 error, 3 panic, 4 invalid score, 5 circuit open, 6 absent,
    /// 7 saturated (`risk_fallback_name`).
    pub fallback: u8,
    /// `RISK_ESCALATION_*`.
    pub escalation: u8,
    /// Whether a hard rule set the action.
    pub hard_rule: bool,
    /// Entity state for this decision: 0 off (no `[state]` or no event time), 1 fresh,
    /// 2 timeout, 3 error, 4 unavailable (2-4: the store failed, the state features are
    /// missing). Sits in what was padding: the layout of every other field is unchanged.
    pub state: u8,
    /// Deep-tier ticket when enqueued, else 0.
    pub ticket: u64,
    /// The combined score the thresholds were applied to (a hard rule sets the action
    /// directly; the score still reports the model's view).
    pub score: f32,
    /// The rule tier's probability (NaN if the rule tier failed).
    pub rule_score: f32,
    /// The fast tier's probability (NaN when it did not answer validly).
    pub model_score: f32,
    /// Threshold shift from deep-tier feedback.
    pub threshold_shift: f32,
    /// Rule tier time (ns).
    pub rules_ns: u64,
    /// Fast tier time (ns).
    pub fast_ns: u64,
    /// Total `decide` time (ns).
    pub total_ns: u64,
    /// Number of valid `reasons`.
    pub n_reasons: u32,
    /// Reasons, deciding tier first.
    pub reasons: [risk_reason; RISK_MAX_REASONS],
}

fn fallback_code(f: Option<FallbackCause>) -> u8 {
    match f {
        None => 0,
        Some(FallbackCause::Timeout) => 1,
        Some(FallbackCause::Error) => 2,
        Some(FallbackCause::Panic) => 3,
        Some(FallbackCause::InvalidScore) => 4,
        Some(FallbackCause::CircuitOpen) => 5,
        Some(FallbackCause::Absent) => 6,
        Some(FallbackCause::Saturated) => 7,
        Some(_) => 255,
    }
}

pub(crate) fn to_c(d: &Decision) -> risk_decision {
    let mut out = risk_decision {
        txn: d.txn.0,
        entity: d.entity.0,
        action: match d.action {
            Action::Approve => RISK_ACTION_APPROVE,
            Action::Review => RISK_ACTION_REVIEW,
            Action::Decline => RISK_ACTION_DECLINE,
        },
        tier: match d.tier {
            Tier::Rules => RISK_TIER_RULES,
            Tier::Fast => RISK_TIER_FAST,
            Tier::Static => RISK_TIER_STATIC,
            _ => 255,
        },
        fallback: fallback_code(d.fallback),
        escalation: match d.escalation {
            Escalation::None => RISK_ESCALATION_NONE,
            Escalation::Enqueued(_) => RISK_ESCALATION_ENQUEUED,
            Escalation::Shed(_) => RISK_ESCALATION_SHED,
        },
        hard_rule: d.hard_rule,
        state: match d.state {
            risk_core::StateStatus::Off => 0,
            risk_core::StateStatus::Fresh => 1,
            risk_core::StateStatus::Degraded(risk_core::StateFault::Timeout) => 2,
            risk_core::StateStatus::Degraded(risk_core::StateFault::Error) => 3,
            risk_core::StateStatus::Degraded(risk_core::StateFault::Unavailable) => 4,
        },
        ticket: match d.escalation {
            Escalation::Enqueued(t) => t.0,
            _ => 0,
        },
        score: d.score,
        rule_score: d.rule_score,
        model_score: d.model_score.unwrap_or(f32::NAN),
        threshold_shift: d.threshold_shift,
        rules_ns: d.timings.rules_ns,
        fast_ns: d.timings.fast_ns,
        total_ns: d.timings.total_ns,
        n_reasons: 0,
        reasons: [risk_reason::default(); RISK_MAX_REASONS],
    };
    for (slot, r) in out.reasons.iter_mut().zip(d.reasons.iter()) {
        *slot = risk_reason {
            code: r.code.id(),
            weight: r.weight,
        };
        out.n_reasons += 1;
    }
    out
}

/// The name of a reason code (e.g. `ACCOUNT_TAKEOVER`, `xgb:amount`).
///
/// # Safety
/// `buf` has `cap` writable bytes (or is NULL to query the size); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_reason_name(
    code: u32,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    export(buf, cap, len, || match ReasonCode::from_id(code) {
        Some(c) => Ok(c.name().to_owned()),
        None => Err(fail(RISK_ERR_INVALID, format!("no reason code {code}"))),
    })
}

/// The name of a fallback code of `risk_decision::fallback` ("none", "timeout", ...), static.
#[no_mangle]
pub extern "C" fn risk_fallback_name(code: u8) -> *const c_char {
    let s: &'static str = match code {
        0 => "none\0",
        1 => "timeout\0",
        2 => "error\0",
        3 => "panic\0",
        4 => "invalid_score\0",
        5 => "circuit_open\0",
        6 => "absent\0",
        7 => "saturated\0",
        _ => "unknown\0",
    };
    s.as_ptr().cast()
}
