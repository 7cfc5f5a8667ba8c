//! Native XGBoost scoring and TreeSHAP against xgboost's own outputs.

use crate::common::*;
use risk_core::synth::schema;
use risk_core::{Engine, Scorer, Transaction};
use risk_gpu::trees::{XgbModel, XgbScorer};
use std::sync::Arc;

fn model() -> XgbModel {
    XgbModel::from_file(models().join("xgb_fraud.json")).unwrap()
}

#[test]
fn probabilities_equal_xgboost_on_every_test_row() {
    let r = reference();
    let m = model();
    assert!(m.is_padded());
    kernel_runs(
        "avx2-bytes",
        "probabilities_equal_xgboost_on_every_test_row",
    );
    eprintln!(
        "probabilities_equal_xgboost_on_every_test_row: kernel {} ran",
        m.kernel()
    );
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        m.kernel(),
        if std::arch::is_x86_feature_detected!("avx2") {
            "avx2-bytes"
        } else if std::arch::is_x86_feature_detected!("avx512f") {
            "avx512-top"
        } else {
            "scalar"
        },
        "18 features, 100 trees, depth 6: the byte kernel runs wherever the CPU has AVX2"
    );
    assert_eq!(m.num_features(), r.features);
    let missing = r.x.iter().filter(|v| v.is_nan()).count();
    assert!(
        missing > 1000,
        "the reference rows must include missing values ({missing})"
    );
    let (mut worst_p, mut worst_m) = (0f64, 0f64);
    for i in 0..r.rows {
        let x = &r.x[i * r.features..(i + 1) * r.features];
        let p = m.predict(x) as f64;
        worst_p = worst_p.max((p - r.probs[i] as f64).abs());
        worst_m = worst_m.max((m.margin(x) - r.margins[i] as f64).abs());
        // The SIMD kernel and the scalar traversal agree bit for bit.
        assert_eq!(m.margin(x), m.margin_scalar(x), "row {i}");
        // The padded layout and the plain walk agree.
        let walk = m.ensemble().margin_walk(x);
        assert!(
            (walk - m.margin(x)).abs() < 1e-5,
            "row {i}: walk {walk} vs flat {}",
            m.margin(x)
        );
    }
    assert!(r.rows >= 10_000);
    assert!(worst_p <= 1e-6, "max |p - xgboost| = {worst_p:e}");
    assert!(worst_m <= 1e-4, "max |margin - xgboost| = {worst_m:e}");
}

#[test]
fn batch_equals_single_rows() {
    let r = reference();
    let m = model();
    let rows: Vec<&[f32]> = (0..500)
        .map(|i| &r.x[i * r.features..(i + 1) * r.features])
        .collect();
    let mut out = vec![0f32; rows.len()];
    m.predict_batch(&rows, &mut out);
    for (x, p) in rows.iter().zip(&out) {
        assert!((m.predict(x) - p).abs() <= 1e-6);
    }
}

#[test]
fn tree_shap_equals_xgboost_pred_contribs_and_sums_to_the_margin() {
    let r = reference();
    let m = model();
    let nf = r.features;
    assert!(m.has_shap_tables());
    // The AVX2 credit pass where the CPU has it (required by CI where it does).
    let spread = kernel_runs(
        "avx2-shap",
        "tree_shap_equals_xgboost_pred_contribs_and_sums_to_the_margin",
    );
    assert_eq!(m.shap_kernel(), if spread { "avx2-shap" } else { "scalar" });
    let mut phi = Vec::new();
    let mut rec = Vec::new();
    let mut worst = 0f64;
    for i in 0..r.contrib_rows {
        let x = &r.x[i * nf..(i + 1) * nf];
        m.contributions(x, &mut phi);
        // Tables and the recursive algorithm agree.
        m.contributions_recursive(x, &mut rec);
        for (a, b) in phi.iter().zip(&rec) {
            assert!((a - b).abs() < 2e-6, "row {i}: table {a} vs recursive {b}");
        }
        assert_eq!(phi.len(), nf + 1);
        let want = &r.contribs[i * (nf + 1)..(i + 1) * (nf + 1)];
        for (p, w) in phi.iter().zip(want) {
            worst = worst.max((p - *w as f64).abs());
        }
        let sum: f64 = phi.iter().sum();
        assert!(
            (sum - m.margin(x)).abs() < 1e-4,
            "row {i}: sum {sum} vs margin {}",
            m.margin(x)
        );
    }
    assert!(worst <= 1e-5, "max |phi - pred_contribs| = {worst:e}");
}

