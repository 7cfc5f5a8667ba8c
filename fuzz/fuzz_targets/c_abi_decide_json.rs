//! The C ABI's JSON decide path on arbitrary bytes: `risk_engine_decide_json` on one live
//! engine (rules tier from `risk-rules/rules/default.rules`, constant fast tier, built once
//! through `risk_engine_new_from_toml`) returns one of its documented result codes, never
//! `RISK_ERR_PANIC` (and, the handle being live, never NULL/HANDLE/SHUT_DOWN); a decision
//! it returns has in-range codes, and every error leaves a readable `risk_last_error`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_ffi::*;
use std::ffi::CStr;
use std::sync::OnceLock;

const TOML: &str = r#"
[schema]
fields = [
  { name = "amount", kind = "numeric", required = true },
  { name = "currency", kind = "categorical", vocab = ["USD", "GBP", "EUR", "CAD", "BRL", "MXN", "INR", "NGN", "RUB"] },
  { name = "mcc", kind = "categorical", vocab = ["5411", "5812", "5541", "5311", "5999", "4111", "5814", "5732", "5944", "4511", "7011", "5815", "5816", "6011"] },
  { name = "country", kind = "categorical", vocab = ["US", "GB", "DE", "FR", "ES", "IT", "NL", "CA", "BR", "MX", "IN", "NG", "RU", "CN", "JP", "AU"] },
  { name = "channel", kind = "categorical", vocab = ["pos", "ecom", "atm", "moto", "app"] },
  { name = "hour", kind = "numeric", required = false },
  { name = "is_foreign", kind = "numeric", required = false },
  { name = "device_new", kind = "numeric", required = false },
  { name = "txn_count_1h", kind = "numeric", required = false },
  { name = "txn_count_24h", kind = "numeric", required = false },
  { name = "amount_sum_24h", kind = "numeric", required = false },
  { name = "small_count_1h", kind = "numeric", required = false },
  { name = "distinct_countries_24h", kind = "numeric", required = false },
  { name = "secs_since_last", kind = "numeric", required = false },
  { name = "amount_ratio", kind = "numeric", required = false },
  { name = "card_age_days", kind = "numeric", required = false },
  { name = "merchant_txn_count_1h", kind = "numeric", required = false },
  { name = "high_risk_country", kind = "numeric", required = false },
]

[rules.scorer]
kind = "rules"
path = "risk-rules/rules/default.rules"

[fast]
deadline_ms = 50
[fast.scorer]
kind = "constant"
probability = 0.5

[thresholds]
approve_below = 0.3
decline_at = 0.7
"#;

/// The engine handle, created once (as an address: raw pointers are not `Sync`).
fn engine() -> *const risk_engine {
    static E: OnceLock<usize> = OnceLock::new();
    *E.get_or_init(|| {
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/..\0");
        let mut e: *mut risk_engine = std::ptr::null_mut();
        // SAFETY: TOML is `len` bytes, `base` is NUL-terminated, `e` is writable.
        let r = unsafe { risk_engine_new_from_toml(TOML.as_ptr(), TOML.len(), base.as_ptr().cast(), &mut e) };
        assert_eq!(r, risk_result::RISK_OK, "{}", last_error());
        assert!(!e.is_null());
        e as usize
    }) as *const risk_engine
}

fn last_error() -> String {
    // SAFETY: risk_last_error returns a NUL-terminated string valid until the next call on
    // this thread.
    unsafe { CStr::from_ptr(risk_last_error()) }.to_string_lossy().into_owned()
}

fuzz_target!(|data: &[u8]| {
    let e = engine();
    let mut d = risk_decision::default();
    // SAFETY: `e` is live (never freed), `data` is `len` bytes, `d` is writable.
    let r = unsafe { risk_engine_decide_json(e, data.as_ptr(), data.len(), &mut d) };
    use risk_result::*;
    match r {
        RISK_OK => {
            assert!(d.action <= RISK_ACTION_DECLINE, "action {}", d.action);
            assert!(d.tier <= RISK_TIER_STATIC, "tier {}", d.tier);
            assert!(d.escalation <= RISK_ESCALATION_SHED, "escalation {}", d.escalation);
            assert!(d.fallback <= RISK_FALLBACK_SATURATED || d.fallback == RISK_CODE_UNKNOWN);
            assert!(d.n_reasons as usize <= RISK_MAX_REASONS, "n_reasons {}", d.n_reasons);
            assert!(d.score.is_nan() || (0.0..=1.0).contains(&d.score), "score {}", d.score);
        }
        RISK_ERR_UTF8 | RISK_ERR_INVALID | RISK_ERR_JSON | RISK_ERR_TRANSACTION => {
            let _ = last_error();
        }
        RISK_ERR_PANIC => panic!("RISK_ERR_PANIC: {}", last_error()),
        other => panic!("undocumented result for a live engine: {other:?}: {}", last_error()),
    }
});
