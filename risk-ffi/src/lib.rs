//! # risk-ffi
//!
//! The C ABI of **risk** (issue [6]). Conventions (also in the README, "API conventions"):
//!
//! - Every function returns a [`risk_result`] (`RISK_OK` = 0) except `risk_version`,
//!   `risk_last_error` and the `_free` functions. On failure, `risk_last_error()` returns
//!   a message for the calling thread (valid until that thread's next call); outputs are
//!   left untouched: there are no partial successes (a batch reports one code per item).
//! - Every function body runs inside a panic boundary: a Rust panic becomes
//!   `RISK_ERR_PANIC`, never an unwind into the caller.
//! - Pointers are checked for NULL (`RISK_ERR_NULL`); strings must be NUL-terminated UTF-8
//!   (`RISK_ERR_UTF8`); lengths are explicit and bounded.
//! - Handles are opaque, created by `_new` and released by `_free`. Live handles are kept
//!   in a registry, so a freed or foreign pointer is refused with `RISK_ERR_HANDLE` (freeing
//!   twice is harmless), and `_free` waits for calls in flight on that handle to finish.
//! - An engine handle may be shared by any number of threads; a subscription handle too.
//! - Caller-owned buffers: functions writing text take `(buf, cap, *len)`, always set `*len`
//!   to the full size, and return `RISK_ERR_BUFFER_TOO_SMALL` without writing when it does
//!   not fit (`cap` must hold the text plus a NUL).
#![deny(missing_docs)]
#![allow(non_camel_case_types)]

use risk_core::{
    Action, Channel, ConfigError, DecideError, Decision, Engine, Escalation, FallbackCause,
    ReasonCode, ScorerRegistry, Shutdown, Tier, Transaction,
};
use risk_rules::RuleScorer;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// Result codes. Stable numbers: new codes are only ever appended.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum risk_result {
    /// Success.
    RISK_OK = 0,
    /// A required pointer was NULL.
    RISK_ERR_NULL = 1,
    /// A string was not valid UTF-8.
    RISK_ERR_UTF8 = 2,
    /// An argument was out of range (a length, a code, an option).
    RISK_ERR_INVALID = 3,
    /// The configuration could not build an engine (message names the key).
    RISK_ERR_CONFIG = 4,
    /// The transaction was rejected (message names the field).
    RISK_ERR_TRANSACTION = 5,
    /// The engine was shut down.
    RISK_ERR_SHUT_DOWN = 6,
    /// A Rust panic was caught (a bug: please report the message).
    RISK_ERR_PANIC = 7,
    /// The caller's buffer is too small; `*len` says how much is needed.
    RISK_ERR_BUFFER_TOO_SMALL = 8,
    /// Malformed JSON input.
    RISK_ERR_JSON = 9,
    /// A freed, never-created or foreign handle.
    RISK_ERR_HANDLE = 10,
    /// Nothing to return yet (a poll that timed out).
    RISK_ERR_EMPTY = 11,
    /// Rule reload failed or the engine has no rule file; the serving rules are unchanged.
    RISK_ERR_RELOAD = 12,
    /// No more items will ever come (a subscription whose engine has no deep tier or was
    /// shut down): stop polling.
    RISK_ERR_CLOSED = 13,
}

use risk_result::*;

/// Largest input accepted by the JSON and config functions (bytes).
pub const RISK_MAX_INPUT: usize = 1 << 24;
/// Reasons carried by a decision.
pub const RISK_MAX_REASONS: usize = 8;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: impl AsRef<str>) {
    let s = msg.as_ref().replace('\0', " ");
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(s).unwrap_or_default());
}

fn fail(code: risk_result, msg: impl AsRef<str>) -> risk_result {
    set_error(msg);
    code
}

/// Runs `f` inside the panic boundary.
fn guard(f: impl FnOnce() -> risk_result) -> risk_result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(RISK_ERR_PANIC, format!("panic inside risk: {msg}"))
        }
    }
}

/// The library version, NUL-terminated, static.
#[no_mangle]
pub extern "C" fn risk_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The calling thread's last error message (empty if none). Valid until the thread's next
/// call into the library; copy it to keep it.
#[no_mangle]
pub extern "C" fn risk_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

