//! Activation-aware weight quantization (AWQ; Lin et al., 2023,
//! <https://arxiv.org/abs/2306.00978>), calibrated in Rust.
//!
//! A few input channels of each linear layer carry much larger activations than the rest;
//! their weights matter most. AWQ scales those weight columns up by `s` before 4-bit
//! quantization (so they lose less precision) and divides the layer's input by `s` —
//! folded into the preceding RMSNorm weight or the preceding linear's rows, so the
//! forward costs nothing extra. Per scaling group of a block:
//!
//! | group | scale folded into | objective (output compared with f32) |
//! |---|---|---|
//! | q, k, v | `input_layernorm` | q, k, v outputs |
//! | o (only when `v` and `o` shapes allow, i.e. no GQA) | `v_proj` rows | o output |
//! | gate, up | `post_attention_layernorm` | the whole MLP output |
//! | down | `up_proj` rows | down output |
//!
//! `s = mean|x|^α / sqrt(max · min)` per input channel, `α` searched on a grid over
//! `[0, 1)` (`α = 0` is plain round-to-nearest, so the search never does worse than RTN
//! on its objective). Then, optionally, a clipping search (as AutoAWQ's `auto_clip`):
//! per output row and group, the weight range shrunk by up to 50% where that lowers the
//! output error (not for q and k, whose error only matters through attention scores).
//!
//! Inputs come from one f32 forward over the calibration sequences (every block sees the
//! unquantized model's activations, as in AutoAWQ). [`calibrate`] returns an f32 model
//! with the scales folded and clipping applied; [`Llama::quantize`] with an `awq_int4`
//! plan then quantizes it.

use crate::llm::error::LlmError;
use crate::llm::model::Block;
use crate::llm::model::Llama;
use crate::qlinear::error::QuantError;
use crate::qlinear::plan::{Precision, Proj, QuantPlan};
use candle_core::{DType, Tensor};
use std::time::Instant;

/// Calibration settings.
#[derive(Debug, Clone)]
pub struct AwqOptions {
    /// Points of the `α` grid over `[0, 1)` (AutoAWQ: 20).
    pub grid: usize,
    /// Run the clipping search.
    pub clip: bool,
    /// Steps of the clipping grid (ratios `1 − i/clip_grid`, down to `1 − max_shrink`).
    pub clip_grid: usize,
    /// Largest fraction of the range clipping may remove.
    pub max_shrink: f32,
    /// Tokens (evenly sampled from the calibration set) used by the searches; the
    /// activation statistics use every token.
    pub search_tokens: usize,
    /// Tokens used by the clipping search.
    pub clip_tokens: usize,
    /// Print a progress bar on stderr.
    pub progress: bool,
}

impl Default for AwqOptions {
    fn default() -> Self {
        Self {
            grid: 20,
            clip: true,
            clip_grid: 20,
            max_shrink: 0.5,
            search_tokens: 512,
            clip_tokens: 256,
            progress: false,
        }
    }
}

/// What the search found for one scaling group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupResult {
    /// Layer index.
    pub layer: usize,
    /// `qkv`, `o`, `gate_up` or `down`.
    pub group: &'static str,
    /// Chosen `α` (0 = no scaling).
    pub alpha: f32,
    /// Mean squared output error of round-to-nearest (`α = 0`).
    pub err_rtn: f64,
    /// Mean squared output error at the chosen `α`.
    pub err_awq: f64,
}

/// Calibration summary.
#[derive(Debug, Clone, Default)]
pub struct AwqReport {
    /// One entry per searched scaling group.
    pub groups: Vec<GroupResult>,
    /// Calibration tokens.
    pub tokens: usize,
    /// Seconds spent.
    pub seconds: f64,
}

/// Row-major `[out, inp]` f32 values of a block weight.
fn weights(b: &Block, p: Proj) -> Result<(Vec<f32>, usize, usize), LlmError> {
    let w = b.proj(p).dequantize()?;
    let (o, i) = w.dims2()?;
    Ok((w.flatten_all()?.to_vec1::<f32>()?, o, i))
}

/// Round-to-nearest INT4 quantize + dequantize (the "fake quantization" of the search).
fn qdq(w: &[f32], out: usize, inp: usize, group: usize) -> Result<Vec<f32>, LlmError> {
    Ok(
        crate::qlinear::format::Int4Weight::quantize("awq search", w, out, inp, group)?
            .dequantize(),
    )
}

