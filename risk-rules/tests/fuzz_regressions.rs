//! Every input the fuzzer ever crashed on (`fuzz/regressions/rules_compile/`, one named
//! file each) and the seed corpus (`fuzz/seeds/rules/`) compile or fail with a
//! positioned error, without panicking, and compiled sets agree with the interpreter.

use risk_core::synth::schema;
use risk_rules::{Hits, RuleSet};
use std::path::Path;

fn replay(dir: &str) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let s = schema();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let Ok(src) = std::str::from_utf8(&bytes) else {
            continue;
        };
        match RuleSet::compile(src, &p.display().to_string(), &s) {
            Ok(set) => {
                let mut f = s.features();
                let (mut a, mut b) = (Hits::new(), Hits::new());
                for fill in [f32::NAN, 0.0, 1.0, -1.0, 1e30] {
                    f.values_mut().iter_mut().for_each(|v| *v = fill);
                    assert_eq!(
                        set.evaluate(&f, &mut a),
                        set.evaluate_reference(&f, &mut b),
                        "{}",
                        p.display()
                    );
                }
            }
            Err(e) => assert!(e.line >= 1 && e.col >= 1, "{}", p.display()),
        }
        n += 1;
    }
    n
}

#[test]
fn fuzz_seeds_and_regressions_replay() {
    assert!(replay("fuzz/seeds/rules") >= 100);
    replay("fuzz/regressions/rules_compile");
}