// ----- handles -----

/// An engine (opaque).
#[derive(Debug)]
pub struct risk_engine {
    engine: Engine,
    rules: Option<Arc<RuleScorer>>,
}

/// A subscription to deep-tier verdicts (opaque).
#[derive(Debug)]
pub struct risk_subscription {
    rx: Mutex<std::sync::mpsc::Receiver<risk_core::DeepVerdict>>,
}

/// Handle types. A handle is the address of a small token allocated for it and never
/// freed or reused, so a stale handle can never alias a newer one; the registry maps
/// tokens to reference-counted objects of the right type.
trait Handle: Sized {
    const NAME: &'static str;
    fn wrap(a: Arc<Self>) -> Entry;
    fn unwrap(e: &Entry) -> Option<&Arc<Self>>;
}

enum Entry {
    Engine(Arc<risk_engine>),
    Subscription(Arc<risk_subscription>),
}

impl Handle for risk_engine {
    const NAME: &'static str = "engine";
    fn wrap(a: Arc<Self>) -> Entry {
        Entry::Engine(a)
    }
    fn unwrap(e: &Entry) -> Option<&Arc<Self>> {
        match e {
            Entry::Engine(a) => Some(a),
            Entry::Subscription(_) => None,
        }
    }
}

impl Handle for risk_subscription {
    const NAME: &'static str = "subscription";
    fn wrap(a: Arc<Self>) -> Entry {
        Entry::Subscription(a)
    }
    fn unwrap(e: &Entry) -> Option<&Arc<Self>> {
        match e {
            Entry::Subscription(a) => Some(a),
            Entry::Engine(_) => None,
        }
    }
}

#[derive(Default)]
struct Registry {
    live: HashMap<usize, Entry>,
    /// Every token ever handed out, kept allocated so its address is never reused (boxed:
    /// each token needs its own stable address, which a `Vec<u64>` would move).
    #[allow(clippy::vec_box)]
    tokens: Vec<Box<u64>>,
}

fn registry_lock() -> &'static RwLock<Registry> {
    static R: OnceLock<RwLock<Registry>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(Registry::default()))
}

/// The object behind a live handle of type `T`. The registry lock is held only for the
/// lookup: calls run on their own reference, so a long call (a poll, a drain) never
/// blocks other handles, and `_free` never waits.
fn lookup<T: Handle>(p: *const T) -> Result<Arc<T>, risk_result> {
    if p.is_null() {
        return Err(fail(RISK_ERR_NULL, format!("{} handle is NULL", T::NAME)));
    }
    let g = registry_lock().read().unwrap_or_else(|e| e.into_inner());
    match g.live.get(&(p as usize)) {
        Some(e) => T::unwrap(e).cloned().ok_or_else(|| {
            fail(
                RISK_ERR_HANDLE,
                format!("the handle is not a {} handle", T::NAME),
            )
        }),
        None => Err(fail(
            RISK_ERR_HANDLE,
            format!("not a live {} handle (freed, or never created)", T::NAME),
        )),
    }
}

fn with_handle<T: Handle>(p: *const T, f: impl FnOnce(&T) -> risk_result) -> risk_result {
    match lookup(p) {
        Ok(h) => f(&h),
        Err(r) => r,
    }
}

fn register_handle<T: Handle>(obj: T) -> *mut T {
    let token = Box::new(0u64);
    let addr = &*token as *const u64 as usize;
    let mut g = registry_lock().write().unwrap_or_else(|e| e.into_inner());
    g.tokens.push(token);
    g.live.insert(addr, T::wrap(Arc::new(obj)));
    addr as *mut T
}

/// Removes a live handle of type `T`; `None` if it was not one.
fn unregister_handle<T: Handle>(p: *mut T) -> Option<Arc<T>> {
    if p.is_null() {
        return None;
    }
    let mut g = registry_lock().write().unwrap_or_else(|e| e.into_inner());
    let addr = p as usize;
    T::unwrap(g.live.get(&addr)?)?;
    g.live.remove(&addr).and_then(|e| T::unwrap(&e).cloned())
}

/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, risk_result> {
    // SAFETY: forwarded caller guarantee.
    unsafe { str_arg_at(p, what, usize::MAX) }
}

