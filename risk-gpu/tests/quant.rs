//! Quantization (issue [5]): formats against the independent Python reference
//! (`tools/awq_reference.py`), kernels against each other, plans and checkpoints, and AWQ
//! on SmolLM2 against round-to-nearest.

use candle_core::{DType, Device, Tensor};
use risk_gpu::llm::{KvCache, Llama, LlmError, LlmTokenizer};
use risk_gpu::quant::{
    self, awq, eval, AwqGemm, AwqOptions, Int4Weight, Int8Weight, Precision, QLinear, QuantError,
    QuantPlan,
};
use std::collections::HashMap;
use std::sync::OnceLock;

fn reference() -> HashMap<String, Tensor> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/quant/awq_reference.safetensors");
    candle_core::safetensors::load(&p, &Device::Cpu).unwrap()
}

fn vec_f32(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn vec_i32(t: &Tensor) -> Vec<i32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn int4_and_int8_match_the_python_reference_bit_for_bit() {
    let r = reference();
    for (case, group) in [("a", 32), ("b", 64), ("c", 128)] {
        let w = &r[&format!("{case}.w")];
        let (out, inp) = w.dims2().unwrap();
        let ours = Int4Weight::quantize(case, &vec_f32(w), out, inp, group).unwrap();
        let packed = ours.to_awq().unwrap();
        assert_eq!(
            packed.qweight,
            vec_i32(&r[&format!("{case}.qweight")]),
            "{case} qweight"
        );
        assert_eq!(
            packed.qzeros,
            vec_i32(&r[&format!("{case}.qzeros")]),
            "{case} qzeros"
        );
        let scales: Vec<half::f16> = r[&format!("{case}.scales")]
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(packed.scales, scales, "{case} scales");
        // Python's packed tensors, unpacked by us, dequantize exactly to Python's values.
        let theirs = Int4Weight::from_awq(
            case,
            &AwqGemm {
                qweight: vec_i32(&r[&format!("{case}.qweight")]),
                qzeros: vec_i32(&r[&format!("{case}.qzeros")]),
                scales,
                inp,
                out,
                group,
            },
        )
        .unwrap();
        assert_eq!(theirs, ours);
        assert_eq!(
            theirs.dequantize(),
            vec_f32(&r[&format!("{case}.dequant")]),
            "{case}"
        );
        let q8 = Int8Weight::quantize(case, &vec_f32(w), out, inp).unwrap();
        let want_q: Vec<i8> = r[&format!("{case}.int8_q")]
            .to_dtype(DType::I64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as i8)
            .collect();
        assert_eq!(q8.q, want_q, "{case} int8");
        assert_eq!(q8.scales, vec_f32(&r[&format!("{case}.int8_scales")]));
        assert_eq!(
            q8.dequantize(),
            vec_f32(&r[&format!("{case}.int8_dequant")])
        );
    }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn kernels_agree_naive_and_device_path() {
    let dev = Device::Cpu;
    // 1536 rows: several tiles; 576 inputs: SmolLM2's hidden size (groups of 32 and 64).
    let w = (Tensor::randn(0f32, 1.0, (1536, 576), &dev).unwrap() * 0.05).unwrap();
    let x = Tensor::randn(0f32, 1.0, (37, 576), &dev).unwrap();
    let exact = x.matmul(&w.t().unwrap()).unwrap();
    for p in [
        Precision::F16,
        Precision::Bf16,
        Precision::Int8,
        Precision::RtnInt4 { group: 32 },
        Precision::RtnInt4 { group: 64 },
    ] {
        let q = QLinear::quantize("w", &w, p).unwrap();
        let kernel = q.forward(&x).unwrap();
        let full = q.forward_naive(&x).unwrap();
        let device = q.forward_device_path(&x).unwrap();
        assert!(max_abs_diff(&kernel, &full) <= 1e-4, "{p}: kernel vs naive");
        assert!(
            max_abs_diff(&device, &full) <= 1e-4,
            "{p}: device path vs full"
        );
        // Quantization error itself is bounded and ordered by bits.
        let e = max_abs_diff(&full, &exact);
        let bound = match p {
            Precision::F16 | Precision::Bf16 => 0.05,
            Precision::Int8 => 0.1,
            _ => 1.5,
        };
        assert!(e < bound && e > 0.0, "{p}: error {e}");
        assert_eq!(q.bytes(), p.bytes(1536, 576), "{p}");
    }
    assert!(matches!(
        QLinear::quantize("layers.0.q", &w, Precision::RtnInt4 { group: 128 }),
        Err(QuantError::Group {
            inp: 576,
            group: 128,
            ..
        })
    ));
}

fn smollm2() -> &'static Llama {
    static M: OnceLock<Llama> = OnceLock::new();
    M.get_or_init(|| {
        let p = risk_gpu::llm::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
        Llama::from_gguf(p, &Device::Cpu).unwrap()
    })
}

fn topics_tokens() -> Vec<u32> {
    let p = awq::pydoc_topics().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(p).unwrap();
    let tok = LlmTokenizer::from_gguf(risk_gpu::llm::smollm2_gguf().unwrap()).unwrap();
    // The first 60 kB is plenty for these tests.
    let cut = text
        .char_indices()
        .nth(60_000)
        .map_or(text.len(), |(i, _)| i);
    tok.encode(&text[..cut]).unwrap()
}

#[test]
fn plans_on_a_model_name_what_is_wrong() {
    let m = smollm2();
    let err = |plan: &str| {
        m.quantize(&plan.parse::<QuantPlan>().unwrap())
            .unwrap_err()
            .to_string()
    };
    let e = err("layers.0-30=f16");
    assert!(e.contains("layers.0-30") && e.contains("0-29"), "{e}");
    let e = err("layers.2=awq_int4_g64");
    assert!(
        e.contains("layers.2.self_attn.q_proj") && e.contains("calibration"),
        "{e}"
    );
    // 576 inputs: group 128 does not divide them (the error names the tensor).
    let e = err("layers.2=rtn_int4");
    assert!(
        e.contains("model.layers.2.self_attn.q_proj") && e.contains("576"),
        "{e}"
    );
    let e = m
        .quantize(&QuantPlan::from_pairs([("layers.1-3", "f16"), ("layers.3", "int8")]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("layers.3") && e.contains("overlaps"), "{e}");
    let e = awq::calibrate(
        m,
        &"layers.0=awq_int4".parse().unwrap(),
        &[vec![1, 2, 3]],
        &AwqOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("model.layers.0.self_attn.q_proj") && e.contains("group size 128"),
        "{e}"
    );
}

#[test]
fn awq_beats_round_to_nearest_on_smollm2() {
    let m = smollm2();
    let ids = topics_tokens();
    let calib: Vec<Vec<u32>> = ids[..1024].chunks(128).map(<[u32]>::to_vec).collect();
    let held_out: Vec<Vec<u32>> = ids[ids.len() - 512..]
        .chunks(128)
        .map(<[u32]>::to_vec)
        .collect();
    // Four middle layers at INT4 g64: enough to measure, quick enough for a test.
    let awq_plan: QuantPlan = "layers.8-11=awq_int4_g64".parse().unwrap();
    let rtn_plan: QuantPlan = "layers.8-11=rtn_int4_g64".parse().unwrap();
    let opts = AwqOptions {
        grid: 10,
        ..AwqOptions::default()
    };
    let (scaled, report) = awq::calibrate(m, &awq_plan, &calib, &opts).unwrap();
    // GQA (3 KV heads for 9 query heads): no v→o group, so q/k/v, gate/up and down.
    assert_eq!(report.groups.len(), 4 * 3);
    assert!(report.groups.iter().all(|g| g.err_awq <= g.err_rtn));
    assert!(
        report
            .groups
            .iter()
            .any(|g| g.alpha > 0.0 && g.err_awq < 0.9 * g.err_rtn),
        "{:?}",
        report.groups
    );
    assert_ne!(scaled.identity(), m.identity());
    // Scales are folded exactly: the f32 scaled model computes what the original does
    // (clipping aside, which only touches the weights that will be quantized).
    let awq = scaled.quantize(&awq_plan).unwrap();
    let rtn = m.quantize(&rtn_plan).unwrap();
    assert_eq!(awq.base_identity(), m.identity());
    let (mut kl_awq, mut kl_rtn, mut nll_awq, mut nll_rtn, mut n) = (0.0, 0.0, 0.0, 0.0, 0);
    for s in &held_out {
        let r = eval::next_token_log_probs(m, s).unwrap();
        let a = eval::next_token_log_probs(&awq, s).unwrap();
        let b = eval::next_token_log_probs(&rtn, s).unwrap();
        kl_awq += eval::mean_kl(&r, &a).unwrap();
        kl_rtn += eval::mean_kl(&r, &b).unwrap();
        nll_awq += eval::nll(&a, s).unwrap().0;
        let (x, k) = eval::nll(&b, s).unwrap();
        nll_rtn += x;
        n += k;
    }
    let (ppl_awq, ppl_rtn) = ((nll_awq / n as f64).exp(), (nll_rtn / n as f64).exp());
    eprintln!(
        "4 layers g64: KL awq {kl_awq:.5} rtn {kl_rtn:.5}; ppl awq {ppl_awq:.4} rtn {ppl_rtn:.4}"
    );
    assert!(kl_awq < kl_rtn, "KL: awq {kl_awq} vs rtn {kl_rtn}");
    assert!(kl_rtn > 0.0);
}

#[test]
fn checkpoints_round_trip_in_the_autoawq_layout_and_bad_files_are_named() {
    let m = smollm2();
    let tok = LlmTokenizer::from_gguf(risk_gpu::llm::smollm2_gguf().unwrap()).unwrap();
    let plan: QuantPlan = "layers.0-1=f16,layers.2-27=rtn_int4_g64,layers.28-29=bf16"
        .parse()
        .unwrap();
    let q = m.quantize(&plan).unwrap();
    let (blocks, _) = q.weight_bytes();
    let (f32_blocks, _) = m.weight_bytes();
    assert!(blocks * 5 < f32_blocks, "{blocks} vs {f32_blocks}");
    let dir = std::env::temp_dir().join(format!("risk-awq-ckpt-{}", std::process::id()));
    quant::checkpoint::save(&q, Some(&tok), &dir).unwrap();
    let back = Llama::from_safetensors(&dir, &Device::Cpu).unwrap();
    assert_eq!(back.precisions()[0][0], Precision::F16);
    assert_eq!(back.precisions()[29][6], Precision::Bf16);
    assert!(back.precisions()[5].iter().all(|p| p.group() == Some(64)));
    assert_eq!(back.base_identity(), m.identity());
    assert_eq!(back.plan(), q.plan());
    let tokens = tok
        .encode("The card was used twice within a minute at")
        .unwrap();
    let a = q.forward(&tokens, &mut KvCache::default()).unwrap();
    let b = back.forward(&tokens, &mut KvCache::default()).unwrap();
    assert!(max_abs_diff(&a, &b) <= 1e-3, "{}", max_abs_diff(&a, &b));
    // The written tokenizer is the model's.
    let t2 = LlmTokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    assert_eq!(
        t2.encode("chargeback dispute").unwrap(),
        tok.encode("chargeback dispute").unwrap()
    );

    // Another AutoAWQ layout (GEMV) is refused, not misread.
    let cfg_path = dir.join("config.json");
    let cfg_text = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(&cfg_path, cfg_text.replace("\"gemm\"", "\"gemv\"")).unwrap();
    let e = Llama::from_safetensors(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gemv") && e.contains("GEMM"), "{e}");
    std::fs::write(&cfg_path, cfg_text).unwrap();

    // Corrupt files: a truncated qzeros and a missing scales tensor name the tensor.
    let st = dir.join("model.safetensors");
    let mut t = candle_core::safetensors::load(&st, &Device::Cpu).unwrap();
    let name = "model.layers.5.mlp.up_proj.qzeros";
    let z = t.remove(name).unwrap();
    t.insert(name.into(), z.narrow(0, 0, 3).unwrap());
    candle_core::safetensors::save(&t, &st).unwrap();
    let e = Llama::from_safetensors(&dir, &Device::Cpu).unwrap_err();
    assert!(matches!(e, LlmError::Quant(_)), "{e}");
    assert!(e.to_string().contains(name), "{e}");
    t.remove(name);
    t.remove("model.layers.5.mlp.up_proj.scales");
    candle_core::safetensors::save(&t, &st).unwrap();
    let e = Llama::from_safetensors(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model.layers.5.mlp.up_proj.qzeros") && e.contains("missing"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
    // INT8 has no AutoAWQ layout: refused, by name.
    let i8 = m
        .quantize(&"layers.3.mlp.down_proj=int8".parse().unwrap())
        .unwrap();
    let e = quant::checkpoint::save(&i8, None, &dir)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model.layers.3.mlp.down_proj") && e.contains("int8"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
