//! The reference rows the tree fixtures carry (`reference.json` beside the models written
//! by `tools/lightgbm_models.py` and `tools/xgb_variants.py`), read once for a bench.

/// The rows of `path`'s `"rows"`, row-major, and the features a row has (`"nan"`, `"inf"`
/// and `"-inf"` strings are NaN and the infinities).
pub fn read(path: &std::path::Path) -> (usize, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let nf = rows[0].as_array().unwrap().len();
    let x = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter())
        .map(|x| match x.as_str() {
            Some("nan") => f32::NAN,
            Some("inf") => f32::INFINITY,
            Some("-inf") => f32::NEG_INFINITY,
            Some(o) => panic!("{}: a row holds {o:?}", path.display()),
            None => x.as_f64().unwrap() as f32,
        })
        .collect();
    (nf, x)
}