/// [`str_arg`] for element `index` of an array argument (`usize::MAX`: not an array); the
/// name is only formatted on failure, so the success path allocates nothing.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn str_arg_at<'a>(
    p: *const c_char,
    what: &str,
    index: usize,
) -> Result<&'a str, risk_result> {
    let name = || {
        if index == usize::MAX {
            what.to_owned()
        } else {
            format!("features[{index}].{what}")
        }
    };
    if p.is_null() {
        return Err(fail(RISK_ERR_NULL, format!("{} is NULL", name())));
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(p) };
    if c.to_bytes().len() > RISK_MAX_INPUT {
        return Err(fail(
            RISK_ERR_INVALID,
            format!("{} is longer than {RISK_MAX_INPUT} bytes", name()),
        ));
    }
    c.to_str()
        .map_err(|e| fail(RISK_ERR_UTF8, format!("{} is not UTF-8: {e}", name())))
}

/// # Safety
/// `p` is NULL (then `len` must be 0) or points to `len` readable bytes.
unsafe fn bytes_arg<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a str, risk_result> {
    if p.is_null() && len == 0 {
        return Ok("");
    }
    if p.is_null() {
        return Err(fail(RISK_ERR_NULL, format!("{what} is NULL")));
    }
    if len > RISK_MAX_INPUT {
        return Err(fail(
            RISK_ERR_INVALID,
            format!("{what}: {len} bytes, more than {RISK_MAX_INPUT}"),
        ));
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p`.
    let b = unsafe { std::slice::from_raw_parts(p, len) };
    std::str::from_utf8(b).map_err(|e| fail(RISK_ERR_UTF8, format!("{what} is not UTF-8: {e}")))
}

fn registry(rules: &Arc<Mutex<Option<Arc<RuleScorer>>>>) -> ScorerRegistry {
    let mut reg = ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    let slot = Arc::clone(rules);
    reg.register("rules", move |spec| {
        let s = risk_rules::scorer_from_spec(spec)?;
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&s));
        Ok(s as Arc<dyn risk_core::Scorer>)
    });
    reg
}

fn config_err(e: ConfigError) -> risk_result {
    fail(RISK_ERR_CONFIG, e.to_string())
}

fn new_engine(
    build: impl FnOnce(&ScorerRegistry) -> Result<Engine, ConfigError>,
    out: *mut *mut risk_engine,
) -> risk_result {
    let rules = Arc::new(Mutex::new(None));
    let engine = match build(&registry(&rules)) {
        Ok(e) => e,
        Err(e) => return config_err(e),
    };
    let rules = rules.lock().unwrap_or_else(|e| e.into_inner()).take();
    let p = register_handle(risk_engine { engine, rules });
    // SAFETY: `out` was checked non-NULL by the caller of this function.
    unsafe { *out = p };
    RISK_OK
}

/// Builds an engine from a `risk.toml` file (relative paths inside resolve against its
/// directory). Kinds: `rules`, `xgboost`, `onnx`, `llm`, `constant`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_new_from_path(
    path: *const c_char,
    out: *mut *mut risk_engine,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let path = match unsafe { str_arg(path, "path") } {
            Ok(p) => p.to_owned(),
            Err(e) => return e,
        };
        new_engine(|reg| Engine::from_config_with(&path, reg), out)
    })
}

/// Builds an engine from `risk.toml` text; relative paths resolve against `base_dir`
/// (NULL: the current directory).
///
/// # Safety
/// `toml` points to `len` bytes; `base_dir` is NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_new_from_toml(
    toml: *const u8,
    len: usize,
    base_dir: *const c_char,
    out: *mut *mut risk_engine,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let text = match unsafe { bytes_arg(toml, len, "toml") } {
            Ok(t) => t.to_owned(),
            Err(e) => return e,
        };
        let dir = if base_dir.is_null() {
            ".".to_owned()
        } else {
            // SAFETY: forwarded caller guarantee.
            match unsafe { str_arg(base_dir, "base_dir") } {
                Ok(d) => d.to_owned(),
                Err(e) => return e,
            }
        };
        new_engine(
            |reg| Engine::from_toml_str(&text, Path::new(&dir), Path::new("<risk.toml text>"), reg),
            out,
        )
    })
}

/// Releases an engine (shutting it down, abandoning queued deep work). NULL, or a handle
/// already freed, is ignored. Calls in flight on other threads finish safely (they hold
/// their own reference); later calls with the handle get `RISK_ERR_HANDLE`.
///
/// # Safety
/// `e` is NULL or a pointer returned by `risk_engine_new_*`.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_free(e: *mut risk_engine) {
    let _ = guard(|| {
        if let Some(h) = unregister_handle(e) {
            // Calls in flight keep their own reference and get `RISK_ERR_SHUT_DOWN` for
            // new decisions; the engine is dropped with the last reference.
            h.engine.shutdown(Shutdown::Abandon);
        }
        RISK_OK
    });
}

// ----- transactions and decisions -----

/// One extra feature by schema name: numeric `value`, or a categorical `category`
/// (non-NULL; `value` ignored). A NaN value means missing.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct risk_feature {
    /// Field name (NUL-terminated).
    pub name: *const c_char,
    /// Numeric value (NaN = missing).
    pub value: f64,
    /// Categorical value, or NULL for a numeric field.
    pub category: *const c_char,
}

/// A transaction. `currency` is required; `country` and `channel` may be NULL (unset);
/// `mcc` 0 and `device` 0 mean unset.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct risk_txn {
    /// Transaction id.
    pub id: u64,
    /// Card or account the transaction belongs to.
    pub entity: u64,
    /// Event time, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Amount in `currency`.
    pub amount: f64,
    /// ISO 4217 code, e.g. "USD".
    pub currency: *const c_char,
    /// Merchant category code (0 = unset).
    pub mcc: u16,
    /// ISO 3166-1 alpha-2 code, or NULL.
    pub country: *const c_char,
    /// "pos", "ecom", "atm", "moto" or "app", or NULL.
    pub channel: *const c_char,
    /// Device id (0 = unset).
    pub device: u64,
    /// Extra features.
    pub features: *const risk_feature,
    /// Number of `features` (at most 4096). Values are stored as `f32`.
    pub n_features: usize,
}

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

fn to_c(d: &Decision) -> risk_decision {
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

/// Most features in one `risk_txn`.
pub const RISK_MAX_FEATURES: usize = 4096;
/// Most transactions in one `risk_engine_decide_batch` call.
pub const RISK_MAX_BATCH: usize = 65_536;
const MAX_FEATURES: usize = RISK_MAX_FEATURES;

/// Features are stored as `f32`: a finite value outside its range is an error, not an
/// infinity.
fn to_f32(name: &str, v: f64) -> Result<f32, risk_result> {
    let f = v as f32;
    if v.is_finite() && !f.is_finite() {
        return Err(fail(
            RISK_ERR_TRANSACTION,
            format!("feature {name:?}: {v} is outside the f32 range features are stored in"),
        ));
    }
    Ok(f)
}

/// # Safety
/// `t` points to a valid `risk_txn` whose pointers follow its documentation.
unsafe fn build_txn(e: &Engine, t: &risk_txn) -> Result<Transaction, risk_result> {
    // SAFETY (all `str_arg` calls below): pointers come from the caller's `risk_txn`,
    // documented as NULL or NUL-terminated.
    let currency = unsafe { str_arg(t.currency, "currency") }?;
    let mut b = Transaction::builder(e.schema())
        .id(t.id)
        .entity(t.entity)
        .timestamp_ms(t.timestamp_ms)
        .amount(t.amount, currency);
    if t.mcc != 0 {
        b = b.mcc(t.mcc);
    }
    if !t.country.is_null() {
        b = b.country(unsafe { str_arg(t.country, "country") }?);
    }
    if !t.channel.is_null() {
        let c = unsafe { str_arg(t.channel, "channel") }?;
        let ch = Channel::parse(c).map_err(|err| fail(RISK_ERR_TRANSACTION, err.to_string()))?;
        b = b.channel(ch);
    }
    if t.device != 0 {
        b = b.device(t.device);
    }
    if t.n_features > 0 {
        if t.features.is_null() {
            return Err(fail(RISK_ERR_NULL, "features is NULL with n_features > 0"));
        }
        if t.n_features > MAX_FEATURES {
            return Err(fail(
                RISK_ERR_INVALID,
                format!("n_features {} is more than {MAX_FEATURES}", t.n_features),
            ));
        }
        // SAFETY: the caller guarantees `n_features` readable `risk_feature`s.
        let fs = unsafe { std::slice::from_raw_parts(t.features, t.n_features) };
        for (i, f) in fs.iter().enumerate() {
            let name = unsafe { str_arg_at(f.name, "name", i) }?;
            b = if f.category.is_null() {
                if f.value.is_nan() {
                    b.missing(name)
                } else {
                    b.numeric(name, to_f32(name, f.value)?)
                }
            } else {
                b.categorical(name, unsafe { str_arg_at(f.category, "category", i) }?)
            };
        }
    }
    b.build().map_err(decide_err)
}

fn decide_err(e: DecideError) -> risk_result {
    match e {
        DecideError::ShutDown => fail(RISK_ERR_SHUT_DOWN, e.to_string()),
        _ => fail(RISK_ERR_TRANSACTION, e.to_string()),
    }
}

fn decide_one(e: &Engine, t: &Transaction, out: *mut risk_decision) -> risk_result {
    match e.decide(t) {
        Ok(d) => {
            // SAFETY: `out` was checked non-NULL by the exported function.
            unsafe { *out = to_c(&d) };
            RISK_OK
        }
        Err(err) => decide_err(err),
    }
}

/// Decides one transaction.
///
/// # Safety
/// `e` is a live engine; `txn` points to a valid `risk_txn`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide(
    e: *const risk_engine,
    txn: *const risk_txn,
    out: *mut risk_decision,
) -> risk_result {
    guard(|| {
        if txn.is_null() || out.is_null() {
            return fail(RISK_ERR_NULL, "txn or out is NULL");
        }
        with_handle(e, |h| {
            // SAFETY: `txn` is non-NULL and valid per the caller's guarantee.
            let t = match unsafe { build_txn(&h.engine, &*txn) } {
                Ok(t) => t,
                Err(r) => return r,
            };
            decide_one(&h.engine, &t, out)
        })
    })
}

/// Decides `n` transactions (at most 65,536). `results[i]` gets each item's code and
/// `out[i]` its decision when `RISK_OK`. Returns `RISK_OK` when the batch was processed
/// (items may still have failed), or an error for the call itself.
///
/// # Safety
/// `e` is live; `txns`, `out` and `results` point to `n` elements each.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide_batch(
    e: *const risk_engine,
    txns: *const risk_txn,
    n: usize,
    out: *mut risk_decision,
    results: *mut risk_result,
) -> risk_result {
    guard(|| {
        if n == 0 {
            return with_handle(e, |_| RISK_OK);
        }
        if txns.is_null() || out.is_null() || results.is_null() {
            return fail(RISK_ERR_NULL, "txns, out or results is NULL");
        }
        if n > RISK_MAX_BATCH {
            return fail(
                RISK_ERR_INVALID,
                format!("batch of {n} is more than {RISK_MAX_BATCH}"),
            );
        }
        with_handle(e, |h| {
            // SAFETY: the caller guarantees `n` elements behind each pointer.
            let (ts, os, rs) = unsafe {
                (
                    std::slice::from_raw_parts(txns, n),
                    std::slice::from_raw_parts_mut(out, n),
                    std::slice::from_raw_parts_mut(results, n),
                )
            };
            let mut built = Vec::with_capacity(n);
            let mut idx = Vec::with_capacity(n);
            for (i, t) in ts.iter().enumerate() {
                // SAFETY: each element is a valid `risk_txn` per the caller.
                match unsafe { build_txn(&h.engine, t) } {
                    Ok(t) => {
                        built.push(t);
                        idx.push(i);
                    }
                    Err(r) => rs[i] = r,
                }
            }
            for (i, d) in idx.into_iter().zip(h.engine.decide_batch(&built)) {
                match d {
                    Ok(d) => {
                        os[i] = to_c(&d);
                        rs[i] = RISK_OK;
                    }
                    Err(err) => rs[i] = decide_err(err),
                }
            }
            RISK_OK
        })
    })
}

fn json_txn(e: &Engine, text: &str) -> Result<Transaction, risk_result> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|err| fail(RISK_ERR_JSON, format!("transaction JSON: {err}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| fail(RISK_ERR_JSON, "transaction JSON: not an object"))?;
    let known = [
        "id",
        "entity",
        "timestamp_ms",
        "amount",
        "currency",
        "mcc",
        "country",
        "channel",
        "device",
        "features",
    ];
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(fail(
            RISK_ERR_JSON,
            format!("transaction JSON: unknown key {k:?}"),
        ));
    }
    let u = |k: &str| -> Result<Option<u64>, risk_result> {
        match o.get(k) {
            None => Ok(None),
            Some(x) => x.as_u64().map(Some).ok_or_else(|| {
                fail(
                    RISK_ERR_JSON,
                    format!("transaction JSON: {k} must be a non-negative integer"),
                )
            }),
        }
    };
    let s = |k: &str| -> Result<Option<&str>, risk_result> {
        match o.get(k) {
            None => Ok(None),
            Some(x) => x.as_str().map(Some).ok_or_else(|| {
                fail(
                    RISK_ERR_JSON,
                    format!("transaction JSON: {k} must be a string"),
                )
            }),
        }
    };
    let amount = o
        .get("amount")
        .and_then(|x| x.as_f64())
        .ok_or_else(|| fail(RISK_ERR_JSON, "transaction JSON: amount (number) missing"))?;
    let currency =
        s("currency")?.ok_or_else(|| fail(RISK_ERR_JSON, "transaction JSON: currency missing"))?;
    let mut b = Transaction::builder(e.schema())
        .id(u("id")?.unwrap_or(0))
        .entity(u("entity")?.unwrap_or(0))
        .amount(amount, currency);
    if let Some(t) = o.get("timestamp_ms") {
        b = b.timestamp_ms(t.as_i64().ok_or_else(|| {
            fail(
                RISK_ERR_JSON,
                "transaction JSON: timestamp_ms must be an integer",
            )
        })?);
    }
    if let Some(m) = u("mcc")? {
        let m = u16::try_from(m)
            .map_err(|_| fail(RISK_ERR_TRANSACTION, format!("invalid mcc: {m}")))?;
        b = b.mcc(m);
    }
    if let Some(c) = s("country")? {
        b = b.country(c);
    }
    if let Some(c) = s("channel")? {
        b = b
            .channel(Channel::parse(c).map_err(|err| fail(RISK_ERR_TRANSACTION, err.to_string()))?);
    }
    if let Some(d) = u("device")? {
        b = b.device(d);
    }
    if let Some(f) = o.get("features") {
        let f = f.as_object().ok_or_else(|| {
            fail(
                RISK_ERR_JSON,
                "transaction JSON: features must be an object",
            )
        })?;
        for (k, v) in f {
            b = match v {
                serde_json::Value::Number(n) => {
                    b.numeric(k, to_f32(k, n.as_f64().unwrap_or(f64::NAN))?)
                }
                serde_json::Value::String(c) => b.categorical(k, c),
                serde_json::Value::Null => b.missing(k),
                _ => {
                    return Err(fail(
                        RISK_ERR_JSON,
                        format!(
                            "transaction JSON: features.{k} must be a number, a string or null"
                        ),
                    ))
                }
            };
        }
    }
    b.build().map_err(decide_err)
}

/// Decides a transaction given as JSON: `{"id", "entity", "timestamp_ms", "amount",
/// "currency", "mcc", "country", "channel", "device", "features": {name: number | string |
/// null}}` (`amount` and `currency` required; unknown keys rejected).
///
/// # Safety
/// `e` is live; `json` points to `len` bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_decide_json(
    e: *const risk_engine,
    json: *const u8,
    len: usize,
    out: *mut risk_decision,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        // SAFETY: forwarded caller guarantee.
        let text = match unsafe { bytes_arg(json, len, "json") } {
            Ok(t) => t,
            Err(r) => return r,
        };
        with_handle(e, |h| match json_txn(&h.engine, text) {
            Ok(t) => decide_one(&h.engine, &t, out),
            Err(r) => r,
        })
    })
}

