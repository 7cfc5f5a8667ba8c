//! LightGBM text models (`testdata/models/lgbm/`, written by `tools/lightgbm_models.py`
//! with lightgbm 4.x): margins, probabilities and TreeSHAP equal lightgbm's
//! `predict(raw_score=True)`, `predict()` and `predict(pred_contrib=True)` on rows with
//! NaN, zeros, LightGBM's zero range, infinities and values on either side of the models'
//! own thresholds; what is not read is refused naming it; bad files are refused, never a
//! panic; `risk.toml` names a LightGBM tier.

use crate::common::*;
use risk_core::{Engine, FeatureSchema, Scorer, Transaction};
use risk_gpu::trees::{ModelFamily, TreeError, XgbModel, XgbScorer};
use std::sync::Arc;

fn lgbm() -> std::path::PathBuf {
    models().join("lgbm")
}

fn text(name: &str) -> String {
    std::fs::read_to_string(lgbm().join(name)).unwrap_or_else(|e| panic!("lgbm/{name}: {e}"))
}

struct Reference {
    names: Vec<String>,
    rows: Vec<Vec<f32>>,
    models: serde_json::Value,
}

fn reference() -> Reference {
    let v: serde_json::Value = serde_json::from_str(&text("reference.json")).unwrap();
    Reference {
        names: v["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect(),
        rows: json_rows(&v["rows"]),
        models: v["models"].clone(),
    }
}

const ACCEPTED: [&str; 7] = [
    "binary_nan",
    "binary_zero",
    "xentropy",
    "categorical",
    "regression",
    "poisson",
    "shap_120x6",
];

#[test]
fn lightgbm_models_score_and_explain_as_lightgbm() {
    let r = reference();
    assert!(r.rows.len() >= 300, "{} rows", r.rows.len());
    for name in ACCEPTED {
        let m = XgbModel::from_file(lgbm().join(format!("{name}.txt"))).unwrap();
        assert_eq!(m.family(), ModelFamily::LightGBM);
        assert_eq!(m.num_features(), r.names.len(), "{name}");
        assert_eq!(m.ensemble().feature_names.as_ref(), Some(&r.names));
        let want = &r.models[name];
        let raw = json_f64s(&want["raw"]);
        let prob = json_f64s(&want["prob"]);
        let (mut worst_m, mut worst_p, mut worst_c) = (0f64, 0f64, 0f64);
        let (mut phi, mut phi_rec) = (Vec::new(), Vec::new());
        for (i, x) in r.rows.iter().enumerate() {
            let got = m.margin(x);
            // The SIMD kernel and the scalar traversal agree bit for bit; the walk of the
            // plain trees agrees up to the order of the sum.
            assert_eq!(
                got.to_bits(),
                m.margin_scalar(x).to_bits(),
                "{name} row {i}"
            );
            assert!((got - m.ensemble().margin_walk(x)).abs() < 1e-9);
            worst_m = worst_m.max((got - raw[i]).abs());
            // The output (a probability, or a regression's value: relative).
            worst_p = worst_p.max((m.predict(x) as f64 - prob[i]).abs() / prob[i].abs().max(1.0));
            m.contributions(x, &mut phi);
            m.contributions_recursive(x, &mut phi_rec);
            let c = json_f64s(&want["contrib"][i]);
            assert_eq!(phi.len(), c.len());
            for (k, ((p, q), w)) in phi.iter().zip(&phi_rec).zip(&c).enumerate() {
                assert!(
                    (p - q).abs() < 2e-6,
                    "{name} row {i} feature {k}: {p} vs {q}"
                );
                worst_c = worst_c.max((p - w).abs());
            }
            // Contributions sum to the margin.
            let sum = phi.iter().sum::<f64>();
            assert!((sum - got).abs() < 1e-6, "{name} row {i}: {sum} vs {got}");
        }
        eprintln!(
            "{name}: kernel {}, SHAP {}, max |margin - lightgbm| {worst_m:.2e}, \
             |prob| {worst_p:.2e}, |shap| {worst_c:.2e}",
            m.kernel(),
            m.shap_kernel()
        );
        // Leaf-wise trees deeper than the tables go (17 of binary_nan's 80) are explained
        // by the recursive algorithm, the others by tables.
        assert!(m.has_shap_tables(), "{name}");
        assert!(
            worst_m <= 1e-5,
            "{name}: max |margin - lightgbm| = {worst_m:e}"
        );
        assert!(
            worst_p <= 1e-6,
            "{name}: max |prob - lightgbm| = {worst_p:e}"
        );
        assert!(
            worst_c <= 1e-5,
            "{name}: max |shap - lightgbm| = {worst_c:e}"
        );
        // A batch equals row by row.
        let refs: Vec<&[f32]> = r.rows.iter().map(|x| x.as_slice()).collect();
        let mut out = vec![0f32; refs.len()];
        m.predict_batch(&refs, &mut out);
        for (i, x) in refs.iter().enumerate() {
            assert_eq!(out[i].to_bits(), m.predict(x).to_bits(), "{name} row {i}");
        }
    }
}

#[test]
fn zero_as_missing_sends_lightgbms_zero_range_to_the_default_branch() {
    let m = XgbModel::from_file(lgbm().join("binary_zero.txt")).unwrap();
    let za = &m.ensemble().zero_as_missing;
    // is_foreign (10) is a 0/1 flag that LightGBM gave missing type None; the others Zero.
    assert!(!za.is_empty() && !za.contains(&10), "{za:?}");
    let nan = XgbModel::from_file(lgbm().join("binary_nan.txt")).unwrap();
    assert!(nan.ensemble().zero_as_missing.is_empty());
    // In the zero range, zero, and NaN: the same leaves.
    let r = reference();
    let f = za[0] as usize;
    for x in r.rows.iter().take(40) {
        let mut a = x.clone();
        let mut b = x.clone();
        let mut c = x.clone();
        a[f] = 0.0;
        b[f] = -1e-35;
        c[f] = f32::NAN;
        assert_eq!(m.margin(&a).to_bits(), m.margin(&b).to_bits());
        assert_eq!(m.margin(&a).to_bits(), m.margin(&c).to_bits());
    }
}

#[test]
fn categorical_splits_follow_lightgbms_bitsets() {
    let m = XgbModel::from_file(lgbm().join("categorical.txt")).unwrap();
    let e = m.ensemble();
    assert!(e.has_categorical());
    // The padded layout does not take categorical splits (the subset tables do, but
    // these leaf-wise trees are too deep for them: `trees_xgb_variants.rs` has tables).
    assert_eq!(m.kernel(), "walk");
    // Find a categorical node on `hour` (feature 1) and check LightGBM's rules on it:
    // truncation toward zero, NaN and negatives right, outside the bitset right.
    let (tree, node) = e
        .trees
        .iter()
        .flat_map(|t| t.nodes.iter().map(move |n| (t, n)))
        .find(|(_, n)| !n.is_leaf() && n.cat != risk_gpu::trees::ensemble::NO_CAT)
        .expect("a categorical split");
    let set = &tree.cats[node.cat as usize];
    let member = (0..32 * set.words.len() as u32)
        .find(|c| set.words[*c as usize / 32] >> (c % 32) & 1 == 1)
        .expect("a category in the set") as f32;
    assert!(tree.goes_left(node, member));
    assert!(tree.goes_left(node, member + 0.99));
    assert!(!tree.goes_left(node, f32::NAN));
    assert!(!tree.goes_left(node, -1.0));
    assert!(!tree.goes_left(node, 1e10));
    assert!(!tree.goes_left(node, (32 * set.words.len()) as f32));
    // A feature split both ways is refused (LightGBM never writes it).
    let t = text("categorical.txt");
    let s = t.find("\ndecision_type=").unwrap() + 1;
    let e = s + t[s..].find('\n').unwrap();
    let line = &t[s..e];
    let (i, first_cat) = line["decision_type=".len()..]
        .split(' ')
        .enumerate()
        .find(|(_, d)| d.parse::<i32>().unwrap() & 1 == 1)
        .unwrap();
    let mut parts: Vec<String> = line["decision_type=".len()..]
        .split(' ')
        .map(str::to_owned)
        .collect();
    parts[i] = (first_cat.parse::<i32>().unwrap() & !1).to_string();
    let mixed = t.replacen(line, &format!("decision_type={}", parts.join(" ")), 1);
    match XgbModel::from_lightgbm(mixed.as_bytes()) {
        Err(e) => assert!(e.to_string().contains("missing type"), "{e}"),
        Ok(_) => panic!("a feature split both ways loaded"),
    }
    // A categorical split naming a set the tree does not have.
    let s = t.find("\nnum_cat=").unwrap() + 1;
    let e = s + t[s..].find('\n').unwrap();
    let bad = t.replacen(&t[s..e], "num_cat=0", 1);
    assert!(XgbModel::from_lightgbm(bad.as_bytes()).is_err());
}

#[test]
fn what_is_not_read_is_refused_naming_it() {
    for (file, says) in [
        ("refused_linear.txt", "linear trees"),
        ("refused_sigmoid2.txt", "sigmoid:2"),
        ("refused_multiclassova.txt", "multiclassova"),
        ("refused_reg_sqrt.txt", "reg_sqrt"),
        ("refused_rf.txt", "average_output"),
    ] {
        match XgbModel::from_file(lgbm().join(file)) {
            Err(TreeError::Unsupported(m)) => assert!(m.contains(says), "{file}: {m}"),
            other => panic!("{file}: {other:?}"),
        }
    }
    // XGBoost JSON asked for a LightGBM file: it says what the file is.
    let t = text("xentropy.txt");
    match XgbModel::from_json(t.as_bytes()) {
        Err(TreeError::Format(m)) => assert!(m.contains("LightGBM"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_lightgbm_files_are_refused_never_a_panic() {
    let good = text("binary_nan.txt");
    let load = |t: &str| XgbModel::from_lightgbm(t.as_bytes());
    // Cut anywhere (a line boundary or mid-line): refused.
    let b = good.as_bytes();
    for cut in [5, 60, 300, b.len() / 3, b.len() / 2, b.len() * 9 / 10] {
        let Ok(t) = std::str::from_utf8(&b[..cut]) else {
            continue;
        };
        assert!(load(t).is_err(), "cut at {cut} loaded");
    }
    let cut = good.find("end of trees").unwrap();
    match load(&good[..cut]) {
        Err(TreeError::Format(m)) => assert!(m.contains("truncated"), "{m}"),
        other => panic!("{other:?}"),
    }
    let expect = |t: String, what: &str| match load(&t) {
        Err(e) => assert!(e.to_string().contains(what), "{what}: {e}"),
        Ok(_) => panic!("{what}: loaded"),
    };
    // One value too few in a per-node array, a bad number, a repeated key.
    let first = |key: &str| {
        let s = good.find(&format!("\n{key}=")).unwrap() + 1;
        let e = s + good[s..].find('\n').unwrap();
        (s, e)
    };
    let (s, e) = first("left_child");
    let line = &good[s..e];
    let fewer = line[..line.rfind(' ').unwrap()].to_owned();
    expect(
        good.replacen(line, &fewer, 1),
        "left_child has 29 values, 30 expected",
    );
    expect(
        good.replacen(line, &line.replacen(' ', " x", 1), 1),
        "not a number",
    );
    expect(
        good.replacen(line, &format!("{line}\n{line}"), 1),
        "appears twice",
    );
    // A child pointing back at the root (a cycle), and one out of range.
    let cyc = line.replacen("left_child=3 ", "left_child=0 ", 1);
    assert_ne!(cyc, line);
    expect(good.replacen(line, &cyc, 1), "reached twice");
    expect(
        good.replacen(line, &line.replacen("=3 ", "=-99 ", 1), 1),
        "out of range",
    );
    // A feature beyond max_feature_idx; a NaN threshold; a decision type not written.
    let (s, e) = first("split_feature");
    expect(
        good.replacen(&good[s..e], &good[s..e].replacen("=11 ", "=15 ", 1), 1),
        "feature 15 out of range",
    );
    let (s, e) = first("threshold");
    let nan = format!(
        "threshold=nan {}",
        &good[s..e][good[s..e].find(' ').unwrap() + 1..]
    );
    expect(good.replacen(&good[s..e], &nan, 1), "threshold NaN");
    let (s, e) = first("decision_type");
    expect(
        good.replacen(&good[s..e], &good[s..e].replacen("=2 ", "=99 ", 1), 1),
        "decision_type 99",
    );
    // One feature given two missing types (LightGBM never writes that).
    expect(
        good.replacen(&good[s..e], &good[s..e].replacen("=2 ", "=10 ", 1), 1),
        "missing type",
    );
    // Counts that disagree: feature names, tree_sizes, tree numbers; absurd sizes.
    expect(
        good.replacen("max_feature_idx=14", "max_feature_idx=15", 1),
        "feature_names has 15 values",
    );
    expect(
        good.replacen("tree_sizes=", "tree_sizes=1 ", 1),
        "tree_sizes lists 81 trees",
    );
    expect(
        good.replacen("Tree=1\n", "Tree=7\n", 1),
        "where tree 1 was expected",
    );
    expect(
        good.replacen("num_leaves=31", "num_leaves=99999999999", 1),
        "max",
    );
    expect(good.replacen("version=v4", "version=v9", 1), "v9");
    expect(
        good.replacen("objective=binary sigmoid:1\n", "", 1),
        "objective is missing",
    );
    // Not UTF-8.
    let mut bytes = good.clone().into_bytes();
    bytes[40] = 0xff;
    assert!(matches!(
        XgbModel::from_lightgbm(&bytes),
        Err(TreeError::Format(_))
    ));
}

/// The reference's features as a schema (reversed, so that the model's features are
/// found by name, not by position).
fn schema() -> Arc<FeatureSchema> {
    let mut b = FeatureSchema::builder();
    for n in reference().names.iter().rev() {
        b = b.numeric(n);
    }
    b.build().unwrap()
}

#[test]
fn risk_toml_names_a_lightgbm_tier_and_its_reasons() {
    let s = schema();
    let mut reg = risk_core::ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    let toml = |kind: &str, file: &str| {
        format!(
            "{}[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n[fast.scorer]\n\
             kind = \"{kind}\"\npath = \"lgbm/{file}\"\nexplain_above = 0.0\n",
            s.to_toml()
        )
    };
    let p = std::path::Path::new("risk.toml");
    let e = Engine::from_toml_str(&toml("lightgbm", "binary_nan.txt"), &models(), p, &reg).unwrap();
    let r = reference();
    let m = XgbModel::from_file(lgbm().join("binary_nan.txt")).unwrap();
    let mut t = Transaction::builder(e.schema()).amount(10.0, "USD");
    for (n, v) in r.names.iter().zip(&r.rows[3]).skip(1) {
        t = if v.is_nan() {
            t.missing(n)
        } else {
            t.numeric(n, *v)
        };
    }
    let t = t.build().unwrap();
    let mut x = r.rows[3].clone();
    x[0] = 10.0;
    let d = e.decide(&t).unwrap();
    assert_eq!(d.tier, risk_core::Tier::Fast);
    assert!((d.model_score.unwrap() - m.predict(&x)).abs() < 1e-7);
    assert!(!d.reasons.is_empty());
    assert!(d.reasons.iter().all(|x| x.code.name().starts_with("lgbm:")));
    // The scorer says what it is.
    let sc = XgbScorer::new(Arc::new(m), &s, 0.0, 3).unwrap();
    assert_eq!(sc.info().name, "lightgbm");
    // A LightGBM file under kind = "xgboost" (and the reverse) names the kind it needs.
    let err =
        Engine::from_toml_str(&toml("xgboost", "binary_nan.txt"), &models(), p, &reg).unwrap_err();
    assert!(err.to_string().contains("kind = \"lightgbm\""), "{err}");
    let err = Engine::from_toml_str(
        &toml("lightgbm", "binary_nan.txt").replace("lgbm/binary_nan.txt", "xgb_fraud.json"),
        &models(),
        p,
        &reg,
    )
    .unwrap_err();
    assert!(err.to_string().contains("kind = \"xgboost\""), "{err}");
    // A regression needs the policy's score_transform, and gets it.
    let reg = toml("lightgbm", "regression.txt");
    let err = Engine::from_toml_str(&reg, &models(), p, &reg_registry()).unwrap_err();
    assert!(err.to_string().contains("score_transform"), "{err}");
    let with = format!("{reg}score_transform = \"linear:0:50\"\n");
    let e = Engine::from_toml_str(&with, &models(), p, &reg_registry()).unwrap();
    let m = XgbModel::from_file(lgbm().join("regression.txt")).unwrap();
    let d = e.decide(&t).unwrap();
    let want = (m.predict(&x) as f64 / 50.0).clamp(0.0, 1.0) as f32;
    assert!((d.model_score.unwrap() - want).abs() < 1e-6);
    let bad = format!("{reg}score_transform = \"linear:50:0\"\n");
    let err = Engine::from_toml_str(&bad, &models(), p, &reg_registry()).unwrap_err();
    assert!(err.to_string().contains("score_transform"), "{err}");
    // A binary model takes none.
    let both = format!(
        "{}score_transform = \"clamp\"\n",
        toml("lightgbm", "binary_nan.txt")
    );
    assert!(Engine::from_toml_str(&both, &models(), p, &reg_registry()).is_err());
}

fn reg_registry() -> risk_core::ScorerRegistry {
    let mut reg = risk_core::ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    reg
}

fn fuzz_seeds() -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/lgbm_text");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    assert!(v.len() >= 3, "lgbm_text seeds missing");
    v
}

/// The `lgbm_text` fuzz seeds load (NaN / None / Zero missing types, an `inf` threshold).
#[test]
fn fuzz_seeds_load_and_score() {
    for (p, b) in fuzz_seeds() {
        let m = XgbModel::from_lightgbm(&b).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        for fill in [f32::NAN, -1.0, 0.0, 0.5, 3.0, f32::MAX] {
            let x = vec![fill; m.num_features()];
            let p = m.predict(&x);
            assert!((0.0..=1.0).contains(&p));
        }
    }
}

/// What the fuzz target does, on every test run: 20,000 mutations of the seeds (bytes
/// flipped, lines cut or repeated, numbers swapped for extreme ones) load or are refused
/// with a typed error, and a model that loads scores and explains.
#[test]
fn mutated_lightgbm_files_load_or_are_refused() {
    let seeds = fuzz_seeds();
    let mut s = 0x2545f4914f6cdd1du64;
    let mut next = move |n: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n as u64) as usize
    };
    const SWAP: [&str; 8] = ["-1", "0", "nan", "inf", "-inf", "1e308", "99999999999", "x"];
    let (mut loaded, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let b = &seeds[next(seeds.len())].1;
        let mut m = b.clone();
        match next(4) {
            0 => {
                for _ in 0..1 + next(4) {
                    let i = next(m.len());
                    m[i] = next(256) as u8;
                }
            }
            1 => {
                let text = String::from_utf8_lossy(&m).into_owned();
                let mut lines: Vec<&str> = text.lines().collect();
                let i = next(lines.len());
                if next(2) == 0 {
                    lines.remove(i);
                } else {
                    lines.insert(i, lines[i]);
                }
                m = lines.join("\n").into_bytes();
            }
            _ => {
                // A number in a tree's arrays swapped for another.
                let text = String::from_utf8_lossy(&m).into_owned();
                let nums: Vec<usize> = text
                    .match_indices(' ')
                    .map(|(i, _)| i + 1)
                    .filter(|&i| text.as_bytes().get(i).is_some_and(u8::is_ascii_digit))
                    .collect();
                if nums.is_empty() {
                    continue;
                }
                let at = nums[next(nums.len())];
                let end = at + text[at..].find([' ', '\n']).unwrap_or(text.len() - at);
                m = format!("{}{}{}", &text[..at], SWAP[next(SWAP.len())], &text[end..])
                    .into_bytes();
            }
        }
        match XgbModel::from_lightgbm(&m) {
            Ok(model) => {
                loaded += 1;
                let nf = model.num_features();
                for fill in [f32::NAN, 0.0, 1.0, -1e30, 1e30] {
                    let x = vec![fill; nf];
                    let p = model.predict(&x);
                    assert!((0.0..=1.0).contains(&p));
                    let mut phi = Vec::new();
                    model.contributions(&x, &mut phi);
                    assert_eq!(phi.len(), nf + 1);
                }
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!("mutations: {loaded} loaded, {refused} refused");
    assert!(
        loaded > 1_000 && refused > 1_000,
        "{loaded} loaded, {refused} refused"
    );
}