fn matmul_t(x: &Tensor, w: Vec<f32>, out: usize, inp: usize) -> Result<Tensor, LlmError> {
    let w = Tensor::from_vec(w, (out, inp), x.device())?;
    Ok(x.matmul(&w.t()?)?)
}

fn mse(a: &Tensor, b: &Tensor) -> Result<f64, LlmError> {
    let d = (a - b)?.sqr()?;
    Ok(d.mean_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// Evenly spaced rows of `x` (at most `n`).
fn sample_rows(x: &Tensor, n: usize) -> Result<Tensor, LlmError> {
    let rows = x.dim(0)?;
    if rows <= n {
        return Ok(x.clone());
    }
    let idx: Vec<u32> = (0..n).map(|i| (i * rows / n) as u32).collect();
    Ok(x.index_select(&Tensor::new(idx.as_slice(), x.device())?, 0)?)
}

/// Scales `w` columns by `s` (`w[r][c] *= s[c]`).
fn scale_cols(w: &mut [f32], inp: usize, s: &[f32]) {
    for row in w.chunks_exact_mut(inp) {
        for (x, &k) in row.iter_mut().zip(s) {
            *x *= k;
        }
    }
}

/// Maps a group's effective weights (member order) to the output compared with f32.
type Objective<'a> = &'a dyn Fn(&Tensor, Vec<Vec<f32>>) -> Result<Tensor, LlmError>;

/// One member of a scaling group: its weights and the INT4 group size it will be
/// quantized with (`None`: kept at a float precision, so exact in the search).
struct Member {
    w: Vec<f32>,
    out: usize,
    inp: usize,
    group: Option<usize>,
}

/// The α search for one group. `x` are the (sampled) inputs, `mean_abs` the per-channel
/// mean |x| over all tokens, `objective` maps the members' effective weights (in member
/// order) to the output compared with the f32 one. Returns `(best α, s, rtn err, best err)`.
fn search_scales(
    members: &[Member],
    x: &Tensor,
    mean_abs: &[f32],
    grid: usize,
    objective: Objective<'_>,
) -> Result<(f32, Vec<f32>, f64, f64), LlmError> {
    let reference = objective(x, members.iter().map(|m| m.w.clone()).collect())?;
    let mut best = (
        0f32,
        vec![1f32; mean_abs.len()],
        f64::INFINITY,
        f64::INFINITY,
    );
    for step in 0..grid.max(1) {
        let alpha = step as f32 / grid.max(1) as f32;
        let mut s: Vec<f32> = mean_abs.iter().map(|&m| m.max(1e-4).powf(alpha)).collect();
        let (lo, hi) = s
            .iter()
            .fold((f32::INFINITY, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
        let norm = (lo * hi).sqrt();
        s.iter_mut().for_each(|v| *v /= norm);
        let mut eff = Vec::with_capacity(members.len());
        for m in members {
            match m.group {
                None => eff.push(m.w.clone()),
                Some(g) => {
                    let mut w = m.w.clone();
                    scale_cols(&mut w, m.inp, &s);
                    let mut q = qdq(&w, m.out, m.inp, g)?;
                    let inv: Vec<f32> = s.iter().map(|v| 1.0 / v).collect();
                    scale_cols(&mut q, m.inp, &inv);
                    eff.push(q);
                }
            }
        }
        let err = mse(&objective(x, eff)?, &reference)?;
        if step == 0 {
            best.2 = err;
        }
        if err < best.3 {
            best = (alpha, s, best.2, err);
        }
    }
    Ok(best)
}

/// AutoAWQ-style clipping for one weight (already scaled) given its (scaled) inputs:
/// per row and group, the symmetric range `±max|w|·r` with the smallest output error.
fn clip_search(
    w: &mut [f32],
    out: usize,
    inp: usize,
    group: usize,
    x: &Tensor,
    o: &AwqOptions,
) -> Result<(), LlmError> {
    let groups = inp / group;
    let steps = ((o.clip_grid as f32 * o.max_shrink) as usize).max(1);
    let mut wg = vec![0f32; out * group];
    for g in 0..groups {
        let xg = x.narrow(1, g * group, group)?.contiguous()?;
        for r in 0..out {
            wg[r * group..(r + 1) * group]
                .copy_from_slice(&w[r * inp + g * group..r * inp + (g + 1) * group]);
        }
        let reference = matmul_t(&xg, wg.clone(), out, group)?;
        let maxes: Vec<f32> = wg
            .chunks_exact(group)
            .map(|row| row.iter().fold(0f32, |m, v| m.max(v.abs())))
            .collect();
        let mut best_err = vec![f64::INFINITY; out];
        let mut best_ratio = vec![1f32; out];
        for i in 0..steps {
            let ratio = 1.0 - i as f32 / o.clip_grid as f32;
            let mut c = wg.clone();
            for (row, &m) in c.chunks_exact_mut(group).zip(&maxes) {
                let lim = m * ratio;
                row.iter_mut().for_each(|v| *v = v.clamp(-lim, lim));
            }
            let q = qdq(&c, out, group, group)?;
            let y = matmul_t(&xg, q, out, group)?;
            let err: Vec<f32> = (y - &reference)?.sqr()?.sum(0)?.to_vec1()?;
            for r in 0..out {
                if (err[r] as f64) < best_err[r] {
                    best_err[r] = err[r] as f64;
                    best_ratio[r] = ratio;
                }
            }
        }
        for r in 0..out {
            if best_ratio[r] < 1.0 {
                let lim = maxes[r] * best_ratio[r];
                for v in &mut w[r * inp + g * group..r * inp + (g + 1) * group] {
                    *v = v.clamp(-lim, lim);
                }
            }
        }
    }
    Ok(())
}

/// The layer's recorded inputs.
#[derive(Default)]
struct LayerInputs {
    qkv: Option<Tensor>,
    o: Option<Tensor>,
    mlp: Option<Tensor>,
}

/// What a block's calibration needs besides its weights.
struct BlockJob<'a> {
    layer: usize,
    prec: &'a [Precision; 7],
    inputs: LayerInputs,
    x_down: &'a Tensor,
    same_vo: bool,
}

fn mean_abs(x: &Tensor) -> Result<Vec<f32>, LlmError> {
    Ok(x.abs()?.mean(0)?.to_vec1::<f32>()?)
}

/// Searches and folds the scales of one block (`prec`: the plan's row for it).
fn calibrate_block(
    b: &Block,
    job: BlockJob<'_>,
    o: &AwqOptions,
    report: &mut Vec<GroupResult>,
) -> Result<Block, LlmError> {
    let BlockJob {
        layer,
        prec,
        inputs,
        x_down,
        same_vo,
    } = job;
    let awq = |p: Proj| match prec[p as usize] {
        Precision::AwqInt4 { group } => Some(group),
        _ => None,
    };
    let member = |p: Proj| -> Result<Member, LlmError> {
        let (w, out, inp) = weights(b, p)?;
        Ok(Member {
            w,
            out,
            inp,
            group: awq(p),
        })
    };
    let mut nb = b.clone();
    let mut w: std::collections::HashMap<Proj, (Vec<f32>, usize, usize)> = Default::default();
    for p in Proj::ALL {
        w.insert(p, weights(b, p)?);
    }
    // Inputs as the (possibly) rescaled weights will see them, for clipping.
    let mut clip_inputs: Vec<(Proj, Tensor)> = Vec::new();
    let mut run_group = |name: &'static str,
                         projs: &[Proj],
                         x_all: &Tensor,
                         objective: Objective<'_>|
     -> Result<Option<Vec<f32>>, LlmError> {
        if !projs.iter().any(|&p| awq(p).is_some()) {
            return Ok(None);
        }
        let members = projs
            .iter()
            .map(|&p| member(p))
            .collect::<Result<Vec<_>, _>>()?;
        let stats = mean_abs(x_all)?;
        let x = sample_rows(x_all, o.search_tokens)?;
        let (alpha, s, err_rtn, err_awq) = search_scales(&members, &x, &stats, o.grid, objective)?;
        report.push(GroupResult {
            layer,
            group: name,
            alpha,
            err_rtn,
            err_awq,
        });
        Ok(Some(s))
    };
    let x_qkv = inputs
        .qkv
        .as_ref()
        .ok_or_else(|| LlmError::Format("no q/k/v input recorded".into()))?;
    let x_o = inputs
        .o
        .as_ref()
        .ok_or_else(|| LlmError::Format("no o input recorded".into()))?;
    let x_mlp = inputs
        .mlp
        .as_ref()
        .ok_or_else(|| LlmError::Format("no mlp input recorded".into()))?;

    // q, k, v: outputs concatenated.
    let cat_outputs = |x: &Tensor, ws: Vec<Vec<f32>>| -> Result<Tensor, LlmError> {
        let mut outs = Vec::new();
        for (m, wv) in [Proj::Q, Proj::K, Proj::V].iter().zip(ws) {
            let (_, out, inp) = w[m];
            outs.push(matmul_t(x, wv, out, inp)?);
        }
        Ok(Tensor::cat(&outs, 1)?)
    };
    let s_qkv = run_group("qkv", &[Proj::Q, Proj::K, Proj::V], x_qkv, &cat_outputs)?;
    // o, folded into v's rows (only without grouped-query attention).
    let single = |p: Proj| {
        let (_, out, inp) = w[&p];
        move |x: &Tensor, mut ws: Vec<Vec<f32>>| -> Result<Tensor, LlmError> {
            matmul_t(x, ws.remove(0), out, inp)
        }
    };
    let s_o = if same_vo {
        run_group("o", &[Proj::O], x_o, &single(Proj::O))?
    } else {
        None
    };
    // gate, up: the whole MLP output, down in f32.
    let (down_w, dout, dinp) = w[&Proj::Down].clone();
    let down_t = Tensor::from_vec(down_w, (dout, dinp), x_mlp.device())?;
    let mlp = |x: &Tensor, ws: Vec<Vec<f32>>| -> Result<Tensor, LlmError> {
        let mut it = ws.into_iter();
        let (_, go, gi) = w[&Proj::Gate];
        let g = matmul_t(x, it.next().expect("gate"), go, gi)?;
        let u = matmul_t(x, it.next().expect("up"), go, gi)?;
        Ok((g.silu()? * u)?.matmul(&down_t.t()?)?)
    };
    let s_mlp = run_group("gate_up", &[Proj::Gate, Proj::Up], x_mlp, &mlp)?;
    let s_down = run_group("down", &[Proj::Down], x_down, &single(Proj::Down))?;

    // Fold: previous op divided by s, consumers' columns multiplied by s.
    let dev = x_qkv.device().clone();
    let div_norm = |n: &Tensor, s: &[f32]| -> Result<Tensor, LlmError> {
        let s = Tensor::new(s, &dev)?;
        Ok(n.div(&s)?)
    };
    let div_rows = |w: &mut [f32], inp: usize, s: &[f32]| {
        for (row, &k) in w.chunks_exact_mut(inp).zip(s) {
            row.iter_mut().for_each(|v| *v /= k);
        }
    };
    let mut inputs_for = |p: Proj, x: &Tensor, s: &Option<Vec<f32>>| -> Result<(), LlmError> {
        let x = sample_rows(x, o.clip_tokens)?;
        let x = match s {
            Some(s) => x.broadcast_div(&Tensor::new(s.as_slice(), &dev)?)?,
            None => x,
        };
        clip_inputs.push((p, x));
        Ok(())
    };
    if let Some(s) = &s_qkv {
        nb.attn_norm = div_norm(&b.attn_norm, s)?;
        for p in [Proj::Q, Proj::K, Proj::V] {
            let e = w.get_mut(&p).expect("weight");
            scale_cols(&mut e.0, e.2, s);
        }
    }
    inputs_for(Proj::V, x_qkv, &s_qkv)?;
    if let Some(s) = &s_o {
        let v = w.get_mut(&Proj::V).expect("v");
        div_rows(&mut v.0, v.2, s);
        let e = w.get_mut(&Proj::O).expect("o");
        scale_cols(&mut e.0, e.2, s);
    }
    inputs_for(Proj::O, x_o, &s_o)?;
    if let Some(s) = &s_mlp {
        nb.ffn_norm = div_norm(&b.ffn_norm, s)?;
        for p in [Proj::Gate, Proj::Up] {
            let e = w.get_mut(&p).expect("weight");
            scale_cols(&mut e.0, e.2, s);
        }
    }
    inputs_for(Proj::Gate, x_mlp, &s_mlp)?;
    inputs_for(Proj::Up, x_mlp, &s_mlp)?;
    if let Some(s) = &s_down {
        let u = w.get_mut(&Proj::Up).expect("up");
        div_rows(&mut u.0, u.2, s);
        let e = w.get_mut(&Proj::Down).expect("down");
        scale_cols(&mut e.0, e.2, s);
    }
    inputs_for(Proj::Down, x_down, &s_down)?;
    if o.clip {
        for (p, x) in &clip_inputs {
            if let Some(g) = awq(*p) {
                let e = w.get_mut(p).expect("weight");
                clip_search(&mut e.0, e.1, e.2, g, x, o)?;
            }
        }
    }
    for p in Proj::ALL {
        let (v, out, inp) = w.remove(&p).expect("weight");
        *nb.proj_mut(p) =
            crate::qlinear::linear::QLinear::f32(Tensor::from_vec(v, (out, inp), &dev)?)?;
        nb.awq[p as usize] = awq(p);
    }
    Ok(nb)
}

/// Where CPython's `pydoc_data/topics.py` is (English prose shipped with Python: the
/// calibration and held-out text that needs no download), found through `python3`'s
/// import system without importing it.
pub fn pydoc_topics() -> Result<std::path::PathBuf, String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('pydoc_data.topics'); print(s.origin if s else '')",
        ])
        .output()
        .map_err(|e| format!("cannot run python3 to find pydoc_data/topics.py: {e}"))?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if p.is_empty() || !std::path::Path::new(&p).exists() {
        return Err("python3 has no pydoc_data/topics.py (a full CPython install has it)".into());
    }
    Ok(p.into())
}