fn write_text(text: &str, buf: *mut c_char, cap: usize, len: *mut usize) -> risk_result {
    if len.is_null() {
        return fail(RISK_ERR_NULL, "len is NULL");
    }
    // SAFETY: `len` is non-NULL and writable per the caller.
    unsafe { *len = text.len() };
    if buf.is_null() || cap < text.len() + 1 {
        return fail(
            RISK_ERR_BUFFER_TOO_SMALL,
            format!("needs {} bytes plus a NUL, buffer holds {cap}", text.len()),
        );
    }
    // SAFETY: `buf` holds at least `cap >= text.len() + 1` writable bytes per the caller.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    RISK_OK
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
    guard(|| match ReasonCode::from_id(code) {
        Some(c) => write_text(c.name(), buf, cap, len),
        None => fail(RISK_ERR_INVALID, format!("no reason code {code}")),
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

/// Every metric as JSON (decisions by action, tier and fallback cause, latency
/// percentiles, gray zone, circuit state).
///
/// # Safety
/// `e` is live; `buf` has `cap` writable bytes (or is NULL to query the size); `len` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_metrics_json(
    e: *const risk_engine,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            let m = h.engine.metrics();
            let lat = |l: &risk_core::LatencySummary| serde_json::json!({"count": l.count, "p50_ns": l.p50_ns, "p99_ns": l.p99_ns, "p999_ns": l.p999_ns, "max_ns": l.max_ns});
            let by = |v: Vec<(&str, u64)>| {
                serde_json::Value::Object(
                    v.into_iter()
                        .map(|(k, c)| (k.to_owned(), c.into()))
                        .collect(),
                )
            };
            let g = &m.gray;
            let j = serde_json::json!({
                "decisions": m.decisions,
                "by_action": by(m.by_action.iter().map(|(a, c)| (a.as_str(), *c)).collect()),
                "by_tier": by(m.by_tier.iter().map(|(t, c)| (t.as_str(), *c)).collect()),
                "fallbacks": by(m.fallbacks.iter().map(|(f, c)| (f.as_str(), *c)).collect()),
                "hard_rule": m.hard_rule,
                "rules_failed": m.rules_failed,
                "late_discarded": m.late_discarded,
                "latency": {
                    "rules": lat(&m.rules_latency),
                    "fast": lat(&m.fast_latency),
                    "total": lat(&m.total_latency),
                    "deep": lat(&m.deep_latency),
                },
                "gray": {
                    "enqueued": g.enqueued, "shed": g.shed, "completed": g.completed,
                    "timed_out": g.timed_out, "failed": g.failed, "saturated": g.saturated,
                    "queue_len": g.queue_len,
                },
                "fast_circuit": m.fast_circuit,
                "fast_workers_busy": m.fast_workers_busy,
            });
            write_text(&j.to_string(), buf, cap, len)
        })
    })
}

