//! AutoAWQ tensors in a checkpoint: `<name>.qweight` / `.qzeros` / `.scales` read as INT4
//! weights, and the `"risk"` record [`crate::quant::checkpoint::save`] writes into
//! `config.json`.

use crate::llm::error::LlmError;
use crate::qlinear::error::QuantError;
use crate::qlinear::format::{AwqGemm, Int4Weight};
use candle_core::{DType, Tensor};
use std::collections::HashMap;

fn shape_err(tensor: &str, reason: String) -> LlmError {
    QuantError::Shape {
        tensor: tensor.to_owned(),
        reason,
    }
    .into()
}

/// Removes `<name>.qweight` / `.qzeros` / `.scales` from `all` and reads them as INT4
/// weights (`None` when `<name>.qweight` is absent). The group size is `inp / rows of
/// scales`; `group_hint` (config.json's `quantization_config.group_size`) must agree.
pub(crate) fn take_awq(
    all: &mut HashMap<String, Tensor>,
    name: &str,
    group_hint: Option<usize>,
) -> Result<Option<Int4Weight>, LlmError> {
    let qn = format!("{name}.qweight");
    let Some(qweight) = all.remove(&qn) else {
        return Ok(None);
    };
    let mut take = |suffix: &str| {
        let n = format!("{name}.{suffix}");
        all.remove(&n)
            .ok_or_else(|| shape_err(&n, "missing (AutoAWQ tensors come in threes)".into()))
    };
    let qzeros = take("qzeros")?;
    let scales = take("scales")?;
    let dims2 = |n: &str, t: &Tensor| -> Result<(usize, usize), LlmError> {
        t.dims2().map_err(|_| {
            shape_err(
                &format!("{name}.{n}"),
                format!("rank {} (need 2)", t.rank()),
            )
        })
    };
    let (inp, words) = dims2("qweight", &qweight)?;
    let (groups, out) = dims2("scales", &scales)?;
    if qweight.dtype() != DType::I32 || qzeros.dtype() != DType::I32 {
        return Err(shape_err(
            &qn,
            format!(
                "qweight {:?} / qzeros {:?}: both must be int32",
                qweight.dtype(),
                qzeros.dtype()
            ),
        ));
    }
    if groups == 0 || inp % groups != 0 || out != words * 8 {
        return Err(shape_err(
            &format!("{name}.scales"),
            format!("shape [{groups}, {out}] does not fit qweight [{inp}, {words}]"),
        ));
    }
    if qzeros.dims() != [groups, words] {
        return Err(shape_err(
            &format!("{name}.qzeros"),
            format!("shape {:?}, expected [{groups}, {words}]", qzeros.dims()),
        ));
    }
    let group = inp / groups;
    if let Some(h) = group_hint {
        if h != group {
            return Err(QuantError::Group {
                tensor: name.to_owned(),
                inp,
                group: h,
            }
            .into());
        }
    }
    let flat_i32 = |t: Tensor| -> Result<Vec<i32>, LlmError> { Ok(t.flatten_all()?.to_vec1()?) };
    let a = AwqGemm {
        qweight: flat_i32(qweight)?,
        qzeros: flat_i32(qzeros)?,
        scales: scales.to_dtype(DType::F16)?.flatten_all()?.to_vec1()?,
        inp,
        out,
        group,
    };
    Ok(Some(Int4Weight::from_awq(name, &a)?))
}

/// Reads `config.json`'s `"risk"` record (base identity, plan) if present.
pub(crate) fn risk_record(j: &serde_json::Value) -> Option<(String, String)> {
    let r = j.get("risk")?;
    Some((
        r.get("base_identity")?.as_str()?.to_owned(),
        r.get("plan")?.as_str()?.to_owned(),
    ))
}