/// Calibrates AWQ for every `awq_int4` projection of `plan` on `seqs` (token sequences,
/// run packed in one f32 forward) and returns the model with scales folded and clipping
/// applied, still in f32 (quantize it with [`Llama::quantize`] and the same plan), plus
/// what each search found. The returned model's identity names the calibration.
pub fn calibrate(
    model: &Llama,
    plan: &QuantPlan,
    seqs: &[Vec<u32>],
    o: &AwqOptions,
) -> Result<(Llama, AwqReport), LlmError> {
    let cfg = model.config().clone();
    let r = plan.resolve(cfg.layers, model.tied)?;
    if seqs.is_empty() || seqs.iter().any(|s| s.is_empty()) {
        return Err(LlmError::Request(
            "AWQ calibration needs non-empty sequences".into(),
        ));
    }
    if let Some((l, p, g)) = r.layers.iter().enumerate().find_map(|(l, row)| {
        Proj::ALL.iter().find_map(|&p| {
            let prec = row[p as usize];
            let (_, inp) = model.blocks[l].proj(p).dims();
            prec.group().filter(|g| inp % g != 0).map(|g| (l, p, g))
        })
    }) {
        return Err(QuantError::Group {
            tensor: format!("model.layers.{l}.{}", p.hf_name()),
            inp: model.blocks[l].proj(p).dims().1,
            group: g,
        }
        .into());
    }
    let start = Instant::now();
    let same_vo = cfg.heads == cfg.kv_heads;
    let todo: Vec<usize> = (0..cfg.layers)
        .filter(|&l| {
            r.layers[l]
                .iter()
                .any(|p| matches!(p, Precision::AwqInt4 { .. }))
        })
        .collect();
    let mut out = model.clone();
    let mut report = AwqReport {
        tokens: seqs.iter().map(Vec::len).sum(),
        ..Default::default()
    };
    let mut cur = LayerInputs::default();
    let mut done = 0usize;
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let mut tap = |layer: usize, p: Proj, x: &Tensor| -> Result<(), LlmError> {
        if !todo.contains(&layer) {
            return Ok(());
        }
        match p {
            Proj::Q => cur.qkv = Some(x.clone()),
            Proj::O => cur.o = Some(x.clone()),
            Proj::Gate => cur.mlp = Some(x.clone()),
            _ => {
                let job = BlockJob {
                    layer,
                    prec: &r.layers[layer],
                    inputs: std::mem::take(&mut cur),
                    x_down: x,
                    same_vo,
                };
                out.blocks[layer] =
                    calibrate_block(&model.blocks[layer], job, o, &mut report.groups)?;
                done += 1;
                if o.progress {
                    let width = 30;
                    let filled = done * width / todo.len().max(1);
                    eprint!(
                        "\r[awq] [{}{}] {done}/{} layers  {:.0}s ",
                        "#".repeat(filled),
                        " ".repeat(width - filled),
                        todo.len(),
                        start.elapsed().as_secs_f64()
                    );
                    if done == todo.len() {
                        eprintln!();
                    }
                }
            }
        }
        Ok(())
    };
    model.forward_taps(&refs, &mut tap)?;
    report.seconds = start.elapsed().as_secs_f64();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for s in seqs {
        for &t in s {
            h = (h ^ t as u64).wrapping_mul(0x100_0000_01b3);
        }
        h = h.rotate_left(7);
    }
    out.identity = format!(
        "{} awq[{plan}; {} tokens {h:016x}; grid {} clip {}]",
        model.identity(),
        report.tokens,
        o.grid,
        o.clip
    );
    Ok((out, report))
}