/// Reloads the engine's rule file (`[rules.scorer] kind = "rules"`). A file that does not
/// compile leaves the serving rules in place and returns `RISK_ERR_RELOAD`.
///
/// # Safety
/// `e` is live.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_reload_rules(e: *const risk_engine) -> risk_result {
    guard(|| {
        with_handle(e, |h| match &h.rules {
            None => fail(
                RISK_ERR_RELOAD,
                "the engine has no rule file (rules.scorer kind is not \"rules\")",
            ),
            Some(r) => match r.reload() {
                Ok(_) => RISK_OK,
                Err(err) => fail(RISK_ERR_RELOAD, err.to_string()),
            },
        })
    })
}

/// Shuts the engine down: later decides return `RISK_ERR_SHUT_DOWN`. `drain_ms` > 0 waits up
/// to that long for queued deep-tier work; 0 abandons it. Counts go to `drained` and
/// `abandoned` when non-NULL. The handle stays valid until `risk_engine_free`.
///
/// # Safety
/// `e` is live; `drained` and `abandoned` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_shutdown(
    e: *const risk_engine,
    drain_ms: u32,
    drained: *mut u64,
    abandoned: *mut u64,
) -> risk_result {
    guard(|| {
        with_handle(e, |h| {
            let mode = if drain_ms == 0 {
                Shutdown::Abandon
            } else {
                Shutdown::Drain {
                    timeout: Duration::from_millis(drain_ms as u64),
                }
            };
            let r = h.engine.shutdown(mode);
            // SAFETY: each pointer is NULL or writable per the caller.
            unsafe {
                if !drained.is_null() {
                    *drained = r.drained;
                }
                if !abandoned.is_null() {
                    *abandoned = r.abandoned;
                }
            }
            RISK_OK
        })
    })
}