#[test]
fn scorer_in_the_engine_explains_high_scores() {
    let s = schema();
    let model = Arc::new(model());
    let scorer = Arc::new(XgbScorer::new(model.clone(), &s, 0.3, 3).unwrap());
    let engine = Engine::builder(s.clone())
        .rules(Arc::new(risk_core::ConstantScorer::new(0.0)))
        .fast(scorer.clone())
        .build()
        .unwrap();
    let r = reference();
    let mut explained = 0;
    for i in 0..2_000 {
        let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
        t.features
            .values_mut()
            .copy_from_slice(&r.x[i * r.features..(i + 1) * r.features]);
        t.amount = t.features.values()[0] as f64;
        let d = engine.decide(&t).unwrap();
        assert_eq!(d.tier, risk_core::Tier::Fast);
        assert!((d.model_score.unwrap() - r.probs[i]).abs() <= 1e-6);
        if d.model_score.unwrap() >= 0.3 {
            explained += 1;
            let reasons: Vec<_> = d
                .reasons
                .iter()
                .filter(|x| x.code.name().starts_with("xgb:"))
                .collect();
            assert!(!reasons.is_empty() && reasons.len() <= 3, "{:?}", d.reasons);
            assert!(reasons.windows(2).all(|w| w[0].weight >= w[1].weight));
        } else {
            assert!(d.reasons.iter().all(|x| !x.code.name().starts_with("xgb:")));
        }
    }
    assert!(explained > 10);
    // Batch through the Scorer equals single.
    let txns: Vec<Transaction> = (0..64)
        .map(|i| {
            let mut t = Transaction::builder(&s).amount(1.0, "USD").build().unwrap();
            t.features
                .values_mut()
                .copy_from_slice(&r.x[i * r.features..(i + 1) * r.features]);
            t
        })
        .collect();
    let refs: Vec<&Transaction> = txns.iter().collect();
    let mut out = Vec::new();
    scorer.score_batch(&refs, &mut out).unwrap();
    for (t, b) in txns.iter().zip(&out) {
        assert!((scorer.score(t).unwrap().probability - b.probability).abs() <= 1e-6);
    }
}

#[test]
fn risk_toml_builds_the_xgboost_tier() {
    let s = schema();
    let mut reg = risk_core::ScorerRegistry::default();
    risk_gpu::register(&mut reg);
    // The same model as JSON and as UBJSON (told apart by content).
    for file in ["xgb_fraud.json", "xgb_fraud.ubj"] {
        let text = format!(
            "{}[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n[fast.scorer]\nkind = \"xgboost\"\npath = \"{file}\"\n",
            s.to_toml()
        );
        let e = Engine::from_toml_str(&text, &models(), std::path::Path::new("risk.toml"), &reg)
            .unwrap();
        let t = Transaction::builder(e.schema())
            .amount(10.0, "USD")
            .build()
            .unwrap();
        assert_eq!(e.decide(&t).unwrap().tier, risk_core::Tier::Fast, "{file}");
        let bad = text.replace(file, "nope.json");
        let err = Engine::from_toml_str(&bad, &models(), std::path::Path::new("risk.toml"), &reg)
            .unwrap_err();
        assert_eq!(err.key(), Some("fast.scorer"));
    }
}

/// Thresholds with ties and signed zeros (few distinct values: the byte kernel's case).
const POOL: [f64; 10] = [-0.0, 0.0, 1.0, -1.0, 0.5, 2.5, 100.0, -3.25, 1e-3, 7.0];

/// Random XGBoost JSON trees (depth up to `depth`, early leaves, features 0..`nf`,
/// thresholds from [`POOL`], both missing directions).
fn synthetic_model(n_trees: usize, depth: usize, nf: usize, seed: u64) -> XgbModel {
    synthetic_model_with(n_trees, depth, nf, seed, &POOL)
}

