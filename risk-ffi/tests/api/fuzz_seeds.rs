//! Replays the committed inputs of the `c_abi_decide_json` fuzz target
//! (`fuzz/seeds/txn_json/`, and `fuzz/regressions/c_abi_decide_json/` once a crash is kept):
//! every one is answered with a documented result code, never `RISK_ERR_PANIC`.

use crate::*;
use risk_ffi::risk_result::*;
use std::path::Path;

#[test]
fn fuzz_seeds_and_regressions_replay_through_decide_json() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let e = engine(&minimal(), Path::new(".")).unwrap_or_else(|(r, m)| panic!("{r:?}: {m}"));
    let mut n = 0;
    for dir in ["seeds/txn_json", "regressions/c_abi_decide_json"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir)) else {
            assert_ne!(dir, "seeds/txn_json", "the seed dir is committed");
            continue;
        };
        for entry in entries {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            let mut d = risk_decision::default();
            // SAFETY: `bytes` is `len` readable bytes, `d` is writable, `e` is live.
            let r = unsafe { risk_engine_decide_json(e, bytes.as_ptr(), bytes.len(), &mut d) };
            assert!(
                matches!(
                    r,
                    RISK_OK
                        | RISK_ERR_JSON
                        | RISK_ERR_TRANSACTION
                        | RISK_ERR_UTF8
                        | RISK_ERR_INVALID
                ),
                "{}: {r:?} {}",
                p.display(),
                last_error()
            );
            n += 1;
        }
    }
    assert!(n >= 3, "{n} inputs replayed");
    // SAFETY: `e` is live and freed once.
    unsafe { risk_engine_free(e) };
}