// ----- deep verdicts -----

/// A deep-tier verdict.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct risk_verdict {
    /// Ticket of the decision that enqueued it.
    pub ticket: u64,
    /// Transaction id.
    pub txn: u64,
    /// Entity.
    pub entity: u64,
    /// Deep score.
    pub score: f32,
    /// The fast tier's score that sent it to the gray zone.
    pub fast_score: f32,
    /// 0 model, 1 cached average, 2 global prior.
    pub source: u8,
    /// 0 none, 1 timeout, 2 error, 3 saturated.
    pub failure: u8,
    /// Enqueue to verdict (ns).
    pub latency_ns: u64,
}

/// Subscribes to deep-tier verdicts from now on (bounded channel: a slow reader loses
/// verdicts, counted by the engine, rather than blocking the deep tier).
///
/// # Safety
/// `e` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_engine_subscribe(
    e: *const risk_engine,
    out: *mut *mut risk_subscription,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        let mut rx = None;
        let r = with_handle(e, |h| {
            rx = Some(h.engine.subscribe());
            RISK_OK
        });
        // Registered after `with_handle` released the live set's read lock (registering
        // takes the write lock).
        if let Some(rx) = rx {
            let s = register_handle(risk_subscription { rx: Mutex::new(rx) });
            // SAFETY: `out` is non-NULL and writable per the caller.
            unsafe { *out = s };
        }
        r
    })
}