/// [`synthetic_model`] with thresholds drawn from `pool`.
fn synthetic_model_with(
    n_trees: usize,
    depth: usize,
    nf: usize,
    seed: u64,
    pool: &[f64],
) -> XgbModel {
    let mut s = seed;
    let mut next = move |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    };
    let mut trees = Vec::new();
    for id in 0..n_trees {
        let (mut l, mut r, mut f, mut c, mut d) = (vec![], vec![], vec![], vec![], vec![]);
        // Breadth-first: node i at depth di splits unless at `depth` or by chance.
        let mut queue = vec![0usize];
        let mut depths = vec![0usize];
        let mut i = 0;
        while i < queue.len() {
            let di = depths[i];
            let split = di < depth && (di < 2 || next(5) != 0);
            if split {
                let left = queue.len();
                queue.extend([left, left + 1]);
                depths.extend([di + 1, di + 1]);
                l.push(left as i64);
                r.push(left as i64 + 1);
                f.push(next(nf as u64) as i64);
                c.push(pool[next(pool.len() as u64) as usize]);
            } else {
                l.push(-1);
                r.push(-1);
                f.push(0);
                c.push((next(2001) as f64 - 1000.0) / 997.0);
            }
            d.push(next(2) as i64);
            i += 1;
        }
        let n = l.len();
        // Covers add up (children sum to their parent), as in a trained model: TreeSHAP
        // then sums to the margin. Children come after parents in this order.
        let mut cover = vec![0.0f64; n];
        for i in (0..n).rev() {
            cover[i] = if l[i] < 0 {
                1.0 + next(9) as f64
            } else {
                cover[l[i] as usize] + cover[r[i] as usize]
            };
        }
        trees.push(serde_json::json!({
            "id": id, "left_children": l, "right_children": r, "split_indices": f,
            "split_conditions": c, "default_left": d, "split_type": vec![0; n],
            "sum_hessian": cover, "base_weights": vec![0.0; n],
            "tree_param": {"num_nodes": n.to_string(), "num_feature": nf.to_string(),
                           "num_deleted": "0", "size_leaf_vector": "1"}
        }));
    }
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(models().join("xgb_fraud.json")).unwrap()).unwrap();
    let g = &mut v["learner"]["gradient_booster"]["model"];
    g["gbtree_model_param"]["num_trees"] = n_trees.to_string().into();
    g["tree_info"] = vec![0; n_trees].into();
    g["iteration_indptr"] = (0..=n_trees).collect::<Vec<_>>().into();
    g["trees"] = trees.into();
    v["learner"]["learner_model_param"]["num_feature"] = nf.to_string().into();
    XgbModel::from_json(&serde_json::to_vec(&v).unwrap()).unwrap()
}

/// Models shallower than, as deep as and deeper than the byte kernel's six levels (the
/// deeper ones continue in the scalar traversal), with 3, 12 and 30 features: the
/// kernel, the scalar traversal and the plain walk give the same margins.
#[test]
fn simd_kernels_equal_the_walk_on_synthetic_models() {
    let bytes = kernel_runs(
        "avx2-bytes",
        "simd_kernels_equal_the_walk_on_synthetic_models",
    );
    for (case, &(trees, depth, nf)) in [
        (37, 3, 3),
        (64, 6, 12),
        (70, 7, 30),
        (33, 8, 12),
        (5, 10, 3),
    ]
    .iter()
    .enumerate()
    {
        let m = synthetic_model(trees, depth, nf, 0x1234_5678 + case as u64);
        assert_eq!(m.ensemble().max_depth(), depth);
        assert!(m.has_shap_tables(), "case {case}");
        if bytes {
            assert_eq!(m.kernel(), "avx2-bytes", "case {case}");
        }
        eprintln!(
            "simd_kernels_equal_the_walk_on_synthetic_models: case {case} ran kernel {}",
            m.kernel()
        );
        let mut s = 99u64;
        for r in 0..2_000 {
            let x: Vec<f32> = (0..nf)
                .map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    match (s >> 33) % 10 {
                        0 => f32::NAN,
                        1 => -0.0,
                        2 => 1.0,
                        3 => f32::INFINITY,
                        _ => ((s >> 40) % 4000) as f32 / 400.0 - 5.0,
                    }
                })
                .collect();
            let (a, b) = (m.margin(&x), m.margin_scalar(&x));
            assert_eq!(a, b, "case {case} row {r}: {x:?}");
            let w = m.ensemble().margin_walk(&x);
            assert!((a - w).abs() < 1e-9, "case {case} row {r}: {a} vs walk {w}");
            if r % 20 == 0 {
                // TreeSHAP: the tables (bit pass or state pass) equal the recursion.
                let (mut t, mut rec) = (Vec::new(), Vec::new());
                m.contributions(&x, &mut t);
                m.contributions_recursive(&x, &mut rec);
                for (f, (p, q)) in t.iter().zip(&rec).enumerate() {
                    assert!(
                        (p - q).abs() < 1e-5,
                        "case {case} row {r} feature {f}: tables {p} vs recursive {q}"
                    );
                }
                let sum: f64 = t.iter().sum();
                assert!(
                    (sum - a).abs() < 1e-4,
                    "case {case} row {r}: SHAP sum {sum} vs {a}"
                );
            }
        }
    }
}

