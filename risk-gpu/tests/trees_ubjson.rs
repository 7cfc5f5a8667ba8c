//! XGBoost's UBJSON format (`save_model("m.ubj")`): `testdata/models/xgb_fraud.ubj`
//! (`tools/xgb_ubjson.py`: the committed JSON model saved by xgboost 3.2 as UBJSON)
//! scores and explains exactly as xgboost and as the same model read from JSON; bad UBJSON
//! is refused with the byte offset (`risk.toml` naming a `.ubj` model: `trees.rs`).

use crate::common::*;
use risk_gpu::trees::{TreeError, XgbModel};

fn ubj() -> Vec<u8> {
    std::fs::read(models().join("xgb_fraud.ubj")).expect("testdata/models/xgb_fraud.ubj")
}

#[test]
fn a_ubjson_model_scores_and_explains_as_xgboost_and_as_its_json() {
    let r = reference();
    let u = XgbModel::from_file(models().join("xgb_fraud.ubj")).unwrap();
    let j = XgbModel::from_file(models().join("xgb_fraud.json")).unwrap();
    assert_eq!(u.num_features(), r.features);
    assert_eq!(u.ensemble().trees.len(), j.ensemble().trees.len());
    let mut worst = 0f64;
    for i in 0..r.rows {
        let x = &r.x[i * r.features..(i + 1) * r.features];
        // The same floats in both files: the same margins, bit for bit.
        assert_eq!(u.margin(x).to_bits(), j.margin(x).to_bits(), "row {i}");
        worst = worst.max((u.margin(x) - r.margins[i] as f64).abs());
    }
    assert!(worst <= 1e-5, "max |margin - xgboost| = {worst:e}");
    let (mut pu, mut pj) = (Vec::new(), Vec::new());
    for i in 0..r.contrib_rows {
        let x = &r.x[i * r.features..(i + 1) * r.features];
        u.contributions(x, &mut pu);
        j.contributions(x, &mut pj);
        assert_eq!(pu, pj, "row {i}");
        let want = &r.contribs[i * (r.features + 1)..(i + 1) * (r.features + 1)];
        for (p, w) in pu.iter().zip(want) {
            assert!((p - *w as f64).abs() <= 1e-5, "row {i}: {p} vs {w}");
        }
    }
    // Told apart by content: the bytes load through from_bytes too.
    assert_eq!(
        XgbModel::from_bytes(&ubj()).unwrap().ensemble().trees.len(),
        u.ensemble().trees.len()
    );
}

#[test]
fn bad_ubjson_is_refused_with_where_and_why() {
    let b = ubj();
    // Cut anywhere: a typed error naming the byte, never a panic.
    for cut in [1, 2, 9, 100, b.len() / 3, b.len() / 2, b.len() - 1] {
        match XgbModel::from_ubjson(&b[..cut]) {
            Err(TreeError::Format(m)) => assert!(m.contains("UBJSON at byte"), "cut {cut}: {m}"),
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    // A count far beyond the file.
    let mut big = b.clone();
    let at = big
        .windows(4)
        .position(|w| w == b"[$d#")
        .expect("a float array")
        + 4;
    big[at] = b'L';
    big[at + 1..at + 9].copy_from_slice(&(1i64 << 40).to_be_bytes());
    let e = XgbModel::from_ubjson(&big).unwrap_err().to_string();
    assert!(e.contains("length 1099511627776"), "{e}");
    // UBJSON handed to the JSON reader says what it is.
    let e = XgbModel::from_json(&b).unwrap_err().to_string();
    assert!(e.contains("this is UBJSON"), "{e}");
    // A file over the UBJSON bound is refused before it is read into a tree.
    let huge = vec![b'N'; risk_gpu::trees::xgb_json::MAX_UBJSON_FILE + 1];
    assert!(matches!(
        XgbModel::from_ubjson(&huge),
        Err(TreeError::TooLarge(_))
    ));
}

/// The `xgb_ubjson` fuzz seeds (the `xgb_json` seeds saved by xgboost as UBJSON) load and
/// score as their JSON originals.
#[test]
fn fuzz_seeds_load_as_their_json_originals() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let mut n = 0;
    for e in std::fs::read_dir(seeds.join("xgb_ubjson")).unwrap() {
        let p = e.unwrap().path();
        let u = XgbModel::from_ubjson(&std::fs::read(&p).unwrap()).unwrap();
        let json = seeds
            .join("xgb_json")
            .join(p.with_extension("json").file_name().unwrap());
        let j = XgbModel::from_json(&std::fs::read(&json).unwrap()).unwrap();
        for fill in [f32::NAN, -1.0, 0.0, 0.5, 3.0] {
            let x = vec![fill; u.num_features()];
            assert_eq!(u.margin(&x).to_bits(), j.margin(&x).to_bits(), "{p:?}");
        }
        n += 1;
    }
    assert!(n >= 2, "seeds missing");
}