/// Waits up to `timeout_ms` for the next verdict: `RISK_OK` with `*out` set,
/// `RISK_ERR_EMPTY` when none came in time, or `RISK_ERR_CLOSED` (at once) when none ever
/// will. Several threads may poll one subscription; they take turns.
///
/// # Safety
/// `s` is a live subscription; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn risk_subscription_poll(
    s: *const risk_subscription,
    timeout_ms: u32,
    out: *mut risk_verdict,
) -> risk_result {
    guard(|| {
        if out.is_null() {
            return fail(RISK_ERR_NULL, "out is NULL");
        }
        with_handle(s, |h| {
            let rx = h.rx.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv_timeout(Duration::from_millis(timeout_ms as u64)) {
                Ok(v) => {
                    let c = risk_verdict {
                        ticket: v.ticket.0,
                        txn: v.txn.0,
                        entity: v.entity.0,
                        score: v.score,
                        fast_score: v.fast_score,
                        source: match v.source {
                            risk_core::DeepSource::Model => 0,
                            risk_core::DeepSource::CachedAverage => 1,
                            risk_core::DeepSource::GlobalPrior => 2,
                            _ => 255,
                        },
                        failure: match v.failure {
                            None => 0,
                            Some(risk_core::DeepFailure::Timeout) => 1,
                            Some(risk_core::DeepFailure::Error) => 2,
                            Some(risk_core::DeepFailure::Saturated) => 3,
                            Some(_) => 255,
                        },
                        latency_ns: v.latency.as_nanos() as u64,
                    };
                    // SAFETY: `out` is non-NULL and writable per the caller.
                    unsafe { *out = c };
                    RISK_OK
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    fail(RISK_ERR_EMPTY, "no verdict within the timeout")
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => fail(
                    RISK_ERR_CLOSED,
                    "no more verdicts: the engine has no deep tier or was shut down",
                ),
            }
        })
    })
}

/// Releases a subscription. NULL or an already freed handle is ignored.
///
/// # Safety
/// `s` is NULL or a pointer returned by `risk_engine_subscribe`.
#[no_mangle]
pub unsafe extern "C" fn risk_subscription_free(s: *mut risk_subscription) {
    let _ = guard(|| {
        drop(unregister_handle(s));
        RISK_OK
    });
}