/// Models with more distinct thresholds per feature in the top six levels than the byte
/// kernel's ranks hold (254): it refuses them and the AVX-512 kernel runs them where the
/// CPU has AVX-512F (top four levels in float lanes, the rest in the scalar traversal),
/// else the scalar traversal. Margins equal the scalar path bit for bit on rows with
/// missing values, infinities, signed zeros and values at and next to every threshold.
#[test]
fn avx512_kernel_equals_the_scalar_path_on_models_the_byte_kernel_refuses() {
    let test = "avx512_kernel_equals_the_scalar_path_on_models_the_byte_kernel_refuses";
    let runs = kernel_runs("avx512-top", test);
    // 640 distinct thresholds, exact in f32: -40, -39.875, ..., 39.875.
    let pool: Vec<f64> = (0..640).map(|k| k as f64 / 8.0 - 40.0).collect();
    // Depth below, at and past the kernel's four levels; tree counts not a multiple of
    // sixteen; up to the kernel's 32 features and close to its 1,024 trees.
    for (case, &(trees, depth, nf)) in [(300, 3, 2), (201, 6, 5), (1000, 9, 32)].iter().enumerate()
    {
        let m = synthetic_model_with(trees, depth, nf, 0xa5a5 + case as u64, &pool);
        assert_eq!(m.ensemble().max_depth(), depth, "case {case}");
        // Distinct thresholds per feature among the top six levels' splits.
        let mut per_feature = vec![std::collections::BTreeSet::new(); nf];
        for t in &m.ensemble().trees {
            let mut stack = vec![(0usize, 0usize)];
            while let Some((i, d)) = stack.pop() {
                let n = &t.nodes[i];
                if n.is_leaf() || d >= 6 {
                    continue;
                }
                per_feature[n.feature as usize].insert(n.threshold.to_bits());
                stack.push((n.left as usize, d + 1));
                stack.push((n.right as usize, d + 1));
            }
        }
        let most = per_feature.iter().map(|s| s.len()).max().unwrap();
        assert!(most > 254, "case {case}: only {most} distinct thresholds");
        assert_ne!(
            m.kernel(),
            "avx2-bytes",
            "case {case}: the byte kernel must refuse"
        );
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            assert_eq!(m.kernel(), "avx512-top", "case {case}");
        }
        assert_eq!(
            m.kernel(),
            if runs { "avx512-top" } else { "scalar" },
            "case {case}"
        );
        eprintln!("{test}: case {case} ran kernel {}", m.kernel());
        let mut s = 7u64;
        let mut next = move |n: u64| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) % n
        };
        let rows: Vec<Vec<f32>> = (0..3_000)
            .map(|_| {
                (0..nf)
                    .map(|_| {
                        let t = pool[next(pool.len() as u64) as usize] as f32;
                        match next(12) {
                            0 => f32::NAN,
                            1 => f32::INFINITY,
                            2 => f32::NEG_INFINITY,
                            3 => -0.0,
                            4 => t,
                            5 => t.next_up(),
                            6 => t.next_down(),
                            _ => (next(100_000) as f32 / 1000.0) - 50.0,
                        }
                    })
                    .collect()
            })
            .collect();
        for (r, x) in rows.iter().enumerate() {
            let (a, b) = (m.margin(x), m.margin_scalar(x));
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "case {case} row {r}: {a} vs {b}, {x:?}"
            );
            let w = m.ensemble().margin_walk(x);
            assert!((a - w).abs() < 1e-9, "case {case} row {r}: {a} vs walk {w}");
        }
        // The batch path picks the same kernel.
        let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
        let mut out = vec![0f32; refs.len()];
        m.predict_batch(&refs, &mut out);
        for (r, (x, p)) in refs.iter().zip(&out).enumerate() {
            assert_eq!(m.predict(x).to_bits(), p.to_bits(), "case {case} row {r}");
        }
        // TreeSHAP (no byte ranks: the state pass) still equals the recursion.
        for x in rows.iter().step_by(100) {
            let (mut t, mut rec) = (Vec::new(), Vec::new());
            m.contributions(x, &mut t);
            m.contributions_recursive(x, &mut rec);
            for (p, q) in t.iter().zip(&rec) {
                assert!(
                    (p - q).abs() < 1e-5,
                    "case {case}: tables {p} vs recursive {q}"
                );
            }
        }
    }
}
